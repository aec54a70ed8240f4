"""SOFTMAX, LOGISTIC, TANH, the RELUs, PRELU, HARD_SWISH, ELU, L2_NORMALIZATION and LOG_SOFTMAX: calls into
firmware/runtime/lt_activation.c."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TypedDict

import numpy as np

from lowtide.compile import quantization as q
from lowtide.compile.kernel_params import (
    ActivationParams,
    BinaryParams,
    HardSwishParams,
    SoftmaxParams,
    params_reading,
)
from lowtide.compile.lowering.elementwise import NO_RESCALE, Broadcast, broadcast_steps
from lowtide.compile.lowering.emitter import (
    C_TYPES,
    NO_FLOAT_ACTIVATION,
    NO_QUANTIZED_ACTIVATION,
    Kernel,
    ModelEmitter,
    Unsupported,
    attributes_of,
    elementwise_count,
    fused_activation,
    require,
    tensor_types,
)
from lowtide.model.attributes import LeakyReluAttributes, SoftmaxAttributes
from lowtide.model.ir import Operator

SUFFIXES = {"int8": "s8", "int16": "s16", "float32": "f32"}


def lower_softmax(e: ModelEmitter, op: Operator, name: str) -> str:
    ins, outs = tensor_types(e, op)
    rows = _rows(e, op, same_shape=False)
    beta = attributes_of(op, SoftmaxAttributes).beta
    if ins == ["int8"] and outs == ["int8"]:
        out_q = e.quantization(op.outputs[0])
        require(
            out_q.zero_point == -128 and np.float32(out_q.scale) == np.float32(1 / 256),
            "int8 softmax output must have scale 1/256 and zero point -128",
        )
        params = SoftmaxParams(**rows, **q.softmax_params_int8(beta, e.quantization(op.inputs[0]).scale), beta=beta)
        suffix = "s8"
    elif ins == ["int8"] and outs == ["int16"]:
        out_q = e.quantization(op.outputs[0])
        # SoftmaxPrepare's TF_LITE_ENSURE_NEAR: within 0.1% of 1/65536
        require(
            out_q.zero_point == -32768 and abs(out_q.scale - 1 / 65536) <= 0.001 / 65536,
            "int8 -> int16 softmax output must have scale 1/65536 and zero point -32768",
        )
        params = SoftmaxParams(**rows, **q.softmax_params_int8(beta, e.quantization(op.inputs[0]).scale), beta=beta)
        suffix = "s8_s16"
    elif ins == ["int16"] and outs == ["int16"]:
        return _lower_softmax_int16(e, op, name, rows, beta)
    elif ins == ["float32"] and outs == ["float32"]:
        params = params_reading(SoftmaxParams, **rows, beta=beta)
        suffix = "f32"
    else:
        raise Unsupported(f"types {ins} -> {outs}")
    p = e.struct(f"{name}_params", params)
    return f"lt_softmax_{suffix}({p}, {e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)});"


def _round_away(x: np.float32) -> np.float32:
    """TfLiteRound on a float: halfway cases away from zero (std::round), in float32."""
    whole = np.trunc(x)
    return np.float32(whole + np.sign(x) * np.float32(abs(x - whole) >= np.float32(0.5)))


def _lut_int16(
    input_scale: np.float32,
    input_zero_point: int,
    output_scale: np.float32,
    output_zero_point: int,
    transform: Callable[[np.float32], np.float32],
) -> list[int]:
    """common.h's LUTPopulateInt16<float>: 512 samples of `transform` over the int16 input range plus the end,
    each biased by half the error of interpolating at its midpoint; every step in float32, as TFLM computes it
    (checked against the C code with glibc's expf: the tables are equal)."""
    f = np.float32
    input_min, input_max = f(input_scale * f(-32768 - input_zero_point)), f(input_scale * f(32767 - input_zero_point))
    output_range = f(f(output_scale * f(32767 - output_zero_point)) - f(output_scale * f(-32768 - output_zero_point)))
    step = f((input_max - input_min) / f(512))
    half_step, inverse = f(step / f(2)), f(f(65536) / output_range)
    table = []
    for i in range(512):
        at = f(input_min + f(f(i) * step))
        value, midpoint, following = (
            transform(at),
            transform(f(at + half_step)),
            transform(f(input_min + f(f(i + 1) * step))),
        )
        sample = _round_away(f(value * inverse))
        interpolated = _round_away(f(f(f(following * inverse) + sample) / f(2)))
        bias = _round_away(f(f(interpolated - _round_away(f(midpoint * inverse))) / f(2)))
        table.append(int(min(max(f(sample - bias), f(-32768)), f(32767))))
    table.append(int(min(max(_round_away(f(transform(input_max) * inverse)), f(-32768)), f(32767))))
    return table


@functools.cache
def softmax_luts_int16() -> tuple[list[int], list[int]]:
    """The exp table over [-10, 0] and the 1 / (1 + x) table over [0, 1] of softmax_common.cc's Prepare (the same
    for every model). exp is float32's: the double exp rounded to float32, which glibc's and newlib's expf give
    for every sample here."""
    f = np.float32
    span = f(65535)
    exp_table = _lut_int16(f(f(10) / span), 32767, f(f(2) / span), 0, lambda v: f(math.exp(float(v))))
    reciprocal_table = _lut_int16(f(f(1) / span), -32768, f(f(2) / span), 0, lambda v: f(f(1) / f(f(1) + v)))
    return exp_table, reciprocal_table


SOFTMAX_LUTS = ("lt_softmax16_exp_lut", "lt_softmax16_one_over_one_plus_x_lut")


def _lower_softmax_int16(e: ModelEmitter, op: Operator, name: str, rows: Rows, beta: float) -> str:
    """int16 -> int16: zero points 0, the output scale within 0.1% of 1/32768 (SoftmaxPrepare's checks); the
    input rescaled so that [-65535, 0] is [-10, 0]. The two tables are declared once per model."""
    in_q, out_q = e.quantization(op.inputs[0]), e.quantization(op.outputs[0])
    require(
        in_q.zero_point == 0 and out_q.zero_point == 0 and abs(out_q.scale - 1 / 32768) <= 0.001 / 32768,
        "int16 softmax needs zero points 0 and output scale 1/32768",
    )
    multiplier, shift = q.quantize_multiplier(
        float(np.float32(in_q.scale)) * float(np.float32(beta)) / (10.0 / 65535.0)
    )
    if not any(f" {SOFTMAX_LUTS[0]}[" in d for d in e.declarations):
        for table_name, table in zip(SOFTMAX_LUTS, softmax_luts_int16()):
            e.array(table_name, "int16_t", table)
    p = e.struct(
        f"{name}_params",
        params_reading(SoftmaxParams, **rows, input_multiplier=multiplier, input_left_shift=shift, beta=beta),
    )
    return (
        f"lt_softmax_s16({p}, {SOFTMAX_LUTS[0]}, {SOFTMAX_LUTS[1]}, {e.pointer(op.inputs[0])}, "
        f"{e.pointer(op.outputs[0], True)});"
    )


def lower_logistic(e: ModelEmitter, op: Operator, name: str) -> str:
    ins, outs = tensor_types(e, op)
    count = math.prod(e.tensor(op.inputs[0]).shape)
    if ins == ["int8"] and outs == ["int8"]:
        out_q = e.quantization(op.outputs[0])
        require(
            out_q.zero_point == -128 and np.float32(out_q.scale) == np.float32(1 / 256),
            "int8 logistic output must have scale 1/256 and zero point -128",
        )
        in_q = e.quantization(op.inputs[0])
        table = e.array(f"{name}_table", C_TYPES["int8"], q.sigmoid_table_int8(in_q.scale, in_q.zero_point, False))
        return f"lt_lookup_s8({table}, {e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)}, {count});"
    if ins == ["int16"] and outs == ["int16"]:
        return (
            f"lt_logistic_s16({_sigmoid_int16_struct(e, op, name, tanh=False)}, {e.pointer(op.inputs[0])}, "
            f"{e.pointer(op.outputs[0], True)});"
        )
    if ins == ["float32"] and outs == ["float32"]:
        return f"lt_logistic_f32({e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)}, {count});"
    raise Unsupported(f"types {ins} -> {outs}")


def _sigmoid_int16_struct(e: ModelEmitter, op: Operator, name: str, tanh: bool) -> str:
    """int16 LOGISTIC and TANH: zero points 0, an output scale of 2^-15 (TFLM's Prepare refuses others)."""
    _symmetric_int16(e, op)
    try:
        rescale = q.sigmoid_params_int16(e.quantization(op.inputs[0]).scale, e.quantization(op.outputs[0]).scale, tanh)
    except ValueError as exc:
        raise Unsupported(str(exc)) from None
    return e.struct(f"{name}_params", params_reading(ActivationParams, count=_count(e, op), **rescale))


def _unary(e: ModelEmitter, op: Operator) -> tuple[str, str, str]:
    """(type, input, output) of a kernel whose output has the input's shape and type."""
    count = elementwise_count(e, op)
    require(count > 0, "an empty tensor")
    dtype = e.tensor(op.inputs[0]).dtype
    return dtype, e.pointer(op.inputs[0]), e.pointer(op.outputs[0], True)


def _count(e: ModelEmitter, op: Operator) -> int:
    return math.prod(e.tensor(op.inputs[0]).shape)


def _symmetric_int16(e: ModelEmitter, op: Operator) -> None:
    """TFLM's int16 activations need zero points of 0 on both sides."""
    require(
        e.quantization(op.inputs[0]).zero_point == 0 and e.quantization(op.outputs[0]).zero_point == 0,
        "int16 input and output need zero point 0",
    )


def lower_relu(e: ModelEmitter, op: Operator, name: str) -> str:
    dtype, source, target = _unary(e, op)
    if dtype == "float32":
        return f"lt_relu_f32({source}, {target}, {math.prod(e.tensor(op.inputs[0]).shape)});"
    if dtype == "int16":
        _symmetric_int16(e, op)
    in_q, out_q = e.quantization(op.inputs[0]), e.quantization(op.outputs[0])
    p = e.struct(
        f"{name}_params",
        params_reading(
            ActivationParams,
            count=_count(e, op),
            **q.relu_params(in_q.scale, in_q.zero_point, out_q.scale, out_q.zero_point, dtype),
        ),
    )
    return f"lt_relu_{SUFFIXES[dtype]}({p}, {source}, {target});"


def lower_relu6(e: ModelEmitter, op: Operator, name: str) -> str:
    """TFLM's RELU6 clamps the input's own values to its 0 and 6: the output's quantization is not used."""
    dtype, source, target = _unary(e, op)
    if dtype == "float32":
        return f"lt_relu6_f32({source}, {target}, {math.prod(e.tensor(op.inputs[0]).shape)});"
    in_q = e.quantization(op.inputs[0])
    p = e.struct(
        f"{name}_params",
        params_reading(
            ActivationParams,
            count=_count(e, op),
            act_min=in_q.zero_point,
            act_max=q.float_to_quantized(6.0, in_q.scale, in_q.zero_point, dtype),
        ),
    )
    return f"lt_relu6_{SUFFIXES[dtype]}({p}, {source}, {target});"


def lower_leaky_relu(e: ModelEmitter, op: Operator, name: str) -> str:
    dtype, source, target = _unary(e, op)
    alpha = attributes_of(op, LeakyReluAttributes).alpha
    if dtype == "float32":
        params = params_reading(ActivationParams, count=_count(e, op), alpha=alpha)
    else:
        in_q, out_q = e.quantization(op.inputs[0]), e.quantization(op.outputs[0])
        rescale = q.leaky_relu_params(in_q.scale, in_q.zero_point, alpha, out_q.scale, out_q.zero_point)
        params = params_reading(ActivationParams, count=_count(e, op), **rescale)
    p = e.struct(f"{name}_params", params)
    return f"lt_leaky_relu_{SUFFIXES[dtype]}({p}, {source}, {target});"


def lower_prelu(e: ModelEmitter, op: Operator, name: str) -> str:
    """PRELU: alpha (any shape that broadcasts, usually a constant per channel) of the input's type, or int8 for
    an int16 input."""
    ins, outs = tensor_types(e, op)
    dtype = ins[0]
    require(ins[1] == ("int8" if dtype == "int16" else dtype), f"alpha of type {ins[1]} for a {dtype} input")
    steps = broadcast_steps(e, op)
    by_rows = op.index in e.row_ops  # output row oy of a row chain (`lowtide.compile.rows`): alpha on every row alike
    if by_rows and op.index not in e.one_row_ops:  # the dims of one NHWC row (alone: one row of all its pixels)
        steps = Broadcast(ndim=2, dims=steps["dims"][2:], step1=steps["step1"][2:], step2=steps["step2"][2:])
    if dtype == "float32":
        params = BinaryParams(**steps, **NO_RESCALE, **NO_QUANTIZED_ACTIVATION, **NO_FLOAT_ACTIVATION)
    else:
        in_q, alpha_q, out_q = (e.quantization(t) for t in (op.inputs[0], op.inputs[1], op.outputs[0]))
        params = BinaryParams(
            **steps,
            input1_offset=-in_q.zero_point,
            input2_offset=-alpha_q.zero_point,
            output_offset=out_q.zero_point,
            **q.prelu_params(in_q.scale, alpha_q.scale, out_q.scale),
            output_multiplier=0,
            output_shift=0,
            left_shift=0,
            **NO_QUANTIZED_ACTIVATION,
            **NO_FLOAT_ACTIVATION,
        )
    p = e.struct(f"{name}_params", params)
    if by_rows:
        body = (
            f"lt_prelu_{SUFFIXES[dtype]}({p}, {e.row_pointer(op.inputs[0], 'oy')}, {e.pointer(op.inputs[1])}, "
            f"{e.row_pointer(op.outputs[0], 'oy', True)});"
        )
        return e.row_function(name, body)
    return (
        f"lt_prelu_{SUFFIXES[dtype]}({p}, {e.pointer(op.inputs[0])}, {e.pointer(op.inputs[1])}, "
        f"{e.pointer(op.outputs[0], True)});"
    )


def lower_hard_swish(e: ModelEmitter, op: Operator, name: str) -> str:
    dtype, source, target = _unary(e, op)
    count = math.prod(e.tensor(op.inputs[0]).shape)
    if dtype == "float32":
        return f"lt_hard_swish_f32({source}, {target}, {count});"
    in_q, out_q = e.quantization(op.inputs[0]), e.quantization(op.outputs[0])
    try:
        rescale = q.hard_swish_params_int8(in_q.scale, out_q.scale)
    except ValueError as exc:
        raise Unsupported(str(exc)) from None
    p = e.struct(
        f"{name}_params",
        HardSwishParams(count=count, input_zero_point=in_q.zero_point, output_zero_point=out_q.zero_point, **rescale),
    )
    return f"lt_hard_swish_s8({p}, {source}, {target});"


def lower_tanh(e: ModelEmitter, op: Operator, name: str) -> str:
    dtype, source, target = _unary(e, op)
    if dtype == "float32":
        return f"lt_tanh_f32({source}, {target}, {math.prod(e.tensor(op.inputs[0]).shape)});"
    if dtype == "int16":
        return f"lt_tanh_s16({_sigmoid_int16_struct(e, op, name, tanh=True)}, {source}, {target});"
    in_q = e.quantization(op.inputs[0])
    table = e.array(f"{name}_table", C_TYPES["int8"], q.sigmoid_table_int8(in_q.scale, in_q.zero_point, True))
    return f"lt_lookup_s8({table}, {source}, {target}, {math.prod(e.tensor(op.inputs[0]).shape)});"


def lower_elu(e: ModelEmitter, op: Operator, name: str) -> str:
    dtype, source, target = _unary(e, op)
    count = math.prod(e.tensor(op.inputs[0]).shape)
    if dtype == "float32":
        return f"lt_elu_f32({source}, {target}, {count});"
    in_q, out_q = e.quantization(op.inputs[0]), e.quantization(op.outputs[0])
    table = e.array(
        f"{name}_table", C_TYPES["int8"], q.elu_table_int8(in_q.scale, in_q.zero_point, out_q.scale, out_q.zero_point)
    )
    return f"lt_lookup_s8({table}, {source}, {target}, {count});"


class Rows(TypedDict):
    """lt_softmax_params' shape: `outer` rows of `depth` values, the last dimension."""

    outer: int
    depth: int


def _rows(e: ModelEmitter, op: Operator, same_shape: bool = True) -> Rows:
    """outer x depth: the last dimension is normalized; `same_shape`: the output must have the input's shape."""
    shape = e.tensor(op.inputs[0]).shape or (1,)
    if same_shape:
        require(shape == (e.tensor(op.outputs[0]).shape or (1,)), "output shape differs from the input's")
    return Rows(outer=math.prod(shape) // shape[-1], depth=shape[-1])


def lower_l2_normalization(e: ModelEmitter, op: Operator, name: str) -> str:
    """TFLM's int8 kernel writes Q0.7 (scale 1/128, zero point 0) whatever the output says; no activation."""
    require(fused_activation(op) == 0, "fused activation")
    dtype = e.tensor(op.inputs[0]).dtype
    p = e.struct(f"{name}_params", params_reading(SoftmaxParams, **_rows(e, op)))
    source, target = e.pointer(op.inputs[0]), e.pointer(op.outputs[0], True)
    if dtype == "float32":
        return f"lt_l2_normalization_f32({p}, {source}, {target});"
    return f"lt_l2_normalization_s8({p}, {e.quantization(op.inputs[0]).zero_point}, {source}, {target});"


def lower_log_softmax(e: ModelEmitter, op: Operator, name: str) -> str:
    """int8: TFLM's Prepare requires the output scale 16/256 and zero point 127."""
    rows = _rows(e, op)
    source, target = e.pointer(op.inputs[0]), e.pointer(op.outputs[0], True)
    if e.tensor(op.inputs[0]).dtype == "float32":
        p = e.struct(f"{name}_params", params_reading(SoftmaxParams, **rows))
        return f"lt_log_softmax_f32({p}, {source}, {target});"
    out_q = e.quantization(op.outputs[0])
    require(
        np.float32(out_q.scale) == np.float32(16 / 256) and out_q.zero_point == 127,
        "int8 log_softmax output must have scale 16/256 and zero point 127",
    )
    try:
        scaling = q.log_softmax_params_int8(e.quantization(op.inputs[0]).scale)
    except ValueError as exc:
        raise Unsupported(str(exc)) from None
    p = e.struct(
        f"{name}_params",
        params_reading(
            SoftmaxParams,
            **rows,
            input_multiplier=scaling["input_multiplier"],
            input_left_shift=scaling["input_left_shift"],
            diff_min=scaling["diff_min"],
        ),
    )
    return (
        f"lt_log_softmax_s8({p}, {scaling['reverse_scaling_divisor']}, {scaling['reverse_scaling_shift']}, "
        f"{source}, {target});"
    )


KERNELS = (
    Kernel(
        "SOFTMAX",
        lower_softmax,
        ("int8", "int8->int16", "int16", "float32"),
        "int16: TFLM's interpolated exp and reciprocal tables",
    ),
    Kernel(
        "LOGISTIC",
        lower_logistic,
        ("int8", "int16", "float32"),
        "int16: zero points 0, output scale 2^-15 (TFLM's interpolated table)",
    ),
    Kernel("RELU", lower_relu, ("int8", "int16", "float32")),
    Kernel("RELU6", lower_relu6, ("int8", "int16", "float32")),
    Kernel("LEAKY_RELU", lower_leaky_relu, ("int8", "int16", "float32")),
    Kernel("PRELU", lower_prelu, ("int8", "int16", "float32"), "broadcast alpha; int8 alpha for int16"),
    Kernel("HARD_SWISH", lower_hard_swish, ("int8", "float32")),
    Kernel(
        "TANH",
        lower_tanh,
        ("int8", "int16", "float32"),
        "int16: zero points 0, output scale 2^-15 (TFLM's interpolated table)",
    ),
    Kernel("L2_NORMALIZATION", lower_l2_normalization, ("int8", "float32"), "over the last dimension"),
    Kernel("LOG_SOFTMAX", lower_log_softmax, ("int8", "float32"), "int8: output scale 16/256, zero point 127"),
    Kernel("ELU", lower_elu, ("int8", "float32"), "int8 through TFLM's 256-entry table"),
)
