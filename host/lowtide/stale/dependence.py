"""Which output elements of an operator can depend on which input elements: the data dependence each kernel has,
as boolean masks (one bool per tensor element, shaped like the tensor), propagated forward one operator at a time.

`propagate` takes the masks of an operator's inputs (True: the element may hold or be computed from stale memory)
and gives, per output, the elements that may then depend on stale memory, and the elements the kernel never writes
at all (known from its geometry: BATCH_TO_SPACE_ND's declared output beyond what its input covers). Every rule
over-approximates the kernel's reads: an output element marked False reads no marked input element, whatever
values flow. An operator without a rule here, or one whose shapes or parameters the rule cannot read, gets the
safe default: every output element depends on every input element, so it is marked as soon as any input element
is. Masks never say False where the kernel may read a marked element: that is what makes a False a proof.

Geometry follows TFLM's reference kernels (`tflm/sources/tflm-ref/tensorflow/lite/kernels/internal/reference/`);
the rows and columns a window, a pad or a resize reads come from `lowtide.model.windows` (the maps the rewrites
tile by), the opcode families from `lowtide.model.operators`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from lowtide.model import padding
from lowtide.model.attributes import (
    A,
    BatchMatMulAttributes,
    ConcatenationAttributes,
    DepthToSpaceAttributes,
    GatherAttributes,
    PackAttributes,
    SpaceToDepthAttributes,
    StridedSliceAttributes,
    TransposeConvAttributes,
    UnpackAttributes,
    attributes_as,
)
from lowtide.model.ir import Graph, Operator
from lowtide.model.operators import (
    BINARY_OPCODES,
    OTHER_ELEMENTWISE_OPCODES,
    PAD_OPCODES,
    POOL_OPCODES,
    REDUCE_OPCODES,
    RESIZE_OPCODES,
    UNARY_OPCODES,
)
from lowtide.model.windows import AxisMap, MirrorMap, pad_maps, resize_axes, window_maps

# Element by element, with numpy broadcasting of any operand.
ELEMENTWISE_OPCODES = UNARY_OPCODES | BINARY_OPCODES | OTHER_ELEMENTWISE_OPCODES
# Every output element reads its whole last axis (a maximum, a sum or a norm over it).
LAST_AXIS_OPCODES = frozenset({"SOFTMAX", "LOG_SOFTMAX", "L2_NORMALIZATION", "LOCAL_RESPONSE_NORMALIZATION"})
# Outputs computed from shapes only, or constant: never from an element's value.
VALUE_FREE_OPCODES = frozenset({"SHAPE", "ZEROS_LIKE"})


@dataclass(frozen=True)
class OutputDependence:
    dependent: np.ndarray  # bool per output element: may be read from or computed with a marked input element
    unwritten: np.ndarray  # bool per output element: the kernel never writes it (it keeps what the arena held)


class _NoRule(Exception):
    """The operator's rule cannot read its parameters or shapes: the safe default applies."""


@dataclass(frozen=True)
class _Operands:
    graph: Graph
    op: Operator
    masks: dict[int, np.ndarray]  # main-subgraph tensor -> its mask; absent: nothing in it depends on stale memory

    def mask(self, position: int) -> np.ndarray:
        t = self.op.inputs[position] if position < len(self.op.inputs) else -1
        if t < 0:
            raise _NoRule
        return self.masks.get(t, np.zeros(element_shape(self.graph, t), bool))

    def shape(self, tensor: int) -> tuple[int, ...]:
        return element_shape(self.graph, tensor)

    @property
    def out_shape(self) -> tuple[int, ...]:
        return self.shape(self.op.outputs[0])

    def constant(self, position: int) -> np.ndarray:
        t = self.op.inputs[position] if position < len(self.op.inputs) else -1
        values = self.graph.constant_array(t) if t >= 0 else None
        if values is None:
            raise _NoRule  # a parameter computed at run time: the rule cannot know its value
        return values.astype(np.int64)

    def attributes(self, cls: type[A], required: bool = False) -> A:
        """The operator's attributes as a `cls`: the defaults when it stores none, unless the rule needs them
        (`required`)."""
        if required and not isinstance(self.op.attributes, cls):
            raise _NoRule
        return attributes_as(self.op.attributes, cls)


