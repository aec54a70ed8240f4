"""The shapes an operator computes for its outputs, from its inputs' shapes, its options and its constant inputs,
as TFLite Micro's kernels compute them: one rule per operator the compiler lowers, the table the validator compares
declared output shapes with (and the operand shapes the kernels combine without checking).

lowtide relies on declared shapes everywhere: the memory planner sizes every tensor from its declared shape before
any kernel runs, and the compiler takes loop bounds, per-channel quantization and window geometry from them. So a
declared shape the kernel does not compute is refused, even where TFLM's Prepare recomputes the output's dimensions
and runs (BATCH_MATMUL, GATHER, GATHER_ND, EMBEDDING_LOOKUP, SPACE_TO_DEPTH, DEPTH_TO_SPACE): lowtide could plan with
the computed shape instead, but the file it reads and writes would still say another. The exceptions are where a
kernel, TFLM's and lowtide's alike, takes the declared shape as it is, each said at its rule: a dimension that may
be anything (`None`), or only an element count. Rules judge only sound operands (constant inputs of the right
type and size, ranks the kernel indexes, axes in range); the validator's other checks report the rest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from lowtide.model import padding
from lowtide.model.attributes import (
    A,
    BatchMatMulAttributes,
    ConcatenationAttributes,
    Conv2DAttributes,
    DepthToSpaceAttributes,
    DepthwiseConv2DAttributes,
    FullyConnectedAttributes,
    GatherAttributes,
    PackAttributes,
    Pool2DAttributes,
    ReducerAttributes,
    SpaceToDepthAttributes,
    StridedSliceAttributes,
    SvdfAttributes,
    UnpackAttributes,
    attributes_as,
)
from lowtide.model.ir import Graph, Operator, Subgraph, TensorKind, first_assignments, variable_handles

Dim = int | None  # None: any size, the kernel takes the declared one


class OperandShapes(Exception):
    """The operator's inputs have shapes its kernel cannot combine (the message says how)."""


class _NotJudged(Exception):
    """A rule cannot judge this operator: an operand it needs is missing, computed at run time or malformed."""


@dataclass(frozen=True)
class Computed:
    """What a kernel computes for one output: its dimensions (each possibly any size), and or only its element
    count (`dims` None: any shape of `elements` elements)."""

    dims: tuple[Dim, ...] | None
    elements: int | None = None
    impossible: str = ""  # why the operator computes no shape at all from these operands (TFLM runs it anyway)

    @classmethod
    def exact(cls, shape: Sequence[int]) -> Computed:
        return cls(tuple(int(d) for d in shape))

    @classmethod
    def none(cls, why: str) -> Computed:
        """No shape: TensorFlow refuses these operands, while TFLM's kernel, which never computes the output's
        shape, runs on the declared one."""
        return cls(None, impossible=why)

    def matches(self, declared: tuple[int, ...]) -> bool:
        if self.impossible:
            return False
        if self.elements is not None and math.prod(declared) != self.elements:
            return False
        return self.dims is None or (
            len(declared) == len(self.dims) and all(d is None or d == s for d, s in zip(self.dims, declared))
        )

    def __str__(self) -> str:
        if self.impossible:
            return f"none ({self.impossible})"
        count = f"{self.elements} elements"
        if self.dims is None:
            return f"any shape of {count}"
        dims = f"[{', '.join('any' if d is None else str(d) for d in self.dims)}]"
        return f"{dims} of {count}" if self.elements is not None and None in self.dims else dims


