"""Stage 2: what TFLM allocates. Lifetimes (`lifetimes`), kernel scratch requests (`scratch`), a replica of TFLM's
greedy planner (`greedy`), the live-memory lower bound of an operator order, and lowtide's own plan of an order
for TFLM (`placed_plan`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from lowtide.budget import WorkBudget
from lowtide.memory.greedy import arena_head, greedy_offsets
from lowtide.memory.in_place import Executor, concatenation_inputs, in_place_outputs
from lowtide.memory.lifetimes import ALIGNMENT, Buffer, Order, Step, align_up, buffer_lifetimes, stored_order
from lowtide.memory.placement import Placement, place
from lowtide.model.ir import Graph


@dataclass(frozen=True)
class MemoryPlan:
    """TFLM's plan of the arena head for one operator order."""

    buffers: tuple[Buffer, ...]
    steps: tuple[Step, ...]
    offsets: tuple[int, ...]  # offset of each buffer, as TFLM's greedy planner places it
    head_bytes: int  # predicted TFLM arena head
    live_peak_bytes: int  # lower bound: the most aligned bytes live at any one step
    peak_step: int | None  # index into steps of the first step at the live peak


def tflm_plan(graph: Graph, order: Order | None = None) -> MemoryPlan:
    buffers, steps = buffer_lifetimes(graph, order)
    offsets = greedy_offsets(buffers)
    peak = max(steps, key=lambda s: s.live_bytes, default=None)
    return MemoryPlan(
        buffers=tuple(buffers),
        steps=tuple(steps),
        offsets=tuple(offsets),
        head_bytes=arena_head(buffers, offsets),
        live_peak_bytes=peak.live_bytes if peak else 0,
        peak_step=steps.index(peak) if peak else None,
    )


def buffers_to_plan(
    graph: Graph, order: Order | None = None, executor: Executor = Executor.TFLM, blocks: bool = False
) -> list[Buffer]:
    """The buffers of `order` as a new plan for `executor` places them: any plan the model already carries
    dropped, and outputs that may share a dying input's bytes under `executor`'s kernels marked so (the plan can
    put them there); with `blocks`, what only the order lets sit inside another tensor too (TFLM's kernels only:
    CONCATENATION inputs inside their output, `buffer_lifetimes`). Plans written into a model
    (OfflineMemoryAllocation) are TFLM's."""
    return [
        dataclasses.replace(b, offline_offset=None)
        for b in buffer_lifetimes(graph, order, in_place=True, executor=executor, blocks=blocks)[0]
    ]


@dataclass(frozen=True)
class PlacedPlan:
    """lowtide's plan of one operator order for TFLM: its buffers (`buffers_to_plan`) and their placement."""

    buffers: tuple[Buffer, ...]
    placement: Placement
    blocks: bool  # CONCATENATION inputs placed inside their output and the like (`buffers_to_plan`'s option)
    plain_head_bytes: int  # the head placed without that option


def placed_plan(graph: Graph, order: Order | None, work: WorkBudget) -> PlacedPlan:
    """The buffers of `order` placed within `work`, and where the order lets more tensors sit inside another
    (`buffers_to_plan`'s `blocks`: CONCATENATION inputs inside their output, strips inside a source read before),
    placed that way too, within as many units again; the lower head is kept. Holding an input inside its output
    saves its bytes at the concatenation but ties it to one offset from its producer on, which can place worse;
    a tie keeps the plan without, so a model where it does not help gets the plan it had before."""
    buffers = buffers_to_plan(graph, order)
    units = work.left
    plain = place(buffers, work)
    assembled = buffers_to_plan(graph, order, blocks=True)
    if assembled != buffers:
        placement = place(assembled, WorkBudget.of(units, f"{work.where}: blocks in place", work.clock))
        if placement.head_bytes < plain.head_bytes:
            return PlacedPlan(tuple(assembled), placement, True, plain.head_bytes)
    return PlacedPlan(tuple(buffers), plain, False, plain.head_bytes)


def footprint_bound_bytes(graph: Graph) -> int:
    """Most aligned bytes one operator's own activations need while it runs, with every output that may sit
    inside its input there and every CONCATENATION input that may sit inside its output there, whatever the
    order (`buffers_to_plan`'s `blocks`): no order's plan for TFLM, with blocks in place or not, has a smaller
    head. Weaker than the schedule's bound, which holds only for plans without blocks in place."""
    inside_input = in_place_outputs(graph, ALIGNMENT, read_before=True)
    inside_output = concatenation_inputs(graph, ALIGNMENT)
    most = 0
    for sg in graph.subgraphs:
        for op in sg.operators:
            own = {t for t in (*op.inputs, *op.outputs) if t >= 0 and sg.tensors[t].planned}
            if sg.index == 0:
                own -= {t for t in op.outputs if t in inside_input and inside_input[t].op == op.index}
                own -= {t for t in op.inputs if t in inside_output and inside_output[t].op == op.index}
            most = max(most, sum(align_up(sg.tensors[t].nbytes) for t in own))
    return most


def live_peak_bytes(graph: Graph, order: Order | None = None, in_place: bool = False) -> int:
    """Most aligned bytes live while one operator runs: no placement of `order` beats it."""
    return max((step.live_bytes for step in buffer_lifetimes(graph, order, in_place)[1]), default=0)


__all__ = [
    "ALIGNMENT",
    "Buffer",
    "Executor",
    "MemoryPlan",
    "Order",
    "PlacedPlan",
    "Step",
    "align_up",
    "arena_head",
    "buffer_lifetimes",
    "buffers_to_plan",
    "footprint_bound_bytes",
    "greedy_offsets",
    "live_peak_bytes",
    "placed_plan",
    "stored_order",
    "tflm_plan",
]
