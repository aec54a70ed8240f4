"""Pooling and reductions (AVERAGE_POOL_2D, MAX_POOL_2D, MEAN, SUM, REDUCE_MAX, REDUCE_MIN, ARG_MAX, ARG_MIN,
CUMSUM): calls into firmware/runtime/lt_pool.c."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import TypedDict

from lowtide.compile import quantization as q
from lowtide.compile.kernel_params import MAX_DIMS, AxisParams, ConvParams, MeanParams
from lowtide.compile.lowering.conv import window_geometry
from lowtide.compile.lowering.elementwise import add_n_rescale
from lowtide.compile.lowering.emitter import (
    NO_FLOAT_ACTIVATION,
    NO_QUANTIZED_ACTIVATION,
    Kernel,
    ModelEmitter,
    QuantizedActivation,
    Unsupported,
    attributes_of,
    float_activation,
    quantized_activation,
    require,
    strides,
    tensor_types,
)
from lowtide.model.attributes import CumsumAttributes, Pool2DAttributes
from lowtide.model.ir import Operator


def _pool(e: ModelEmitter, op: Operator, name: str, kind: str) -> str:
    ins, outs = tensor_types(e, op)
    window = window_geometry(e, op, *attributes_of(op, Pool2DAttributes).filter)
    if ins == ["int8"] and outs == ["int8"]:
        in_q, out_q = e.quantization(op.inputs[0]), e.quantization(op.outputs[0])
        require(in_q == out_q, "int8 pooling needs equal input and output quantization")
        # no offsets: the input's quantization is the output's
        params = ConvParams(
            **asdict(window),
            input_offset=0,
            output_offset=0,
            **quantized_activation(e, op, op.outputs[0]),
            **NO_FLOAT_ACTIVATION,
        )
        suffix = "s8"
    elif ins == ["float32"] and outs == ["float32"]:
        params = ConvParams(
            **asdict(window), input_offset=0, output_offset=0, **NO_QUANTIZED_ACTIVATION, **float_activation(op)
        )
        suffix = "f32"
    else:
        raise Unsupported(f"types {ins} -> {outs}")
    p = e.struct(f"{name}_params", params)
    if op.index in e.row_ops:  # output row oy of a row chain (`lowtide.compile.rows`): int8 max pools, in lt_rows.h
        rows, slots = e.ring_argument(op.inputs[0], f"oy * {window.stride_h}")
        body = f"lt_{kind}_ring_{suffix}({p}, {rows}, {slots}, oy, {e.row_pointer(op.outputs[0], 'oy', True)});"
        return e.row_function(name, body)
    return f"lt_{kind}_{suffix}({p}, {e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)});"


def lower_average_pool_2d(e: ModelEmitter, op: Operator, name: str) -> str:
    return _pool(e, op, name, "average_pool")


def lower_max_pool_2d(e: ModelEmitter, op: Operator, name: str) -> str:
    return _pool(e, op, name, "max_pool")


SUFFIXES = {"int8": "s8", "int16": "s16", "float32": "f32"}


class Reduction(TypedDict):
    """lt_mean_params' shape members."""

    kept_ndim: int
    kept_dims: list[int]
    kept_steps: list[int]
    reduced_ndim: int
    reduced_dims: list[int]
    reduced_steps: list[int]
    count: int


def _reduction(e: ModelEmitter, op: Operator) -> Reduction:
    """lt_mean_params' shape members: kept and reduced dimensions (axes sorted, duplicates and negatives
    resolved as ResolveAxis does) with their steps in the input."""
    shape = e.tensor(op.inputs[0]).shape
    require(len(shape) <= MAX_DIMS, f"more than {MAX_DIMS} dimensions")
    axes = sorted({int(a) % len(shape) for a in e.constant_values(op.inputs[1]).reshape(-1)})
    kept = [d for d in range(len(shape)) if d not in axes]
    st = strides(shape)
    return Reduction(
        kept_ndim=len(kept),
        kept_dims=[shape[d] for d in kept],
        kept_steps=[st[d] for d in kept],
        reduced_ndim=len(axes),
        reduced_dims=[shape[d] for d in axes],
        reduced_steps=[st[d] for d in axes],
        count=math.prod(shape[d] for d in axes),
    )


def _mean_or_sum(e: ModelEmitter, op: Operator, name: str, mean: bool) -> str:
    """MEAN and SUM (QuantizedMeanOrSum): the sum requantized; MEAN folds 1/count into the multiplier."""
    dtype = e.tensor(op.inputs[0]).dtype
    shape = _reduction(e, op)
    if dtype == "float32":
        params = MeanParams(**shape, input_zero_point=0, output_zero_point=0, multiplier=0, shift=0)
        function = "lt_mean_f32" if mean else "lt_sum_f32"
    else:
        in_q, out_q = e.quantization(op.inputs[0]), e.quantization(op.outputs[0])
        m, s = q.quantize_multiplier(float(in_q.scale) / float(out_q.scale))
        if mean:
            m, s = q.mean_multiplier(m, s, shape["count"])
        params = MeanParams(
            **shape, input_zero_point=in_q.zero_point, output_zero_point=out_q.zero_point, multiplier=m, shift=s
        )
        function = f"lt_mean_{SUFFIXES[dtype]}"
    p = e.struct(f"{name}_params", params)
    return f"{function}({p}, {e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)});"


