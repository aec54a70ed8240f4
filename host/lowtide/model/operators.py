"""TFLM's operator semantics, one definition each: the facts about the operators themselves that every stage reads.

- Operator families by what TFLM's kernels do with their operands (the validator's output shapes, rewrite's
  windows and stale-memory analysis's dependence read them).
- `SEMANTICS`, one row per opcode lowtide knows: its tiling class (what `rewrite.regions` does with it on a patch)
  and whether TFLM's kernel may run it in place (what `memory.in_place` lets a plan share). Facts about lowtide's
  own compiled kernels are not here: they are the compiled runtime's (`memory.in_place`, `compile`).
- The MAC cost of one operator (`op_macs`, `graph_macs`), which rewrite's budget and optimize's report count.
- TFLM's resize geometry (`resize_scale`, `resize_scale_q10`, `resize_sources`), as its reference kernels compute
  it bit for bit: what `rewrite.regions` tiles by, what `compile` writes into the C and what `stale` propagates.

The output shape each operator computes is `model.shapes`'s.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from lowtide.model.ir import Graph, Operator, Subgraph

CONV_OPCODES = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D"})
POOL_OPCODES = frozenset({"MAX_POOL_2D", "AVERAGE_POOL_2D"})
# One input, one output, each element on its own: a patch of the output needs the same patch of the input.
UNARY_OPCODES = frozenset(
    {
        "QUANTIZE",
        "DEQUANTIZE",
        "CAST",
        "RELU",
        "RELU6",
        "RELU_N1_TO_1",
        "RELU_0_TO_1",
        "LEAKY_RELU",
        "LOGISTIC",
        "TANH",
        "HARD_SWISH",
        "ELU",
        "GELU",
        "ABS",
        "NEG",
        "SQUARE",
        "SQRT",
        "RSQRT",
        "EXP",
        "LOG",
        "FLOOR",
        "CEIL",
        "ROUND",
        "SIN",
        "COS",
        "LOGICAL_NOT",
    }
)
# Two operands, element by element; either may be broadcast along channels, or be a per-channel or scalar constant.
BINARY_OPCODES = frozenset({"ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "PRELU"})
# Reductions: global when they reduce over rows or columns (a squeeze-and-excitation block's pooling).
REDUCE_OPCODES = frozenset({"MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD"})
PAD_OPCODES = frozenset({"PAD", "PADV2", "MIRROR_PAD"})
RESIZE_OPCODES = frozenset({"RESIZE_NEAREST_NEIGHBOR", "RESIZE_BILINEAR"})
CHANNEL_OPCODES = frozenset({"CONCATENATION", "SPLIT", "SPLIT_V"})  # along channels only: each pixel on its own
# Operators whose effects are not visible through their tensors: their relative order must be kept.
SIDE_EFFECT_OPCODES = frozenset({"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE"})
# Operators that produce nothing through tensors: all others must have an output.
NO_OUTPUT_OPCODES = frozenset({"ASSIGN_VARIABLE", "CALL_ONCE"})
# Operators whose TFLM kernel runs on the output shape the model declares, whatever it computes: Prepare checks
# only ranks and types and never resizes the output, and Eval loops over the declared batches, rows and columns
# (or skips what falls outside them), copying the input's channels into each (docs/stale-memory.md). Any other
# kernel may resize its output in Prepare, refuse it, or run past it.
TFLM_KEEPS_DECLARED_OUTPUT = frozenset({"SPACE_TO_BATCH_ND", "BATCH_TO_SPACE_ND"})
# The operators whose multiply-accumulates are counted (`op_macs`): every other kernel's work is negligible beside.
MAC_OPCODES = CONV_OPCODES | {"FULLY_CONNECTED"}


class TilingClass(enum.Enum):
    """What `rewrite.regions` does with an operator inside a region run patch by patch."""

    WINDOW = "window"  # convolutions and pools: each output pixel reads a window of rows and columns
    ELEMENTWISE = "elementwise"  # one input, each element on its own: a patch reads the same patch
    BROADCAST = "broadcast"  # two operands element by element, one maybe a per-channel or scalar constant
    PAD = "pad"  # a window shifted (or mirrored) by constant paddings; folded into its consumers where it can be
    RESIZE = "resize"  # an integer factor whose windows compute what the whole resize does (`ResizeMap`)
    CHANNEL = "channel"  # along channels only (joins and splits): each pixel on its own
    GLOBAL = "global"  # may read whole rows and columns (a reduction over them): a region ends before it
    NONE = "none"  # cannot run on patches: a region ends at it


TILEABLE = frozenset(
    {
        TilingClass.WINDOW,
        TilingClass.ELEMENTWISE,
        TilingClass.BROADCAST,
        TilingClass.PAD,
        TilingClass.RESIZE,
        TilingClass.CHANNEL,
    }
)


class TflmInPlace(enum.Enum):
    """Whether TFLM's kernel (reference or CMSIS-NN) may run an operator with an output on its input's bytes, in an
    offline plan (TFLM honours its offsets and checks nothing; its own planner never shares)."""

    BLOCKS = "blocks"  # SPLIT / SPLIT_V along a leading axis: each output a contiguous block of the input
    NARROWING = "narrowing"  # QUANTIZE to an element no wider: element i written at or below where it was read
    ASSEMBLES = "assembles"  # CONCATENATION along a leading axis: each input copied onto its own block of the output
    MODEL_PLAN = "model plan"  # lowtide never shares; a model's own plan that does is run as its author planned
    NEVER = "never"  # the kernel reads the input while it writes: no plan for TFLM may share their bytes


@dataclass(frozen=True)
class Semantics:
    tiling: TilingClass
    tflm_in_place: TflmInPlace


def _rows(
    opcodes: frozenset[str] | set[str], tiling: TilingClass, in_place: TflmInPlace = TflmInPlace.MODEL_PLAN
) -> dict[str, Semantics]:
    return {opcode: Semantics(tiling, in_place) for opcode in opcodes}


# Element by element too, with numpy broadcasting of any operand, but not tiled (comparisons, selects, sums of many
# operands): stale-memory analysis propagates through them as through the unary and binary families.
OTHER_ELEMENTWISE_OPCODES = frozenset(
    {
        "ADD_N",
        "FLOOR_DIV",
        "FLOOR_MOD",
        "POW",
        "LESS",
        "LESS_EQUAL",
        "GREATER",
        "GREATER_EQUAL",
        "EQUAL",
        "NOT_EQUAL",
        "LOGICAL_AND",
        "LOGICAL_OR",
        "SELECT",
        "SELECT_V2",
    }
)

# TFLM's depthwise and element-wise kernels that read an input element after writing over one: the cases lowtide's
# compiled runtime does run in place (`memory.in_place`), which TFLM's must never.
_TFLM_READS_WHILE_WRITING = frozenset(
    {"DEPTHWISE_CONV_2D", "ADD", "SUB", "MUL", "RELU", "RELU6", "LEAKY_RELU", "HARD_SWISH"}
)
# Every opcode lowtide's stages know: those validated (`model.shapes`, `model.validate`), lowered (`compile`) or
# propagated (`stale`). An opcode not here (a custom operator) gets `UNLISTED`.
SEMANTICS: dict[str, Semantics] = {
    **_rows(CONV_OPCODES | POOL_OPCODES, TilingClass.WINDOW),
    **_rows(UNARY_OPCODES, TilingClass.ELEMENTWISE),
    **_rows(BINARY_OPCODES, TilingClass.BROADCAST),
    **_rows(PAD_OPCODES, TilingClass.PAD),
    **_rows(RESIZE_OPCODES, TilingClass.RESIZE),
    **_rows(CHANNEL_OPCODES, TilingClass.CHANNEL),
    **_rows(REDUCE_OPCODES, TilingClass.GLOBAL),
    **_rows(
        {
            "FULLY_CONNECTED",
            "TRANSPOSE_CONV",
            "BATCH_MATMUL",
            "SVDF",
            "UNIDIRECTIONAL_SEQUENCE_LSTM",
            "L2_POOL_2D",
            "SOFTMAX",
            "LOG_SOFTMAX",
            "L2_NORMALIZATION",
            "LOCAL_RESPONSE_NORMALIZATION",
            "REDUCE_ANY",
            "REDUCE_ALL",
            "ARG_MAX",
            "ARG_MIN",
            "CUMSUM",
            "RESHAPE",
            "SQUEEZE",
            "EXPAND_DIMS",
            "TRANSPOSE",
            "SLICE",
            "STRIDED_SLICE",
            "PACK",
            "UNPACK",
            "REVERSE_V2",
            "DYNAMIC_UPDATE_SLICE",
            "SPACE_TO_DEPTH",
            "DEPTH_TO_SPACE",
            "SPACE_TO_BATCH_ND",
            "BATCH_TO_SPACE_ND",
            "GATHER",
            "GATHER_ND",
            "EMBEDDING_LOOKUP",
            "FILL",
            "BROADCAST_TO",
            "BROADCAST_ARGS",
            "SHAPE",
            "ZEROS_LIKE",
            "IF",
            "WHILE",
        }
        | OTHER_ELEMENTWISE_OPCODES
        | SIDE_EFFECT_OPCODES,
        TilingClass.NONE,
    ),
}
SEMANTICS |= {opcode: Semantics(SEMANTICS[opcode].tiling, TflmInPlace.NEVER) for opcode in _TFLM_READS_WHILE_WRITING}
SEMANTICS |= {opcode: Semantics(TilingClass.CHANNEL, TflmInPlace.BLOCKS) for opcode in ("SPLIT", "SPLIT_V")}
SEMANTICS["QUANTIZE"] = Semantics(TilingClass.ELEMENTWISE, TflmInPlace.NARROWING)
SEMANTICS["CONCATENATION"] = Semantics(TilingClass.CHANNEL, TflmInPlace.ASSEMBLES)
# An operator lowtide knows nothing about: never tiled, no MACs counted, and a model's own plan trusted.
UNLISTED = Semantics(TilingClass.NONE, TflmInPlace.MODEL_PLAN)


def semantics(opcode: str) -> Semantics:
    return SEMANTICS.get(opcode, UNLISTED)


def tiled_as(*classes: TilingClass) -> frozenset[str]:
    """The opcodes of these tiling classes."""
    return frozenset(opcode for opcode, row in SEMANTICS.items() if row.tiling in classes)


TILEABLE_OPCODES = tiled_as(*TILEABLE)


def op_macs(sg: Subgraph, op: Operator, pixels: int | None = None) -> int:
    """Multiply-accumulates of a convolution or dense layer; `pixels` overrides the output's spatial size."""
    if op.opcode not in MAC_OPCODES:
        return 0
    weights = sg.tensors[op.inputs[1]].shape
    out_shape = sg.tensors[op.outputs[0]].shape
    if op.opcode == "FULLY_CONNECTED":
        return math.prod(weights) * math.prod(out_shape[:-1])
    if pixels is None:
        pixels = out_shape[1] * out_shape[2]
    per_pixel = math.prod(weights[1:]) * (weights[0] if op.opcode == "CONV_2D" else 1)
    return pixels * per_pixel


