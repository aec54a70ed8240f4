"""Geometry of spatial tiling: which tensors cut the graph in two, which operators can run on a window of their
input, and which window of every tensor each output patch needs (its receptive field, with halos).

Everything here is pure arithmetic on the typed graph; `emit` turns a `TilingPlan` into a model.

Rows and columns are half-open intervals in a tensor's own coordinates. A window may reach past the tensor's
edges: those rows and columns are padding, filled with the value TFLM would have used there. For a SAME
convolution that is the input's zero point (TFLM's int8 kernels skip out-of-image taps, which is the same as
adding `(zero_point - zero_point) * w = 0`); for a PAD operator folded into its consumer it is the PAD's value.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass


from lowtide.memory.lifetimes import ALIGNMENT
from lowtide.model.ir import Graph, Operator, Subgraph
from lowtide.model.schema import ELEMENT_BYTES, fb

Interval = tuple[int, int]  # half-open [lo, hi)

CONV_OPCODES = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D"})
POOL_OPCODES = frozenset({"MAX_POOL_2D", "AVERAGE_POOL_2D"})
# One input, one output, each element on its own: a patch of the output needs the same patch of the input.
ELEMENTWISE_OPCODES = frozenset({"QUANTIZE", "RELU", "RELU6"})
TILEABLE_OPCODES = CONV_OPCODES | POOL_OPCODES | ELEMENTWISE_OPCODES | {"ADD", "PAD"}


@dataclass(frozen=True)
class AxisMap:
    """How one spatial axis of an operator's output reads its input: output index o reads input indices
    o * stride - offset ... o * stride - offset + extent - 1."""

    extent: int  # dilated kernel size
    stride: int
    offset: int  # padding before the first row/column (SAME padding and folded PAD)

    def needed(self, out: Interval) -> Interval:
        lo, hi = out
        return lo * self.stride - self.offset, (hi - 1) * self.stride - self.offset + self.extent


IDENTITY = AxisMap(1, 1, 0)


@dataclass(frozen=True)
class Edge:
    """One activation input of a tileable operator, looking through a PAD operator folded into it."""

    slot: int  # position in the operator's input list
    tensor: int  # the tensor actually read (the PAD's input when a PAD is folded in)
    rows: AxisMap
    cols: AxisMap
    pad_op: int | None  # folded PAD operator: supplies the fill value and the padded window's quantization


@dataclass(frozen=True)
class RegionOp:
    op: int
    edges: tuple[Edge, ...]
    output: int


@dataclass(frozen=True)
class Region:
    """The operators between two cut tensors: `source` stays whole, `target` is produced patch by patch."""

    source: int
    target: int
    ops: tuple[RegionOp, ...]  # in a topological order
    folded_pads: tuple[int, ...]  # PAD operators absorbed into their consumers' edges


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


@dataclass(frozen=True)
class Apply:
    op: int  # original operator, run with VALID padding on its input windows
    inputs: tuple[tuple[int, Piece], ...]  # (input slot, window)
    result: Piece


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


def shape_hw(sg: Subgraph, tensor: int) -> tuple[int, int]:
    return sg.tensors[tensor].shape[1], sg.tensors[tensor].shape[2]


def cut_tensors(graph: Graph) -> list[int]:
    """4-D activation tensors of the main subgraph that every path from the inputs to the outputs crosses:
    once one is computed, no other tensor computed before it is read again. Ordered by how much precedes them."""
    sg = graph.main
    ancestors = _ancestors(sg)
    producers = sg.producers()
    consumers = sg.consumers()
    produced_by = {t: producers[t] for t in producers}
    cuts = []
    for t in range(len(sg.tensors)):
        tensor = sg.tensors[t]
        if not tensor.planned or len(tensor.shape) != 4 or t in sg.outputs:
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


def _only_crossing(sg: Subgraph, cut: int, before: int, produced_by: dict[int, int],
                   consumers: dict[int, list[int]]) -> bool:
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


def region_between(graph: Graph, source: int, target: int) -> Region | str:
    """The tileable region from cut `source` to cut `target`, or why there is none."""
    sg = graph.main
    producers = sg.producers()
    ancestors = _ancestors(sg)
    if target not in producers:
        return "the target tensor is a model input"
    t_op = producers[target]
    before_target = ancestors[t_op] | 1 << t_op
    before_source = 0
    if source in producers:
        before_source = ancestors[producers[source]] | 1 << producers[source]
    if before_source & ~before_target:
        return "the source does not precede the target"
    members = before_target & ~before_source
    consumers = sg.consumers()
    ops: list[RegionOp] = []
    folded: list[int] = []
    for op in sg.operators:
        if not members >> op.index & 1:
            continue
        if op.opcode == "PAD":
            reason = _foldable_pad(graph, op, consumers)
            if reason:
                return reason
            folded.append(op.index)
            continue
        region_op = _region_op(graph, op, producers, members)
        if isinstance(region_op, str):
            return region_op
        ops.append(region_op)
    if not ops or sg.operators[t_op].opcode == "PAD":
        return "the region ends in a PAD or holds no convolution"
    for region_op in ops:
        for edge in region_op.edges:
            if edge.tensor != source and not (edge.tensor in producers and members >> producers[edge.tensor] & 1):
                return f"operator {region_op.op} reads a tensor from outside the region"
    return Region(source, target, tuple(ops), tuple(folded))


def _foldable_pad(graph: Graph, op: Operator, consumers: dict[int, list[int]]) -> str:
    sg = graph.main
    paddings = graph.constant_array(op.inputs[1])
    if paddings is None or paddings.shape != (4, 2) or paddings[0].any() or paddings[3].any():
        return f"PAD operator {op.index} pads more than rows and columns"
    for c in consumers.get(op.outputs[0], []):
        consumer = sg.operators[c]
        if consumer.opcode == "PAD":
            return f"PAD operator {op.index} feeds another PAD"
        if consumer.opcode in CONV_OPCODES | POOL_OPCODES and _same_padding_used(sg, consumer):
            return f"operator {c} pads a PAD's output again"
    return ""


def _same_padding_used(sg: Subgraph, op: Operator) -> bool:
    o = op.options
    if o.padding != fb.Padding.SAME:
        return False
    rows, cols = _axis_maps(sg, op)
    in_h, in_w = shape_hw(sg, op.inputs[0])
    out_h, out_w = shape_hw(sg, op.outputs[0])
    return rows.needed((0, out_h)) != (0, in_h) or cols.needed((0, out_w)) != (0, in_w)


def _axis_maps(sg: Subgraph, op: Operator) -> tuple[AxisMap, AxisMap]:
    o = op.options
    if op.opcode in POOL_OPCODES:
        kh, kw, dh, dw = o.filterHeight, o.filterWidth, 1, 1
    else:
        weights = sg.tensors[op.inputs[1]].shape  # CONV: (O, H, W, I); DEPTHWISE: (1, H, W, C)
        kh, kw, dh, dw = weights[1], weights[2], o.dilationHFactor or 1, o.dilationWFactor or 1
    in_h, in_w = shape_hw(sg, op.inputs[0])
    out_h, out_w = shape_hw(sg, op.outputs[0])
    return (_axis_map(kh, dh, o.strideH, in_h, out_h, o.padding), _axis_map(kw, dw, o.strideW, in_w, out_w, o.padding))


def _axis_map(kernel: int, dilation: int, stride: int, in_size: int, out_size: int, padding: int) -> AxisMap:
    extent = (kernel - 1) * dilation + 1
    offset = 0
    if padding == fb.Padding.SAME:  # TFLM's ComputePaddingWithOffset: the odd pixel goes after
        offset = max((out_size - 1) * stride + extent - in_size, 0) // 2
    return AxisMap(extent, stride, offset)


def _region_op(graph: Graph, op: Operator, producers: dict[int, int], members: int) -> RegionOp | str:
    sg = graph.main
    output = op.outputs[0]
    if len(sg.tensors[output].shape) != 4 or sg.tensors[output].shape[0] != 1:
        return f"operator {op.index} ({op.opcode}) has no single-image NHWC output"
    if op.opcode in CONV_OPCODES or op.opcode in POOL_OPCODES:
        if op.opcode in POOL_OPCODES and _same_padding_used(sg, op):
            # AVERAGE_POOL's SAME padding divides by the in-image count: no explicit PAD reproduces it.
            return f"operator {op.index} ({op.opcode}) pads"
        rows, cols = _axis_maps(sg, op)
        slots = [0]
    elif op.opcode == "ADD":
        a, b = op.inputs[:2]
        shapes = {sg.tensors[t].shape for t in (a, b, output)}
        if len(shapes) != 1 or not sg.tensors[a].planned or not sg.tensors[b].planned:
            return f"ADD operator {op.index} broadcasts or adds a constant"
        rows = cols = IDENTITY
        slots = [0, 1]
    elif op.opcode in ELEMENTWISE_OPCODES:
        rows = cols = IDENTITY
        slots = [0]
    else:
        return f"operator {op.index} ({op.opcode}) cannot run on patches"
    edges = []
    for slot in slots:
        tensor = op.inputs[slot]
        pad_op = producers.get(tensor)
        if pad_op is not None and members >> pad_op & 1 and sg.operators[pad_op].opcode == "PAD":
            paddings = graph.constant_array(sg.operators[pad_op].inputs[1])
            tensor = sg.operators[pad_op].inputs[0]
            edges.append(Edge(slot, tensor, _shifted(rows, int(paddings[1][0])), _shifted(cols, int(paddings[2][0])),
                              pad_op))
        else:
            edges.append(Edge(slot, tensor, rows, cols, None))
    return RegionOp(op.index, tuple(edges), output)


def _shifted(axis: AxisMap, pad_before: int) -> AxisMap:
    """The map through a PAD: row p of the padded tensor is row p - pad_before of its input."""
    return AxisMap(axis.extent, axis.stride, axis.offset + pad_before)


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
        patches: list[Piece] = []
        for col_index, cols in enumerate(itertools.pairwise(col_cuts)):
            result, patch_macs = _patch(graph, region, rows, cols, first_patch + col_index, steps, held)
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
    target computes or reads, clipped to the tensor."""
    need = {region.target: interval}
    for rop in reversed(region.ops):
        out = need[rop.output]
        for edge in rop.edges:
            lo, hi = (edge.rows if axis == 0 else edge.cols).needed(out)
            want = (max(lo, 0), min(hi, sg.tensors[edge.tensor].shape[1 + axis]))
            old = need.get(edge.tensor, want)
            need[edge.tensor] = (min(old[0], want[0]), max(old[1], want[1]))
    return need


