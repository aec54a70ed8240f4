"""Geometry of spatial tiling: which tensors cut the graph in two, which operators can run on a window of their
input, and which window of every tensor each output patch needs (its receptive field, with halos).

Everything here is pure arithmetic on the typed graph; `emit` turns a `TilingPlan` into a model.

Rows and columns are half-open intervals in a tensor's own coordinates. A window may reach past the tensor's
edges: those rows and columns are padding, filled with the value TFLM would have used there. For a SAME
convolution that is the input's zero point (TFLM's int8 kernels skip out-of-image taps, which is the same as
adding `(zero_point - zero_point) * w = 0`); for a PAD operator folded into its consumer it is the PAD's value;
for a SAME MAX_POOL the type's lowest value, which no maximum picks over an in-image tap.

Each operator input read per patch has a window map per axis, `lowtide.model.windows`'s: affine (`AxisMap`:
convolutions, pools, element-wise operators, PAD), mirrored (`MirrorMap`) or a resize (`ResizeMap`, whose windows
are computed on whole input rows and sliced). docs/rewrite.md lists the operators and why the others end a region.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lowtide.memory.lifetimes import ALIGNMENT
from lowtide.model.attributes import ConcatenationAttributes, Padding, attributes_as
from lowtide.model.ir import Graph, Operator, Subgraph
from lowtide.model.operators import (
    BINARY_OPCODES,
    CHANNEL_OPCODES,
    CONV_OPCODES,
    PAD_OPCODES,
    POOL_OPCODES,
    REDUCE_OPCODES,
    RESIZE_OPCODES,
    UNARY_OPCODES,
    op_macs,
)
from lowtide.model.schema import ELEMENT_BYTES
from lowtide.model.validate import shape_problems
from lowtide.model.windows import (
    IDENTITY,
    AxisMap,
    Interval,
    WindowMap,
    pad_maps,
    resize_axes,
    window_attributes,
    window_maps,
)

# The resize maps by the names rewrite's tests check them under (tests/test_rewrite_operators.py).
from lowtide.model.windows import ResizeMap as ResizeMap
from lowtide.model.windows import resize_window_map as _resize_axis  # noqa: F401
from lowtide.rewrite.errors import NotApplicable

# Element types every operator tiling adds to a region's tensors runs on in TFLM (STRIDED_SLICE, CONCATENATION,
# PAD/PADV2 and SPLIT_V all take these; STRIDED_SLICE and CONCATENATION refuse uint8). A window holds its tensor's
# type, so a region whose tensors have another type (a uint8 model input before its QUANTIZE) cannot be tiled:
# its region starts after the QUANTIZE instead.
WINDOW_TYPES = frozenset({"float32", "int8", "int16", "int32"})


@dataclass(frozen=True)
class Edge:
    """One activation input of a tileable operator, looking through a PAD operator folded into it."""

    slot: int  # position in the operator's input list
    tensor: int  # the tensor actually read (the PAD's input when a PAD is folded in)
    rows: WindowMap
    cols: WindowMap
    pad_op: int | None  # folded PAD operator: supplies the fill value and the padded window's quantization
    fill_lowest: bool = False  # a SAME MAX_POOL's padding: the lowest value, which no maximum picks

    def map(self, axis: int) -> WindowMap:
        return self.rows if axis == 0 else self.cols


@dataclass(frozen=True)
class RegionOp:
    op: int
    edges: tuple[Edge, ...]
    outputs: tuple[int, ...]
    pads: bool = False  # a PAD, PADV2 or MIRROR_PAD run per patch: it pads its window itself where it leaves
    # the input

    @property
    def output(self) -> int:
        return self.outputs[0]

    def computed(self, axis: int, out: Interval) -> Interval:
        return self.edges[0].map(axis).computed(out)


@dataclass(frozen=True)
class Region:
    """The operators between two cut tensors: `source` stays whole, `target` is produced patch by patch."""

    source: int
    target: int
    ops: tuple[RegionOp, ...]  # in a topological order
    folded_pads: tuple[int, ...]  # PAD operators absorbed into their consumers' edges
    # Operators run once, whole, before the patches (`broadcast_branch`): every patch reads their per-channel
    # result as a broadcast operand.
    broadcast_ops: tuple[int, ...] = ()
    # Tensors computed before the source and read inside the region (`skip_inputs`: a decoder's skip tensors, a
    # residual block's input): held whole, like the source, while every patch reads its window of them.
    skips: tuple[int, ...] = ()

    @property
    def held_whole(self) -> tuple[int, ...]:
        """The tensors the patches read their windows from: the source and the skip tensors."""
        return (self.source, *self.skips)

    @property
    def all_ops(self) -> set[int]:
        """Every operator a tiling of the region replaces or runs beside its patches: its own, the PADs folded
        into them and the broadcast branch."""
        return {rop.op for rop in self.ops} | set(self.folded_pads) | set(self.broadcast_ops)


WHOLE = -1  # `Piece.patch` of the source, the target and its rows: not made by one patch


@dataclass(frozen=True)
class Piece:
    """A window of an original tensor, held in a tensor of its own. Rows and columns outside the tensor's
    extent are padding. `quant_of` names the tensor whose quantization the window carries. Windows made by
    different patches are different tensors even when their extents agree (clipped at the image border)."""

    tensor: int
    rows: Interval
    cols: Interval
    quant_of: int
    patch: int = WHOLE

    @property
    def height(self) -> int:
        return self.rows[1] - self.rows[0]

    @property
    def width(self) -> int:
        return self.cols[1] - self.cols[0]


@dataclass(frozen=True)
class Slice:
    source: Piece
    result: Piece


@dataclass(frozen=True)
class Pad:
    source: Piece
    result: Piece
    pad_op: int | None  # its constant_values input (if any) is reused; None: TFLM pads with the zero point
    lowest: bool = False  # pad with the lowest value of the type instead (a SAME MAX_POOL's padding)


@dataclass(frozen=True)
class Apply:
    op: int  # original operator, run with VALID padding on its input windows
    inputs: tuple[tuple[int, Piece], ...]  # (input slot, window)
    results: tuple[Piece, ...]  # one per output of the operator
    # A PAD run per patch: ((before, after) rows, (before, after) columns); channels are padded as the original.
    spatial_padding: tuple[Interval, Interval] | None = None

    @property
    def result(self) -> Piece:
        return self.results[0]


@dataclass(frozen=True)
class Split:
    """The source cut into row strips by one SPLIT_V, each strip planned inside the source's own bytes
    (`lowtide.memory.in_place`): a strip's bytes come free as soon as the last patch reading it is done, while
    the source as one tensor would stay live until the last patch."""

    source: Piece
    results: tuple[Piece, ...]


@dataclass(frozen=True)
class Concat:
    sources: tuple[Piece, ...]
    result: Piece
    axis: int  # 1 = rows, 2 = columns (NHWC)


Step = Slice | Pad | Apply | Concat | Split


@dataclass(frozen=True)
class TilingPlan:
    region: Region
    grid: tuple[int, int]  # patches along rows and columns of the target
    split_source: bool  # the source is cut into row strips first (see `Split`)
    steps: tuple[Step, ...]  # in execution order: patch by patch, rows of patches concatenated as they finish
    macs: int  # multiply-accumulates of the steps (the region's own MACs plus halo recomputation)
    stream: bool = False  # full-width strips that carry their halo rows to the next strip (`plan_streaming`)


def shape_hw(sg: Subgraph, tensor: int) -> tuple[int, int]:
    return sg.tensors[tensor].shape[1], sg.tensors[tensor].shape[2]


def cut_tensors(graph: Graph) -> list[int]:
    """4-D activation tensors of the main subgraph that every path from the inputs to the outputs crosses:
    once one is computed, no other tensor computed before it is read again (a model output may be one: a
    segmenter's full-resolution output is then assembled from patches). Ordered by how much precedes them."""
    sg = graph.main
    ancestors = _ancestors(sg)
    producers = sg.producers()
    consumers = sg.consumers()
    produced_by = {t: producers[t] for t in producers}
    cuts = []
    for t in range(len(sg.tensors)):
        tensor = sg.tensors[t]
        if not tensor.planned or len(tensor.shape) != 4:
            continue
        if t in produced_by:
            before = ancestors[produced_by[t]] | 1 << produced_by[t]
        elif t in sg.inputs:
            before = 0
        else:
            continue
        if _only_crossing(sg, t, before, produced_by, consumers):
            cuts.append((before.bit_count(), t))
    return [t for _, t in sorted(cuts)]


def _only_crossing(
    sg: Subgraph, cut: int, before: int, produced_by: dict[int, int], consumers: dict[int, list[int]]
) -> bool:
    for t in list(sg.inputs) + [u for u, p in produced_by.items() if before >> p & 1]:
        if t == cut:
            continue
        if t in sg.outputs or any(not before >> c & 1 for c in consumers.get(t, [])):
            return False
    return True


def _ancestors(sg: Subgraph) -> list[int]:
    """Bitmask of the operators each operator depends on (transitively). Stored order is topological."""
    producers = sg.producers()
    result = [0] * len(sg.operators)
    for op in sg.operators:
        mask = 0
        for t in op.inputs:
            p = producers.get(t)
            if p is not None:
                mask |= result[p] | 1 << p
        result[op.index] = mask
    return result


def region_between(graph: Graph, source: int, target: int) -> Region:
    """The tileable region from cut `source` to cut `target`; NotApplicable says why there is none."""
    sg = graph.main
    producers = sg.producers()
    ancestors = _ancestors(sg)
    if target not in producers:
        raise NotApplicable("the target tensor is a model input")
    t_op = producers[target]
    before_target = ancestors[t_op] | 1 << t_op
    before_source = 0
    if source in producers:
        before_source = ancestors[producers[source]] | 1 << producers[source]
    if before_source & ~before_target:
        raise NotApplicable("the source does not precede the target")
    members = before_target & ~before_source
    branch = broadcast_branch(graph, source, members)
    members &= ~sum(1 << op for op in branch)
    consumers = sg.consumers()
    ops: list[RegionOp] = []
    folded: list[int] = []
    for op in sg.operators:
        if not members >> op.index & 1:
            continue
        if op.opcode == "PAD" and not _foldable_pad(graph, op, consumers, members):
            folded.append(op.index)
            continue
        ops.append(_region_op(graph, op, producers, members, set(folded)))
    if not ops or t_op in folded:
        raise NotApplicable("the region ends in a PAD folded into its consumers or holds no operator")
    skips = skip_inputs(graph, source, ops, members)
    for region_op in ops:
        outside = _broadcast_read_elsewhere(graph, region_op, branch)
        if outside:
            raise NotApplicable(outside)
    for t in sorted({source, *skips} | {t for rop in ops for t in rop.outputs}):
        if sg.tensors[t].dtype not in WINDOW_TYPES:
            raise NotApplicable(
                f"tensor {t} '{sg.tensors[t].name}' is {sg.tensors[t].dtype}, which TFLM's "
                f"STRIDED_SLICE and CONCATENATION do not copy"
            )
    return Region(source, target, tuple(ops), tuple(folded), branch, skips)


def skip_inputs(graph: Graph, source: int, ops: list[RegionOp], members: int) -> tuple[int, ...]:
    """The tensors other than the source that the region's operators read windows of and that are computed
    before it (a decoder's skip tensors from the encoder, the input of a residual block tiled from inside it);
    NotApplicable says why one cannot be held whole beside the source. They are whole before the first patch,
    like the source."""
    sg = graph.main
    producers = sg.producers()
    skips: list[int] = []
    for region_op in ops:
        for edge in region_op.edges:
            t = edge.tensor
            if t == source or t in skips or (t in producers and members >> producers[t] & 1):
                continue
            shape = sg.tensors[t].shape
            if not sg.tensors[t].planned or len(shape) != 4 or shape[0] != 1:
                raise NotApplicable(f"operator {region_op.op} reads a tensor from outside the region")
            skips.append(t)
    return tuple(sorted(skips))


def escaping_tensor(graph: Graph, source: int, target: int) -> str:
    """Why the operators from `source` to `target` do not form a region that ends in `target` (one of the
    tensors they compute is read after it, or is a model output), or ''. Unlike a cut tensor, the target may
    have tensors from before the region read after it (the source, a decoder's skip tensors): they are whole
    anyway."""
    return RegionEnds(graph).escaping(source, target)


class RegionEnds:
    """`escaping_tensor` for many regions of one graph: its dependences computed once."""

    def __init__(self, graph: Graph):
        self._sg = graph.main
        self._producers = self._sg.producers()
        self._consumers = self._sg.consumers()
        self._ancestors = _ancestors(self._sg)

    def escaping(self, source: int, target: int) -> str:
        sg, producers, ancestors = self._sg, self._producers, self._ancestors
        if target not in producers:
            return "the target tensor is a model input"
        before_source = ancestors[producers[source]] | 1 << producers[source] if source in producers else 0
        members = (ancestors[producers[target]] | 1 << producers[target]) & ~before_source
        for op in sg.operators:
            if not members >> op.index & 1:
                continue
            for t in op.outputs:
                if t != target and (t in sg.outputs or any(not members >> c & 1 for c in self._consumers.get(t, []))):
                    return f"tensor {t} '{sg.tensors[t].name}' computed in the region is read after it"
        return ""


def broadcast_branch(graph: Graph, source: int, members: int) -> tuple[int, ...]:
    """The operators among `members` that compute per-channel vectors from a global reduction of the source: a
    squeeze-and-excitation branch (MEAN, 1x1 convolutions or dense layers, its gate). The source is whole before
    the first patch, so they run once, whole, before the patches, and each patch reads their result whole as a
    broadcast operand (the MUL scaling the block per channel). A reduction of any other tensor of the region
    still ends the region: the tensor is never whole there."""
    sg = graph.main
    branch: list[int] = []
    vectors: set[int] = set()
    for op in sg.operators:
        if not members >> op.index & 1 or not all(_per_channel(sg, t) for t in op.outputs):
            continue
        activations = [t for t in op.inputs if t >= 0 and sg.tensors[t].planned]
        reduces_source = activations == [source] and bool(global_operator(graph, op))
        if reduces_source or (activations and all(t in vectors for t in activations)):
            branch.append(op.index)
            vectors.update(op.outputs)
    return tuple(branch)


def _per_channel(sg: Subgraph, tensor: int) -> bool:
    """A tensor with no rows or columns: one value per channel (or a scalar)."""
    return all(d == 1 for d in sg.tensors[tensor].shape[:-1])


def _broadcast_read_elsewhere(graph: Graph, region_op: RegionOp, branch: tuple[int, ...]) -> str:
    """Why a per-channel activation `region_op` reads whole is not the result of the region's broadcast branch
    (nothing else computes it before the patches), or ''."""
    sg = graph.main
    producers = sg.producers()
    read = {edge.slot for edge in region_op.edges}
    op = sg.operators[region_op.op]
    for slot, t in enumerate(op.inputs):
        if slot not in read and t >= 0 and sg.tensors[t].planned and producers.get(t) not in branch:
            return (
                f"operator {op.index} ({op.opcode}) broadcasts an activation of shape {sg.tensors[t].shape} "
                "computed inside the region"
            )
    return ""


def global_operator(graph: Graph, op: Operator) -> str:
    """Why `op` needs whole rows and columns of its input at once (a region must end before it), or ''."""
    sg = graph.main
    if op.opcode in REDUCE_OPCODES:
        axes = graph.constant_array(op.inputs[1])
        rank = len(sg.tensors[op.inputs[0]].shape)
        if axes is None or rank != 4 or {int(a) % rank for a in np.ravel(axes)} & {1, 2}:
            return f"operator {op.index} ({op.opcode}) reduces over rows and columns, so a region ends before it"
    if op.opcode in POOL_OPCODES and len(sg.tensors[op.outputs[0]].shape) == 4:
        if shape_hw(sg, op.outputs[0]) == (1, 1) and shape_hw(sg, op.inputs[0]) != (1, 1):
            return f"operator {op.index} ({op.opcode}) pools the whole image, so a region ends before it"
    return ""


def region_end(graph: Graph, target: str) -> str:
    """Why a region ending at the tensor named `target` goes no further when a global operator reads it, or ''."""
    sg = graph.main
    index = next((t.index for t in sg.tensors if t.name == target), None)
    for c in sg.consumers().get(index, []) if index is not None else []:
        reason = global_operator(graph, sg.operators[c])
        if reason:
            return f"{target}: {reason}"
    return ""


def _foldable_pad(graph: Graph, op: Operator, consumers: dict[int, list[int]], members: int) -> str:
    """Why the PAD `op` cannot be folded into its consumers' windows (it then runs per patch), or ''."""
    sg = graph.main
    paddings = graph.constant_array(op.inputs[1])
    if paddings is None or paddings.shape != (4, 2) or paddings[0].any() or paddings[3].any():
        return f"PAD operator {op.index} pads more than rows and columns"
    for c in consumers.get(op.outputs[0], []):
        consumer = sg.operators[c]
        if not members >> c & 1:
            return f"PAD operator {op.index} is read outside the region"
        if consumer.opcode not in CONV_OPCODES | POOL_OPCODES | UNARY_OPCODES | BINARY_OPCODES:
            return f"PAD operator {op.index} feeds a {consumer.opcode}"
        if consumer.opcode in CONV_OPCODES | POOL_OPCODES and _same_padding_used(sg, consumer):
            return f"operator {c} pads a PAD's output again"
    return ""


def _same_padding_used(sg: Subgraph, op: Operator) -> bool:
    if window_attributes(op).padding != Padding.SAME:
        return False
    rows, cols = window_maps(sg, op)
    in_h, in_w = shape_hw(sg, op.inputs[0])
    out_h, out_w = shape_hw(sg, op.outputs[0])
    return rows.needed((0, out_h)) != (0, in_h) or cols.needed((0, out_w)) != (0, in_w)


def _region_op(graph: Graph, op: Operator, producers: dict[int, int], members: int, folded: set[int]) -> RegionOp:
    sg = graph.main
    # Patches are computed from the shapes the operators compute: a model taken in with an operator whose
    # declared output is another (TFLM runs the declared one) is tiled around it, never through it.
    problems = shape_problems(graph, sg, op)
    if problems:
        raise NotApplicable(f"operator {op.index} ({op.opcode}): {problems[0].reason}")
    for output in op.outputs:
        if len(sg.tensors[output].shape) != 4 or sg.tensors[output].shape[0] != 1:
            raise NotApplicable(f"operator {op.index} ({op.opcode}) has no single-image NHWC output")
    out_hw = shape_hw(sg, op.outputs[0])
    fill_lowest = False
    pads = False
    maps: dict[int, tuple[WindowMap, WindowMap]]
    if op.opcode in CONV_OPCODES or op.opcode in POOL_OPCODES:
        if op.opcode == "AVERAGE_POOL_2D" and _same_padding_used(sg, op):
            # AVERAGE_POOL's SAME padding divides by the in-image count: no explicit PAD reproduces it.
            raise NotApplicable(f"operator {op.index} ({op.opcode}) averages over SAME padding")
        fill_lowest = op.opcode == "MAX_POOL_2D" and _same_padding_used(sg, op)
        maps = {0: window_maps(sg, op)}
    elif op.opcode in UNARY_OPCODES:
        maps = {0: (IDENTITY, IDENTITY)}
    elif op.opcode in BINARY_OPCODES:
        maps = {}
        for slot in (0, 1):
            reason = _broadcast_operand(graph, op, slot, out_hw)
            if reason is None:
                maps[slot] = (IDENTITY, IDENTITY)
            elif reason:
                raise NotApplicable(reason)
    elif op.opcode in PAD_OPCODES:
        maps = _pad_maps(graph, op)
        pads = True
    elif op.opcode in RESIZE_OPCODES:
        maps = _resize_maps(graph, op)
    elif op.opcode in CHANNEL_OPCODES:
        maps = _channel_maps(graph, op, out_hw)
    else:
        raise NotApplicable(global_operator(graph, op) or f"operator {op.index} ({op.opcode}) cannot run on patches")
    edges = []
    for slot, (rows, cols) in maps.items():
        tensor = op.inputs[slot]
        pad_op = producers.get(tensor)
        if pad_op is not None and pad_op in folded:
            paddings = graph.constant_array(sg.operators[pad_op].inputs[1])
            assert paddings is not None  # _foldable_pad folds only a PAD with constant paddings
            tensor = sg.operators[pad_op].inputs[0]
            edges.append(
                Edge(slot, tensor, _shifted(rows, int(paddings[1][0])), _shifted(cols, int(paddings[2][0])), pad_op)
            )
        else:
            edges.append(Edge(slot, tensor, rows, cols, None, fill_lowest))
    return RegionOp(op.index, tuple(edges), tuple(op.outputs), pads)


def _broadcast_operand(graph: Graph, op: Operator, slot: int, out_hw: tuple[int, int]) -> str | None:
    """None: the operand is an activation of the output's rows and columns (read per patch); '': a constant
    without rows or columns (per channel or scalar: read whole by every patch); else why neither."""
    sg = graph.main
    tensor = sg.tensors[op.inputs[slot]]
    if tensor.planned:
        if len(tensor.shape) == 4 and tensor.shape[0] == 1 and tensor.shape[1:3] == out_hw:
            return None
        if _per_channel(sg, op.inputs[slot]) and tensor.shape[-1] in (1, sg.tensors[op.outputs[0]].shape[-1]):
            return ""  # a broadcast branch's result (`broadcast_branch`; region_between checks it is one)
        return (
            f"operator {op.index} ({op.opcode}) broadcasts an activation of shape {tensor.shape} over rows or columns"
        )
    if graph.constant_array(op.inputs[slot]) is None or any(d != 1 for d in tensor.shape[:-1]):
        return f"operator {op.index} ({op.opcode}) reads a constant with rows or columns"
    return ""


def _pad_maps(graph: Graph, op: Operator) -> dict[int, tuple[WindowMap, WindowMap]]:
    paddings = graph.constant_array(op.inputs[1])
    if paddings is None or paddings.shape != (4, 2) or paddings[0].any():
        raise NotApplicable(f"operator {op.index} ({op.opcode}) pads the batch or has no constant paddings")
    widths = tuple((int(before), int(after)) for before, after in paddings)
    _, rows, cols, _ = pad_maps(op, widths, graph.main.tensors[op.inputs[0]].shape)
    return {0: (rows, cols)}


def _resize_maps(graph: Graph, op: Operator) -> dict[int, tuple[WindowMap, WindowMap]]:
    maps = []
    for axis in resize_axes(graph.main, op):
        axis_map = axis.window_map()
        if axis_map is None:
            raise NotApplicable(
                f"operator {op.index} ({op.opcode}) maps a window of {axis.n_out} rows or columns back to "
                f"{axis.n_in} in a way no smaller resize reproduces (a non-integer factor or align_corners)"
            )
        maps.append(axis_map)
    return {0: (maps[0], maps[1])}


def _channel_maps(graph: Graph, op: Operator, out_hw: tuple[int, int]) -> dict[int, tuple[WindowMap, WindowMap]]:
    slots: Sequence[int]
    if op.opcode == "CONCATENATION":
        axis, slots = attributes_as(op.attributes, ConcatenationAttributes).axis, range(len(op.inputs))
    else:
        data, axis_slot = (1, 0) if op.opcode == "SPLIT" else (0, 2)
        axis_value = graph.constant_array(op.inputs[axis_slot])
        if axis_value is None:
            raise NotApplicable(f"operator {op.index} ({op.opcode}) has no constant axis")
        axis, slots = int(np.ravel(axis_value)[0]), [data]
    if axis % 4 != 3:
        raise NotApplicable(f"operator {op.index} ({op.opcode}) works along rows or columns, not channels")
    for slot in slots:
        if _broadcast_operand(graph, op, slot, out_hw) is not None:
            raise NotApplicable(
                f"operator {op.index} ({op.opcode}) joins a constant or tensors of other rows and columns"
            )
    return {slot: (IDENTITY, IDENTITY) for slot in slots}


def _shifted(axis: WindowMap, pad_before: int) -> AxisMap:
    assert isinstance(axis, AxisMap)  # PADs fold into operators with affine maps only
    return axis.shifted(pad_before)


def plan_tiling(graph: Graph, region: Region, grid: tuple[int, int], split_source: bool = False) -> TilingPlan:
    """Patch by patch, row-major: each patch's steps, and each finished row of patches concatenated along the
    columns; the rows concatenated into the target at the end. With `split_source`, the source is first cut
    into row strips in place, and each row of patches reads its window of them."""
    sg = graph.main
    height, width = shape_hw(sg, region.target)
    row_cuts, col_cuts = _bounds(height, grid[0]), _bounds(width, grid[1])
    source_h, source_w = shape_hw(sg, region.source)
    source = Piece(region.source, (0, source_h), (0, source_w), region.source)
    steps: list[Step] = []
    row_windows = [_needed(sg, region, 0, rows)[region.source] for rows in itertools.pairwise(row_cuts)]
    strips = _strips(sg, region.source, row_windows) if split_source else []
    if len(strips) > 1:
        steps.append(Split(source, tuple(strips)))
    macs = 0
    rows_done: list[Piece] = []
    for row_index, rows in enumerate(itertools.pairwise(row_cuts)):
        first_patch = row_index * grid[1]
        held = _window_of_strips(strips, row_windows[row_index], first_patch, steps) if len(strips) > 1 else source
        held_whole = {region.source: held} | {t: whole_piece(sg, t) for t in region.skips}
        patches: list[Piece] = []
        for col_index, cols in enumerate(itertools.pairwise(col_cuts)):
            result, patch_macs = _patch(graph, region, rows, cols, first_patch + col_index, steps, held_whole)
            patches.append(result)
            macs += patch_macs
        if len(patches) > 1:
            row = Piece(region.target, rows, (0, width), region.target)
            steps.append(Concat(tuple(patches), row, axis=2))
            patches = [row]
        rows_done.extend(patches)
    if len(rows_done) > 1:
        steps.append(Concat(tuple(rows_done), Piece(region.target, (0, height), (0, width), region.target), axis=1))
    return TilingPlan(region, grid, len(strips) > 1, tuple(steps), macs)


def plan_streaming(graph: Graph, region: Region, strips: int, split_source: bool = False) -> TilingPlan:
    """`strips` full-width row strips of the target that recompute nothing (StreamNet's stream buffers): strip k
    of every operator computes only the rows of its output no earlier strip computed, and reads the rows an
    earlier strip made that it still needs (carried: sliced from the earlier strip's rows once its last reader
    there has its window) concatenated along the rows with the rows strip k made. A pointwise or element-wise
    operator reads only new rows and carries nothing. The source and the skip tensors are whole (the source, with
    `split_source`, cut into row strips in place) and read as `plan_tiling` reads them. Every row of every tensor
    is computed once, so the MACs are the region's own. NotApplicable where an operator's rows do not map to
    input rows affinely (resizes, MIRROR_PAD) or the strips of the target do not follow each other."""
    sg = graph.main
    for rop in region.ops:
        for edge in rop.edges:
            if not isinstance(edge.rows, AxisMap):
                raise NotApplicable(f"operator {rop.op} ({sg.operators[rop.op].opcode}) reads rows no stream carries")
    height, width = shape_hw(sg, region.target)
    cuts = _bounds(height, strips)
    new_rows = _stream_rows(sg, region, cuts)
    reads = _stream_reads(sg, region, new_rows)
    carries = _carried_rows(sg, region, new_rows, reads)
    source_h, source_w = shape_hw(sg, region.source)
    source = Piece(region.source, (0, source_h), (0, source_w), region.source)
    steps = _StreamSteps()
    source_reads = [read.get(region.source) for read in reads]  # None: the strip reads none of it
    source_strips = _strips(sg, region.source, [r or (0, 0) for r in source_reads]) if split_source else []
    if len(source_strips) > 1:
        steps.add(Split(source, tuple(source_strips)))
    carried: dict[int, Piece] = {}  # per tensor computed in the region: the rows this strip starts with
    macs = 0
    target_strips: list[Piece] = []
    for k in range(strips):
        held = {t: whole_piece(sg, t) for t in region.skips}
        rows = source_reads[k]
        held[region.source] = (steps.window_of_strips(source_strips, rows, k) if rows else None) or source
        made: dict[int, Piece] = {}  # the rows of each tensor this strip computed
        handed_on: dict[int, Piece] = {}  # the rows the next strip starts with
        running = [rop for rop in region.ops if new_rows[k][rop.output][0] < new_rows[k][rop.output][1]]
        last_reader = {edge.tensor: rop.op for rop in running for edge in rop.edges}

        for rop in running:
            out_rows, out_cols = new_rows[k][rop.output], (0, sg.tensors[rop.output].shape[2])
            inputs = []
            for edge in rop.edges:
                if edge.tensor not in held:
                    held[edge.tensor] = steps.assembled(edge.tensor, k, carried, made)
                want = (edge.rows.needed(out_rows), edge.cols.needed(out_cols))
                inside = _clip(sg, edge.tensor, *want)
                piece = steps.crop(held[edge.tensor], inside, k)
                if inside != want and not rop.pads:
                    quant_of = sg.operators[edge.pad_op].outputs[0] if edge.pad_op is not None else edge.tensor
                    piece = steps.pad(piece, Piece(edge.tensor, *want, quant_of, k), edge.pad_op, edge.fill_lowest)
                inputs.append((edge.slot, piece))
                rows = carries[edge.tensor][k + 1] if edge.tensor in carries else (0, 0)
                if last_reader[edge.tensor] == rop.op and rows[0] < rows[1]:  # before this strip's rows of it die
                    handed_on[edge.tensor] = steps.crop(held[edge.tensor], (rows, held[edge.tensor].cols), k + 1)
            results = tuple(Piece(t, out_rows, out_cols, t, k) for t in rop.outputs)
            steps.add(Apply(rop.op, tuple(inputs), results, _pad_padding(rop, inputs, out_rows, out_cols)))
            made.update((r.tensor, r) for r in results)
            macs += op_macs(sg, sg.operators[rop.op], results[0].height * results[0].width)
        for t, rows_per_strip in carries.items():  # a tensor no operator read in this strip hands its rows on
            rows = rows_per_strip[k + 1]
            if t not in last_reader and rows[0] < rows[1]:
                rows_in = steps.assembled(t, k, carried, made)
                handed_on[t] = steps.crop(rows_in, (rows, rows_in.cols), k + 1)
        carried = handed_on
        target_strips.append(made[region.target])
    whole = Piece(region.target, (0, height), (0, width), region.target)
    steps.add(Concat(tuple(target_strips), whole, axis=1))
    return TilingPlan(region, (strips, 1), len(source_strips) > 1, tuple(steps.steps), macs, stream=True)


def _stream_rows(sg: Subgraph, region: Region, cuts: list[int]) -> list[dict[int, Interval]]:
    """Per strip, per tensor computed in the region: the rows of it the strip computes, those it needs that no
    earlier strip computed (empty where the earlier strips computed all it needs)."""
    done: dict[int, int] = {}
    rows: list[dict[int, Interval]] = []
    for strip in itertools.pairwise(cuts):
        need = _needed(sg, region, 0, strip)
        new: dict[int, Interval] = {}
        for rop in region.ops:
            lo, hi = need[rop.output]
            start = max(lo, done.get(rop.output, lo))
            for t in rop.outputs:
                new[t] = (start, max(hi, start))
                done[t] = new[t][1]
        if new[region.target] != strip:
            raise NotApplicable("the strips of the target do not follow each other")
        rows.append(new)
    return rows


def _stream_reads(sg: Subgraph, region: Region, new_rows: list[dict[int, Interval]]) -> list[dict[int, Interval]]:
    """Per strip, per tensor the region reads: the rows (inside the tensor) the strip's operators read of it."""
    reads: list[dict[int, Interval]] = []
    for strip in new_rows:
        read: dict[int, Interval] = {}
        for rop in region.ops:
            out = strip[rop.output]
            if out[0] >= out[1]:
                continue
            for edge in rop.edges:
                lo, hi = edge.rows.needed(out)
                lo, hi = max(lo, 0), min(hi, sg.tensors[edge.tensor].shape[1])
                old = read.get(edge.tensor, (lo, hi))
                read[edge.tensor] = (min(old[0], lo), max(old[1], hi))
        reads.append(read)
    return reads


def _carried_rows(
    sg: Subgraph, region: Region, new_rows: list[dict[int, Interval]], reads: list[dict[int, Interval]]
) -> dict[int, list[Interval]]:
    """Per tensor computed in the region and read in it, per strip (and one past the last): the rows that strip
    starts with, carried from the strip before, from the first row it or a later strip reads to the first row it
    computes (empty where it reads nothing earlier strips made)."""
    carries: dict[int, list[Interval]] = {}
    computed = {t for rop in region.ops for t in rop.outputs}
    for t in computed & {t for read in reads for t in read}:
        first = sg.tensors[t].shape[1]
        starts = []
        for k in reversed(range(len(new_rows))):
            first = min(first, reads[k].get(t, (first, first))[0])
            starts.append(first)
        starts.reverse()
        carries[t] = [(min(start, strip[t][0]), strip[t][0]) for start, strip in zip(starts, new_rows)] + [(0, 0)]
    return carries


class _StreamSteps:
    """A stream plan's steps as they are appended, each piece made once: a window of a tensor holds the same
    values whichever step asks for it, so one already made (a slice, pad, concatenation or an operator's
    rows) is read again rather than made twice."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.made: set[Piece] = set()

    def add(self, step: Step) -> None:
        self.steps.append(step)
        self.made.update(step.results if isinstance(step, (Split, Apply)) else (step.result,))

    def crop(self, piece: Piece, inside: tuple[Interval, Interval], strip: int) -> Piece:
        if (piece.rows, piece.cols) == inside:
            return piece
        window = Piece(piece.tensor, *inside, piece.quant_of, strip)
        if window not in self.made:
            self.add(Slice(piece, window))
        return window

    def pad(self, piece: Piece, padded: Piece, pad_op: int | None, lowest: bool) -> Piece:
        if padded not in self.made:
            self.add(Pad(piece, padded, pad_op, lowest))
        return padded

    def assembled(self, tensor: int, strip: int, carried: dict[int, Piece], made: dict[int, Piece]) -> Piece:
        """The rows of `tensor` strip `strip` holds: those carried to it and those it made, concatenated along
        the rows where there are both."""
        parts = [p for p in (carried.get(tensor), made.get(tensor)) if p is not None]
        if len(parts) == 1:
            return parts[0]
        result = Piece(tensor, (parts[0].rows[0], parts[1].rows[1]), parts[1].cols, tensor, strip)
        if result not in self.made:
            self.add(Concat(tuple(parts), result, axis=1))
        return result

    def window_of_strips(self, strips: list[Piece], rows: Interval, strip: int) -> Piece | None:
        """The source rows `rows` from its row strips (`_window_of_strips`), or None where it is not cut."""
        if len(strips) < 2:
            return None
        added: list[Step] = []
        window = _window_of_strips(strips, rows, strip, added)
        for step in added:
            self.add(step)
        return window


def _strips(sg: Subgraph, source: int, row_windows: list[Interval]) -> list[Piece]:
    """Row strips of the source: strip i ends where the rows of patch row i end, so patch row i finds its rows
    in strips up to i, and a strip is free once no later window reaches back into it. Cuts are rounded down
    to rows whose byte offset is a multiple of 16, as offline-plan offsets must be."""
    height, width = shape_hw(sg, source)
    tensor = sg.tensors[source]
    row_bytes = width * tensor.shape[3] * ELEMENT_BYTES[tensor.dtype]
    step = ALIGNMENT // math.gcd(row_bytes, ALIGNMENT)
    cuts = sorted({0, height} | {hi // step * step for _, hi in row_windows[:-1] if 0 < hi // step * step < height})
    return [Piece(source, rows, (0, width), source) for rows in itertools.pairwise(cuts)]


def _window_of_strips(strips: list[Piece], rows: Interval, patch: int, steps: list[Step]) -> Piece:
    """The source rows `rows`, full width, as one piece: a strip itself, or its slices concatenated."""
    parts = []
    for strip in strips:
        lo, hi = max(strip.rows[0], rows[0]), min(strip.rows[1], rows[1])
        if lo >= hi:
            continue
        if (lo, hi) == strip.rows:
            parts.append(strip)
        else:
            part = Piece(strip.tensor, (lo, hi), strip.cols, strip.quant_of, patch)
            steps.append(Slice(strip, part))
            parts.append(part)
    if len(parts) == 1:
        return parts[0]
    window = Piece(strips[0].tensor, rows, strips[0].cols, strips[0].quant_of, patch)
    steps.append(Concat(tuple(parts), window, axis=1))
    return window


def grid_macs(graph: Graph, region: Region, grid: tuple[int, int]) -> int:
    """The MACs `plan_tiling(graph, region, grid)` spends, without planning it: windows are products of a row
    interval and a column interval, so the summed window areas factor into per-axis sums."""
    sg = graph.main
    height, width = shape_hw(sg, region.target)
    rows = _summed_lengths(sg, region, 0, _bounds(height, grid[0]))
    cols = _summed_lengths(sg, region, 1, _bounds(width, grid[1]))
    return sum(op_macs(sg, sg.operators[rop.op], rows[rop.output] * cols[rop.output]) for rop in region.ops)


def _summed_lengths(sg: Subgraph, region: Region, axis: int, cuts: list[int]) -> dict[int, int]:
    """Per tensor: the lengths of the windows the patches along one axis compute, added up."""
    total: dict[int, int] = {}
    for interval in itertools.pairwise(cuts):
        for tensor, (lo, hi) in _needed(sg, region, axis, interval).items():
            total[tensor] = total.get(tensor, 0) + hi - lo
    return total


def _needed(sg: Subgraph, region: Region, axis: int, interval: Interval) -> dict[int, Interval]:
    """Per tensor of the region: the rows (axis 0) or columns (axis 1) a patch spanning `interval` of the
    target computes (operator outputs) or reads (the source), clipped to the tensor. An operator computes the
    hull of what its readers want, grown to what it can compute (a resize: whole input rows)."""
    need = {region.target: interval}
    for rop in reversed(region.ops):
        wanted = [need[t] for t in rop.outputs if t in need]
        out = rop.computed(axis, (min(w[0] for w in wanted), max(w[1] for w in wanted)))
        for t in rop.outputs:
            need[t] = out
        for edge in rop.edges:
            lo, hi = edge.map(axis).needed(out)
            want = (max(lo, 0), min(hi, sg.tensors[edge.tensor].shape[1 + axis]))
            old = need.get(edge.tensor, want)
            need[edge.tensor] = (min(old[0], want[0]), max(old[1], want[1]))
    return need


def _bounds(size: int, parts: int) -> list[int]:
    return [round(i * size / parts) for i in range(parts + 1)]


def _patch(
    graph: Graph,
    region: Region,
    rows: Interval,
    cols: Interval,
    patch: int,
    steps: list[Step],
    sources: dict[int, Piece],
) -> tuple[Piece, int]:
    """Append one patch's steps, reading the source and the skip tensors from the pieces `sources`; return the
    patch of the target and the MACs spent on it."""
    sg = graph.main
    # Backwards: the window of every tensor this patch needs (the hull over its readers).
    need_rows, need_cols = _needed(sg, region, 0, rows), _needed(sg, region, 1, cols)
    # Forwards: crop what is held to what each reader wants, pad where the window leaves the image, apply.
    held = dict(sources)
    made: set[Piece] = set()

    def cropped(piece: Piece, inside: tuple[Interval, Interval]) -> Piece:
        if (piece.rows, piece.cols) == inside:
            return piece
        window = Piece(piece.tensor, *inside, piece.quant_of, patch)
        if window not in made:
            steps.append(Slice(piece, window))
            made.add(window)
        return window

    macs = 0
    for rop in region.ops:
        out_rows, out_cols = need_rows[rop.output], need_cols[rop.output]
        inputs = []
        for edge in rop.edges:
            want = (edge.rows.needed(out_rows), edge.cols.needed(out_cols))
            inside = _clip(sg, edge.tensor, *want)
            piece = cropped(held[edge.tensor], inside)
            if inside != want and not rop.pads:
                quant_of = sg.operators[edge.pad_op].outputs[0] if edge.pad_op is not None else edge.tensor
                padded = Piece(edge.tensor, *want, quant_of, patch)
                if padded not in made:
                    steps.append(Pad(piece, padded, edge.pad_op, edge.fill_lowest))
                    made.add(padded)
                piece = padded
            inputs.append((edge.slot, piece))
        results = tuple(Piece(t, out_rows, out_cols, t, patch) for t in rop.outputs)
        steps.append(Apply(rop.op, tuple(inputs), results, _pad_padding(rop, inputs, out_rows, out_cols)))
        for result in results:
            held[result.tensor] = result
        macs += op_macs(sg, sg.operators[rop.op], results[0].height * results[0].width)
    return cropped(held[region.target], (rows, cols)), macs


def whole_piece(sg: Subgraph, tensor: int) -> Piece:
    height, width = shape_hw(sg, tensor)
    return Piece(tensor, (0, height), (0, width), tensor)


def _clip(sg: Subgraph, tensor: int, rows: Interval, cols: Interval) -> tuple[Interval, Interval]:
    shape = sg.tensors[tensor].shape
    return (max(rows[0], 0), min(rows[1], shape[1])), (max(cols[0], 0), min(cols[1], shape[2]))


def _pad_padding(
    rop: RegionOp, inputs: list[tuple[int, Piece]], out_rows: Interval, out_cols: Interval
) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """A PAD's own padding where the window (`out_rows`, `out_cols`) of its output leaves its input (`inputs`' first
    piece); None for any other operator."""
    if not rop.pads:
        return None
    (_, piece), edge = inputs[0], rop.edges[0]
    top, left = edge.rows.offset, edge.cols.offset  # type: ignore[union-attr]
    return (
        (piece.rows[0] + top - out_rows[0], out_rows[1] - piece.rows[1] - top),
        (piece.cols[0] + left - out_cols[0], out_cols[1] - piece.cols[1] - left),
    )
