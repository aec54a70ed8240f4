"""Element-wise math, comparisons, logic, CAST, QUANTIZE and DEQUANTIZE: calls into
firmware/runtime/lt_elementwise.c."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypedDict

from lowtide.compile import quantization as q
from lowtide.compile.kernel_params import MAX_DIMS, ActivationParams, BinaryParams, params_reading
from lowtide.compile.lowering.emitter import (
    C_TYPES,
    NO_FLOAT_ACTIVATION,
    NO_QUANTIZED_ACTIVATION,
    Kernel,
    Lowering,
    ModelEmitter,
    QuantizedActivation,
    Unsupported,
    c_float,
    elementwise_count,
    float_activation,
    fused_activation,
    quantized_activation,
    require,
    strides,
    tensor_types,
)
from lowtide.model.ir import Operator

SUFFIXES = {"int8": "s8", "int16": "s16", "int32": "s32", "int64": "s64", "float32": "f32"}
LT_TYPES = {
    "int8": "LT_INT8",
    "uint8": "LT_UINT8",
    "int16": "LT_INT16",
    "int32": "LT_INT32",
    "float32": "LT_FLOAT32",
    "bool": "LT_BOOL",
}
CAST_TYPES = ("int8", "int16", "int32", "float32")
# QUANTIZE's requantizations (PrepareQuantizeReference's list, int8 <-> uint8 included)
REQUANTIZE_TYPES = (
    "int8",
    "int8->uint8",
    "uint8->int8",
    "int8->int16",
    "int8->int32",
    "int16->int8",
    "int16",
    "int16->int32",
    "int32->int8",
    "int32->int16",
)


class Broadcast(TypedDict):
    """lt_binary_params' shape members."""

    ndim: int
    dims: list[int]
    step1: list[int]
    step2: list[int]


class Offsets(TypedDict):
    """lt_binary_params' zero points: -input1's, -input2's and the output's."""

    input1_offset: int
    input2_offset: int
    output_offset: int


class BinaryRescale(Offsets, q.AddSubRescale):
    """Every member of lt_binary_params that requantizes."""


NO_OFFSETS = Offsets(input1_offset=0, input2_offset=0, output_offset=0)
NO_INPUTS_RESCALE = q.InputsRescale(input1_multiplier=0, input1_shift=0, input2_multiplier=0, input2_shift=0)
NO_OUTPUT_RESCALE = q.OutputRescale(output_multiplier=0, output_shift=0)
# raw values: float kernels, integer kernels that do not requantize
NO_RESCALE = BinaryRescale(**NO_OFFSETS, **NO_INPUTS_RESCALE, **NO_OUTPUT_RESCALE, left_shift=0)


def broadcast_steps(e: ModelEmitter, op: Operator) -> Broadcast:
    """lt_binary_params' shape members: the output's dims and each of the first two inputs' steps along them."""
    out_shape = e.tensor(op.outputs[0]).shape or (1,)
    require(len(out_shape) <= MAX_DIMS, f"more than {MAX_DIMS} dimensions")
    steps = []
    for t in op.inputs[:2]:
        shape = e.tensor(t).shape
        shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
        require(all(s in (1, o) for s, o in zip(shape, out_shape)), "inputs do not broadcast to the output")
        steps.append([st if s > 1 else 0 for s, st in zip(shape, strides(shape))])
    return Broadcast(ndim=len(out_shape), dims=list(out_shape), step1=steps[0], step2=steps[1])


def _offsets(e: ModelEmitter, op: Operator) -> Offsets:
    q1, q2, qo = (e.quantization(t) for t in (op.inputs[0], op.inputs[1], op.outputs[0]))
    return Offsets(input1_offset=-q1.zero_point, input2_offset=-q2.zero_point, output_offset=qo.zero_point)


