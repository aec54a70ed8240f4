"""Data movement: RESHAPE, TRANSPOSE, PAD, CONCATENATION, STRIDED_SLICE, SPLIT, SPLIT_V, PACK, SHAPE and
RESIZE_NEAREST_NEIGHBOR: calls into firmware/runtime/lt_movement.c."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from lowtide.compile.kernel_params import (
    MAX_DIMS,
    CopyParams,
    GatherNdParams,
    GatherParams,
    MappedCopyParams,
    ResizeParams,
    SelectParams,
    UpdateSliceParams,
)
from lowtide.compile.lowering.emitter import (
    C_TYPES,
    Kernel,
    ModelEmitter,
    Unsupported,
    attributes_of,
    c_float,
    element_size,
    fused_activation,
    require,
    same_types,
    strides,
    tensor_types,
)
from lowtide.model.attributes import (
    ConcatenationAttributes,
    DepthToSpaceAttributes,
    GatherAttributes,
    MirrorPadAttributes,
    MirrorPadMode,
    PackAttributes,
    ResizeAttributes,
    SpaceToDepthAttributes,
    SplitAttributes,
    StridedSliceAttributes,
    UnpackAttributes,
)
from lowtide.model.ir import Operator, TensorKind
from lowtide.model.operators import nearest_indices, resize_scale, resize_scale_q10
from lowtide.model.shapes import OperandShapes, strided_slice_axes


def lower_reshape(e: ModelEmitter, op: Operator, name: str) -> str:
    same_types(e, op)
    t = e.tensor(op.outputs[0])
    return f"lt_copy({e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)}, {t.nbytes}u);"


def _copy(
    e: ModelEmitter, name: str, dims: Sequence[int], src_steps: Sequence[int], dst_steps: Sequence[int], elem_size: int
) -> str:
    require(len(dims) <= MAX_DIMS, f"more than {MAX_DIMS} dimensions")
    return e.struct(
        name,
        CopyParams(
            ndim=len(dims), dims=list(dims), src_steps=list(src_steps), dst_steps=list(dst_steps), elem_size=elem_size
        ),
    )


@dataclass(frozen=True)
class View:
    """The elements of one tensor that a box copy visits: from element `start`, `steps[d]` elements apart along
    each copy dimension d."""

    tensor: int
    start: int
    steps: tuple[int, ...]


def _arena_bytes(e: ModelEmitter, view: View, dims: Sequence[int], elem_size: int) -> tuple[int, int] | None:
    """[first, end) arena bytes a view touches; None when it is not in the arena."""
    if e.tensor(view.tensor).kind is not TensorKind.ACTIVATION or view.tensor not in e.offsets:
        return None
    lo = hi = view.start
    for n, step in zip(dims, view.steps):
        lo, hi = lo + min(0, step * (n - 1)), hi + max(0, step * (n - 1))
    base = e.offsets[view.tensor]
    return base + lo * elem_size, base + (hi + 1) * elem_size


def _copy_strided(e: ModelEmitter, name: str, dims: Sequence[int], source: View, target: View) -> str:
    """One lt_copy_strided call from `source` to `target`. A memory plan may put the two on the same bytes only
    as the very same view (an in-place SPLIT or CONCATENATION), which the runtime then skips; any other overlap
    would read bytes the copy has already overwritten, so it is refused."""
    size = element_size(e.tensor(source.tensor))
    if math.prod(dims):
        a, b = _arena_bytes(e, source, dims, size), _arena_bytes(e, target, dims, size)
        same_view = (
            a is not None
            and b is not None
            and a[0] == b[0]
            and all(n <= 1 or s == t for n, s, t in zip(dims, source.steps, target.steps))
        )
        require(
            a is None or b is None or a[1] <= b[0] or b[1] <= a[0] or same_view,
            f"the memory plan overlaps tensors {source.tensor} and {target.tensor} in a way no copy can run in place",
        )
    p = _copy(e, name, dims, source.steps, target.steps, size)
    src, dst = e.pointer(source.tensor), e.pointer(target.tensor, True)
    return (
        f"lt_copy_strided({p}, {f'{src} + {source.start}' if source.start else src}, "
        f"{f'{dst} + {target.start}' if target.start else dst});"
    )


def lower_shape(e: ModelEmitter, op: Operator, name: str) -> str:
    """SHAPE: shapes are static here, so the output is a constant written into the arena when the operator runs
    (the tensor is planned like any activation and later operators read it there)."""
    _, outs = tensor_types(e, op)
    require(outs == ["int32"], f"output type {outs[0]}")
    shape = e.tensor(op.inputs[0]).shape
    require(e.tensor(op.outputs[0]).shape == (len(shape),), "output shape does not match the input rank")
    values = e.array(f"{name}_shape", "int32_t", list(shape))
    return f"lt_copy({values}, {e.pointer(op.outputs[0], True)}, {4 * len(shape)}u);"


def lower_pack(e: ModelEmitter, op: Operator, name: str) -> str:
    """PACK: input k becomes index k along the new axis `axis` of the output; the kernel copies bytes."""
    dtype = same_types(e, op, len(op.inputs))
    pack = attributes_of(op, PackAttributes)
    require(len(op.inputs) == pack.values_count, "the input count differs from values_count")
    t_out = e.tensor(op.outputs[0])
    axis = pack.axis % len(t_out.shape)
    shape = e.tensor(op.inputs[0]).shape
    require(
        dtype in C_TYPES
        and all(e.tensor(t).shape == shape for t in op.inputs)
        and t_out.shape == shape[:axis] + (len(op.inputs),) + shape[axis:],
        f"inputs of shape {shape} do not stack to {t_out.shape}",
    )
    out_st = strides(t_out.shape)
    steps = tuple(out_st[:axis] + out_st[axis + 1 :])
    return " ".join(
        _copy_strided(
            e,
            f"{name}_params{k}",
            shape,
            View(t, 0, tuple(strides(shape))),
            View(op.outputs[0], k * out_st[axis], steps),
        )
        for k, t in enumerate(op.inputs)
    )


def lower_transpose(e: ModelEmitter, op: Operator, name: str) -> str:
    same_types(e, op)
    t_in, t_out = e.tensor(op.inputs[0]), e.tensor(op.outputs[0])
    perm = [int(p) for p in e.constant_values(op.inputs[1]).reshape(-1)]
    in_st = strides(t_in.shape)
    dims = [t_in.shape[p] for p in perm]
    require(tuple(dims) == t_out.shape, "output shape does not match the permutation")
    if op.index in e.row_ops:  # output row oy of a row chain (`lowtide.compile.rows`): the input's slice oy
        copy = _copy(e, f"{name}_params", dims[2:], [in_st[p] for p in perm[2:]], strides(t_out.shape)[2:], 1)
        source = f"{e.pointer(op.inputs[0])} + oy * {in_st[perm[1]]}"
        body = f"lt_copy_strided({copy}, {source}, {e.row_pointer(op.outputs[0], 'oy', True)});"
        return e.row_function(name, body)
    return _copy_strided(
        e,
        f"{name}_params",
        dims,
        View(op.inputs[0], 0, tuple(in_st[p] for p in perm)),
        View(op.outputs[0], 0, tuple(strides(t_out.shape))),
    )


def lower_pad(e: ModelEmitter, op: Operator, name: str) -> str:
    same_types(e, op)
    t_in, t_out = e.tensor(op.inputs[0]), e.tensor(op.outputs[0])
    paddings = e.constant_values(op.inputs[1]).reshape(-1, 2)
    before = [int(b) for b in paddings[:, 0]]
    require(all(int(x) >= 0 for x in paddings.reshape(-1)), "negative padding")
    ctype = C_TYPES[t_in.dtype]
    if len(op.inputs) > 2 and op.inputs[2] >= 0:
        pad_value = e.constant_values(op.inputs[2]).reshape(-1)[0]
    elif t_in.dtype == "int8":
        pad_value = e.quantization(op.outputs[0]).zero_point
    else:
        pad_value = 0
    value = e.array(f"{name}_value", ctype, [pad_value])
    out_st = strides(t_out.shape)
    start = sum(b * s for b, s in zip(before, out_st))
    size = element_size(t_in)
    if op.index in e.row_ops:  # output row oy of a row chain (`lowtide.compile.rows`): int8 NHWC, rows not padded
        p = _copy(e, f"{name}_params", t_in.shape[2:], strides(t_in.shape)[2:], out_st[2:], size)
        row = e.row_pointer(op.outputs[0], "oy", True)
        body = (
            f"lt_fill({row}, {math.prod(t_out.shape[2:])}u, {value}, {size}); "
            f"lt_copy_strided({p}, {e.row_pointer(op.inputs[0], 'oy')}, {row} + {start});"
        )
        return e.row_function(name, body)
    p = _copy(e, f"{name}_params", t_in.shape, strides(t_in.shape), out_st, size)
    out = e.pointer(op.outputs[0], True)
    return (
        f"lt_fill({out}, {math.prod(t_out.shape)}u, {value}, {size}); "
        f"lt_copy_strided({p}, {e.pointer(op.inputs[0])}, {out} + {start});"
    )


def lower_concatenation(e: ModelEmitter, op: Operator, name: str) -> str:
    count = len(op.inputs)
    dtype = same_types(e, op, count)
    t_out = e.tensor(op.outputs[0])
    if dtype == "int8":
        out_q = e.quantization(op.outputs[0])
        require(
            all(e.quantization(t) == out_q for t in op.inputs),
            "int8 concatenation needs equal input and output quantization",
        )
    require(fused_activation(op) == 0, "fused activation on concatenation")
    axis = attributes_of(op, ConcatenationAttributes).axis % len(t_out.shape)
    out_st = tuple(strides(t_out.shape))
    if op.index in e.row_ops:  # output row oy of a row chain (`lowtide.compile.rows`): int8 NHWC, axis 3
        copies, position = [], 0
        row = e.row_pointer(op.outputs[0], "oy", True)
        for k, t in enumerate(op.inputs):
            shape = e.tensor(t).shape
            p = _copy(e, f"{name}_params{k}", shape[2:], strides(shape)[2:], out_st[2:], 1)
            copies.append(f"lt_copy_strided({p}, {e.row_pointer(t, 'oy')}, {row} + {position});")
            position += shape[3]
        body = "\n    ".join(copies)
        return e.row_function(name, body)
    statements, position = [], 0
    for k, t in enumerate(op.inputs):
        shape = e.tensor(t).shape
        statements.append(
            _copy_strided(
                e,
                f"{name}_params{k}",
                shape,
                View(t, 0, tuple(strides(shape))),
                View(op.outputs[0], position * out_st[axis], out_st),
            )
        )
        position += shape[axis]
    return " ".join(statements)


def _split_axis(e: ModelEmitter, axis_tensor: int, rank: int) -> int:
    values = e.constant_values(axis_tensor).reshape(-1)
    require(values.size == 1, "the axis must be one value")
    axis = int(values[0])
    require(-rank <= axis < rank, f"axis {axis} is out of range")
    return axis % rank


def _split(e: ModelEmitter, op: Operator, name: str, data: int, axis: int) -> str:
    """SPLIT and SPLIT_V: output k is the input's block along `axis` after outputs 0..k-1. Like TFLM's kernels,
    the outputs' shapes say where the cuts are; the kernels copy bytes, so int8 outputs keep the input's values
    whatever their quantization says."""
    shape, dtype = e.tensor(data).shape, e.tensor(data).dtype
    outs = [e.tensor(t) for t in op.outputs]
    require(dtype in C_TYPES and all(t.dtype == dtype for t in outs), f"types {dtype} -> {[t.dtype for t in outs]}")

    def others(s: tuple[int, ...]) -> tuple[int, ...]:
        return s[:axis] + s[axis + 1 :]

    require(
        all(len(t.shape) == len(shape) and others(t.shape) == others(shape) for t in outs)
        and sum(t.shape[axis] for t in outs) == shape[axis],
        f"output shapes {[t.shape for t in outs]} do not cut {shape} along axis {axis}",
    )
    in_st = tuple(strides(shape))
    statements, position = [], 0
    for k, out in enumerate(outs):
        statements.append(
            _copy_strided(
                e,
                f"{name}_params{k}",
                out.shape,
                View(data, position * in_st[axis], in_st),
                View(out.index, 0, tuple(strides(out.shape))),
            )
        )
        position += out.shape[axis]
    return " ".join(statements)


def lower_split(e: ModelEmitter, op: Operator, name: str) -> str:
    require(
        len(op.outputs) == attributes_of(op, SplitAttributes).num_splits, "the output count differs from num_splits"
    )
    data = op.inputs[1]
    return _split(e, op, name, data, _split_axis(e, op.inputs[0], len(e.tensor(data).shape)))


def lower_split_v(e: ModelEmitter, op: Operator, name: str) -> str:
    data = op.inputs[0]
    shape = e.tensor(data).shape
    axis = _split_axis(e, op.inputs[2], len(shape))
    # size_splits (one may be -1) agrees with the output shapes: the validator checked it (model/shapes.py).
    return _split(e, op, name, data, axis)


def lower_strided_slice(e: ModelEmitter, op: Operator, name: str) -> str:
    same_types(e, op)
    t_in, t_out = e.tensor(op.inputs[0]), e.tensor(op.outputs[0])
    o = attributes_of(op, StridedSliceAttributes)
    require(not o.ellipsis_mask and not o.new_axis_mask, "ellipsis and new-axis masks are not supported")
    begin = [int(v) for v in e.constant_values(op.inputs[1]).reshape(-1)]
    end = [int(v) for v in e.constant_values(op.inputs[2]).reshape(-1)]
    step = [int(v) for v in e.constant_values(op.inputs[3]).reshape(-1)]
    shape = t_in.shape
    require(len(begin) == len(end) == len(step) == len(shape), "begin/end/strides must cover every dimension")
    try:
        axes = strided_slice_axes(shape, begin, end, step, o.begin_mask, o.end_mask, o.shrink_axis_mask, o.offset)
    except OperandShapes as exc:
        raise Unsupported(str(exc)) from None
    in_st = strides(shape)
    dims = [a.count for a in axes]
    src_start = sum(a.start * st for a, st in zip(axes, in_st) if a.count)
    src_steps = [a.step * st for a, st in zip(axes, in_st)]
    require(math.prod(dims) == math.prod(t_out.shape), "output size does not match the slice")
    return _copy_strided(
        e,
        f"{name}_params",
        dims,
        View(op.inputs[0], src_start, tuple(src_steps)),
        View(op.outputs[0], 0, tuple(strides(tuple(dims)))),
    )


def lower_resize_nearest_neighbor(e: ModelEmitter, op: Operator, name: str) -> str:
    same_types(e, op)
    t_in, t_out = e.tensor(op.inputs[0]), e.tensor(op.outputs[0])
    require(len(t_in.shape) == 4, "only 4-D NHWC tensors are supported")
    out_h, out_w = (int(v) for v in e.constant_values(op.inputs[1]).reshape(-1))
    require((out_h, out_w) == tuple(t_out.shape[1:3]), "output size does not match the size input")
    resize = attributes_of(op, ResizeAttributes)
    align, half = resize.align_corners, resize.half_pixel_centers
    y_map = e.array(f"{name}_y", "int32_t", nearest_indices(t_in.shape[1], out_h, align, half).tolist())
    x_map = e.array(f"{name}_x", "int32_t", nearest_indices(t_in.shape[2], out_w, align, half).tolist())
    by_rows = op.index in e.row_ops  # output row oy of a row chain (`lowtide.compile.rows`): one row of one row
    p = e.struct(
        f"{name}_params",
        ResizeParams(
            batches=t_in.shape[0],
            in_h=1 if by_rows else t_in.shape[1],
            in_w=t_in.shape[2],
            channels=t_in.shape[3],
            out_h=1 if by_rows else out_h,
            out_w=out_w,
            elem_size=element_size(t_in),
            half_pixel_centers=0,
            height_scale=0.0,
            width_scale=0.0,
            height_scale_10=0,
            width_scale_10=0,
        ),
    )  # the maps carry the scales and the half-pixel offset
    if by_rows:  # the input row y_map[oy] (ring or whole), its columns through x_map, into output row oy
        first = e.array(f"{name}_first", "int32_t", [0])
        source = e.row_pointer(op.inputs[0], f"{y_map}[oy]")
        body = f"lt_resize_nearest({p}, {first}, {x_map}, {source}, {e.row_pointer(op.outputs[0], 'oy', True)});"
        return e.row_function(name, body)
    return f"lt_resize_nearest({p}, {y_map}, {x_map}, {e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)});"


def bilinear_q10(n_in: int, n_out: int, align_corners: bool, half_pixel: bool) -> tuple[list[int], ...]:
    """ComputeInterpolationValuesInteger for every output index (lt_movement.c): the two input indices it reads,
    lower and upper, and its distance above the lower one in 10 fractional bits (negative above the first
    half-pixel)."""
    scale = resize_scale_q10(n_in, n_out, align_corners)
    lower, upper, delta = [], [], []
    for v in range(n_out):
        scaled = v * scale + scale // 2 - (1 << 9) if half_pixel else v * scale
        low = max(scaled // (1 << 10), 0)  # C's truncation: scaled is above -1024
        lower.append(low)
        upper.append(min((scaled + (1 << 10) - 1) // (1 << 10), n_in - 1))
        delta.append(scaled - (1 << 10) * low)
    return lower, upper, delta


def lower_resize_bilinear(e: ModelEmitter, op: Operator, name: str) -> str:
    """The scales as TFLM's reference computes them: float32 ratios for float, 10-bit fixed point for int8."""
    same_types(e, op)
    t_in, t_out = e.tensor(op.inputs[0]), e.tensor(op.outputs[0])
    require(len(t_in.shape) == 4, "only 4-D NHWC tensors are supported")
    out_h, out_w = (int(v) for v in e.constant_values(op.inputs[1]).reshape(-1))
    require(
        (out_h, out_w) == tuple(t_out.shape[1:3]) and t_out.shape[3] == t_in.shape[3],
        "output size does not match the size input",
    )
    resize = attributes_of(op, ResizeAttributes)
    align, half = resize.align_corners, resize.half_pixel_centers
    require(not (align and half), "align_corners with half_pixel_centers")
    batches, in_h, in_w, channels = t_in.shape
    p = e.struct(
        f"{name}_params",
        ResizeParams(
            batches=batches,
            in_h=in_h,
            in_w=in_w,
            channels=channels,
            out_h=out_h,
            out_w=out_w,
            elem_size=element_size(t_in),
            half_pixel_centers=int(half),
            height_scale=float(resize_scale(in_h, out_h, align)),
            width_scale=float(resize_scale(in_w, out_w, align)),
            height_scale_10=resize_scale_q10(in_h, out_h, align),
            width_scale_10=resize_scale_q10(in_w, out_w, align),
        ),
    )
    suffix = "s8" if t_in.dtype == "int8" else "f32"
    if op.index in e.row_ops:  # output row oy of a row chain (`lowtide.compile.rows`): int8, from two input rows
        y_lower, y_upper, y_delta = (
            e.array(f"{name}_y{part}", "int32_t", values)
            for part, values in zip(("lower", "upper", "delta"), bilinear_q10(in_h, out_h, align, half))
        )
        columns = ", ".join(
            e.array(f"{name}_x{part}", "int32_t", values)
            for part, values in zip(("lower", "upper", "delta"), bilinear_q10(in_w, out_w, align, half))
        )
        rows = f"{e.row_pointer(op.inputs[0], f'{y_lower}[oy]')}, {e.row_pointer(op.inputs[0], f'{y_upper}[oy]')}"
        body = (
            f"lt_resize_bilinear_row_s8({p}, {rows}, {y_delta}[oy], {columns}, "
            f"{e.row_pointer(op.outputs[0], 'oy', True)});"
        )
        return e.row_function(name, body)
    return f"lt_resize_bilinear_{suffix}({p}, {e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)});"