def lower_mean(e: ModelEmitter, op: Operator, name: str) -> str:
    return _mean_or_sum(e, op, name, mean=True)


def lower_sum(e: ModelEmitter, op: Operator, name: str) -> str:
    return _mean_or_sum(e, op, name, mean=False)


def _extremum(e: ModelEmitter, op: Operator, name: str, kind: str) -> str:
    """REDUCE_MAX, REDUCE_MIN: int8 needs equal input and output quantization (TFLM's Eval checks it)."""
    dtype = e.tensor(op.inputs[0]).dtype
    if dtype == "int8":
        require(
            e.quantization(op.inputs[0]) == e.quantization(op.outputs[0]),
            "int8 needs equal input and output quantization",
        )
    # the extremes are compared as they are: no rescale
    params = MeanParams(**_reduction(e, op), input_zero_point=0, output_zero_point=0, multiplier=0, shift=0)
    p = e.struct(f"{name}_params", params)
    return f"lt_reduce_{kind}_{SUFFIXES[dtype]}({p}, {e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)});"


def lower_reduce_max(e: ModelEmitter, op: Operator, name: str) -> str:
    return _extremum(e, op, name, "max")


def lower_reduce_min(e: ModelEmitter, op: Operator, name: str) -> str:
    return _extremum(e, op, name, "min")


def _axis_params(
    e: ModelEmitter, op: Operator, name: str, axis: int, exclusive: bool = False, reverse: bool = False
) -> str:
    shape = e.tensor(op.inputs[0]).shape
    return e.struct(
        f"{name}_params",
        AxisParams(
            outer=math.prod(shape[:axis]),
            axis_size=shape[axis],
            inner=math.prod(shape[axis + 1 :]),
            exclusive=int(exclusive),
            reverse=int(reverse),
        ),
    )


def _single_axis(e: ModelEmitter, op: Operator) -> int:
    shape = e.tensor(op.inputs[0]).shape
    values = e.constant_values(op.inputs[1]).reshape(-1)
    require(values.size == 1 and -len(shape) <= int(values[0]) < len(shape), "the axis must be one valid value")
    return int(values[0]) % len(shape)


def _arg_extremum(e: ModelEmitter, op: Operator, name: str, kind: str) -> str:
    ins, outs = tensor_types(e, op)
    require(outs == ["int32"] and ins[1] == "int32", f"types {ins} -> {outs} (int32 axis and output only)")
    p = _axis_params(e, op, name, _single_axis(e, op))
    return f"lt_arg_{kind}_{SUFFIXES[ins[0]]}({p}, {e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)});"


def lower_arg_max(e: ModelEmitter, op: Operator, name: str) -> str:
    return _arg_extremum(e, op, name, "max")


def lower_arg_min(e: ModelEmitter, op: Operator, name: str) -> str:
    return _arg_extremum(e, op, name, "min")


def lower_cumsum(e: ModelEmitter, op: Operator, name: str) -> str:
    dtype = e.tensor(op.inputs[0]).dtype
    cumsum = attributes_of(op, CumsumAttributes)
    p = _axis_params(e, op, name, _single_axis(e, op), exclusive=cumsum.exclusive, reverse=cumsum.reverse)
    source, target = e.pointer(op.inputs[0]), e.pointer(op.outputs[0], True)
    if dtype == "float32":
        return f"lt_cumsum_f32({p}, {source}, {target});"
    in_q, out_q = e.quantization(op.inputs[0]), e.quantization(op.outputs[0])
    rescale = e.struct(
        f"{name}_rescale",
        add_n_rescale(
            in_q.zero_point,
            in_q.scale,
            out_q.zero_point,
            out_q.scale,
            QuantizedActivation(act_min=q.INT8_MIN, act_max=q.INT8_MAX),
        ),
    )
    return f"lt_cumsum_s8({p}, {rescale}, {source}, {target});"


KERNELS = (
    Kernel("AVERAGE_POOL_2D", lower_average_pool_2d, ("int8", "float32")),
    Kernel("MAX_POOL_2D", lower_max_pool_2d, ("int8", "float32")),
    Kernel("MEAN", lower_mean, ("int8", "int16", "float32")),
    Kernel("SUM", lower_sum, ("int8", "int16", "float32")),
    Kernel("REDUCE_MAX", lower_reduce_max, ("int8", "float32")),
    Kernel("REDUCE_MIN", lower_reduce_min, ("int8", "float32")),
    Kernel("ARG_MAX", lower_arg_max, ("int8->int32", "float32->int32")),
    Kernel("ARG_MIN", lower_arg_min, ("int8->int32", "float32->int32")),
    Kernel("CUMSUM", lower_cumsum, ("int8", "float32"), "exclusive, reverse"),
)
