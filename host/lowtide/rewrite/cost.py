"""The rewrite search's cost model, figures counted from a `TilingPlan` without building the graph it makes: the
live bytes of the tiled part in its emitted order, the floor under every grid of a region, and TFLM's persistent
tail once the plan is emitted; and the exact figure a built candidate is weighed by, its placed head.

Each figure is a bound the search prunes by: no placement goes below a live peak, no grid of a region below its
floor, and the tail floor is at most the emitted graph's tail (`lowtide.memory.tail.persistent_tail`)."""

from __future__ import annotations

from lowtide.budget import WorkBudget
from lowtide.memory import align_up, placed_plan
from lowtide.memory.in_place import aligned_blocks
from lowtide.memory.lifetimes import ALIGNMENT
from lowtide.memory.tail import EVAL_TENSOR_BYTES, opcode_tail_bytes, operator_tail_bytes
from lowtide.model.ir import Graph, Subgraph
from lowtide.model.schema import ELEMENT_BYTES
from lowtide.rewrite.regions import Apply, Concat, Pad, Piece, Region, Slice, Split, TilingPlan, whole_piece

# The operator each kind of step (but Apply and Pad) writes (`lowtide.rewrite.emit`).
_STEP_OPCODES = {Slice: "STRIDED_SLICE", Concat: "CONCATENATION", Split: "SPLIT_V"}


def piece_bytes(sg: Subgraph, piece: Piece) -> int:
    t = sg.tensors[piece.tensor]
    return align_up(piece.height * piece.width * t.shape[3] * ELEMENT_BYTES[t.dtype])


def region_floors(
    sg: Subgraph, regions: list[Region], outside_live: dict[int, int], assembled: bool = False
) -> list[tuple[int, int, Region]]:
    """(floor, outside peak, region): no grid of a region plans below its floor. Steps outside the region keep
    their live bytes; the source is whole until the first patch reads it (cut into strips or not); the final
    CONCATENATION holds the target twice, or once where its inputs sit inside it (`assembled`)."""
    floors = []
    for region in regions:
        region_ops = region.all_ops
        outside = max((b for op, b in outside_live.items() if op not in region_ops), default=0)
        source = sum(piece_bytes(sg, whole_piece(sg, t)) for t in region.held_whole)
        target = piece_bytes(sg, whole_piece(sg, region.target))
        floors.append((max(outside, (1 if assembled else 2) * target, source), outside, region))
    return floors


def _step_pieces(plan: TilingPlan) -> tuple[list[tuple[Piece, ...]], list[tuple[Piece, ...]]]:
    """What each step of `plan` reads and writes, in order."""
    reads: list[tuple[Piece, ...]] = []
    writes: list[tuple[Piece, ...]] = []
    for step in plan.steps:
        if isinstance(step, (Slice, Pad, Split)):
            reads.append((step.source,))
        elif isinstance(step, Apply):
            reads.append(tuple(p for _, p in step.inputs))
        elif isinstance(step, Concat):
            reads.append(step.sources)
        writes.append(step.results if isinstance(step, (Split, Apply)) else (step.result,))
    return reads, writes


def _freed_after(
    sg: Subgraph, plan: TilingPlan, reads: list[tuple[Piece, ...]], writes: list[tuple[Piece, ...]]
) -> dict[int, int]:
    """Bytes freed after each step: a piece dies at its last reader, but the target and a tensor held whole that
    is read after the tiled part outlive it."""
    last: dict[Piece, int] = {}
    for i, pieces in enumerate(reads):
        for p in pieces:
            last[p] = i
    steps = len(writes)
    last[writes[-1][0]] = steps  # the target outlives the tiled part
    region_ops = plan.region.all_ops
    for t in plan.region.held_whole:  # and so does a tensor held whole that is read after it
        if any(c not in region_ops for c in sg.consumers().get(t, [])):
            last[whole_piece(sg, t)] = steps
    freed_after: dict[int, int] = {}
    for p, i in last.items():
        freed_after[i] = freed_after.get(i, 0) + piece_bytes(sg, p)
    return freed_after