def _block_size(op: Operator) -> int:
    options = op.attributes
    if not isinstance(options, (SpaceToDepthAttributes, DepthToSpaceAttributes)):
        raise Unsupported(f"no block size on {op.opcode}")
    block = options.block_size
    require(block >= 1, f"block size {block}")
    return block


def lower_space_to_depth(e: ModelEmitter, op: Operator, name: str) -> str:
    """Output (n, h, w, (bh * b + bw) * c + k) is input (n, h * b + bh, w * b + bw, k): one 6-D box copy."""
    same_types(e, op)
    block = _block_size(op)
    t_in, t_out = e.tensor(op.inputs[0]), e.tensor(op.outputs[0])
    require(len(t_in.shape) == 4, "only 4-D NHWC tensors are supported")
    n, h, w, c = t_in.shape
    require(
        h % block == 0 and w % block == 0 and t_out.shape == (n, h // block, w // block, c * block * block),
        f"output shape {t_out.shape} is not {t_in.shape} in blocks of {block}",
    )
    st = strides(t_in.shape)
    dims = (n, h // block, w // block, block, block, c)
    source = (st[0], block * st[1], block * st[2], st[1], st[2], 1)
    return _copy_strided(
        e, f"{name}_params", dims, View(op.inputs[0], 0, source), View(op.outputs[0], 0, tuple(strides(dims)))
    )


def lower_depth_to_space(e: ModelEmitter, op: Operator, name: str) -> str:
    """Output (n, h * b + bh, w * b + bw, k) is input (n, h, w, (bh * b + bw) * c + k): one 6-D box copy."""
    same_types(e, op)
    block = _block_size(op)
    t_in, t_out = e.tensor(op.inputs[0]), e.tensor(op.outputs[0])
    require(len(t_in.shape) == 4, "only 4-D NHWC tensors are supported")
    n, h, w, c = t_in.shape
    depth = c // (block * block)
    require(
        c % (block * block) == 0 and t_out.shape == (n, h * block, w * block, depth),
        f"output shape {t_out.shape} is not {t_in.shape} out of blocks of {block}",
    )
    st = strides(t_in.shape)
    dims = (n, h, block, w, block, depth)  # in the output's order
    source = (st[0], st[1], block * depth, st[2], depth, 1)
    return _copy_strided(
        e, f"{name}_params", dims, View(op.inputs[0], 0, source), View(op.outputs[0], 0, tuple(strides(dims)))
    )


def _batch_space_geometry(
    e: ModelEmitter, op: Operator
) -> tuple[tuple[int, ...], tuple[int, ...], list[int], list[int]]:
    """The batch-side and space-side shapes as 4-D (a 3-D NHC tensor is NH1C, as TFLM extends it), the block
    and the padding (SPACE_TO_BATCH_ND) or crops (BATCH_TO_SPACE_ND) before each spatial dimension."""
    same_types(e, op)
    t_in, t_out = e.tensor(op.inputs[0]), e.tensor(op.outputs[0])
    require(len(t_in.shape) in (3, 4) and len(t_out.shape) == len(t_in.shape), "only 3-D and 4-D tensors")
    block = [int(v) for v in e.constant_values(op.inputs[1]).reshape(-1)]
    before = [int(v) for v in e.constant_values(op.inputs[2]).reshape(-1, 2)[:, 0]]
    require(
        len(block) == len(t_in.shape) - 2 and all(b >= 1 for b in block) and all(v >= 0 for v in before),
        f"block {block} and paddings/crops {before}",
    )

    def four_d(shape: tuple[int, ...]) -> tuple[int, ...]:
        return shape if len(shape) == 4 else (shape[0], shape[1], 1, shape[2])

    if len(block) == 1:
        block, before = block + [1], before + [0]
    return four_d(t_in.shape), four_d(t_out.shape), block, before


def _block_copies(
    e: ModelEmitter,
    op: Operator,
    name: str,
    batch: int,
    space: int,
    batch_shape: Sequence[int],
    space_shape: Sequence[int],
    block: list[int],
    before: list[int],
) -> list[str]:
    """One box copy per position (i, j) in the block: batch tensor (((i * bw + j) * n + b), y, x, c) is space
    tensor (b, y * bh + i - before_h, x * bw + j - before_w, c), for the y and x that land inside it."""
    n = space_shape[0]
    require(
        batch_shape[0] == n * block[0] * block[1] and batch_shape[3] == space_shape[3],
        f"shapes {batch_shape} and {space_shape} do not match the block {block}",
    )
    batch_st, space_st = strides(batch_shape), strides(space_shape)
    copies: list[str] = []
    for i in range(block[0]):
        for j in range(block[1]):
            ranges = []
            for axis, offset in ((1, i), (2, j)):
                # batch-side positions y with 0 <= y * b + offset - before < space size
                b, lead = block[axis - 1], before[axis - 1]
                first = max(0, -(-(lead - offset) // b))
                last = min(batch_shape[axis], (space_shape[axis] + lead - offset + b - 1) // b)
                ranges.append((first, max(first, last)))
            dims = (n, ranges[0][1] - ranges[0][0], ranges[1][1] - ranges[1][0], space_shape[3])
            if not math.prod(dims):
                continue
            (y0, _), (x0, _) = ranges
            batch_start = (i * block[1] + j) * n * batch_st[0] + y0 * batch_st[1] + x0 * batch_st[2]
            space_start = (y0 * block[0] + i - before[0]) * space_st[1] + (x0 * block[1] + j - before[1]) * space_st[2]
            batch_view = View(batch, batch_start, tuple(batch_st))
            space_view = View(space, space_start, (space_st[0], block[0] * space_st[1], block[1] * space_st[2], 1))
            source, target = (space_view, batch_view) if space == op.inputs[0] else (batch_view, space_view)
            copies.append(_copy_strided(e, f"{name}_params{len(copies)}", dims, source, target))
    return copies


def lower_space_to_batch_nd(e: ModelEmitter, op: Operator, name: str) -> str:
    """The padding is zero bytes: TFLM's kernel pads with a value its Prepare never sets, which the host TFLM's
    zeroed persistent memory makes 0 (not the zero point)."""
    in_shape, out_shape, block, before = _batch_space_geometry(e, op)
    size = element_size(e.tensor(op.inputs[0]))
    zero = e.array(f"{name}_zero", "uint8_t", [0] * size)
    out = e.pointer(op.outputs[0], True)
    copies = _block_copies(e, op, name, op.outputs[0], op.inputs[0], out_shape, in_shape, block, before)
    return " ".join([f"lt_fill({out}, {math.prod(out_shape)}u, {zero}, {size});", *copies])


def lower_batch_to_space_nd(e: ModelEmitter, op: Operator, name: str) -> str:
    in_shape, out_shape, block, crops = _batch_space_geometry(e, op)
    return " ".join(_block_copies(e, op, name, op.inputs[0], op.outputs[0], in_shape, out_shape, block, crops))


def _constant_ints(e: ModelEmitter, index: int) -> list[int]:
    return [int(v) for v in e.constant_values(index).reshape(-1)]


def lower_slice(e: ModelEmitter, op: Operator, name: str) -> str:
    """SLICE: a box of `size` elements from `begin` (a size of -1: the rest of the dimension)."""
    same_types(e, op)
    shape = e.tensor(op.inputs[0]).shape
    begin, size = _constant_ints(e, op.inputs[1]), _constant_ints(e, op.inputs[2])
    require(len(begin) == len(size) == len(shape), "begin and size must cover every dimension")
    dims = tuple(n - b if s == -1 else s for n, b, s in zip(shape, begin, size))
    require(
        all(0 <= b and 0 <= d and b + d <= n for b, d, n in zip(begin, dims, shape))
        and dims == e.tensor(op.outputs[0]).shape,
        f"slice {begin} + {size} of {shape}",
    )
    st = strides(shape)
    return _copy_strided(
        e,
        f"{name}_params",
        dims,
        View(op.inputs[0], sum(b * s for b, s in zip(begin, st)), tuple(st)),
        View(op.outputs[0], 0, tuple(strides(dims))),
    )


def lower_unpack(e: ModelEmitter, op: Operator, name: str) -> str:
    """UNPACK: output k is index k along `axis` of the input, that axis removed."""
    dtype = e.tensor(op.inputs[0]).dtype
    shape = e.tensor(op.inputs[0]).shape
    axis = attributes_of(op, UnpackAttributes).axis % len(shape)
    piece = shape[:axis] + shape[axis + 1 :]
    require(
        len(op.outputs) == shape[axis]
        and all(e.tensor(t).shape == piece and e.tensor(t).dtype == dtype for t in op.outputs),
        f"outputs do not unstack {shape} along axis {axis}",
    )
    st = strides(shape)
    steps = tuple(st[:axis] + st[axis + 1 :])
    return " ".join(
        _copy_strided(
            e, f"{name}_params{k}", piece, View(op.inputs[0], k * st[axis], steps), View(t, 0, tuple(strides(piece)))
        )
        for k, t in enumerate(op.outputs)
    )


def lower_broadcast_to(e: ModelEmitter, op: Operator, name: str) -> str:
    """BROADCAST_TO: a box copy whose source does not step along the broadcast dimensions."""
    same_types(e, op)
    shape, out_shape = e.tensor(op.inputs[0]).shape, e.tensor(op.outputs[0]).shape
    require(len(shape) <= len(out_shape) <= MAX_DIMS, f"{shape} to {out_shape}")
    padded = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    require(all(s in (1, o) for s, o in zip(padded, out_shape)), f"{shape} does not broadcast to {out_shape}")
    steps = tuple(st if s > 1 else 0 for s, st in zip(padded, strides(padded)))
    return _copy_strided(
        e, f"{name}_params", out_shape, View(op.inputs[0], 0, steps), View(op.outputs[0], 0, tuple(strides(out_shape)))
    )


def lower_fill(e: ModelEmitter, op: Operator, name: str) -> str:
    """FILL: the value tensor (a constant or computed) repeated over the output."""
    t_out = e.tensor(op.outputs[0])
    require(
        e.tensor(op.inputs[1]).dtype == t_out.dtype and math.prod(e.tensor(op.inputs[1]).shape) == 1,
        "the value must be one element of the output's type",
    )
    return (
        f"lt_fill({e.pointer(op.outputs[0], True)}, {math.prod(t_out.shape)}u, {e.pointer(op.inputs[1])}, "
        f"{element_size(t_out)});"
    )


def lower_zeros_like(e: ModelEmitter, op: Operator, name: str) -> str:
    same_types(e, op)
    t_out = e.tensor(op.outputs[0])
    size = element_size(t_out)
    zero = e.array(f"{name}_zero", "uint8_t", [0] * size)
    return f"lt_fill({e.pointer(op.outputs[0], True)}, {math.prod(t_out.shape)}u, {zero}, {size});"


def lower_reverse_v2(e: ModelEmitter, op: Operator, name: str) -> str:
    """REVERSE_V2: a box copy whose source starts at the far end of each reversed axis and steps back. TFLM
    reverses only axes that follow one another (after sorting), and so does this."""
    same_types(e, op)
    shape = e.tensor(op.inputs[0]).shape
    given = _constant_ints(e, op.inputs[1])
    axes = sorted(a % len(shape) for a in given if -len(shape) <= a < len(shape))
    require(
        bool(axes) and len(axes) == len(given) and axes == list(range(axes[0], axes[-1] + 1)),
        f"axes {given} are not contiguous axes of rank {len(shape)}",
    )
    require(e.tensor(op.outputs[0]).shape == shape, "output shape differs from the input's")
    st = strides(shape)
    start = sum((shape[a] - 1) * st[a] for a in axes if shape[a])
    steps = tuple(-s if a in axes else s for a, s in enumerate(st))
    return _copy_strided(
        e, f"{name}_params", shape, View(op.inputs[0], start, steps), View(op.outputs[0], 0, tuple(st))
    )


def lower_dynamic_update_slice(e: ModelEmitter, op: Operator, name: str) -> str:
    """DYNAMIC_UPDATE_SLICE (inputs: operand, update, start indices): the indices may be computed, so they are
    read and clamped when the operator runs."""
    ins, outs = tensor_types(e, op)
    require(ins[0] == ins[1] == outs[0] and ins[2] in ("int32", "int64"), f"types {ins} -> {outs}")
    shape, update_shape = e.tensor(op.inputs[0]).shape, e.tensor(op.inputs[1]).shape
    require(
        len(shape) == len(update_shape) <= MAX_DIMS
        and e.tensor(op.inputs[2]).shape == (len(shape),)
        and all(u <= n for u, n in zip(update_shape, shape))
        and e.tensor(op.outputs[0]).shape == shape,
        f"update {update_shape} does not fit operand {shape}",
    )
    p = e.struct(
        f"{name}_params",
        UpdateSliceParams(
            ndim=len(shape),
            dims=list(shape),
            update_dims=list(update_shape),
            elem_size=element_size(e.tensor(op.inputs[0])),
            indices_64=int(ins[2] == "int64"),
        ),
    )
    return (
        f"lt_dynamic_update_slice({p}, {e.pointer(op.inputs[0])}, {e.pointer(op.inputs[1])}, "
        f"{e.pointer(op.inputs[2])}, {e.pointer(op.outputs[0], True)});"
    )


def lower_broadcast_args(e: ModelEmitter, op: Operator, name: str) -> str:
    """BROADCAST_ARGS: two shape vectors, which may be computed, combined when the operator runs."""
    ins, outs = tensor_types(e, op)
    require(ins[0] == ins[1] == outs[0] and outs[0] in ("int32", "int64"), f"types {ins} -> {outs}")
    counts = [math.prod(e.tensor(t).shape) for t in op.inputs]
    count_out = math.prod(e.tensor(op.outputs[0]).shape)
    require(count_out == max(counts), f"output of {count_out} elements for shapes of {counts}")
    suffix = "s32" if outs[0] == "int32" else "s64"
    return (
        f"lt_broadcast_args_{suffix}({e.pointer(op.inputs[0])}, {counts[0]}, {e.pointer(op.inputs[1])}, "
        f"{counts[1]}, {e.pointer(op.outputs[0], True)}, {count_out});"
    )


def lower_embedding_lookup(e: ModelEmitter, op: Operator, name: str) -> str:
    """EMBEDDING_LOOKUP (inputs: int32 row indices, value rows): row lookup[i] of the value is output row i; int8
    rows into a float32 output are dequantized (TFLM's hybrid form, zero point 0)."""
    ins, outs = tensor_types(e, op)
    require(
        ins[0] == "int32" and (ins[1] == outs[0] in ("int8", "float32") or ins[1:] + outs == ["int8", "float32"]),
        f"types {ins} -> {outs}",
    )
    count, value_shape = math.prod(e.tensor(op.inputs[0]).shape), e.tensor(op.inputs[1]).shape
    require(
        len(e.tensor(op.inputs[0]).shape) == 1
        and len(value_shape) >= 2
        and e.tensor(op.outputs[0]).shape == (count, *value_shape[1:]),
        f"output shape {e.tensor(op.outputs[0]).shape} for {count} rows of {value_shape}",
    )
    columns = math.prod(value_shape[1:])
    if ins[1] == outs[0]:
        p = e.struct(
            f"{name}_params",
            GatherParams(
                batches=1,
                outer=1,
                axis_size=value_shape[0],
                coords=count,
                inner=columns,
                elem_size=element_size(e.tensor(op.inputs[1])),
            ),
        )
        return (
            f"lt_gather({p}, {e.pointer(op.inputs[1])}, {e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)});"
        )
    value_q = e.quantization(op.inputs[1])
    require(value_q.zero_point == 0, "a hybrid EMBEDDING_LOOKUP needs value zero point 0")
    return (
        f"lt_embedding_lookup_hybrid({e.pointer(op.inputs[1])}, {e.pointer(op.inputs[0])}, {count}, {columns}, "
        f"{c_float(value_q.scale)}, {e.pointer(op.outputs[0], True)});"
    )


def _mirror_index(position: int, before: int, size: int, offset: int) -> int:
    """mirror_pad.cc's GetInputDimension: offset 1 reflects (the edge once), 0 is symmetric (the edge twice)."""
    if position < before:
        original = before + offset - 1
        return original - min(position, original - offset)
    position -= before
    if position >= size:
        position -= size
        original = size - (1 + offset)
        return original - min(position, original)
    return position


def lower_mirror_pad(e: ModelEmitter, op: Operator, name: str) -> str:
    same_types(e, op)
    shape, out_shape = e.tensor(op.inputs[0]).shape, e.tensor(op.outputs[0]).shape
    paddings = e.constant_values(op.inputs[1]).reshape(-1, 2)
    require(len(paddings) == len(shape) <= MAX_DIMS, "paddings must cover every dimension")
    offset = 1 if attributes_of(op, MirrorPadAttributes).mode == MirrorPadMode.REFLECT else 0
    offsets: list[int] = []
    starts: list[int] = []
    for d, (size, step) in enumerate(zip(shape, strides(shape))):
        before, after = int(paddings[d][0]), int(paddings[d][1])
        require(size + before + after == out_shape[d], f"output shape {out_shape} does not match the paddings")
        starts.append(len(offsets))
        offsets += [_mirror_index(i, before, size, offset) * step for i in range(out_shape[d])]
    table = e.array(f"{name}_offsets", "int32_t", offsets)
    p = e.struct(
        f"{name}_params",
        MappedCopyParams(
            ndim=len(shape), dims=list(out_shape), map_start=starts, elem_size=element_size(e.tensor(op.inputs[0]))
        ),
    )
    return f"lt_copy_mapped({p}, {table}, {e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)});"


def lower_gather(e: ModelEmitter, op: Operator, name: str) -> str:
    ins, outs = tensor_types(e, op)
    require(ins[0] == outs[0] and ins[1] == "int32", f"types {ins} -> {outs}")
    shape, coords_shape = e.tensor(op.inputs[0]).shape, e.tensor(op.inputs[1]).shape
    gather = attributes_of(op, GatherAttributes)
    axis = gather.axis % len(shape)
    batch_dims = gather.batch_dims
    batch_dims += len(coords_shape) if batch_dims < 0 else 0
    require(batch_dims <= axis, f"batch_dims {batch_dims} above axis {axis}")
    p = e.struct(
        f"{name}_params",
        GatherParams(
            batches=math.prod(shape[:batch_dims]),
            outer=math.prod(shape[batch_dims:axis]),
            axis_size=shape[axis],
            coords=math.prod(coords_shape[batch_dims:]),
            inner=math.prod(shape[axis + 1 :]),
            elem_size=element_size(e.tensor(op.inputs[0])),
        ),
    )
    return f"lt_gather({p}, {e.pointer(op.inputs[0])}, {e.pointer(op.inputs[1])}, {e.pointer(op.outputs[0], True)});"


def lower_gather_nd(e: ModelEmitter, op: Operator, name: str) -> str:
    ins, outs = tensor_types(e, op)
    require(ins[0] == outs[0] and ins[1] == "int32", f"types {ins} -> {outs}")
    shape, indices_shape = e.tensor(op.inputs[0]).shape, e.tensor(op.inputs[1]).shape
    indices_nd = indices_shape[-1]
    require(1 <= indices_nd <= min(len(shape), MAX_DIMS), f"index tuples of {indices_nd} for rank {len(shape)}")
    p = e.struct(
        f"{name}_params",
        GatherNdParams(
            slices=math.prod(indices_shape[:-1]),
            indices_nd=indices_nd,
            slice_size=math.prod(shape[indices_nd:]),
            elem_size=element_size(e.tensor(op.inputs[0])),
            element_steps=strides(shape)[:indices_nd],
        ),
    )
    return f"lt_gather_nd({p}, {e.pointer(op.inputs[0])}, {e.pointer(op.inputs[1])}, {e.pointer(op.outputs[0], True)});"


def lower_select_v2(e: ModelEmitter, op: Operator, name: str) -> str:
    ins, outs = tensor_types(e, op)
    require(ins[0] == "bool" and ins[1] == ins[2] == outs[0], f"types {ins} -> {outs}")
    out_shape = e.tensor(op.outputs[0]).shape or (1,)
    require(len(out_shape) <= MAX_DIMS, f"more than {MAX_DIMS} dimensions")
    steps = []
    for t in op.inputs:
        shape = e.tensor(t).shape
        shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
        require(all(s in (1, o) for s, o in zip(shape, out_shape)), "inputs do not broadcast to the output")
        steps.append([st if s > 1 else 0 for s, st in zip(shape, strides(shape))])
    p = e.struct(
        f"{name}_params",
        SelectParams(
            ndim=len(out_shape),
            dims=list(out_shape),
            step_condition=steps[0],
            step_true=steps[1],
            step_false=steps[2],
            elem_size=element_size(e.tensor(op.outputs[0])),
        ),
    )
    return (
        f"lt_select({p}, {e.pointer(op.inputs[0])}, {e.pointer(op.inputs[1])}, {e.pointer(op.inputs[2])}, "
        f"{e.pointer(op.outputs[0], True)});"
    )


ANY_TYPE = ("int8", "uint8", "int16", "int32", "float32")
ANY_OUTPUT = tuple(f"*->{t}" for t in ANY_TYPE)  # the first input is not the data
# the byte copies TFLM's reference kernels also run on int64 and bool data (their type switches)
WITH_INT64 = (*ANY_TYPE, "int64")
WITH_BOOL = (*ANY_TYPE, "bool")
EVERY_TYPE = (*ANY_TYPE, "int64", "bool")
KERNELS = (
    Kernel("RESHAPE", lower_reshape, EVERY_TYPE),
    Kernel("TRANSPOSE", lower_transpose, ANY_TYPE),
    Kernel("PAD", lower_pad, ANY_TYPE),
    Kernel("CONCATENATION", lower_concatenation, EVERY_TYPE),
    Kernel("STRIDED_SLICE", lower_strided_slice, WITH_BOOL),
    Kernel("SPLIT", lower_split, ANY_OUTPUT),
    Kernel("SPLIT_V", lower_split_v, ANY_TYPE),
    Kernel("PACK", lower_pack, WITH_INT64),
    Kernel("SHAPE", lower_shape, ("*->int32",)),
    Kernel("RESIZE_NEAREST_NEIGHBOR", lower_resize_nearest_neighbor, ANY_TYPE),
    Kernel("SQUEEZE", lower_reshape, EVERY_TYPE),
    Kernel("EXPAND_DIMS", lower_reshape, ANY_TYPE),
    Kernel("SLICE", lower_slice, WITH_BOOL),
    Kernel("UNPACK", lower_unpack, ANY_TYPE),
    Kernel("PADV2", lower_pad, ANY_TYPE, "the constant value input"),
    Kernel("MIRROR_PAD", lower_mirror_pad, ANY_TYPE, "REFLECT and SYMMETRIC"),
    Kernel("BROADCAST_TO", lower_broadcast_to, EVERY_TYPE),
    Kernel("FILL", lower_fill, ANY_OUTPUT, "the value may be computed"),
    Kernel("ZEROS_LIKE", lower_zeros_like, WITH_INT64),
    Kernel("REVERSE_V2", lower_reverse_v2, EVERY_TYPE, "contiguous axes, as TFLM requires"),
    Kernel(
        "DYNAMIC_UPDATE_SLICE",
        lower_dynamic_update_slice,
        ("float32", "int8", "int16", "int32"),
        "int32 or int64 start indices, computed or constant",
    ),
    Kernel("BROADCAST_ARGS", lower_broadcast_args, ("int32", "int64"), "computed or constant shapes"),
    Kernel(
        "EMBEDDING_LOOKUP",
        lower_embedding_lookup,
        ("*->int8", "*->float32"),
        "int8 or float32 rows; int8 rows to float32 dequantized (zero point 0)",
    ),
    Kernel("GATHER", lower_gather, ANY_TYPE, "int32 indices; batch_dims"),
    Kernel("GATHER_ND", lower_gather_nd, ANY_TYPE, "int32 indices"),
    Kernel("SELECT_V2", lower_select_v2, ANY_OUTPUT, "broadcasting up to 6-D"),
    Kernel("RESIZE_BILINEAR", lower_resize_bilinear, ("int8", "float32"), "align_corners, half_pixel_centers"),
    Kernel("SPACE_TO_DEPTH", lower_space_to_depth, ("int8", "float32")),
    Kernel("DEPTH_TO_SPACE", lower_depth_to_space, ("int8", "float32")),
    Kernel("SPACE_TO_BATCH_ND", lower_space_to_batch_nd, ("int8", "float32"), "3-D or 4-D; pads with zero bytes"),
    Kernel("BATCH_TO_SPACE_ND", lower_batch_to_space_nd, ("int8", "float32"), "3-D or 4-D"),
)
