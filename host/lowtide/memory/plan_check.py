"""Whether a model's own OfflineMemoryAllocation is a plan TFLM can run: no two tensors live at the same time on
the same bytes. TFLM honours the plan's offsets and checks nothing, so an overlap would silently corrupt outputs.

Which tensors are live together is TFLM's lifetimes (`lifetimes`), and which may share bytes its in-place rules
(`in_place.tflm_runs_in_place`): the check is the one every plan lowtide makes passes too
(`placement.first_overlap`), run on every model lowtide takes in after the model's own checks
(`lowtide.validation`).
"""

from __future__ import annotations

from lowtide.memory.in_place import tflm_runs_in_place
from lowtide.memory.lifetimes import Buffer, buffer_lifetimes
from lowtide.memory.placement import first_overlap
from lowtide.model.ir import Graph
from lowtide.model.validate import Problem

OVERLAP_REASON = "OfflineMemoryAllocation overlaps tensors live at the same time"


def plan_problems(graph: Graph) -> list[Problem]:
    """The first overlap of `graph`'s OfflineMemoryAllocation (one is enough to refuse the plan; a broken plan can
    overlap quadratically often); none without a plan. Lifetimes need a sound model: acyclic, its tensors written
    once, in order, so the model's own checks run first. The tensors the plan leaves to TFLM (offset -1) are not
    its offsets to judge."""
    if graph.offline_plan is None:
        return []
    buffers, steps = buffer_lifetimes(graph)
    op_at = {step.scope: graph.subgraphs[step.subgraph].operators[step.op] for step in steps}

    def in_place(a: Buffer, b: Buffer) -> bool:
        """Live together only while one operator reads one and writes the other, whose kernel runs in place."""
        scope = max(a.first, b.first)
        op = op_at.get(scope)
        return (
            scope == min(a.last, b.last)
            and op is not None
            and a.subgraph == b.subgraph
            and a.tensor is not None
            and b.tensor is not None
            and tflm_runs_in_place(op, a.tensor, b.tensor)
        )

    fixed = [(b, b.offline_offset) for b in buffers if b.offline_offset is not None]
    overlap = first_overlap([b for b, _ in fixed], [offset for _, offset in fixed], in_place)
    if overlap is None:
        return []
    (a, a_offset), (b, b_offset) = (fixed[i] for i in overlap)
    return [
        Problem(
            "model",
            f"{OVERLAP_REASON}: {a.label} [{a_offset}, {a_offset + a.size}) and {b.label} "
            f"[{b_offset}, {b_offset + b.size}) are both live in scope {b.first}",
        )
    ]