def element_shape(graph: Graph, tensor: int) -> tuple[int, ...]:
    """The shape masks of `tensor` have: its declared shape, or its bytes when that shape does not count them."""
    t = graph.main.tensors[tensor]
    count = int(np.prod(t.shape)) if t.shape else 1
    return tuple(t.shape) if count and t.nbytes % count == 0 else (t.nbytes,)


def propagate(graph: Graph, op: Operator, masks: dict[int, np.ndarray]) -> list[OutputDependence]:
    """The dependence of each output of `op` (main subgraph) on the marked elements of its inputs."""
    operands = _Operands(graph, op, masks)
    outputs = [t for t in op.outputs if t >= 0]
    unwritten: list[np.ndarray] = [np.zeros(operands.shape(t), bool) for t in outputs]
    dependent: list[np.ndarray]
    marked = any(masks[t].any() for t in op.inputs if t in masks)
    rule = _RULES.get(op.opcode)
    try:
        if op.opcode == "BATCH_TO_SPACE_ND":
            covered, never_written = _batch_to_space(operands)
            dependent, unwritten = [covered], [never_written]
        elif not marked:
            dependent = [np.zeros(operands.shape(t), bool) for t in outputs]
        elif rule is None:
            raise _NoRule
        else:
            dependent = rule(operands)
        flat = rule in _FLAT_RULES
        if len(dependent) != len(outputs) or not all(
            d.shape == operands.shape(t) or (flat and d.size == np.prod(operands.shape(t), dtype=int))
            for d, t in zip(dependent, outputs)
        ):
            raise _NoRule  # the declared shapes are not the ones the rule computes
        dependent = [d.reshape(operands.shape(t)) for d, t in zip(dependent, outputs)]
    except (_NoRule, ValueError, IndexError, TypeError, ZeroDivisionError):
        dependent = [np.full(operands.shape(t), marked) for t in outputs]
        unwritten = [np.zeros(operands.shape(t), bool) for t in outputs]
    return [OutputDependence(d, u.reshape(d.shape)) for d, u in zip(dependent, unwritten)]


# ---- element-wise, reductions, matrix products -----------------------------------------------------------------


def _elementwise(o: _Operands) -> list[np.ndarray]:
    out = np.zeros(o.out_shape, bool)
    for position, t in enumerate(o.op.inputs):
        if t >= 0 and t in o.masks and o.masks[t].any():
            out |= np.broadcast_to(o.mask(position), out.shape)
    return [out]


def _last_axis(o: _Operands) -> list[np.ndarray]:
    x = o.mask(0)
    return [np.broadcast_to(x.any(axis=-1, keepdims=True), x.shape)]


def _axes(o: _Operands, rank: int) -> tuple[int, ...]:
    axes = {int(a) for a in np.ravel(o.constant(1))}
    if any(not -rank <= a < rank for a in axes):
        raise _NoRule
    return tuple(sorted(a % rank for a in axes))


def _reduction(o: _Operands) -> list[np.ndarray]:
    """A reduced output element reads every input element along the reduced axes."""
    x = o.mask(0)
    return [np.asarray(x.any(axis=_axes(o, x.ndim), keepdims=True))]


def _fully_connected(o: _Operands) -> list[np.ndarray]:
    """Output row r, unit u reads input row r (the input flattened to rows of the weights' width) and weight
    row u."""
    x, weights = o.mask(0), o.mask(1)
    units, features = o.shape(o.op.inputs[1])
    if x.size % features:
        raise _NoRule
    rows = np.asarray(x.reshape(-1, features).any(axis=1))
    out = rows[:, None] | np.asarray(weights.any(axis=1))[None, :]
    if len(o.op.inputs) > 2 and o.op.inputs[2] >= 0:
        out = out | o.mask(2).reshape(-1)[None, :]
    return [out]


def _batch_matmul(o: _Operands) -> list[np.ndarray]:
    """Output (..., m, n) reads row m of x and column n of y (after their adjoints), batches broadcast."""
    x, y = o.mask(0), o.mask(1)
    matmul = o.attributes(BatchMatMulAttributes)
    rows = np.asarray(x.any(axis=-2 if matmul.adj_x else -1))
    columns = np.asarray(y.any(axis=-1 if matmul.adj_y else -2))
    return [rows[..., :, None] | columns[..., None, :]]