def graph_macs(graph: Graph) -> int:
    sg = graph.main
    return sum(op_macs(sg, op) for op in sg.operators)


def resize_scale(n_in: int, n_out: int, align_corners: bool) -> np.float32:
    """The float32 scale of TFLM's resize kernels (ResizeBilinear's float kernel, GetNearestNeighbor): input over
    output size, both less one when aligning corners."""
    if align_corners and n_out > 1:
        return np.float32(n_in - 1) / np.float32(n_out - 1)
    return np.float32(n_in) / np.float32(n_out)


def resize_scale_q10(n_in: int, n_out: int, align_corners: bool) -> int:
    """ResizeBilinearInteger's scale with 10 fractional bits, rounded (C integer division of positives)."""
    if align_corners and n_out > 1:
        n_in, n_out = n_in - 1, n_out - 1
    return ((1 << 10) * n_in + n_out // 2) // n_out


def resize_kernel_scale(bilinear: bool, n_in: int, n_out: int, align_corners: bool, integer: bool) -> np.float32 | int:
    """The scale the kernel of this resize derives from the sizes: 10-bit fixed point for the integer bilinear
    kernel, float32 for the others."""
    if bilinear and integer:
        return resize_scale_q10(n_in, n_out, align_corners)
    return resize_scale(n_in, n_out, align_corners)


def resize_sources(
    bilinear: bool, n_in: int, n_out: int, align_corners: bool, half_pixel: bool, integer: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per output index along one axis, as TFLM's reference kernels compute it (resize_bilinear.h,
    resize_nearest_neighbor.h): the first and last input index read, and the interpolation weight (the fraction
    past the first: what the kernel multiplies with; 10-bit fixed point for the integer bilinear kernel)."""
    o = np.arange(n_out, dtype=np.int64)
    if bilinear and integer:  # ComputeInterpolationValuesInteger: C++ division truncates towards zero
        scale_q10 = resize_scale_q10(n_in, n_out, align_corners)
        value = o * scale_q10 + scale_q10 // 2 - (1 << 9) if half_pixel else o * scale_q10
        first = np.maximum(np.fix(value / 1024).astype(np.int64), 0)
        last = np.minimum(np.fix((value + 1023) / 1024).astype(np.int64), n_in - 1)
        return first, last, value - 1024 * first
    scale = resize_scale(n_in, n_out, align_corners)
    if bilinear:  # ComputeInterpolationValues, in float32
        of = o.astype(np.float32)
        at = (of + np.float32(0.5)) * scale - np.float32(0.5) if half_pixel else of * scale
        first = np.maximum(np.floor(at).astype(np.int64), 0)
        last = np.minimum(np.ceil(at).astype(np.int64), n_in - 1)
        return first, last, (at - first.astype(np.float32)).astype(np.float32)
    index = nearest_indices(n_in, n_out, align_corners, half_pixel)
    return index, index, np.zeros(n_out)


def nearest_indices(n_in: int, n_out: int, align_corners: bool, half_pixel: bool) -> np.ndarray:
    """GetNearestNeighbor for every output index, in float32 as the kernel computes it: the floor, or with
    align_corners TfLiteRound (half away from zero), clamped to the input."""
    value = (np.arange(n_out, dtype=np.float32) + np.float32(0.5 if half_pixel else 0.0)) * resize_scale(
        n_in, n_out, align_corners
    )
    index: np.ndarray = np.floor(value).astype(np.int64)
    if align_corners:
        index += value - np.floor(value) >= 0.5  # exact: a float32 less its floor loses no bits
    index = np.minimum(index, n_in - 1)
    return np.maximum(index, 0) if half_pixel else index
