"""TRANSPOSE_CONV and BATCH_MATMUL: int8 and float32 call into firmware/runtime/lt_conv.c, the 16-bit forms (16x8,
64-bit sums) into lt_matmul.c; one geometry for every type."""

from __future__ import annotations

from dataclasses import asdict

from lowtide.compile import quantization as q
from lowtide.compile.kernel_params import MAX_DIMS, BatchMatmulParams, BatchMatmulShape, ConvParams, ConvShape
from lowtide.compile.lowering.emitter import (
    NO_FLOAT_ACTIVATION,
    NO_QUANTIZED_ACTIVATION,
    Kernel,
    ModelEmitter,
    Unsupported,
    attributes_of,
    float_activation,
    quantized_activation,
    require,
    strides,
    tensor_types,
)
from lowtide.model import padding
from lowtide.model.attributes import BatchMatMulAttributes, TransposeConvAttributes
from lowtide.model.ir import Operator


def transpose_conv_geometry(e: ModelEmitter, op: Operator) -> ConvShape:
    """TRANSPOSE_CONV (inputs: output shape, filter [out_c, h, w, in_c], input, optional bias). TFLM pads as a
    convolution over the output would: ComputePaddingHeightWidth on the output's height and width."""
    shape_input, filter_index, data = op.inputs[:3]
    in_shape, out_shape = e.tensor(data).shape, e.tensor(op.outputs[0]).shape
    filter_shape = e.tensor(filter_index).shape
    require(len(in_shape) == len(out_shape) == len(filter_shape) == 4, "only 4-D NHWC tensors are supported")
    require(
        tuple(int(v) for v in e.constant_values(shape_input).reshape(-1)) == out_shape,
        "the output shape input differs from the output's shape",
    )
    require(filter_shape[0] == out_shape[3] and filter_shape[3] == in_shape[3], "filter shape does not match")
    o = attributes_of(op, TransposeConvAttributes)
    stride_h, stride_w = o.stride
    pads = []
    for size, kernel, stride in ((out_shape[1], filter_shape[1], stride_h), (out_shape[2], filter_shape[2], stride_w)):
        try:
            pads.append(
                padding.padding_before(size, kernel, stride, 1, padding.output_size(o.padding, size, kernel, stride))
            )
        except ValueError as exc:
            raise Unsupported(str(exc)) from None
    return ConvShape(
        batches=in_shape[0],
        in_h=in_shape[1],
        in_w=in_shape[2],
        in_c=in_shape[3],
        out_h=out_shape[1],
        out_w=out_shape[2],
        out_c=out_shape[3],
        filter_h=filter_shape[1],
        filter_w=filter_shape[2],
        filter_in_c=in_shape[3],
        stride_h=stride_h,
        stride_w=stride_w,
        dilation_h=1,
        dilation_w=1,
        pad_h=pads[0],
        pad_w=pads[1],
        depth_multiplier=1,
    )


def lower_transpose_conv(e: ModelEmitter, op: Operator, name: str) -> str:
    """16x8: int16 input, int8 per-channel filter, int16 output. The reference adds no offsets (zero points are
    0 in 16x8 models); the bias is int64, or int16 widened to int64 (TFLM's Eval widens it into a scratch buffer
    each time; here once, offline). An int32 bias TFLM would read as int64, past its end: refused."""
    ins, outs = tensor_types(e, op)
    if ins[2] != "int16":
        return _lower_transpose_conv_8_or_float(e, op, name)
    _, filter_index, data = op.inputs[:3]
    bias = op.inputs[3] if len(op.inputs) > 3 and op.inputs[3] >= 0 else None
    require(ins[1] == "int8" and outs == ["int16"], f"types {ins} -> {outs}")
    shape = transpose_conv_geometry(e, op)
    if bias is None:
        bias_pointer = "NULL"
    elif e.tensor(bias).dtype == "int64":
        bias_pointer = e.pointer(bias)
    else:
        require(e.tensor(bias).dtype == "int16", "a 16x8 transpose convolution needs an int64 or int16 bias")
        bias_pointer = e.array(f"{name}_bias", "int64_t", e.constant_values(bias).astype("int64"))
    in_q, f_q, out_q = e.quantization(data), e.quantization(filter_index), e.quantization(op.outputs[0])
    multipliers, shifts = q.per_channel_multipliers(in_q.scale, list(f_q.scales), out_q.scale, shape.out_c)
    p = e.struct(
        f"{name}_params",
        ConvParams(
            **asdict(shape),
            input_offset=0,
            output_offset=0,
            **quantized_activation(e, op, op.outputs[0]),
            **NO_FLOAT_ACTIVATION,
        ),
    )
    return (
        f"lt_transpose_conv_s16({p}, {e.pointer(data)}, {e.pointer(filter_index)}, {bias_pointer}, "
        f"{e.array(f'{name}_multiplier', 'int32_t', multipliers)}, {e.array(f'{name}_shift', 'int32_t', shifts)}, "
        f"{e.pointer(op.outputs[0], True)});"
    )


