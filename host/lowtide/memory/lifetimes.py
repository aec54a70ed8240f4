"""TFLM's buffer lifetimes (micro_allocation_info.cc, MarkAllocationLifetimes), for any operator order.

Scopes are global across subgraphs: subgraph 0's inputs are created at scope 0, operator k of a subgraph run
opens a new scope, and a control-flow operator's called subgraphs get scopes nested inside its own. Intervals
are inclusive, so an operator's inputs and outputs are live together and never share memory.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from lowtide.memory.in_place import Executor, InPlace, concatenation_inputs, in_place_outputs
from lowtide.memory.scratch import scratch_sizes
from lowtide.model.ir import Graph

ALIGNMENT = 16  # MicroArenaBufferAlignment()


def align_up(n: int, alignment: int = ALIGNMENT) -> int:
    return (n + alignment - 1) // alignment * alignment


@dataclass(frozen=True)
class Buffer:
    """One buffer TFLM's memory planner places in the arena head."""

    subgraph: int
    tensor: int | None  # tensor index in its subgraph, or None for a kernel scratch buffer
    op: int | None  # for scratch buffers: the operator that requested it
    size: int  # bytes, rounded up to 16 as TFLM does
    first: int  # first scope in which it is live
    last: int  # last scope in which it is live (inclusive)
    offline_offset: int | None = None  # fixed offset from an OfflineMemoryAllocation plan
    # An output sharing its input's bytes (`in_place`): (that input's tensor index, offset inside it). Its
    # lifetime starts after its producer's scope, in which its bytes are still counted as the input's. Or a
    # CONCATENATION input inside its output (`in_place.concatenation_inputs`): (the output, the input's block's
    # offset); its lifetime ends before the concatenation's scope, in which its bytes are counted as the output's.
    shares: tuple[int, int] | None = None

    @property
    def label(self) -> str:
        if self.tensor is None:
            return f"scratch(op {self.op})"
        return f"t{self.tensor}" if self.subgraph == 0 else f"sg{self.subgraph}:t{self.tensor}"


@dataclass(frozen=True)
class Step:
    """What is live while one operator runs."""

    subgraph: int
    op: int  # operator index in the subgraph's stored order
    opcode: str
    scope: int
    buffers: tuple[int, ...]  # indices into the buffer list
    live_bytes: int  # aligned bytes of those buffers


Order = dict[int, list[int]]  # subgraph index -> operator indices in execution order


def stored_order(graph: Graph) -> Order:
    return {sg.index: [op.index for op in sg.operators] for sg in graph.subgraphs}


def buffer_lifetimes(
    graph: Graph,
    order: Order | None = None,
    in_place: bool = False,
    executor: Executor = Executor.TFLM,
    blocks: bool = False,
) -> tuple[list[Buffer], list[Step]]:
    """Buffers in the order TFLM adds them to its planner (tensors of every subgraph, then scratch buffers),
    and one Step per operator execution in scope order. With `in_place`, outputs that may share their input's
    bytes when `executor`'s kernels run the plan (`lowtide.memory.in_place`) say so in `Buffer.shares`: what an
    offline plan can do, never TFLM's own planner. Where the model's own offline plan already puts such an output inside its input, it is marked
    whatever `in_place` says: those bytes are held once. With `in_place` and `blocks` too, so do the blocks of
    another tensor that only the order allows, under TFLM's kernels: CONCATENATION inputs inside their output
    (`in_place.concatenation_inputs`), and in-place outputs whose input other operators read before
    (`in_place_outputs`' `read_before`)."""
    if blocks and executor is not Executor.TFLM:
        raise ValueError("blocks of another tensor are planned for TFLM's kernels only")
    order = order or stored_order(graph)
    first: dict[tuple[int, int], int] = {}
    last: dict[tuple[int, int], int] = {}
    scratch: list[tuple[int, int, int, int]] = []  # (subgraph, op, size, scope)
    op_scopes: list[tuple[int, int, int]] = []  # (subgraph, op, scope)
    scope = 0

    def created(key: tuple[int, int], s: int) -> None:
        first.setdefault(key, s)

    def used(key: tuple[int, int], s: int) -> None:
        last[key] = max(last.get(key, s), s)

    # Recursion follows subgraph nesting (a handful of levels), never the operator count.
    def mark(sg_index: int) -> None:
        nonlocal scope
        sg = graph.subgraphs[sg_index]
        for t in sg.inputs:
            created((sg_index, t), scope)
            used((sg_index, t), scope)
        for op_index in order[sg_index]:
            op = sg.operators[op_index]
            scope += 1
            for t in op.outputs:
                created((sg_index, t), scope)
            op_scope = scope
            op_scopes.append((sg_index, op_index, op_scope))
            for size in scratch_sizes(graph, sg_index, op_index):
                scratch.append((sg_index, op_index, size, op_scope))
            for called in op.called_subgraphs:
                scope += 1
                mark(called)
            for t in op.inputs:
                if t >= 0:
                    used((sg_index, t), scope)
            for t in op.outputs:
                used((sg_index, t), op_scope)
        for t in sg.outputs:
            created((sg_index, t), scope)
            used((sg_index, t), scope)

    mark(0)

    plan = graph.offline_plan
    shared = in_place_outputs(graph, ALIGNMENT, executor, in_place and blocks) if in_place or plan is not None else {}

    def planned_offset(sg_index: int, tensor: int) -> int | None:
        # TFLM ignores the plan's entries for tensors it does not plan (constants, variables, empty tensors).
        if plan is None or not graph.subgraphs[sg_index].tensors[tensor].planned:
            return None
        return plan.offset(graph.tensor_counts, sg_index, tensor)

    def in_plan(output: int, share: InPlace) -> bool:
        inner, outer = planned_offset(0, output), planned_offset(0, share.input)
        return inner is not None and outer is not None and inner == outer + share.offset

    if not in_place:  # only what the model's plan really shares
        shared = {t: share for t, share in shared.items() if in_plan(t, share)}
    inside = concatenation_inputs(graph, ALIGNMENT) if in_place and blocks else {}
    buffers: list[Buffer] = []
    for sg in graph.subgraphs:
        for t in sg.tensors:
            key = (sg.index, t.index)
            if not t.planned or key not in first:
                continue
            buffer = Buffer(
                sg.index, t.index, None, align_up(t.nbytes), first[key], last[key], planned_offset(sg.index, t.index)
            )
            share = shared.get(t.index) if sg.index == 0 else None
            assembled = inside.get(t.index) if sg.index == 0 else None
            if share is not None and last.get((0, share.input)) == first[key] < last[key]:
                buffer = dataclasses.replace(buffer, first=first[key] + 1, shares=(share.input, share.offset))
            elif assembled is not None and first[key] < last[key] == first.get((0, assembled.output)):
                buffer = dataclasses.replace(buffer, last=last[key] - 1, shares=(assembled.output, assembled.offset))
            buffers.append(buffer)
    for sg_index, op_index, size, s in scratch:
        buffers.append(Buffer(sg_index, None, op_index, align_up(size), s, s))

    steps = []
    for sg_index, op_index, s in op_scopes:
        live = tuple(i for i, b in enumerate(buffers) if b.first <= s <= b.last)
        steps.append(
            Step(
                sg_index,
                op_index,
                graph.subgraphs[sg_index].operators[op_index].opcode,
                s,
                live,
                sum(buffers[i].size for i in live),
            )
        )
    return buffers, steps
