"""Whether a model's own OfflineMemoryAllocation is a plan TFLM can run: no two tensors live at the same time on
the same bytes. TFLM honours the plan's offsets and checks nothing, so an overlap would silently corrupt outputs.

Which tensors are live together is TFLM's lifetimes (`lifetimes`), and which may share bytes its in-place rules
(`in_place`): the check is this stage's, run on every model lowtide takes in after the model's own checks
(`lowtide.validation`).
"""

from __future__ import annotations

from lowtide.memory.in_place import COMPILED_ONLY
from lowtide.memory.lifetimes import Buffer, buffer_lifetimes
from lowtide.model.ir import Graph
from lowtide.model.validate import Problem

OVERLAP_REASON = "OfflineMemoryAllocation overlaps tensors live at the same time"


def plan_problems(graph: Graph) -> list[Problem]:
    """The first overlap of `graph`'s OfflineMemoryAllocation (one is enough to refuse the plan; a broken plan can
    overlap quadratically often); none without a plan. Lifetimes need a sound model: acyclic, its tensors written
    once, in order, so the model's own checks run first."""
    if graph.offline_plan is None:
        return []
    buffers, steps = buffer_lifetimes(graph)
    op_at = {step.scope: graph.subgraphs[step.subgraph].operators[step.op] for step in steps}

    def in_place(a: Buffer, b: Buffer) -> bool:
        """Live together only while one operator reads one and writes the other: an in-place plan (a SPLIT_V
        output inside its input, a CONCATENATION input inside its output), whose kernel lowtide checked. A
        model's plan runs on TFLM, whose depthwise and element-wise kernels are not safe in place (only lowtide's
        compiled runtime is: lowtide.memory.in_place)."""
        scope = max(a.first, b.first)
        op = op_at.get(scope)
        if scope != min(a.last, b.last) or op is None or a.subgraph != b.subgraph or op.opcode in COMPILED_ONLY:
            return False
        return bool({a.tensor, b.tensor} & set(op.inputs) and {a.tensor, b.tensor} & set(op.outputs))

    fixed = sorted(((b, b.offline_offset) for b in buffers if b.offline_offset is not None), key=lambda p: p[0].first)
    for k, (a, a_offset) in enumerate(fixed):
        for b, b_offset in fixed[k + 1:]:
            if b.first > a.last:
                break
            if a_offset < b_offset + b.size and b_offset < a_offset + a.size and not in_place(a, b):
                return [Problem("model", f"{OVERLAP_REASON}: {a.label} [{a_offset}, {a_offset + a.size}) and {b.label} "
                                         f"[{b_offset}, {b_offset + b.size}) are both live in scope {b.first}")]
    return []
