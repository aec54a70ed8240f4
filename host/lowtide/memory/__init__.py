"""Stage 2: what TFLM allocates. Lifetimes (`lifetimes`), kernel scratch requests (`scratch`), a replica of TFLM's
greedy planner (`greedy`), and the live-memory lower bound of an operator order."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from lowtide.memory.greedy import arena_head, greedy_offsets
from lowtide.memory.in_place import Executor
from lowtide.memory.lifetimes import ALIGNMENT, Buffer, Order, Step, align_up, buffer_lifetimes, stored_order
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


def buffers_to_plan(graph: Graph, order: Order | None = None, executor: Executor = Executor.TFLM) -> list[Buffer]:
    """The buffers of `order` as a new plan for `executor` places them: any plan the model already carries
    dropped, and outputs that may share a dying input's bytes under `executor`'s kernels marked so (the plan can
    put them there). Plans written into a model (OfflineMemoryAllocation) are TFLM's."""
    return [
        dataclasses.replace(b, offline_offset=None)
        for b in buffer_lifetimes(graph, order, in_place=True, executor=executor)[0]
    ]


def live_peak_bytes(graph: Graph, order: Order | None = None, in_place: bool = False) -> int:
    """Most aligned bytes live while one operator runs: no placement of `order` beats it."""
    return max((step.live_bytes for step in buffer_lifetimes(graph, order, in_place)[1]), default=0)


__all__ = [
    "ALIGNMENT",
    "Buffer",
    "Executor",
    "MemoryPlan",
    "Order",
    "Step",
    "align_up",
    "arena_head",
    "buffer_lifetimes",
    "buffers_to_plan",
    "greedy_offsets",
    "live_peak_bytes",
    "stored_order",
    "tflm_plan",
]