def raw_values(steps: Broadcast) -> BinaryParams:
    """The broadcast alone: no requantization and no clamp (float kernels without an activation, MAXIMUM,
    comparisons of unquantized values, logic)."""
    return BinaryParams(**steps, **NO_RESCALE, **NO_QUANTIZED_ACTIVATION, **NO_FLOAT_ACTIVATION)


def _binary(e: ModelEmitter, op: Operator, name: str, kind: str) -> str:
    """ADD and MUL: int8 and int16 requantized (ADD left-shifts by 20 and 15; MUL int16 needs zero points of 0),
    int32 wrapping (TFLM's int32 ADD ignores the fused activation; MUL applies it), float32."""
    dtype = _same_type_binary(e, op)
    steps = broadcast_steps(e, op)
    by_rows = op.index in e.row_ops  # one row of a row chain (`lowtide.compile.rows`): same shapes, int8
    if by_rows:
        row = math.prod(e.tensor(op.outputs[0]).shape[2:])
        steps = Broadcast(ndim=1, dims=[row], step1=[1], step2=[1])
    if dtype in ("int8", "int16"):
        q1, q2, qo = (e.quantization(t) for t in (op.inputs[0], op.inputs[1], op.outputs[0]))
        offsets = _offsets(e, op)
        if kind == "add":
            rescale = q.add_sub_params(q1.scale, q2.scale, qo.scale, 20 if dtype == "int8" else 15)
        else:
            if dtype == "int16":
                require(q1.zero_point == q2.zero_point == qo.zero_point == 0, "int16 MUL needs zero points of 0")
            m, s = q.quantize_multiplier(float(q1.scale) * float(q2.scale) / float(qo.scale))
            rescale = q.AddSubRescale(**NO_INPUTS_RESCALE, left_shift=0, output_multiplier=m, output_shift=s)
        params = BinaryParams(
            **steps, **offsets, **rescale, **quantized_activation(e, op, op.outputs[0]), **NO_FLOAT_ACTIVATION
        )
    elif dtype == "int32":
        activation = (
            _int32_activation(op) if kind == "mul" else QuantizedActivation(act_min=q.INT32_MIN, act_max=q.INT32_MAX)
        )
        params = BinaryParams(**steps, **NO_RESCALE, **activation, **NO_FLOAT_ACTIVATION)
    else:
        params = BinaryParams(**steps, **NO_RESCALE, **NO_QUANTIZED_ACTIVATION, **float_activation(op))
    function = f"lt_{kind}_{SUFFIXES[dtype]}"
    if by_rows:
        p = e.struct(f"{name}_params", params)
        a, b = (e.row_pointer(t, "oy") for t in op.inputs[:2])
        body = f"{function}({p}, {a}, {b}, {e.row_pointer(op.outputs[0], 'oy', True)});"
        return e.row_function(name, body)
    return _binary_call(e, op, name, function, params)


def lower_add(e: ModelEmitter, op: Operator, name: str) -> str:
    return _binary(e, op, name, "add")


def lower_mul(e: ModelEmitter, op: Operator, name: str) -> str:
    return _binary(e, op, name, "mul")


def lower_quantize(e: ModelEmitter, op: Operator, name: str) -> str:
    """float32 -> int8/int16 (AffineQuantize) or a requantization between int8, uint8, int16 and int32 with the
    multiplier of the two scales' ratio, in double, as TFLM's PrepareQuantizeReference computes it."""
    ins, outs = tensor_types(e, op)
    count = elementwise_count(e, op)
    out_q = e.quantization(op.outputs[0])
    require(len(out_q.scales) == 1, "per-channel output quantization")
    source, target = e.pointer(op.inputs[0]), e.pointer(op.outputs[0], True)
    if ins[0] == "float32":
        return (
            f"lt_quantize_f32({source}, {LT_TYPES[outs[0]]}, {target}, {count}, {c_float(out_q.scale)}, "
            f"{out_q.zero_point});"
        )
    in_q = e.quantization(op.inputs[0])
    m, s = q.quantize_multiplier(float(in_q.scale) / float(out_q.scale))
    return (
        f"lt_requantize({LT_TYPES[ins[0]]}, {source}, {LT_TYPES[outs[0]]}, {target}, {count}, "
        f"{in_q.zero_point}, {m}, {s}, {out_q.zero_point});"
    )