# ---- windows ----------------------------------------------------------------------------------------------------


def _window_any(x: np.ndarray, rows: AxisMap, cols: AxisMap, out_hw: tuple[int, int]) -> np.ndarray:
    """out[n, oh, ow, c] = any of x[n, r, c', c] over the window's taps (r, c') of output pixel (oh, ow) inside
    the input (padding reads nothing)."""
    n, h, w, c = x.shape
    out = np.zeros((n, *out_hw, c), bool)
    for tap_rows in rows.taps(np.arange(out_hw[0])):
        inside_r = (tap_rows >= 0) & (tap_rows < h)
        for tap_cols in cols.taps(np.arange(out_hw[1])):
            inside_c = (tap_cols >= 0) & (tap_cols < w)
            if inside_r.any() and inside_c.any():
                out[:, np.flatnonzero(inside_r)[:, None], np.flatnonzero(inside_c)[None, :]] |= x[
                    :, tap_rows[inside_r][:, None], tap_cols[inside_c][None, :]
                ]
    return out


def _window(o: _Operands) -> list[np.ndarray]:
    """CONV_2D reads every input channel of its receptive field; DEPTHWISE_CONV_2D the channel each output
    channel is a multiple of; pools their own channel. Filters and bias are read whole."""
    x, out_shape = o.mask(0), o.out_shape
    if x.ndim != 4 or len(out_shape) != 4 or x.shape[0] != out_shape[0]:
        raise _NoRule
    rows, cols = window_maps(o.graph.main, o.op)  # ValueError without the operator's window attributes
    if min(rows.kernel, rows.stride, rows.dilation, cols.kernel, cols.stride, cols.dilation) < 1:
        raise _NoRule
    if o.op.opcode == "CONV_2D":
        x = np.asarray(x.any(axis=3, keepdims=True))
    out = _window_any(x, rows, cols, (out_shape[1], out_shape[2]))
    if o.op.opcode == "CONV_2D":
        out = np.broadcast_to(out, out_shape)
    elif o.op.opcode == "DEPTHWISE_CONV_2D":
        if out_shape[3] % x.shape[3]:
            raise _NoRule
        out = np.repeat(out, out_shape[3] // x.shape[3], axis=3)
    if o.op.opcode not in POOL_OPCODES | {"L2_POOL_2D"} and any(
        o.mask(k).any() for k in range(1, len(o.op.inputs)) if o.op.inputs[k] >= 0
    ):
        out = np.ones(out_shape, bool)
    return [out]


def _transpose_conv(o: _Operands) -> list[np.ndarray]:
    """Input pixel (ih, iw), every channel, adds into output pixels (ih * stride - before + kh, ...) of every
    output channel; before is the padding of a convolution from the output's size (TFLM's transpose_conv.cc)."""
    x, out_shape = o.mask(2), o.out_shape
    if x.ndim != 4 or len(out_shape) != 4:
        raise _NoRule
    kernel = o.shape(o.op.inputs[1])[1:3]
    conv = o.attributes(TransposeConvAttributes, required=True)
    stride, code = conv.stride, conv.padding
    if min(*stride) < 1:
        raise _NoRule
    before = [
        padding.padding_before(
            out_shape[1 + i], kernel[i], stride[i], 1, padding.output_size(code, out_shape[1 + i], kernel[i], stride[i])
        )
        if code == padding.SAME
        else 0
        for i in range(2)
    ]
    pixels = x.any(axis=3)
    out = np.zeros(out_shape[:3], bool)
    n, rows, cols = np.nonzero(pixels)
    for kh in range(kernel[0]):
        for kw in range(kernel[1]):
            r, c = rows * stride[0] - before[0] + kh, cols * stride[1] - before[1] + kw
            inside = (r >= 0) & (r < out_shape[1]) & (c >= 0) & (c < out_shape[2])
            out[n[inside], r[inside], c[inside]] = True
    out = np.broadcast_to(out[..., None], out_shape)
    if o.mask(1).any() or (len(o.op.inputs) > 3 and o.op.inputs[3] >= 0 and o.mask(3).any()):
        out = np.ones(out_shape, bool)
    return [out]


# ---- data movement: each output element is one input element, or a constant ------------------------------------


def _reshape(o: _Operands) -> list[np.ndarray]:
    return [o.mask(0).reshape(-1)]  # the same bytes in the same order


def _transpose(o: _Operands) -> list[np.ndarray]:
    return [np.transpose(o.mask(0), [int(p) for p in np.ravel(o.constant(1))])]


def _concatenation(o: _Operands) -> list[np.ndarray]:
    parts = [o.mask(k) for k in range(len(o.op.inputs))]
    return [np.concatenate(parts, axis=o.attributes(ConcatenationAttributes).axis % parts[0].ndim)]


def _pack(o: _Operands) -> list[np.ndarray]:
    parts = [o.mask(k) for k in range(len(o.op.inputs))]
    return [np.stack(parts, axis=o.attributes(PackAttributes).axis % (parts[0].ndim + 1))]


def _unpack(o: _Operands) -> list[np.ndarray]:
    x = o.mask(0)
    return list(np.moveaxis(x, o.attributes(UnpackAttributes).axis % x.ndim, 0))


def _split(o: _Operands) -> list[np.ndarray]:
    x = o.mask(1)
    return np.split(x, len(o.op.outputs), axis=int(np.ravel(o.constant(0))[0]) % x.ndim)


def _split_v(o: _Operands) -> list[np.ndarray]:
    x = o.mask(0)
    axis = int(np.ravel(o.constant(2))[0]) % x.ndim
    sizes = [int(s) for s in np.ravel(o.constant(1))]
    if sizes.count(-1) == 1:
        sizes[sizes.index(-1)] = x.shape[axis] - sum(s for s in sizes if s != -1)
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


def _slice(o: _Operands) -> list[np.ndarray]:
    x = o.mask(0)
    begin, size = np.ravel(o.constant(1)), np.ravel(o.constant(2))
    return [x[tuple(slice(int(b), None if s == -1 else int(b + s)) for b, s in zip(begin, size))]]


def _strided_slice(o: _Operands) -> list[np.ndarray]:
    """Python's slice clamping is TFLite's StartForAxis/StopForAxis; ellipsis, new axes and offsets are
    left to the default."""
    x = o.mask(0)
    masks = o.attributes(StridedSliceAttributes)
    if masks.ellipsis_mask or masks.new_axis_mask or masks.offset:
        raise _NoRule
    begin, end, steps = (np.ravel(o.constant(k)) for k in (1, 2, 3))
    begin_mask, end_mask, shrink = masks.begin_mask, masks.end_mask, masks.shrink_axis_mask
    index = []
    for axis, (b, e, s) in enumerate(zip(begin, end, steps)):
        if shrink >> axis & 1:
            first = int(b) % x.shape[axis]
            index.append(slice(first, first + 1))
        else:
            index.append(
                slice(None if begin_mask >> axis & 1 else int(b), None if end_mask >> axis & 1 else int(e), int(s))
            )
    return [x[tuple(index)]]


def _pad(o: _Operands) -> list[np.ndarray]:
    """Padded elements hold the pad value (the zero point, or PADV2's constant); MIRROR_PAD copies elements,
    REFLECT without the edge and SYMMETRIC with it."""
    x = o.mask(0)
    widths = tuple((int(a), int(b)) for a, b in o.constant(1).reshape(-1, 2))
    if len(widths) != x.ndim or tuple(n + a + b for n, (a, b) in zip(x.shape, widths)) != o.out_shape:
        raise _NoRule  # before padding: a model's paddings can be anything
    value = o.op.opcode == "PADV2" and len(o.op.inputs) > 2 and bool(o.mask(2).any())
    out = x
    for axis, axis_map in enumerate(pad_maps(o.op, widths, x.shape)):
        outputs = np.arange(o.out_shape[axis])
        sources = axis_map.sources(outputs) if isinstance(axis_map, MirrorMap) else axis_map.taps(outputs)[0]
        inside = (sources >= 0) & (sources < x.shape[axis])
        if isinstance(axis_map, MirrorMap) and not inside.all():
            raise _NoRule  # mirrored wider than the input: the kernel reads past its end
        taken = np.take(out, np.clip(sources, 0, x.shape[axis] - 1), axis=axis)
        out = np.where(inside.reshape([-1 if d == axis else 1 for d in range(x.ndim)]), taken, value)
    return [out]


def _gather(o: _Operands) -> list[np.ndarray]:
    x = o.mask(0)
    gather = o.attributes(GatherAttributes)
    if gather.batch_dims:
        raise _NoRule
    axis = gather.axis % x.ndim
    t = o.op.inputs[1]
    if o.graph.constant_array(t) is not None:
        return [np.take(x, o.constant(1), axis=axis)]
    if o.mask(1).any():
        raise _NoRule
    # Indices computed at run time (not stale): each output element may read any element along the axis.
    return [np.take(x.any(axis=axis, keepdims=True), np.zeros(o.shape(t), int), axis=axis)]


def _space_to_batch(o: _Operands) -> list[np.ndarray]:
    """SpaceToBatchND loops over its output (space_to_batch_nd.h): output batch (shift_h * bw + shift_w) * N + b
    is input batch b's pixel (oh * bh + shift_h - pad_top, ...) or the pad value. 3-D (N, H, C) is (N, H, 1, C)
    with block width 1."""
    x, out_shape = o.mask(0), o.out_shape
    block, widths = [int(b) for b in np.ravel(o.constant(1))], [int(w) for w in np.ravel(o.constant(2))]
    if x.ndim == 3 and len(block) == 1 and len(widths) == 2 and len(out_shape) == 3:
        x, block, widths, out_shape = x[:, :, None], [block[0], 1], [*widths, 0, 0], (*out_shape[:2], 1, out_shape[2])
    if x.ndim != 4 or len(block) != 2 or len(widths) != 4 or min(block) < 1:
        raise _NoRule
    (n, h, w, c), (bh, bw) = x.shape, block
    padded_h, padded_w = h + widths[0] + widths[1], w + widths[2] + widths[3]
    if padded_h % bh or padded_w % bw or out_shape != (n * bh * bw, padded_h // bh, padded_w // bw, c):
        raise _NoRule  # checked before padding: a model's paddings can be anything
    padded = np.pad(x, [(0, 0), tuple(widths[:2]), tuple(widths[2:]), (0, 0)])
    out = padded.reshape(n, padded_h // bh, bh, padded_w // bw, bw, c).transpose(2, 4, 0, 1, 3, 5).reshape(out_shape)
    return [out.reshape(o.out_shape)]


def _batch_to_space(o: _Operands) -> tuple[np.ndarray, np.ndarray]:
    """BatchToSpaceND loops over its input (batch_to_space_nd.h): input batch b, row ih goes to output batch
    b % N, row ih * bh + (b / N) / bw - crops_top (columns likewise, (b / N) % bw and crops_left), when inside
    the declared output; crops_bottom and crops_right are never read. Output elements no input reaches are never
    written. A 3-D (N, H, C) tensor is (N, H, 1, C) with block width 1 and no left crop. (dependent, unwritten),
    both shaped like the output."""
    x, out_shape = o.mask(0), o.out_shape
    block, crops = [int(b) for b in np.ravel(o.constant(1))], [int(c) for c in np.ravel(o.constant(2))]
    if x.ndim == 3 and len(out_shape) == 3 and len(block) == 1 and len(crops) == 2:
        x, out_shape, block, crops = x[:, :, None], (*out_shape[:2], 1, out_shape[2]), [block[0], 1], [*crops, 0, 0]
    if x.ndim != 4 or len(out_shape) != 4 or len(block) != 2 or len(crops) != 4:
        raise _NoRule
    (bh, bw), top, left = block, crops[0], crops[2]
    if out_shape[0] * bh * bw != x.shape[0] or out_shape[3] != x.shape[3] or top < 0 or left < 0:
        raise _NoRule
    n, h, w, c = out_shape
    _, in_h, in_w, _ = x.shape
    full = x.reshape(bh, bw, n, in_h, in_w, c).transpose(2, 3, 0, 4, 1, 5).reshape(n, in_h * bh, in_w * bw, c)
    covered = full[:, top : top + h, left : left + w]
    dependent = np.zeros(out_shape, bool)
    dependent[:, : covered.shape[1], : covered.shape[2]] = covered
    unwritten = np.ones(out_shape, bool)
    unwritten[:, : covered.shape[1], : covered.shape[2]] = False
    declared = o.out_shape
    return (dependent | unwritten).reshape(declared), unwritten.reshape(declared)


def _depth_to_space(o: _Operands) -> list[np.ndarray]:
    """Output (h * b + dh, w * b + dw, c) is input (h, w, (dh * b + dw) * C + c): TFLite's DCR order."""
    x, b = o.mask(0), o.attributes(DepthToSpaceAttributes).block_size
    n, h, w, c = x.shape
    return [x.reshape(n, h, w, b, b, c // (b * b)).transpose(0, 1, 3, 2, 4, 5).reshape(n, h * b, w * b, -1)]


def _space_to_depth(o: _Operands) -> list[np.ndarray]:
    x, b = o.mask(0), o.attributes(SpaceToDepthAttributes).block_size
    n, h, w, c = x.shape
    return [x.reshape(n, h // b, b, w // b, b, c).transpose(0, 1, 3, 2, 4, 5).reshape(n, h // b, w // b, -1)]


def _resize(o: _Operands) -> list[np.ndarray]:
    """Per axis, the source rows of TFLM's map for the kernel the output's type runs: nearest reads one, bilinear
    the first and the last, and each output counts both whatever weight the kernel gives either."""
    x, out_shape = o.mask(0), o.out_shape
    if x.ndim != 4 or len(out_shape) != 4:
        raise _NoRule
    out = x
    for axis, geometry in zip((1, 2), resize_axes(o.graph.main, o.op)):
        first, last = geometry.sources()
        out = np.take(out, first, axis=axis) | np.take(out, last, axis=axis)
    return [out]


def _reverse(o: _Operands) -> list[np.ndarray]:
    x = o.mask(0)
    return [np.flip(x, axis=tuple(int(a) % x.ndim for a in np.ravel(o.constant(1))))]


def _broadcast_to(o: _Operands) -> list[np.ndarray]:
    return [np.broadcast_to(o.mask(0), o.out_shape)]


def _value_free(o: _Operands) -> list[np.ndarray]:
    return [np.zeros(o.shape(t), bool) for t in o.op.outputs if t >= 0]


_RULES: dict[str, Callable[[_Operands], list[np.ndarray]]] = {
    **{opcode: _elementwise for opcode in ELEMENTWISE_OPCODES},
    **{opcode: _last_axis for opcode in LAST_AXIS_OPCODES},
    **{opcode: _reduction for opcode in REDUCE_OPCODES | {"REDUCE_ANY", "REDUCE_ALL", "ARG_MAX", "ARG_MIN"}},
    **{opcode: _window for opcode in POOL_OPCODES | {"CONV_2D", "DEPTHWISE_CONV_2D", "L2_POOL_2D"}},
    **{opcode: _reshape for opcode in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS")},
    **{opcode: _pad for opcode in PAD_OPCODES},
    **{opcode: _resize for opcode in RESIZE_OPCODES},
    **{opcode: _value_free for opcode in VALUE_FREE_OPCODES},
    "FULLY_CONNECTED": _fully_connected,
    "BATCH_MATMUL": _batch_matmul,
    "TRANSPOSE_CONV": _transpose_conv,
    "TRANSPOSE": _transpose,
    "CONCATENATION": _concatenation,
    "PACK": _pack,
    "UNPACK": _unpack,
    "SPLIT": _split,
    "SPLIT_V": _split_v,
    "SLICE": _slice,
    "STRIDED_SLICE": _strided_slice,
    "GATHER": _gather,
    "SPACE_TO_BATCH_ND": _space_to_batch,
    "DEPTH_TO_SPACE": _depth_to_space,
    "SPACE_TO_DEPTH": _space_to_depth,
    "REVERSE_V2": _reverse,
    "BROADCAST_TO": _broadcast_to,
}
# Rules whose output, in row-major order, is the declared output whatever dimensions it keeps or squeezes.
_FLAT_RULES = frozenset({_reshape, _reduction, _fully_connected, _batch_matmul, _strided_slice})
