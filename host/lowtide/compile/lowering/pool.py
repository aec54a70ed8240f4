"""AVERAGE_POOL_2D, MAX_POOL_2D and MEAN: calls into firmware/runtime/lt_pool.c."""

from __future__ import annotations

import math

from lowtide.compile import quantization as q
from lowtide.compile.lowering.conv import window_geometry
from lowtide.compile.lowering.emitter import (
    MAX_DIMS,
    Kernel,
    Unsupported,
    float_activation,
    quantized_activation,
    require,
    strides,
    tensor_types,
)


def _pool(e, op, name, kind):
    ins, outs = tensor_types(e, op)
    params = window_geometry(e, op, int(op.options.filterHeight), int(op.options.filterWidth))
    params.update(filter_in_c=1, depth_multiplier=1)
    if ins == ["int8"] and outs == ["int8"]:
        in_q, out_q = e.quantization(op.inputs[0]), e.quantization(op.outputs[0])
        require(in_q == out_q, "int8 pooling needs equal input and output quantization")
        params.update(quantized_activation(e, op, op.outputs[0]))
        suffix = "s8"
    elif ins == ["float32"] and outs == ["float32"]:
        params.update(float_activation(op))
        suffix = "f32"
    else:
        raise Unsupported(f"types {ins} -> {outs}")
    p = e.struct(f"{name}_params", "lt_conv_params", params)
    return f"lt_{kind}_{suffix}({p}, {e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)});"


def lower_average_pool_2d(e, op, name):
    return _pool(e, op, name, "average_pool")


def lower_max_pool_2d(e, op, name):
    return _pool(e, op, name, "max_pool")


def lower_mean(e, op, name):
    ins, outs = tensor_types(e, op)
    shape = e.tensor(op.inputs[0]).shape
    require(len(shape) <= MAX_DIMS, f"more than {MAX_DIMS} dimensions")
    axes = sorted({int(a) % len(shape) for a in e.constant_values(op.inputs[1]).reshape(-1)})
    kept = [d for d in range(len(shape)) if d not in axes]
    st = strides(shape)
    params: dict[str, object] = {
        "kept_ndim": len(kept), "kept_dims": [shape[d] for d in kept], "kept_steps": [st[d] for d in kept],
        "reduced_ndim": len(axes), "reduced_dims": [shape[d] for d in axes], "reduced_steps": [st[d] for d in axes],
        "count": math.prod(shape[d] for d in axes)}
    if ins[0] == "int8" and outs == ["int8"]:
        in_q, out_q = e.quantization(op.inputs[0]), e.quantization(op.outputs[0])
        m, s = q.mean_multiplier(*q.quantize_multiplier(float(in_q.scale) / float(out_q.scale)), params["count"])
        params.update(input_zero_point=in_q.zero_point, output_zero_point=out_q.zero_point, multiplier=m, shift=s)
        suffix = "s8"
    elif ins[0] == "float32" and outs == ["float32"]:
        suffix = "f32"
    else:
        raise Unsupported(f"types {ins} -> {outs}")
    p = e.struct(f"{name}_params", "lt_mean_params", params)
    return f"lt_mean_{suffix}({p}, {e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)});"



KERNELS = (
    Kernel("AVERAGE_POOL_2D", lower_average_pool_2d, ("int8", "float32")),
    Kernel("MAX_POOL_2D", lower_max_pool_2d, ("int8", "float32")),
    Kernel("MEAN", lower_mean, ("int8", "float32")),
)