def lower_dequantize(e: ModelEmitter, op: Operator, name: str) -> str:
    ins, _ = tensor_types(e, op)
    in_q = e.quantization(op.inputs[0])
    count = elementwise_count(e, op)
    return (
        f"lt_dequantize({LT_TYPES[ins[0]]}, {e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)}, "
        f"{count}, {float(in_q.scale)!r}, {in_q.zero_point});"
    )


def _binary_call(e: ModelEmitter, op: Operator, name: str, function: str, params: BinaryParams) -> str:
    p = e.struct(f"{name}_params", params)
    return f"{function}({p}, {e.pointer(op.inputs[0])}, {e.pointer(op.inputs[1])}, {e.pointer(op.outputs[0], True)});"


def _same_type_binary(e: ModelEmitter, op: Operator) -> str:
    ins, outs = tensor_types(e, op)
    require(ins[0] == ins[1] == outs[0], f"types {ins} -> {outs}")
    return ins[0]


def _int32_activation(op: Operator) -> QuantizedActivation:
    try:
        lo, hi = q.activation_range_int32(fused_activation(op))
    except ValueError as exc:
        raise Unsupported(str(exc)) from None
    return QuantizedActivation(act_min=lo, act_max=hi)


def lower_sub(e: ModelEmitter, op: Operator, name: str) -> str:
    dtype = _same_type_binary(e, op)
    steps = broadcast_steps(e, op)
    by_rows = op.index in e.row_ops  # one row of a row chain (`lowtide.compile.rows`): same shapes, int8
    if by_rows:
        row = math.prod(e.tensor(op.outputs[0]).shape[2:])
        steps = Broadcast(ndim=1, dims=[row], step1=[1], step2=[1])
    if dtype in ("int8", "int16"):
        q1, q2, qo = (e.quantization(t) for t in (op.inputs[0], op.inputs[1], op.outputs[0]))
        params = BinaryParams(
            **steps,
            **_offsets(e, op),
            **q.add_sub_params(q1.scale, q2.scale, qo.scale, 15 if dtype == "int16" else 20),
            **quantized_activation(e, op, op.outputs[0]),
            **NO_FLOAT_ACTIVATION,
        )
    elif dtype == "int32":
        params = BinaryParams(**steps, **NO_RESCALE, **_int32_activation(op), **NO_FLOAT_ACTIVATION)
    else:
        params = BinaryParams(**steps, **NO_RESCALE, **NO_QUANTIZED_ACTIVATION, **float_activation(op))
    return _binary_call(e, op, name, f"lt_sub_{SUFFIXES[dtype]}", params)


def lower_maximum(e: ModelEmitter, op: Operator, name: str) -> str:
    """TFLM compares the raw values: the inputs' and output's quantization must agree for it to mean a maximum,
    but it is not checked, as TFLM does not check it."""
    dtype = _same_type_binary(e, op)
    return _binary_call(e, op, name, f"lt_maximum_{SUFFIXES[dtype]}", raw_values(broadcast_steps(e, op)))


def lower_minimum(e: ModelEmitter, op: Operator, name: str) -> str:
    dtype = _same_type_binary(e, op)
    return _binary_call(e, op, name, f"lt_minimum_{SUFFIXES[dtype]}", raw_values(broadcast_steps(e, op)))


def _float_binary(function: str) -> Lowering:
    def lower(e: ModelEmitter, op: Operator, name: str) -> str:
        _same_type_binary(e, op)
        return _binary_call(e, op, name, function, raw_values(broadcast_steps(e, op)))

    lower.__doc__ = f"A float32 binary kernel with broadcasting: {function}."
    return lower


