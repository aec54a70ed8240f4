"""CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED: calls into firmware/runtime/lt_conv.c, and for int8 layers
the fast kernels of firmware/runtime/lt_conv_dsp.h, specialised per layer (one C function per layer that calls
the inline kernel with its constant parameters) and fed with weights packed offline in the order they are read."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, replace

import numpy as np

from lowtide.compile import quantization as q
from lowtide.compile.kernel_params import ConvParams, ConvShape, FcParams, KernelParams
from lowtide.compile.lowering.emitter import (
    NO_FLOAT_ACTIVATION,
    NO_QUANTIZED_ACTIVATION,
    Kernel,
    ModelEmitter,
    PadFusion,
    QuantizedActivation,
    Unsupported,
    float_activation,
    pack_row_pairs,
    pack_rows_by_four,
    quantized_activation,
    require,
    tensor_types,
)
from lowtide.model import padding
from lowtide.model.attributes import (
    Conv2DAttributes,
    DepthwiseConv2DAttributes,
    FullyConnectedAttributes,
    Pool2DAttributes,
    attributes_as,
)
from lowtide.model.ir import Operator, TensorKind


def window_geometry(e: ModelEmitter, op: Operator, filter_h: int, filter_w: int) -> ConvShape:
    """Window geometry shared by convolutions and pools (ComputePaddingHeightWidth), with a pool's one filter
    input channel and depth multiplier 1."""
    in_shape, out_shape = e.tensor(op.inputs[0]).shape, e.tensor(op.outputs[0]).shape
    require(len(in_shape) == 4 and len(out_shape) == 4, "only 4-D NHWC tensors are supported")
    window = op.attributes
    if not isinstance(window, (Conv2DAttributes, DepthwiseConv2DAttributes, Pool2DAttributes)):
        raise Unsupported(f"no window options on {op.opcode}")
    stride_h, stride_w = window.stride
    dil_h, dil_w = (1, 1) if isinstance(window, Pool2DAttributes) else (d or 1 for d in window.dilation)
    code = window.padding
    try:
        out_h = padding.output_size(code, in_shape[1], filter_h, stride_h, dil_h)
        out_w = padding.output_size(code, in_shape[2], filter_w, stride_w, dil_w)
    except ValueError as exc:
        raise Unsupported(str(exc)) from None
    require((out_h, out_w) == tuple(out_shape[1:3]), f"output shape {out_shape} does not match the padding")
    return ConvShape(
        batches=in_shape[0],
        in_h=in_shape[1],
        in_w=in_shape[2],
        in_c=in_shape[3],
        out_h=out_h,
        out_w=out_w,
        out_c=out_shape[3],
        filter_h=filter_h,
        filter_w=filter_w,
        filter_in_c=1,
        stride_h=stride_h,
        stride_w=stride_w,
        dilation_h=dil_h,
        dilation_w=dil_w,
        pad_h=padding.padding_before(in_shape[1], filter_h, stride_h, dil_h, out_h),
        pad_w=padding.padding_before(in_shape[2], filter_w, stride_w, dil_w, out_w),
        depth_multiplier=1,
    )


def _weighted(e: ModelEmitter, op: Operator, name: str, kind: str) -> str:
    """CONV_2D, DEPTHWISE_CONV_2D: int8 per-channel, 16x8 or float32."""
    ins, outs = tensor_types(e, op)
    filter_shape = e.tensor(op.inputs[1]).shape
    require(len(filter_shape) == 4, "filter must be 4-D")
    geometry = window_geometry(e, op, filter_shape[1], filter_shape[2])
    fusion = e.fused_pads.get(op.index)
    if fusion is not None:  # read the PAD's input: its padding becomes part of this layer's
        source = e.tensor(fusion.source).shape
        geometry = replace(
            geometry,
            in_h=source[1],
            in_w=source[2],
            pad_h=geometry.pad_h + fusion.top,
            pad_w=geometry.pad_w + fusion.left,
        )
    shape = replace(
        geometry,
        filter_in_c=filter_shape[3] if kind == "conv2d" else 1,
        depth_multiplier=geometry.out_c // geometry.in_c if kind == "depthwise_conv2d" else 1,
    )
    if kind == "conv2d":
        require(shape.in_c % shape.filter_in_c == 0, "input channels are not a multiple of the filter's")
    bias = op.inputs[2] if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
    if ins[:2] == ["int8", "int8"] and outs == ["int8"]:
        require(bias is None or ins[2] == "int32", "int8 convolution needs an int32 bias")
        in_q, f_q, out_q = e.quantization(op.inputs[0]), e.quantization(op.inputs[1]), e.quantization(op.outputs[0])
        multipliers, shifts = q.per_channel_multipliers(in_q.scale, list(f_q.scales), out_q.scale, shape.out_c)
        params = ConvParams(
            **asdict(shape),
            input_offset=-in_q.zero_point,
            output_offset=out_q.zero_point,
            **quantized_activation(e, op, op.outputs[0]),
            **NO_FLOAT_ACTIVATION,
        )
        fast = _fast_int8(e, op, name, kind, params, bias, multipliers, shifts)
        if fast is not None:
            return fast
        require(fusion is None, "a fused PAD needs a fast kernel")
        return _weighted_call(e, op, name, f"lt_{kind}_s8", params, bias, (multipliers, shifts))
    if ins[:2] == ["int16", "int8"] and outs == ["int16"]:
        return _weighted_16x8(
            e,
            op,
            name,
            kind,
            bias,
            shape.out_c,
            lambda activation: ConvParams(
                **asdict(shape), input_offset=0, output_offset=0, **activation, **NO_FLOAT_ACTIVATION
            ),
        )
    if ins[:2] == ["float32", "float32"] and outs == ["float32"]:
        params = ConvParams(
            **asdict(shape), input_offset=0, output_offset=0, **NO_QUANTIZED_ACTIVATION, **float_activation(op)
        )
        return _weighted_call(e, op, name, f"lt_{kind}_f32", params, bias)
    raise Unsupported(f"types {ins} -> {outs}")


def _weighted_16x8(
    e: ModelEmitter,
    op: Operator,
    name: str,
    kind: str,
    bias: int | None,
    channels: int,
    params: Callable[[QuantizedActivation], KernelParams],
) -> str:
    """int16 activations (zero points 0, so no offsets), int8 filters; an int64 bias (CONV_2D and FULLY_CONNECTED
    also int32, which makes TFLM accumulate in int32). Without a bias TFLM picks the accumulator from the
    converter's metadata, which is not read here. `params`: the layer's struct with the fused activation's
    clamp."""
    bias_type = e.tensor(bias).dtype if bias is not None else None
    allowed = ("int64",) if kind == "depthwise_conv2d" else ("int64", "int32")
    if bias is None or bias_type not in allowed:
        raise Unsupported(f"16x8 {kind} needs a bias of type {' or '.join(allowed)}, not {bias_type}")
    in_q, f_q, out_q = e.quantization(op.inputs[0]), e.quantization(op.inputs[1]), e.quantization(op.outputs[0])
    require(in_q.zero_point == 0 and out_q.zero_point == 0, "int16 input and output need zero point 0")
    multipliers, shifts = q.per_channel_multipliers(in_q.scale, list(f_q.scales), out_q.scale, channels)
    p = e.struct(f"{name}_params", params(quantized_activation(e, op, op.outputs[0])))
    biases = [e.pointer(bias), "NULL"] if bias_type == "int32" else ["NULL", e.pointer(bias)]
    args = [
        p,
        e.pointer(op.inputs[0]),
        e.pointer(op.inputs[1]),
        *biases,
        e.array(f"{name}_multiplier", "int32_t", multipliers),
        e.array(f"{name}_shift", "int32_t", shifts),
        e.pointer(op.outputs[0], True),
    ]
    return f"lt_{kind}_s16({', '.join(args)});"


def _weighted_call(
    e: ModelEmitter,
    op: Operator,
    name: str,
    function: str,
    params: KernelParams,
    bias: int | None,
    requantization: tuple[list[int], list[int]] | None = None,
) -> str:
    """The C call of a kernel with weights: (params, input, filter, bias[, multipliers, shifts], output)."""
    params_ref = e.struct(f"{name}_params", params)
    requant_refs = []
    if requantization:
        multipliers, shifts = requantization
        requant_refs = [
            e.array(f"{name}_multiplier", "int32_t", multipliers),
            e.array(f"{name}_shift", "int32_t", shifts),
        ]
    args = [
        params_ref,
        e.pointer(op.inputs[0]),
        e.pointer(op.inputs[1]),
        e.pointer(bias) if bias is not None else "NULL",
        *requant_refs,
        e.pointer(op.outputs[0], True),
    ]
    return f"{function}({', '.join(args)});"


def _fast_int8(
    e: ModelEmitter,
    op: Operator,
    name: str,
    kind: str,
    params: ConvParams,
    bias: int | None,
    multipliers: list[int],
    shifts: list[int],
) -> str | None:
    """The call of this layer's specialised fast kernel (lt_conv_dsp.h), or None where only the reference-order
    kernel applies: grouped convolution, a depth multiplier, dilated depthwise convolution, or a folded bias
    beyond int32."""
    weights = e.constant_values(op.inputs[1]).astype(np.int64)
    out_c = params.out_c
    if kind == "conv2d":
        if params.filter_in_c != params.in_c:
            return None
        rows = weights.reshape(out_c, -1)
    else:
        rows = weights.reshape(-1, out_c).T  # [channel][fy * filter_w + fx]
        if params.in_c == 1:
            kind = "conv2d"  # one input channel: a convolution with depth_multiplier filters (person_detect's first)
        elif params.depth_multiplier != 1 or params.dilation_h != 1 or params.dilation_w != 1:
            return None
    bias_values = e.constant_values(bias).astype(np.int64) if bias is not None else np.zeros(out_c, dtype=np.int64)
    folded = bias_values + params.input_offset * rows.sum(axis=1)
    if folded.min() < -(1 << 31) or folded.max() >= (1 << 31):
        return None
    flags = ["0"]
    # SMMULR(2 acc, m) is the doubling high product while 2 acc fits int32: bound acc by |bias| + 128 sum|w|
    acc_bounds = [int(b) for b in np.abs(folded) + 128 * np.abs(rows).sum(axis=1)]
    constants = _constant_channels(multipliers, shifts, acc_bounds, folded, rows, params)
    varying = [c for c in range(out_c) if c not in constants]
    short = all(acc_bounds[c] < (1 << 30) and -31 < shifts[c] < 0 for c in varying)
    # the output offset rides in the rounding term while offset * 2^r fits it; else one add after the shift
    offset_in_round = all((abs(params.output_offset) + 1) << -shifts[c] < (1 << 30) for c in varying)
    if short:
        flags.append("LT_SHORT_ACC")
        if not offset_in_round:
            flags.append("LT_OFFSET_AFTER")
    if (params.act_min, params.act_max) == (-128, 127):
        flags.append("LT_FULL_RANGE")
    if op.index in e.one_row_ops:  # a pointwise row layer's H x W pixels as one row (`RowChain.one_row`)
        pixels_in_row = params.out_h * params.out_w
        params = replace(params, in_h=1, out_h=1, in_w=pixels_in_row, out_w=pixels_in_row)
    p = e.struct(f"{name}_params", params)
    requant_rows = []
    for c, (m, shift) in enumerate(zip(multipliers, shifts)):
        if not short:
            requant_rows.append((m, shift, 0, 0))
        elif c in constants:  # x = round whatever the sum: (2 y + 1 + (0 or -1)) >> 1 = y, before the offset
            requant_rows.append((0, -1, 1 + 2 * (constants[c] - (0 if offset_in_round else params.output_offset)), 1))
        else:
            offset_term = params.output_offset << -shift if offset_in_round else 0
            requant_rows.append((m, shift, (1 << (-shift - 1)) + offset_term, -shift))
    if short and constants:  # their sums are not used: 0 keeps a doubled bias within int32
        folded = folded.copy()
        folded[list(constants)] = 0
    requant = ",\n    ".join(f"{{{m}, {sh}, {r}, {right}}}" for m, sh, r, right in requant_rows)
    e.declarations.append(f"static const lt_requant {name}_requant[{out_c}] = {{\n    {requant}\n}};")
    whole_input = (
        params.batches * params.out_h * params.out_w == 1
        and params.pad_h == params.pad_w == 0
        and (params.filter_h, params.filter_w) == (params.in_h, params.in_w)
    )
    # int16 weights (depthwise, widened convolutions) doubled offline with the bias: the sums are 2 acc, which the
    # short requantization needs (and 2 acc fits int32 where it applies), without a shift per output
    doubled = short and not whole_input and (kind != "conv2d" or op.index in e.wide_weights)
    scale = 2 if doubled else 1
    if doubled:
        flags.append("LT_DOUBLED_ACC")
    arrays = [e.array(f"{name}_bias", "int32_t", folded * scale), f"{name}_requant"]
    if whole_input:  # one output pixel over the whole input: the input is its window, read in place
        e.whole_input.add(op.index)
        if kind == "conv2d":
            filter_ref = e.array(f"{name}_filter", "uint32_t", pack_rows_by_four(rows), aligned=True)
            function = "lt_vector_s8_fast"
        else:
            filter_ref = e.array(f"{name}_filter", "int8_t", e.constant_values(op.inputs[1]), aligned=True)
            function = "lt_depthwise_vector_s8_fast"
            e.in_place_safe.add(op.index)  # output channel c is written after all of input channel c was read
        body = (
            f"{function}({p}, (const int8_t *)input, {filter_ref}, {', '.join(arrays)}, "
            f"(int8_t *)output, {' | '.join(flags)});"
        )
        e.declarations.append(f"static LT_NOINLINE void {name}_run(const void *input, void *output) {{\n    {body}\n}}")
        return f"{name}_run({e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)});"
    if params.batches == 1:
        e.fast_rows.add(op.index)
    by_rows = op.index in e.row_ops
    if kind == "conv2d":
        k4 = -(-rows.shape[1] // 4) * 4
        output_pixels = params.batches * params.out_h * params.out_w
        e.matrix_layers[op.index] = (output_pixels, out_c * k4)
        wide = op.index in e.wide_weights
        filter_ref = e.array(f"{name}_filter", "uint32_t", pack_row_pairs(rows * scale, k4, wide), aligned=True)
        if wide:
            flags.append("LT_WIDE_WEIGHTS")
        pixels = 2 if (params.out_w if by_rows else output_pixels) > 1 else 1
        # lt_conv_s8_fast's rows, and its byte gather unless the layer is pointwise (read without im2col); a row
        # kernel reads a 1x1 window of any row stride in place
        pointwise = (params.filter_h, params.filter_w, params.stride_w, params.pad_h, params.pad_w) == (
            1,
            1,
            1,
            0,
            0,
        ) and (params.in_w == params.out_w and (by_rows or (params.stride_h, params.in_h) == (1, params.out_h)))
        scratch = e.fast_scratch_pointer(op, pixels * k4 + (0 if pointwise else k4 // 2))
        function = "lt_conv_ring_s8_fast" if by_rows else "lt_conv_s8_fast"
    else:
        kh, kw = params.filter_h, params.filter_w
        taps = rows.reshape(out_c, kh, kw) * scale
        if kw % 2:
            taps = np.concatenate([taps, np.zeros((out_c, kh, 1), dtype=np.int64)], axis=2)
        halves = taps.reshape(out_c, kh, -1, 2) & 0xFFFF
        words = (halves[..., 0] | (halves[..., 1] << 16)).astype(np.uint32)
        filter_ref = e.array(f"{name}_filter", "uint32_t", words)
        plane_rows = kh if by_rows else (params.out_h - 1) * params.stride_h + kh
        scratch = e.fast_scratch_pointer(op, plane_rows * ((params.out_w - 1) * params.stride_w + kw))
        function = "lt_depthwise_ring_s8_fast" if by_rows else "lt_depthwise_s8_fast"
        e.in_place_safe.add(op.index)  # each channel's plane is copied before its outputs are written
    fusion = e.fused_pads.get(op.index)
    source = fusion.source if fusion is not None else op.inputs[0]
    if by_rows:  # one output row of a row chain (`lowtide.compile.rows`), its input and output rings or whole
        transpose = next((t for t, reader in e.fused_transposes.items() if reader == op.index), None)
        if transpose is not None:  # the NCHW input of the TRANSPOSE before it, as channel planes
            function, ring = "lt_conv_planes_row_s8_fast", e.pointer(e.sg.operators[transpose].inputs[0])
            arguments = f"(const int8_t *){ring}, oy"
        else:
            ring, slots = e.ring_argument(source, f"oy * {params.stride_h}")
            arguments = f"(const int8_t *){ring}, {slots}, oy"
        body = (
            f"{function}({p}, {arguments}, {filter_ref}, "
            f"{', '.join(arrays)}, {e.row_pointer(op.outputs[0], 'oy', True)}, {scratch}, {' | '.join(flags)});"
        )
        return e.row_function(name, body)
    body = (
        f"{function}({p}, (const int8_t *)input, {filter_ref}, {', '.join(arrays)}, (int8_t *)output, "
        f"scratch, {' | '.join(flags)});"
    )
    e.declarations.append(
        f"static LT_NOINLINE void {name}_run(const void *input, void *output, int16_t *scratch) {{\n    {body}\n}}"
    )
    return f"{name}_run({e.pointer(source)}, {e.pointer(op.outputs[0], True)}, {scratch});"


def _constant_channels(
    multipliers: list[int],
    shifts: list[int],
    acc_bounds: list[int],
    folded: np.ndarray,
    rows: np.ndarray,
    params: ConvParams,
) -> dict[int, int]:
    """The channels whose output is one value whatever the input, and that value: all weights zero (the sum is
    the folded bias: pruned channels, whose bias can be 2^30 and keep a whole layer off the short
    requantization), a zero multiplier, or a right shift r so large that |(acc * m + 2^30) >> 31| <= 2^(r-1) - 1
    for every sum the bound allows, which RoundingDivideByPOT takes to 0."""
    constants = {}
    for c, (m, shift, bound) in enumerate(zip(multipliers, shifts, acc_bounds)):
        right = -shift
        if not rows[c].any():
            value = params.output_offset + q.multiply_by_quantized_multiplier(int(folded[c]), m, shift)
        elif m == 0 or (right >= 2 and bound * m + (1 << 30) <= ((1 << (right - 1)) - 1) << 31):
            value = params.output_offset
        else:
            continue
        constants[c] = min(max(value, params.act_min), params.act_max)
    return constants


def pad_fusions(e: ModelEmitter, fast_convolutions: set[int]) -> dict[int, PadFusion]:
    """PADs the fast convolutions `fast_convolutions` can absorb (PadFusion), by convolution operator: an int8
    PAD or PADV2 of rows and columns only, by the zero point of its output, read by that convolution alone."""
    sg = e.sg
    consumers = sg.consumers()
    producers = sg.producers()
    fusions = {}
    for dw in fast_convolutions:
        padded = sg.operators[dw].inputs[0]
        pad = sg.operators[producers[padded]] if padded in producers else None
        if (
            pad is None
            or pad.opcode not in ("PAD", "PADV2")
            or consumers.get(padded) != [dw]
            or padded in sg.outputs
            or e.tensor(pad.inputs[0]).kind is not TensorKind.ACTIVATION
        ):
            continue
        try:
            paddings = e.constant_values(pad.inputs[1]).reshape(-1, 2)
            value = (
                e.constant_values(pad.inputs[2]).reshape(-1)[0]
                if len(pad.inputs) > 2 and pad.inputs[2] >= 0
                else e.quantization(padded).zero_point
            )
        except Unsupported:
            continue
        if (
            e.tensor(pad.inputs[0]).dtype == "int8"
            and paddings.shape == (4, 2)
            and (paddings >= 0).all()
            and not paddings[0].any()
            and not paddings[3].any()
            and int(value) == e.quantization(padded).zero_point
        ):
            fusions[dw] = PadFusion(pad.index, pad.inputs[0], int(paddings[1][0]), int(paddings[2][0]))
    return fusions


def lower_conv_2d(e: ModelEmitter, op: Operator, name: str) -> str:
    return _weighted(e, op, name, "conv2d")


def lower_depthwise_conv_2d(e: ModelEmitter, op: Operator, name: str) -> str:
    return _weighted(e, op, name, "depthwise_conv2d")


def lower_fully_connected(e: ModelEmitter, op: Operator, name: str) -> str:
    ins, outs = tensor_types(e, op)
    require(
        attributes_as(op.attributes, FullyConnectedAttributes).weights_format == 0, "shuffled weights are not supported"
    )
    filter_shape = e.tensor(op.inputs[1]).shape
    require(len(filter_shape) == 2, "filter must be 2-D")
    out_depth, accum_depth = filter_shape
    input_elements = math.prod(e.tensor(op.inputs[0]).shape)
    require(input_elements % accum_depth == 0, "input size is not a multiple of the filter depth")
    batches = input_elements // accum_depth
    bias = op.inputs[2] if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
    if ins[:2] == ["int8", "int8"] and outs == ["int8"]:
        require(bias is None or ins[2] == "int32", "int8 fully connected needs an int32 bias")
        in_q, f_q, out_q = e.quantization(op.inputs[0]), e.quantization(op.inputs[1]), e.quantization(op.outputs[0])
        multipliers, shifts = q.per_channel_multipliers(in_q.scale, list(f_q.scales), out_q.scale, out_depth)
        filter_offset = -f_q.zero_point if len(f_q.scales) == 1 else 0
        activation = quantized_activation(e, op, op.outputs[0])
        if filter_offset == 0:  # as a 1x1 convolution over `batches` pixels
            conv = ConvParams(
                batches=batches,
                in_h=1,
                in_w=1,
                in_c=accum_depth,
                out_h=1,
                out_w=1,
                out_c=out_depth,
                filter_h=1,
                filter_w=1,
                filter_in_c=accum_depth,
                stride_h=1,
                stride_w=1,
                dilation_h=1,
                dilation_w=1,
                pad_h=0,
                pad_w=0,
                depth_multiplier=1,
                input_offset=-in_q.zero_point,
                output_offset=out_q.zero_point,
                **activation,
                **NO_FLOAT_ACTIVATION,
            )
            fast = _fast_int8(e, op, name, "conv2d", conv, bias, multipliers, shifts)
            if fast is not None:
                return fast
        params = FcParams(
            batches=batches,
            accum_depth=accum_depth,
            out_depth=out_depth,
            input_offset=-in_q.zero_point,
            filter_offset=filter_offset,
            output_offset=out_q.zero_point,
            **activation,
            **NO_FLOAT_ACTIVATION,
        )
        return _weighted_call(e, op, name, "lt_fully_connected_s8", params, bias, (multipliers, shifts))
    if ins[:2] == ["int16", "int8"] and outs == ["int16"]:
        f_q = e.quantization(op.inputs[1])
        filter_offset = -f_q.zero_point if len(f_q.scales) == 1 else 0
        return _weighted_16x8(
            e,
            op,
            name,
            "fully_connected",
            bias,
            out_depth,
            lambda activation: FcParams(
                batches=batches,
                accum_depth=accum_depth,
                out_depth=out_depth,
                input_offset=0,
                filter_offset=filter_offset,
                output_offset=0,
                **activation,
                **NO_FLOAT_ACTIVATION,
            ),
        )
    if ins[:2] == ["float32", "float32"] and outs == ["float32"]:
        params = FcParams(
            batches=batches,
            accum_depth=accum_depth,
            out_depth=out_depth,
            input_offset=0,
            filter_offset=0,
            output_offset=0,
            **NO_QUANTIZED_ACTIVATION,
            **float_activation(op),
        )
        return _weighted_call(e, op, name, "lt_fully_connected_f32", params, bias)
    raise Unsupported(f"types {ins} -> {outs}")


KERNELS = (
    Kernel(
        "CONV_2D",
        lower_conv_2d,
        ("int8", "int16", "float32"),
        "int8 per-channel weights (int16: 16x8, int64 or int32 bias); groups",
    ),
    Kernel(
        "DEPTHWISE_CONV_2D",
        lower_depthwise_conv_2d,
        ("int8", "int16", "float32"),
        "depth multiplier; int16: 16x8 with an int64 bias",
    ),
    Kernel(
        "FULLY_CONNECTED",
        lower_fully_connected,
        ("int8", "int16", "float32"),
        "int8 per-tensor or per-channel weights (int16: 16x8, int64 or int32 bias)",
    ),
)