@dataclass(frozen=True)
class _Operands:
    """What the rules read of one operator: its inputs' shapes and constant values, its options."""

    graph: Graph
    sg: Subgraph
    op: Operator

    def _tensor(self, position: int) -> int:
        if position >= len(self.op.inputs) or self.op.inputs[position] < 0:
            raise _NotJudged
        return self.op.inputs[position]

    def present(self, position: int) -> bool:
        return position < len(self.op.inputs) and self.op.inputs[position] >= 0

    def shape(self, position: int, rank: int | None = None) -> tuple[int, ...]:
        shape = self.sg.tensors[self._tensor(position)].shape
        if (rank is not None and len(shape) != rank) or any(d < 1 for d in shape):
            raise _NotJudged
        return shape

    def ints(self, position: int) -> list[int]:
        """A constant integer input's values; not judged when the input is computed when the model runs."""
        index = self._tensor(position)
        t = self.sg.tensors[index]
        if t.kind is not TensorKind.CONSTANT or t.dtype not in ("int32", "int64"):
            raise _NotJudged
        try:
            values = self.graph.constant_array(index, self.sg.index)
        except ValueError:  # data that does not fill the shape: _buffer_matches_shape says so
            raise _NotJudged from None
        if values is None:
            raise _NotJudged
        return [int(v) for v in values.reshape(-1)]

    def every_shape(self) -> list[tuple[int, ...]]:
        """The shapes of all inputs, of which there is at least one."""
        if not self.op.inputs:
            raise _NotJudged
        return [self.shape(k) for k in range(len(self.op.inputs))]

    def scalar(self, position: int) -> int:
        values = self.ints(position)
        if len(values) != 1:
            raise _NotJudged
        return values[0]

    def attributes(self, cls: type[A], required: bool = False) -> A:
        """The operator's attributes as a `cls`: the defaults when it stores none, unless the rule cannot judge
        without them (`required`)."""
        if required and not isinstance(self.op.attributes, cls):
            raise _NotJudged
        return attributes_as(self.op.attributes, cls)

    def scale_count(self, position: int) -> int:
        """How many scales the input's quantization has (0: none)."""
        q = self.sg.tensors[self._tensor(position)].quantization
        return 0 if q is None else len(q.scales)

    def declared(self, output: int) -> tuple[int, ...]:
        return self.sg.tensors[self.op.outputs[output]].shape


Rule = Callable[[_Operands], Sequence[Computed | None]]


def _axis(value: int, rank: int) -> int:
    if not -rank <= value < max(rank, 1):
        raise _NotJudged  # _axis_in_range refuses these, the compiler the rest
    return value % max(rank, 1)


def _same(o: _Operands) -> list[Computed | None]:
    """Element by element: the output has input 0's shape."""
    return [Computed.exact(o.shape(0))]


def _broadcast(*positions: int) -> Rule:
    def rule(o: _Operands) -> list[Computed | None]:
        shapes = [o.shape(p) for p in positions]
        try:
            return [Computed.exact(np.broadcast_shapes(*shapes))]
        except ValueError:
            raise OperandShapes(
                f"inputs of shapes {', '.join(str(list(s)) for s in shapes)} do not broadcast"
            ) from None

    rule.__doc__ = "Element by element with broadcasting: the inputs' broadcast shape."
    return rule


def _channels_of(o: _Operands, channels: int, filter_position: int, bias_position: int) -> None:
    """The per-channel operands of a weighted kernel: the bias has one value, and a per-channel filter one scale,
    per output channel (the kernels index both by output channel)."""
    if o.present(bias_position) and math.prod(o.shape(bias_position)) != channels:
        raise OperandShapes(f"bias of shape {list(o.shape(bias_position))} for {channels} output channels")
    scales = o.scale_count(filter_position)
    if scales > 1 and scales != channels:
        raise OperandShapes(f"filter quantized with {scales} scales for {channels} output channels")


def _window(o: _Operands) -> list[Computed | None]:
    """CONV_2D, DEPTHWISE_CONV_2D and the pools: ComputeOutSize over the height and width; the channels are the
    filter's (CONV_2D: dimension 0, DEPTHWISE_CONV_2D: 3) or the input's (pools)."""
    x = o.shape(0, rank=4)
    window: Conv2DAttributes | DepthwiseConv2DAttributes | Pool2DAttributes
    if o.op.opcode in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        w = o.shape(1, rank=4)
        if o.op.opcode == "CONV_2D":
            kernel, dilation, channels = w[1:3], o.attributes(Conv2DAttributes).dilation, w[0]
            if x[3] % w[3]:
                raise OperandShapes(f"{x[3]} input channels for a filter of {w[3]}: not a whole number of groups")
        else:
            kernel, dilation, channels = w[1:3], o.attributes(DepthwiseConv2DAttributes).dilation, w[3]
            if channels % x[3]:
                raise OperandShapes(f"a filter of {channels} channels for {x[3]} input channels: not a depth multiple")
        _channels_of(o, channels, 1, 2)
        window = (
            o.attributes(Conv2DAttributes, required=True)
            if o.op.opcode == "CONV_2D"
            else o.attributes(DepthwiseConv2DAttributes, required=True)
        )
    else:
        window = o.attributes(Pool2DAttributes, required=True)
        kernel, dilation, channels = window.filter, (1, 1), x[3]
    strides, code = window.stride, window.padding
    if min(*kernel, *dilation, *strides) < 1 or code not in (padding.SAME, padding.VALID):
        raise _NotJudged  # _windows and the options check refuse these
    return [
        Computed.exact(
            (
                x[0],
                *(padding.output_size(code, size, k, s, d) for size, k, s, d in zip(x[1:3], kernel, strides, dilation)),
                channels,
            )
        )
    ]