def lower_squared_difference(e: ModelEmitter, op: Operator, name: str) -> str:
    dtype = _same_type_binary(e, op)
    steps = broadcast_steps(e, op)
    by_rows = op.index in e.row_ops  # one row of a row chain (`lowtide.compile.rows`): same shapes, int8
    if by_rows:
        row = math.prod(e.tensor(op.outputs[0]).shape[2:])
        steps = Broadcast(ndim=1, dims=[row], step1=[1], step2=[1])
    if dtype in ("int8", "int16"):
        q1, q2, qo = (e.quantization(t) for t in (op.inputs[0], op.inputs[1], op.outputs[0]))
        if dtype == "int16":
            require(q1.zero_point == q2.zero_point == qo.zero_point == 0, "int16 needs zero points of 0")
        lo, hi = q.TYPE_RANGES[dtype]
        params = BinaryParams(
            **steps,
            **_offsets(e, op),
            act_min=lo,
            act_max=hi,
            **q.squared_difference_params(q1.scale, q2.scale, qo.scale, 7 if dtype == "int8" else 0),
            **NO_FLOAT_ACTIVATION,
        )
    else:
        params = raw_values(steps)
    return _binary_call(e, op, name, f"lt_squared_difference_{SUFFIXES[dtype]}", params)


# reference_ops::DivElementwise ends in RoundingDivideByPOT(x, headroom + reciprocal shift - output_shift): up to
# 31 + 7 - output_shift bits (a dividend of 0 or -1 has 31 bits of headroom, a divisor of magnitude 128 or more a
# reciprocal shift of 7). A shift of 32 or more is undefined in C++ and differs between TFLM's host build (x86
# masks the count: x >> (n % 32)) and its Cortex-M build (the sign fills the result), and a negative one (an
# output_shift above 22) is undefined too: only ratios in [2^6, 2^22) give one answer.
DIV_INT8_SHIFTS = (7, 22)
DIV_INT8_RANGE = (
    "TFLM's int8 DIV shifts by 32 bits or more, or by a negative count, unless it is in [64, 2^22) "
    "(undefined behaviour: x86 and Cortex-M give different results)"
)


def lower_div(e: ModelEmitter, op: Operator, name: str) -> str:
    """int8 requantizes the quotient of the zero-point-corrected values, only where TFLM's arithmetic is defined
    (see DIV_INT8_RANGE); int32 truncates (a zero divisor gives 0, as on Cortex-M)."""
    dtype = _same_type_binary(e, op)
    steps = broadcast_steps(e, op)
    if dtype == "int8":
        q1, q2, qo = (e.quantization(t) for t in (op.inputs[0], op.inputs[1], op.outputs[0]))
        rescale = q.div_params_int8(q1.scale, q2.scale, qo.scale)
        params = BinaryParams(
            **steps,
            **_offsets(e, op),
            **NO_INPUTS_RESCALE,
            left_shift=0,
            **rescale,
            **quantized_activation(e, op, op.outputs[0]),
            **NO_FLOAT_ACTIVATION,
        )
        low, high = DIV_INT8_SHIFTS
        ratio = rescale["output_multiplier"] / 2**31 * 2.0 ** rescale["output_shift"]
        require(
            low <= rescale["output_shift"] <= high,
            f"input1 scale / (input2 scale x output scale) is {ratio:.4g}: {DIV_INT8_RANGE}",
        )
    elif dtype == "int32":
        params = BinaryParams(**steps, **NO_RESCALE, **_int32_activation(op), **NO_FLOAT_ACTIVATION)
    else:
        params = BinaryParams(**steps, **NO_RESCALE, **NO_QUANTIZED_ACTIVATION, **float_activation(op))
    return _binary_call(e, op, name, f"lt_div_{SUFFIXES[dtype]}", params)


