"""Lowering of each TFLite operator to one call into the lowtide runtime (firmware/runtime/lt_runtime.h).

Every operator is turned into a C statement plus the const data it needs (weights, per-channel multipliers and
a parameter struct), all computed the way the matching TFLM kernel's Prepare computes them. One module per
kernel family, as the runtime has one C file per family; each lists its `Kernel`s. Together they are the support
table: an operator missing from it, or with a type signature its kernel does not list, raises `Unsupported` with
the reason, and `lowtide compile --support-table` prints it.
"""

from __future__ import annotations

from dataclasses import dataclass

from lowtide.compile.lowering import activation, conv, elementwise, lstm, matmul, movement, pool, svdf, variables
from lowtide.compile.lowering.emitter import (
    C_TYPES,
    NUMPY_TYPES,
    STATE_OBJECT,
    Kernel,
    ModelEmitter,
    StateMember,
    Unsupported,
    accepts,
    c_float,
    signature,
)
from lowtide.model.ir import Operator

# runtime source file -> the kernels it holds ("generated code": no runtime kernel, statements in model.c).
# TRANSPOSE_CONV and BATCH_MATMUL: int8 and float32 in lt_conv.c, their 16-bit forms in lt_matmul.c.
FAMILIES: dict[str, tuple[Kernel, ...]] = {
    "lt_conv.c": conv.KERNELS,
    "lt_conv.c, lt_matmul.c": matmul.KERNELS,
    "lt_pool.c": pool.KERNELS,
    "lt_elementwise.c": elementwise.KERNELS,
    "lt_activation.c": activation.KERNELS,
    "lt_movement.c": movement.KERNELS,
    "lt_svdf.c": svdf.KERNELS,
    "lt_lstm.c": lstm.KERNELS,
    "generated code": variables.KERNELS,
}
KERNELS: dict[str, Kernel] = {k.opcode: k for kernels in FAMILIES.values() for k in kernels}

# Builtin operators TFLM's interpreter has no kernel for: a model using them does not run on TFLM either, so
# there is nothing to be bit-exact with.
NOT_IN_TFLM = {
    "RELU_N1_TO_1": "TFLM has no RELU_N1_TO_1 kernel (only the fused activation of the same name)",
    "RELU_0_TO_1": "TFLM has no RELU_0_TO_1 kernel",
}

# Operator and type pairs TFLM registers whose reference kernel gives no defined result: not compiled, for this
# reason (the int8 DIV rescales it is defined for are in its kernel's notes).
UNDEFINED_IN_TFLM = {
    ("GREATER", "int16->bool"): "TFLM's Prepare sets the input rescaling for int8 only, so its int16 GREATER "
    "compares through uninitialized parameters",
}


@dataclass(frozen=True)
class SupportRow:
    """One line of the generated operator support table."""

    opcode: str
    family: str
    types: tuple[str, ...]
    notes: str


def support_rows() -> list[SupportRow]:
    return sorted(
        (SupportRow(k.opcode, family, k.types, k.notes) for family, kernels in FAMILIES.items() for k in kernels),
        key=lambda r: r.opcode,
    )


def lower_operator(e: ModelEmitter, op: Operator) -> str:
    """The C statement of one operator; raises Unsupported with the reason it cannot be lowered."""
    kernel = KERNELS.get(op.opcode)
    if kernel is None:
        raise Unsupported(NOT_IN_TFLM.get(op.opcode, "no kernel in the lowtide runtime"))
    sig = signature(e, op)
    if not accepts(kernel, sig):
        raise Unsupported(
            UNDEFINED_IN_TFLM.get((op.opcode, sig), f"no {sig} kernel (supported: {', '.join(kernel.types)})")
        )
    return kernel.lower(e, op, f"op{op.index}")


__all__ = [
    "C_TYPES",
    "FAMILIES",
    "KERNELS",
    "NOT_IN_TFLM",
    "NUMPY_TYPES",
    "STATE_OBJECT",
    "Kernel",
    "ModelEmitter",
    "StateMember",
    "SupportRow",
    "Unsupported",
    "c_float",
    "lower_operator",
    "support_rows",
]