def batch_matmul_geometry(e: ModelEmitter, op: Operator) -> BatchMatmulShape:
    """BATCH_MATMUL: the last two dimensions multiplied (adj_x / adj_y transpose them), the others broadcast."""
    lhs_shape, rhs_shape = e.tensor(op.inputs[0]).shape, e.tensor(op.inputs[1]).shape
    out_shape = e.tensor(op.outputs[0]).shape
    require(min(len(lhs_shape), len(rhs_shape)) >= 2 and len(out_shape) <= MAX_DIMS, "rank below 2 or above 6")
    matmul = attributes_of(op, BatchMatMulAttributes)
    adj_x, adj_y = matmul.adj_x, matmul.adj_y
    lhs_st, rhs_st = strides(lhs_shape), strides(rhs_shape)
    rows, depth = (lhs_shape[-1], lhs_shape[-2]) if adj_x else (lhs_shape[-2], lhs_shape[-1])
    lhs_row_step, lhs_depth_step = (1, lhs_st[-2]) if adj_x else (lhs_st[-2], 1)
    rhs_depth, cols = (rhs_shape[-1], rhs_shape[-2]) if adj_y else (rhs_shape[-2], rhs_shape[-1])
    rhs_depth_step, rhs_col_step = (1, rhs_st[-2]) if adj_y else (rhs_st[-2], 1)
    require(depth == rhs_depth and out_shape[-2:] == (rows, cols), f"{lhs_shape} x {rhs_shape} is not {out_shape}")
    batch = out_shape[:-2]
    steps = []
    for shape, st in ((lhs_shape, lhs_st), (rhs_shape, rhs_st)):
        pad = len(batch) - (len(shape) - 2)
        padded = (1,) * pad + tuple(shape[:-2])
        padded_st = [0] * pad + st[:-2]
        require(all(s in (1, b) for s, b in zip(padded, batch)), f"batch dimensions {shape[:-2]} of {batch}")
        steps.append([t if s > 1 else 0 for s, t in zip(padded, padded_st)])
    return BatchMatmulShape(
        batch_ndim=len(batch),
        batch_dims=list(batch),
        lhs_batch_steps=steps[0],
        rhs_batch_steps=steps[1],
        rows=rows,
        cols=cols,
        depth=depth,
        lhs_row_step=lhs_row_step,
        lhs_depth_step=lhs_depth_step,
        rhs_depth_step=rhs_depth_step,
        rhs_col_step=rhs_col_step,
    )


def lower_batch_matmul(e: ModelEmitter, op: Operator, name: str) -> str:
    """int16: both operands and the output int16 with zero points 0 (TFLM's Prepare requires it)."""
    ins, outs = tensor_types(e, op)
    if ins[0] != "int16":
        return _lower_batch_matmul_8_or_float(e, op, name)
    require(ins[1] == outs[0] == "int16", f"types {ins} -> {outs}")
    quants = [e.quantization(t) for t in (op.inputs[0], op.inputs[1], op.outputs[0])]
    require(all(qp.zero_point == 0 for qp in quants), "int16 BATCH_MATMUL needs zero points of 0")
    lhs_q, rhs_q, out_q = quants
    m, s = q.quantize_multiplier(float(lhs_q.scale) * float(rhs_q.scale) / float(out_q.scale))
    p = e.struct(
        f"{name}_params",
        BatchMatmulParams(
            **asdict(batch_matmul_geometry(e, op)), lhs_offset=0, rhs_offset=0, output_offset=0, multiplier=m, shift=s
        ),
    )
    return (
        f"lt_batch_matmul_s16({p}, {e.pointer(op.inputs[0])}, {e.pointer(op.inputs[1])}, "
        f"{e.pointer(op.outputs[0], True)});"
    )