def lower_add_n(e: ModelEmitter, op: Operator, name: str) -> str:
    ins, outs = tensor_types(e, op)
    dtype = outs[0]
    shape = e.tensor(op.outputs[0]).shape
    require(
        all(t == dtype for t in ins) and all(e.tensor(t).shape == shape for t in op.inputs),
        f"inputs {ins} of shapes {[e.tensor(t).shape for t in op.inputs]} for a {dtype} {shape} output",
    )
    count = math.prod(shape)
    ctype = C_TYPES[dtype]
    pointers = ", ".join(e.pointer(t) for t in op.inputs)
    inputs = f"const {ctype} *const {name}_inputs[{len(op.inputs)}] = {{{pointers}}};"
    output = e.pointer(op.outputs[0], True)
    if dtype == "float32":
        return f"{{ {inputs} lt_add_n_f32({name}_inputs, {len(op.inputs)}, {output}, {count}); }}"
    in_q, out_q = e.quantization(op.inputs[0]), e.quantization(op.outputs[0])
    require(all(e.quantization(t).scale == in_q.scale for t in op.inputs), "int8 inputs need one scale")
    p = e.struct(
        f"{name}_params",
        add_n_rescale(
            in_q.zero_point, in_q.scale, out_q.zero_point, out_q.scale, quantized_activation(e, op, op.outputs[0])
        ),
    )
    return f"{{ {inputs} lt_add_n_s8({p}, {name}_inputs, {len(op.inputs)}, {output}, {count}); }}"


def add_n_rescale(
    input_zero_point: int,
    input_scale: float,
    output_zero_point: int,
    output_scale: float,
    activation: QuantizedActivation,
) -> BinaryParams:
    """ADD_N's int8 rescaling (lt_add_n_s8, and CUMSUM's lt_cumsum_s8): every input as input 1, no shape."""
    return BinaryParams(
        ndim=0,
        dims=[],
        step1=[],
        step2=[],
        input1_offset=-input_zero_point,
        input2_offset=0,
        output_offset=output_zero_point,
        **q.add_n_params_int8(input_scale, output_scale),
        input2_multiplier=0,
        input2_shift=0,
        **activation,
        **NO_FLOAT_ACTIVATION,
    )


def _lower_rescaled_unary(
    e: ModelEmitter,
    op: Operator,
    name: str,
    float_op: str,
    rescale: Callable[[float, float], q.AbsRescale],
    kernel: str,
) -> str:
    """ABS and RSQRT: a float kernel, or an int8/int16 one that rescales through `rescale(in_scale, out_scale)`."""
    count = elementwise_count(e, op)
    dtype = e.tensor(op.inputs[0]).dtype
    source, target = e.pointer(op.inputs[0]), e.pointer(op.outputs[0], True)
    if dtype == "float32":
        return f"lt_unary_f32({float_op}, {source}, {target}, {count});"
    in_q, out_q = e.quantization(op.inputs[0]), e.quantization(op.outputs[0])
    if dtype == "int16":
        require(in_q.zero_point == out_q.zero_point == 0, "int16 needs zero points of 0")
    p = e.struct(
        f"{name}_params",
        params_reading(
            ActivationParams,
            count=count,
            input_zero_point=in_q.zero_point,
            output_zero_point=out_q.zero_point,
            **rescale(in_q.scale, out_q.scale),
        ),
    )
    return f"{kernel}_{SUFFIXES[dtype]}({p}, {source}, {target});"


def lower_abs(e: ModelEmitter, op: Operator, name: str) -> str:
    return _lower_rescaled_unary(e, op, name, "LT_ABS", q.abs_params, "lt_abs")


def lower_rsqrt(e: ModelEmitter, op: Operator, name: str) -> str:
    def rescale(input_scale: float, output_scale: float) -> q.AbsRescale:
        return q.AbsRescale(**q.rsqrt_params(input_scale, output_scale), rescale=0)  # lt_rsqrt_* reads no flag

    return _lower_rescaled_unary(e, op, name, "LT_RSQRT", rescale, "lt_rsqrt")