def tiled_live_peak(sg: Subgraph, plan: TilingPlan, assembled: bool = False) -> int:
    """Live bytes of the tiled part in its emitted order, under TFLM's lifetime rules (an operator's inputs and
    outputs are live together; a tensor lives from its producer to its last reader), except that the strips
    of a `Split` occupy the source's own bytes, and with `assembled` the inputs of a `Concat` that may sit inside
    its result its bytes (`in_place.concatenation_inputs`). The source and the skip tensors are whole at the
    start."""
    reads, writes = _step_pieces(plan)
    freed_after = _freed_after(sg, plan, reads, writes)
    live = sum(piece_bytes(sg, whole_piece(sg, t)) for t in plan.region.held_whole)
    peak = live
    strips = {p for step in plan.steps if isinstance(step, Split) for p in step.results}
    for i, (step, results) in enumerate(zip(plan.steps, writes)):
        made = sum(piece_bytes(sg, p) for p in results)
        inside = _inside_result(sg, step, strips) if assembled and isinstance(step, Concat) else 0
        peak = max(peak, live if isinstance(step, Split) else live + made - inside)
        live += made - freed_after.get(i, 0)
    return peak


def _inside_result(sg: Subgraph, step: Concat, strips: set[Piece]) -> int:
    """Bytes of `step`'s sources that may sit inside its result, each one contiguous block of it at an aligned
    offset (`in_place.concatenation_inputs`); a strip of a `Split` already sits inside the source."""
    if step.axis == 2 and step.result.height != 1:
        return 0  # the columns' blocks interleave row by row
    t = sg.tensors[step.result.tensor]
    sizes = [p.height * p.width * t.shape[3] * ELEMENT_BYTES[t.dtype] for p in step.sources]
    return sum(
        piece_bytes(sg, p)
        for p, offset in zip(step.sources, aligned_blocks(sizes, ALIGNMENT))
        if offset is not None and p not in strips
    )


def tail_floor(graph: Graph, plan: TilingPlan, tail_bytes: int) -> int:
    """TFLM's persistent tail of `graph` (`tail_bytes`) once `plan` is emitted, counted from the plan without
    building the graph: the region's operators and the tensors only they wrote go, each step's operator and the
    windows it writes come. The int32 constants of slices, pads and splits (shared by equal values) are left
    out, so it is at most the emitted graph's tail (`lowtide.memory.tail.persistent_tail`, which a built
    candidate is weighed by) but for alignment."""
    sg = graph.main
    region = plan.region
    removed = [rop.op for rop in region.ops] + list(region.folded_pads)
    kept = {*region.held_whole, region.target}
    dropped = {t for op in removed for t in sg.operators[op].outputs} - kept
    costs = {op: operator_tail_bytes(graph, 0, op) for op in {*removed, *(rop.op for rop in region.ops)}}
    windows: set[Piece] = set()
    added = 0
    for step in plan.steps:
        if isinstance(step, Apply):
            added += costs[step.op]
        elif isinstance(step, Pad):
            added += opcode_tail_bytes("PADV2" if step.lowest else "PAD")
        else:
            added += opcode_tail_bytes(_STEP_OPCODES[type(step)])
        windows.update(step.results if isinstance(step, (Split, Apply)) else (step.result,))
    last = plan.steps[-1]
    assert not isinstance(last, Split)  # a plan ends in the step that writes its target
    existing = {whole_piece(sg, t) for t in region.held_whole} | {last.result}  # as `emit_tiled` has them
    new_tensors = len(windows - existing)
    return (
        tail_bytes
        - sum(costs[op] for op in removed)
        - EVAL_TENSOR_BYTES * len(dropped)
        + added
        + EVAL_TENSOR_BYTES * new_tensors
    )


def placed_head(graph: Graph, work: WorkBudget) -> int:
    """The exact figure a built candidate is weighed by: the head lowtide's placement of its stored order reaches,
    in-place outputs inside their inputs and CONCATENATION inputs inside their output where that places lower
    (`placed_plan`, the offline plan `lowtide optimize` writes)."""
    return placed_plan(graph, None, work).placement.head_bytes