def _lower_transpose_conv_8_or_float(e: ModelEmitter, op: Operator, name: str) -> str:
    """int8 (per-channel weights, int32 bias) and float32."""
    ins, outs = tensor_types(e, op)
    _, filter_index, data = op.inputs[:3]
    bias = op.inputs[3] if len(op.inputs) > 3 and op.inputs[3] >= 0 else None
    shape = transpose_conv_geometry(e, op)
    dtype = ins[2]
    require(outs == [dtype] and ins[1] == ("int8" if dtype == "int8" else "float32"), f"types {ins} -> {outs}")
    pointers = [e.pointer(data), e.pointer(filter_index), e.pointer(bias) if bias is not None else "NULL"]
    if dtype == "float32":
        p = e.struct(
            f"{name}_params",
            ConvParams(
                **asdict(shape), input_offset=0, output_offset=0, **NO_QUANTIZED_ACTIVATION, **float_activation(op)
            ),
        )
        return f"lt_transpose_conv_f32({p}, {', '.join(pointers)}, {e.pointer(op.outputs[0], True)});"
    require(bias is None or e.tensor(bias).dtype == "int32", "int8 transpose convolution needs an int32 bias")
    in_q, f_q, out_q = e.quantization(data), e.quantization(filter_index), e.quantization(op.outputs[0])
    multipliers, shifts = q.per_channel_multipliers(in_q.scale, list(f_q.scales), out_q.scale, shape.out_c)
    p = e.struct(
        f"{name}_params",
        ConvParams(
            **asdict(shape),
            input_offset=-in_q.zero_point,
            output_offset=out_q.zero_point,
            **quantized_activation(e, op, op.outputs[0]),
            **NO_FLOAT_ACTIVATION,
        ),
    )
    return (
        f"lt_transpose_conv_s8({p}, {', '.join(pointers)}, {e.array(f'{name}_multiplier', 'int32_t', multipliers)}"
        f", {e.array(f'{name}_shift', 'int32_t', shifts)}, {e.pointer(op.outputs[0], True)});"
    )


def _lower_batch_matmul_8_or_float(e: ModelEmitter, op: Operator, name: str) -> str:
    """int8 (operand zero points as offsets) and float32."""
    ins, outs = tensor_types(e, op)
    require(ins[0] == ins[1] == outs[0], f"types {ins} -> {outs}")
    shape = batch_matmul_geometry(e, op)
    if ins[0] == "int8":
        lhs_q, rhs_q, out_q = (e.quantization(t) for t in (op.inputs[0], op.inputs[1], op.outputs[0]))
        m, s = q.quantize_multiplier(float(lhs_q.scale) * float(rhs_q.scale) / float(out_q.scale))
        params = BatchMatmulParams(
            **asdict(shape),
            lhs_offset=-lhs_q.zero_point,
            rhs_offset=-rhs_q.zero_point,
            output_offset=out_q.zero_point,
            multiplier=m,
            shift=s,
        )
    else:
        params = BatchMatmulParams(**asdict(shape), lhs_offset=0, rhs_offset=0, output_offset=0, multiplier=0, shift=0)
    p = e.struct(f"{name}_params", params)
    suffix = "s8" if ins[0] == "int8" else "f32"
    return (
        f"lt_batch_matmul_{suffix}({p}, {e.pointer(op.inputs[0])}, {e.pointer(op.inputs[1])}, "
        f"{e.pointer(op.outputs[0], True)});"
    )


KERNELS = (
    Kernel(
        "BATCH_MATMUL",
        lower_batch_matmul,
        ("int8", "int16", "float32"),
        "adj_x, adj_y, broadcast batch dimensions; int16: zero points 0",
    ),
    Kernel(
        "TRANSPOSE_CONV",
        lower_transpose_conv,
        ("*->int8", "*->int16", "*->float32"),
        "int8 per-channel weights (int16: 16x8, int64 or int16 bias)",
    ),
)