COMPARISONS = {
    "EQUAL": "LT_EQUAL",
    "NOT_EQUAL": "LT_NOT_EQUAL",
    "LESS": "LT_LESS",
    "LESS_EQUAL": "LT_LESS_EQUAL",
    "GREATER": "LT_GREATER",
    "GREATER_EQUAL": "LT_GREATER_EQUAL",
}
COMPARISON_SUFFIXES = {"int8": "s8", "int32": "s32", "int64": "s64", "float32": "f32", "bool": "bool"}


def lower_comparison(e: ModelEmitter, op: Operator, name: str) -> str:
    ins, outs = tensor_types(e, op)
    require(ins[0] == ins[1] and outs == ["bool"], f"types {ins} -> {outs}")
    steps = broadcast_steps(e, op)
    if ins[0] == "int8":
        q1, q2 = e.quantization(op.inputs[0]), e.quantization(op.inputs[1])
        params = BinaryParams(
            **steps,
            input1_offset=-q1.zero_point,
            input2_offset=-q2.zero_point,
            output_offset=0,
            **q.comparison_params_int8(q1.scale, q2.scale),
            **NO_OUTPUT_RESCALE,
            **NO_QUANTIZED_ACTIVATION,
            **NO_FLOAT_ACTIVATION,
        )
    else:
        params = raw_values(steps)
    p = e.struct(f"{name}_params", params)
    return (
        f"lt_compare_{COMPARISON_SUFFIXES[ins[0]]}({COMPARISONS[op.opcode]}, {p}, {e.pointer(op.inputs[0])}, "
        f"{e.pointer(op.inputs[1])}, {e.pointer(op.outputs[0], True)});"
    )


def _logical(and_op: bool) -> Lowering:
    def lower(e: ModelEmitter, op: Operator, name: str) -> str:
        _same_type_binary(e, op)
        p = e.struct(f"{name}_params", raw_values(broadcast_steps(e, op)))
        return (
            f"lt_logical({int(and_op)}, {p}, {e.pointer(op.inputs[0])}, {e.pointer(op.inputs[1])}, "
            f"{e.pointer(op.outputs[0], True)});"
        )

    lower.__doc__ = f"LOGICAL_{'AND' if and_op else 'OR'} with broadcasting."
    return lower


def lower_logical_not(e: ModelEmitter, op: Operator, name: str) -> str:
    count = elementwise_count(e, op)
    return f"lt_logical_not({e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)}, {count});"


def _float_function(function: str) -> Lowering:
    def lower(e: ModelEmitter, op: Operator, name: str) -> str:
        count = elementwise_count(e, op)
        return f"lt_unary_f32({function}, {e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)}, {count});"

    lower.__doc__ = f"A float32 kernel of one element: {function}."
    return lower


def lower_cast(e: ModelEmitter, op: Operator, name: str) -> str:
    ins, outs = tensor_types(e, op)
    count = elementwise_count(e, op)
    return (
        f"lt_cast({LT_TYPES[ins[0]]}, {e.pointer(op.inputs[0])}, {LT_TYPES[outs[0]]}, "
        f"{e.pointer(op.outputs[0], True)}, {count});"
    )