def _bounds(size: int, parts: int) -> list[int]:
    return [round(i * size / parts) for i in range(parts + 1)]


def _patch(graph: Graph, region: Region, rows: Interval, cols: Interval, patch: int, steps: list[Step],
           source: Piece) -> tuple[Piece, int]:
    """Append one patch's steps, reading the source from the piece `source`; return the patch of the target
    and the MACs spent on it."""
    sg = graph.main
    # Backwards: the window of every tensor this patch needs (the hull over its readers).
    need: dict[int, tuple[Interval, Interval]] = {region.target: (rows, cols)}
    for rop in reversed(region.ops):
        out = need[rop.output]
        for edge in rop.edges:
            want = _clip(sg, edge.tensor, edge.rows.needed(out[0]), edge.cols.needed(out[1]))
            old = need.get(edge.tensor)
            need[edge.tensor] = want if old is None else _hull(old, want)
    # Forwards: crop what is held to what each reader wants, pad where the window leaves the image, apply.
    held = {region.source: source}
    made: set[Piece] = set()
    macs = 0
    for rop in region.ops:
        out_rows, out_cols = need[rop.output]
        inputs = []
        for edge in rop.edges:
            want = (edge.rows.needed(out_rows), edge.cols.needed(out_cols))
            inside = _clip(sg, edge.tensor, *want)
            piece = held[edge.tensor]
            if (piece.rows, piece.cols) != inside:
                cropped = Piece(edge.tensor, *inside, edge.tensor, patch)
                if cropped not in made:
                    steps.append(Slice(piece, cropped))
                    made.add(cropped)
                piece = cropped
            if inside != want:
                quant_of = sg.operators[edge.pad_op].outputs[0] if edge.pad_op is not None else edge.tensor
                padded = Piece(edge.tensor, *want, quant_of, patch)
                if padded not in made:
                    steps.append(Pad(piece, padded, edge.pad_op))
                    made.add(padded)
                piece = padded
            inputs.append((edge.slot, piece))
        result = Piece(rop.output, out_rows, out_cols, rop.output, patch)
        steps.append(Apply(rop.op, tuple(inputs), result))
        held[rop.output] = result
        macs += op_macs(sg, sg.operators[rop.op], result.height * result.width)
    return held[region.target], macs