def _fully_connected(o: _Operands) -> list[Computed | None]:
    """The filter's units. Without keep_num_dims TFLM takes the number of rows from the declared leading dimensions
    (lowtide from the input's elements): any dimensions, as long as they hold the input's rows."""
    units, depth = o.shape(1, rank=2)
    elements = math.prod(o.shape(0))
    if elements % depth:
        raise OperandShapes(f"input of {elements} elements is not a whole number of rows of {depth}")
    _channels_of(o, units, 1, 2)
    if o.attributes(FullyConnectedAttributes).keep_num_dims:
        return [Computed.exact((*o.shape(0)[:-1], units))]
    rank = max(len(o.declared(0)), 1)
    return [Computed((None,) * (rank - 1) + (units,), elements // depth * units)]


def _transpose_conv(o: _Operands) -> list[Computed | None]:
    """The output shape input (TFLM pads over the declared output, which must be that shape)."""
    out = o.ints(0)
    w, x = o.shape(1, rank=4), o.shape(2, rank=4)
    if len(out) != 4:
        raise _NotJudged
    if out[3] != w[0] or x[3] != w[3]:
        raise OperandShapes(f"filter of shape {list(w)} for an input of {x[3]} channels and an output of {out[3]}")
    _channels_of(o, w[0], 1, 3)
    return [Computed.exact(out)]


def _batch_matmul(o: _Operands) -> list[Computed | None]:
    lhs, rhs = o.shape(0), o.shape(1)
    if min(len(lhs), len(rhs)) < 2:
        raise _NotJudged
    matmul = o.attributes(BatchMatMulAttributes)
    rows, depth = (lhs[-1], lhs[-2]) if matmul.adj_x else lhs[-2:]
    rhs_depth, cols = (rhs[-1], rhs[-2]) if matmul.adj_y else rhs[-2:]
    try:
        batch = np.broadcast_shapes(lhs[:-2], rhs[:-2])
    except ValueError:
        batch = None
    if depth != rhs_depth or batch is None:
        raise OperandShapes(f"{list(lhs)} and {list(rhs)} do not multiply")
    return [Computed.exact((*batch, rows, cols))]


def _reduction(o: _Operands) -> list[Computed | None]:
    """MEAN, SUM, REDUCE_MAX, REDUCE_MIN over the axes input: kept as 1 with keep_dims, else removed."""
    x = o.shape(0)
    given = o.ints(1)
    if any(not -len(x) <= a < len(x) for a in given):
        raise OperandShapes(f"axes {given} outside rank {len(x)}")
    axes = {a % len(x) for a in given}
    if o.attributes(ReducerAttributes).keep_dims:
        return [Computed.exact(tuple(1 if d in axes else n for d, n in enumerate(x)))]
    return [Computed.exact(tuple(n for d, n in enumerate(x) if d not in axes))]


def _arg_extremum(o: _Operands) -> list[Computed | None]:
    x = o.shape(0)
    axis = _axis(o.scalar(1), len(x))
    return [Computed.exact(x[:axis] + x[axis + 1 :])]


def _concatenation(o: _Operands) -> list[Computed | None]:
    shapes = o.every_shape()
    rank = len(shapes[0])
    if any(len(s) != rank for s in shapes):
        raise _NotJudged  # _ranks refuses these
    axis = _axis(o.attributes(ConcatenationAttributes).axis, rank)
    others = {s[:axis] + s[axis + 1 :] for s in shapes}
    if len(others) > 1:
        raise OperandShapes(f"inputs of shapes {', '.join(str(list(s)) for s in shapes)} differ outside axis {axis}")
    return [Computed.exact((*shapes[0][:axis], sum(s[axis] for s in shapes), *shapes[0][axis + 1 :]))]


def _pack(o: _Operands) -> list[Computed | None]:
    shapes = set(o.every_shape())
    if len(shapes) > 1:
        raise OperandShapes(f"inputs of shapes {', '.join(str(list(s)) for s in sorted(shapes))} do not stack")
    shape = shapes.pop()
    axis = _axis(o.attributes(PackAttributes).axis, len(shape) + 1)
    return [Computed.exact((*shape[:axis], len(o.op.inputs), *shape[axis:]))]


def _unpack(o: _Operands) -> list[Computed | None]:
    x = o.shape(0)
    axis = _axis(o.attributes(UnpackAttributes).axis, len(x))
    if len(o.op.outputs) != x[axis]:
        raise OperandShapes(f"{len(o.op.outputs)} outputs for an axis of {x[axis]}")
    return [Computed.exact(x[:axis] + x[axis + 1 :])] * len(o.op.outputs)


def _split(o: _Operands) -> list[Computed | None]:
    """SPLIT (axis, data): equal parts; TFLM's kernel cuts every output to output 0's shape."""
    x = o.shape(1)
    axis = _axis(o.scalar(0), len(x))
    parts = len(o.op.outputs)
    if x[axis] % parts:
        raise OperandShapes(f"an axis of {x[axis]} does not split into {parts} equal parts")
    return [Computed.exact((*x[:axis], x[axis] // parts, *x[axis + 1 :]))] * parts


def _split_v(o: _Operands) -> list[Computed | None]:
    """SPLIT_V (data, size_splits, axis): one size may be -1, the rest of the axis."""
    x = o.shape(0)
    axis = _axis(o.scalar(2), len(x))
    sizes = o.ints(1)
    rest = x[axis] - sum(n for n in sizes if n != -1)
    sizes = [rest if n == -1 else n for n in sizes]
    if len(sizes) != len(o.op.outputs) or any(n < 0 for n in sizes) or sum(sizes) != x[axis]:
        raise OperandShapes(f"size_splits {o.ints(1)} do not cut an axis of {x[axis]} into {len(o.op.outputs)}")
    return [Computed.exact((*x[:axis], n, *x[axis + 1 :])) for n in sizes]


def _element_count(o: _Operands) -> list[Computed | None]:
    """RESHAPE and SQUEEZE copy the bytes: TFLM takes the declared dimensions (RESHAPE's shape input is not
    read), so only the element count must be the input's."""
    return [Computed(None, math.prod(o.shape(0)))]


def _expand_dims(o: _Operands) -> list[Computed | None]:
    x = o.shape(0)
    axis = _axis(o.scalar(1), len(x) + 1)
    return [Computed.exact((*x[:axis], 1, *x[axis:]))]


def _transpose(o: _Operands) -> list[Computed | None]:
    x = o.shape(0)
    perm = o.ints(1)
    if sorted(perm) != list(range(len(x))):
        raise OperandShapes(f"permutation {perm} of rank {len(x)}")
    return [Computed.exact(tuple(x[p] for p in perm))]


def _pad(o: _Operands) -> list[Computed | None]:
    """PAD, PADV2, MIRROR_PAD: the paddings before and after each dimension."""
    x = o.shape(0)
    paddings = o.ints(1)
    if len(paddings) != 2 * len(x) or min(paddings, default=0) < 0:
        raise OperandShapes(f"paddings {paddings} for rank {len(x)}")
    return [Computed.exact(tuple(n + paddings[2 * d] + paddings[2 * d + 1] for d, n in enumerate(x)))]


def _slice(o: _Operands) -> list[Computed | None]:
    x = o.shape(0)
    begin, size = o.ints(1), o.ints(2)
    dims = [n - b if s == -1 else s for n, b, s in zip(x, begin, size)]
    if not len(begin) == len(size) == len(x) or not all(
        0 <= b and 0 <= d and b + d <= n for b, d, n in zip(begin, dims, x)
    ):
        raise OperandShapes(f"slice of {size} from {begin} outside {list(x)}")
    return [Computed.exact(dims)]


@dataclass(frozen=True)
class SliceAxis:
    """One axis of a STRIDED_SLICE: the elements start, start + step, ... before stop."""

    start: int
    stop: int
    step: int
    shrunk: bool  # removed from the output (shrink_axis_mask)

    @property
    def count(self) -> int:
        return len(range(self.start, self.stop, self.step))


def strided_slice_axes(
    shape: Sequence[int],
    begin: Sequence[int],
    end: Sequence[int],
    steps: Sequence[int],
    begin_mask: int,
    end_mask: int,
    shrink_mask: int,
    offset: bool,
) -> list[SliceAxis]:
    """StartForAxis and StopForAxis of strided_slice_logic.h, for begin, end and strides covering every axis
    (no ellipsis or new-axis mask); raises OperandShapes on a zero stride."""
    big = 1 << 31
    axes = []
    for axis, size in enumerate(shape):
        stride = steps[axis]
        if stride == 0:
            raise OperandShapes(f"stride 0 along axis {axis}")
        start = begin[axis]
        if begin_mask & (1 << axis):
            start = -big if stride > 0 else big - 1
        if start < 0:
            start += size
        start = min(max(start, 0), size) if stride > 0 else min(max(start, -1), size - 1)
        shrunk = bool(shrink_mask & (1 << axis))
        if shrunk:
            stop = start + 1
        else:
            stop = begin[axis] + end[axis] if offset else end[axis]
            if end_mask & (1 << axis):
                stop = big - 1 if stride > 0 else -big
            if stop < 0:
                stop += size
            stop = min(max(stop, 0), size) if stride > 0 else min(max(stop, -1), size - 1)
        axes.append(SliceAxis(start, stop, stride, shrunk))
    return axes


def _strided_slice(o: _Operands) -> list[Computed | None]:
    """The shrunk axes removed (TFLM's Prepare checks the declared shape against this)."""
    x = o.shape(0)
    begin, end, steps = o.ints(1), o.ints(2), o.ints(3)
    masks = o.attributes(StridedSliceAttributes)
    if masks.ellipsis_mask or masks.new_axis_mask or not len(begin) == len(end) == len(steps) == len(x):
        raise _NotJudged  # forms the compiler does not lower: it says so
    axes = strided_slice_axes(
        x, begin, end, steps, masks.begin_mask, masks.end_mask, masks.shrink_axis_mask, masks.offset
    )
    return [Computed.exact(tuple(a.count for a in axes if not a.shrunk))]


def _resize(o: _Operands) -> list[Computed | None]:
    x = o.shape(0, rank=4)
    size = o.ints(1)
    if len(size) != 2:
        raise _NotJudged
    return [Computed.exact((x[0], *size, x[3]))]


def _space_to_depth(o: _Operands) -> list[Computed | None]:
    n, h, w, c = o.shape(0, rank=4)
    block = o.attributes(SpaceToDepthAttributes, required=True).block_size
    if block < 1:
        raise _NotJudged
    if h % block or w % block:
        raise OperandShapes(f"{h}x{w} is not a whole number of {block}x{block} blocks")
    return [Computed.exact((n, h // block, w // block, c * block * block))]


def _depth_to_space(o: _Operands) -> list[Computed | None]:
    n, h, w, c = o.shape(0, rank=4)
    block = o.attributes(DepthToSpaceAttributes, required=True).block_size
    if block < 1:
        raise _NotJudged
    if c % (block * block):
        raise OperandShapes(f"{c} channels are not a whole number of {block}x{block} blocks")
    return [Computed.exact((n, h * block, w * block, c // (block * block)))]


def _batch_space(o: _Operands) -> list[Computed | None]:
    """SPACE_TO_BATCH_ND and BATCH_TO_SPACE_ND: the batch times or divided by the block, the channels kept. The
    height and width may be anything: both kernels, TFLM's and lowtide's, write the declared height and width,
    copying what the block covers (the rest of a BATCH_TO_SPACE_ND's output is stale memory, which lowtide.stale
    follows), so no declared height or width makes compiled code differ from TFLM. A BATCH_TO_SPACE_ND input batch
    that is no whole number of blocks (the converter's batch of 1 where the batch size is unknown) computes no
    shape: TFLM's kernel still copies each input batch to the declared output's batch `b % declared` at block
    offset `b // declared`."""
    x = o.shape(0)
    if len(x) not in (3, 4):
        raise _NotJudged
    block = o.ints(1)
    if len(block) != len(x) - 2 or min(block) < 1:
        raise OperandShapes(f"block {block} for rank {len(x)}")
    blocks = math.prod(block)
    if o.op.opcode == "SPACE_TO_BATCH_ND":
        batch = x[0] * blocks
    elif x[0] % blocks:
        return [Computed.none(f"a batch of {x[0]} is not a whole number of {blocks}-element blocks")]
    else:
        batch = x[0] // blocks
    return [Computed((batch, *(None,) * (len(x) - 2), x[-1]))]


def _gather(o: _Operands) -> list[Computed | None]:
    x, coords = o.shape(0), o.shape(1)
    gather = o.attributes(GatherAttributes)
    axis = _axis(gather.axis, len(x))
    batch_dims = gather.batch_dims
    batch_dims += len(coords) if batch_dims < 0 else 0
    if not 0 <= batch_dims <= min(axis, len(coords)) or x[:batch_dims] != coords[:batch_dims]:
        raise OperandShapes(f"batch_dims {batch_dims} for axis {axis} of {list(x)} and indices {list(coords)}")
    return [Computed.exact((*x[:axis], *coords[batch_dims:], *x[axis + 1 :]))]


def _gather_nd(o: _Operands) -> list[Computed | None]:
    x, indices = o.shape(0), o.shape(1)
    if not indices or not 1 <= indices[-1] <= len(x):
        raise OperandShapes(f"index tuples of shape {list(indices)} into rank {len(x)}")
    return [Computed.exact((*indices[:-1], *x[indices[-1] :]))]


def _embedding_lookup(o: _Operands) -> list[Computed | None]:
    (rows,), value = o.shape(0, rank=1), o.shape(1)
    if len(value) < 2:
        raise _NotJudged
    return [Computed.exact((rows, *value[1:]))]


def _to_shape_input(position: int) -> Rule:
    def rule(o: _Operands) -> list[Computed | None]:
        return [Computed.exact(o.ints(position))]

    rule.__doc__ = "The shape input's values, when it is a constant (TFLM's Prepare checks the declared shape)."
    return rule


def _broadcast_to(o: _Operands) -> list[Computed | None]:
    shape, target = o.shape(0), o.ints(1)
    padded = (1,) * (len(target) - len(shape)) + shape
    if len(shape) > len(target) or any(s not in (1, t) for s, t in zip(padded, target)):
        raise OperandShapes(f"{list(shape)} does not broadcast to {target}")
    return [Computed.exact(target)]


def _broadcast_args(o: _Operands) -> list[Computed | None]:
    return [Computed.exact((max(math.prod(o.shape(0)), math.prod(o.shape(1))),))]


def _shape(o: _Operands) -> list[Computed | None]:
    return [Computed.exact((len(o.shape(0)),))]


def _svdf(o: _Operands) -> list[Computed | None]:
    batches, _ = o.shape(0, rank=2)
    filters = o.shape(1, rank=2)[0]
    rank = o.attributes(SvdfAttributes, required=True).rank
    if rank < 1 or filters % rank:
        raise OperandShapes(f"{filters} filters do not divide into rank {rank}")
    return [Computed.exact((batches, filters // rank))]


def _lstm(o: _Operands) -> list[Computed | None]:
    """Time and batch as the input has them; the units of the recurrent-to-output weights (input 8)."""
    x = o.shape(0, rank=3)
    return [Computed.exact((*x[:2], o.shape(8, rank=2)[1]))]


def _read_variable(o: _Operands) -> list[Computed | None]:
    """The bytes of the variable's first assigned value (TFLM copies them whatever the output's shape)."""
    key = variable_handles(o.graph).get((o.sg.index, o.op.inputs[0] if o.op.inputs else -1))
    value = first_assignments(o.graph).get(key) if key is not None else None
    if value is None:
        raise _NotJudged  # the compiler refuses a variable never assigned
    tensor = o.graph.subgraphs[value[0]].tensors[value[1]]
    output = o.sg.tensors[o.op.outputs[0]]
    if tensor.dtype != output.dtype:
        raise OperandShapes(f"a {tensor.dtype} variable read into {output.dtype}")
    return [Computed(None, math.prod(tensor.shape))]


_SAME = (
    "ABS",
    "CEIL",
    "COS",
    "EXP",
    "FLOOR",
    "LOG",
    "LOGICAL_NOT",
    "NEG",
    "ROUND",
    "RSQRT",
    "SIN",
    "SQRT",
    "SQUARE",
    "RELU",
    "RELU6",
    "LEAKY_RELU",
    "LOGISTIC",
    "TANH",
    "HARD_SWISH",
    "ELU",
    "QUANTIZE",
    "DEQUANTIZE",
    "CAST",
    "SOFTMAX",
    "LOG_SOFTMAX",
    "L2_NORMALIZATION",
    "ZEROS_LIKE",
    "CUMSUM",
    "REVERSE_V2",
    "DYNAMIC_UPDATE_SLICE",
)  # DYNAMIC_UPDATE_SLICE: the operand (input 0) with the update written into it
_BROADCAST = (
    "ADD",
    "SUB",
    "MUL",
    "DIV",
    "MAXIMUM",
    "MINIMUM",
    "SQUARED_DIFFERENCE",
    "PRELU",
    "FLOOR_DIV",
    "FLOOR_MOD",
    "EQUAL",
    "NOT_EQUAL",
    "LESS",
    "LESS_EQUAL",
    "GREATER",
    "GREATER_EQUAL",
    "LOGICAL_AND",
    "LOGICAL_OR",
)


def _add_n(o: _Operands) -> list[Computed | None]:
    shapes = set(o.every_shape())
    if len(shapes) > 1:
        raise OperandShapes(f"inputs of shapes {', '.join(str(list(s)) for s in sorted(shapes))} differ")
    return [Computed.exact(shapes.pop())]


# opcode -> rule. VAR_HANDLE's output is a handle, no data: TFLM and lowtide ignore its shape. CALL_ONCE and
# ASSIGN_VARIABLE write no tensor.
RULES: dict[str, Rule] = {
    **{opcode: _same for opcode in _SAME},
    **{opcode: _broadcast(0, 1) for opcode in _BROADCAST},
    "SELECT_V2": _broadcast(0, 1, 2),
    "ADD_N": _add_n,
    "CONV_2D": _window,
    "DEPTHWISE_CONV_2D": _window,
    "AVERAGE_POOL_2D": _window,
    "MAX_POOL_2D": _window,
    "FULLY_CONNECTED": _fully_connected,
    "TRANSPOSE_CONV": _transpose_conv,
    "BATCH_MATMUL": _batch_matmul,
    "MEAN": _reduction,
    "SUM": _reduction,
    "REDUCE_MAX": _reduction,
    "REDUCE_MIN": _reduction,
    "ARG_MAX": _arg_extremum,
    "ARG_MIN": _arg_extremum,
    "CONCATENATION": _concatenation,
    "PACK": _pack,
    "UNPACK": _unpack,
    "SPLIT": _split,
    "SPLIT_V": _split_v,
    "RESHAPE": _element_count,
    "SQUEEZE": _element_count,
    "EXPAND_DIMS": _expand_dims,
    "TRANSPOSE": _transpose,
    "PAD": _pad,
    "PADV2": _pad,
    "MIRROR_PAD": _pad,
    "SLICE": _slice,
    "STRIDED_SLICE": _strided_slice,
    "RESIZE_NEAREST_NEIGHBOR": _resize,
    "RESIZE_BILINEAR": _resize,
    "SPACE_TO_DEPTH": _space_to_depth,
    "DEPTH_TO_SPACE": _depth_to_space,
    "SPACE_TO_BATCH_ND": _batch_space,
    "BATCH_TO_SPACE_ND": _batch_space,
    "GATHER": _gather,
    "GATHER_ND": _gather_nd,
    "EMBEDDING_LOOKUP": _embedding_lookup,
    "FILL": _to_shape_input(0),
    "BROADCAST_TO": _broadcast_to,
    "BROADCAST_ARGS": _broadcast_args,
    "SHAPE": _shape,
    "SVDF": _svdf,
    "UNIDIRECTIONAL_SEQUENCE_LSTM": _lstm,
    "READ_VARIABLE": _read_variable,
}


def computed_outputs(graph: Graph, sg: Subgraph, op: Operator) -> Sequence[Computed | None]:
    """What `op` computes for each of its outputs (None: not judged); raises OperandShapes when its inputs'
    shapes do not combine. Empty for operators without a rule and operands the rules cannot judge."""
    rule = RULES.get(op.opcode)
    if rule is None or not op.outputs or min(op.outputs) < 0:
        return ()  # _inputs refuses an operator without outputs
    try:
        return rule(_Operands(graph, sg, op))
    except _NotJudged:
        return ()