KERNELS = (
    Kernel("ADD", lower_add, ("int8", "int16", "int32", "float32"), "broadcasting up to 6-D"),
    Kernel("MUL", lower_mul, ("int8", "int16", "int32", "float32"), "broadcasting up to 6-D; int16: zero points 0"),
    Kernel("QUANTIZE", lower_quantize, ("float32->int8", "float32->int16") + REQUANTIZE_TYPES),
    Kernel("DEQUANTIZE", lower_dequantize, ("int8->float32", "uint8->float32", "int16->float32")),
    Kernel("SUB", lower_sub, ("int8", "int16", "int32", "float32"), "broadcasting up to 6-D"),
    Kernel(
        "MAXIMUM", lower_maximum, ("int8", "int16", "int32", "int64", "float32"), "raw values compared, as TFLM does"
    ),
    Kernel(
        "MINIMUM", lower_minimum, ("int8", "int16", "int32", "int64", "float32"), "raw values compared, as TFLM does"
    ),
    Kernel(
        "FLOOR_DIV",
        _float_binary("lt_floor_div_f32"),
        ("float32",),
        "broadcasting; a zero divisor gives ±inf or NaN (TFLM's kernel fails the invocation)",
    ),
    Kernel("FLOOR_MOD", _float_binary("lt_floor_mod_f32"), ("float32",), "broadcasting"),
    Kernel("SQUARED_DIFFERENCE", lower_squared_difference, ("int8", "int16", "int32", "float32")),
    Kernel(
        "DIV",
        lower_div,
        ("int8", "int32", "float32"),
        "int8: input1 scale / (input2 scale × output scale) in [64, 2^22), outside which TFLM's reference "
        "kernel shifts by 32 bits or more or by a negative count (undefined: x86 and Cortex-M differ); int32: "
        "x / 0 is 0 and INT32_MIN / -1 is INT32_MIN, as Cortex-M's SDIV gives (TFLM traps on x86)",
    ),
    Kernel("ADD_N", lower_add_n, ("int8", "float32")),
    Kernel("ABS", lower_abs, ("int8", "int16", "float32"), "int16 quantized with zero points 0"),
    Kernel("NEG", _float_function("LT_NEG"), ("float32",)),
    Kernel("SQUARE", _float_function("LT_SQUARE"), ("float32",)),
    Kernel("SQRT", _float_function("LT_SQRT"), ("float32",)),
    Kernel("RSQRT", lower_rsqrt, ("int8", "int16", "float32"), "quantized: inputs at or above the zero point"),
    Kernel("EXP", _float_function("LT_EXP"), ("float32",)),
    Kernel("LOG", _float_function("LT_LOG"), ("float32",)),
    Kernel("SIN", _float_function("LT_SIN"), ("float32",)),
    Kernel("COS", _float_function("LT_COS"), ("float32",)),
    Kernel("FLOOR", _float_function("LT_FLOOR"), ("float32",)),
    Kernel("CEIL", _float_function("LT_CEIL"), ("float32",)),
    Kernel("ROUND", _float_function("LT_ROUND"), ("float32",), "halfway cases to even"),
    Kernel("EQUAL", lower_comparison, ("int8->bool", "int32->bool", "int64->bool", "float32->bool", "bool")),
    Kernel("NOT_EQUAL", lower_comparison, ("int8->bool", "int32->bool", "int64->bool", "float32->bool", "bool")),
    Kernel("LESS", lower_comparison, ("int8->bool", "int32->bool", "int64->bool", "float32->bool")),
    Kernel("LESS_EQUAL", lower_comparison, ("int8->bool", "int32->bool", "int64->bool", "float32->bool")),
    Kernel("GREATER", lower_comparison, ("int8->bool", "int32->bool", "int64->bool", "float32->bool")),
    Kernel("GREATER_EQUAL", lower_comparison, ("int8->bool", "int32->bool", "int64->bool", "float32->bool")),
    Kernel("LOGICAL_AND", _logical(True), ("bool",)),
    Kernel("LOGICAL_OR", _logical(False), ("bool",)),
    Kernel("LOGICAL_NOT", lower_logical_not, ("bool",)),
    Kernel(
        "CAST",
        lower_cast,
        tuple(f"{a}->{b}" for a in CAST_TYPES + ("bool",) for b in CAST_TYPES if a != b) + CAST_TYPES,
        "bool: 0 or 1",
    ),
)