def _clip(sg: Subgraph, tensor: int, rows: Interval, cols: Interval) -> tuple[Interval, Interval]:
    shape = sg.tensors[tensor].shape
    return (max(rows[0], 0), min(rows[1], shape[1])), (max(cols[0], 0), min(cols[1], shape[2]))


def _hull(a: tuple[Interval, Interval], b: tuple[Interval, Interval]) -> tuple[Interval, Interval]:
    return tuple((min(x[0], y[0]), max(x[1], y[1])) for x, y in zip(a, b))  # type: ignore[return-value]


def op_macs(sg: Subgraph, op: Operator, pixels: int | None = None) -> int:
    """Multiply-accumulates of a convolution or dense layer; `pixels` overrides the output's spatial size."""
    if op.opcode not in CONV_OPCODES and op.opcode != "FULLY_CONNECTED":
        return 0
    weights = sg.tensors[op.inputs[1]].shape
    out_shape = sg.tensors[op.outputs[0]].shape
    if op.opcode == "FULLY_CONNECTED":
        return math.prod(weights) * math.prod(out_shape[:-1])
    if pixels is None:
        pixels = out_shape[1] * out_shape[2]
    per_pixel = math.prod(weights[1:]) * (weights[0] if op.opcode == "CONV_2D" else 1)
    return pixels * per_pixel


def graph_macs(graph: Graph) -> int:
    sg = graph.main
    return sum(op_macs(sg, op) for op in sg.operators)
