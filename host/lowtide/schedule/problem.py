"""One subgraph as a scheduling problem: which operator orders are valid, and what each step costs.

Operators are bits of a Python int. A state is the set of operators already run; the bytes live between two
steps depend on that set only, not on the order that produced it, which is what makes search over sets exact.

Costs follow TFLM's lifetime rules (`lowtide.memory.lifetimes`) restricted to one subgraph: while an operator
runs, every planned tensor created earlier and still needed (by an operator not yet run, by this operator, or
as a subgraph output) is live, together with this operator's outputs and its scratch buffers.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from lowtide.errors import LowtideError
from lowtide.memory.in_place import in_place_outputs
from lowtide.memory.lifetimes import ALIGNMENT, Order, align_up
from lowtide.memory.scratch import scratch_sizes
from lowtide.model.ir import Graph, Subgraph, TensorKind


@dataclass(frozen=True)
class SubgraphProblem:
    subgraph: int
    op_count: int
    predecessors: tuple[int, ...]  # per operator: bitmask of the operators it is directly ordered after
    ancestors: tuple[int, ...]  # per operator: bitmask of every operator that must run before it
    descendants: tuple[int, ...]  # per operator: bitmask of every operator that must run after it
    tensor_bytes: tuple[int, ...]  # per planned tensor (local numbering): aligned size
    tensor_consumers: tuple[int, ...]  # per planned tensor: bitmask of operators that read it
    tensor_kept: tuple[bool, ...]  # per planned tensor: a subgraph output, live until the end once created
    tensor_producer: tuple[int | None, ...]  # per planned tensor: writing operator, None for a subgraph input
    op_reads: tuple[tuple[int, ...], ...]  # per operator: planned tensors it reads (distinct)
    op_creates: tuple[tuple[int, ...], ...]  # per operator: planned tensors it writes (distinct)
    op_scratch_bytes: tuple[int, ...]  # per operator: aligned scratch buffers it requests
    op_shared_bytes: tuple[int, ...]  # per operator: bytes of its outputs placed inside an input that dies there

    @property
    def all_ops(self) -> int:
        return (1 << self.op_count) - 1

    def live_bytes(self, done: int) -> int:
        """Bytes live between steps once the operators in `done` have run."""
        total = 0
        for t, size in enumerate(self.tensor_bytes):
            producer = self.tensor_producer[t]
            if producer is not None and not done >> producer & 1:
                continue
            if self.tensor_kept[t] or self.tensor_consumers[t] & ~done:
                total += size
        return total

    def step(self, done: int, live: int, op: int) -> tuple[int, int]:
        """Run `op` after the operators in `done` (whose live bytes are `live`): the bytes live while it runs,
        and the bytes live after it."""
        created = 0
        freed = 0
        after = done | 1 << op
        for t in self.op_creates[op]:
            size = self.tensor_bytes[t]
            created += size
            if not self.tensor_kept[t] and not self.tensor_consumers[t]:
                freed += size  # read by nobody: live during its own step only
        for t in self.op_reads[op]:
            if not self.tensor_kept[t] and not self.tensor_consumers[t] & ~after:
                freed += self.tensor_bytes[t]
        during = live + created - self.op_shared_bytes[op] + self.op_scratch_bytes[op]
        return during, live + created - freed

    def step_lower_bound(self, op: int) -> int:
        """Bytes live while `op` runs in every valid order: its own tensors and scratch, and every tensor made
        before it (by an ancestor, or a subgraph input) that is still needed after it."""
        before = self.ancestors[op]
        from_here = self.descendants[op] | 1 << op
        total = self.op_scratch_bytes[op] - self.op_shared_bytes[op]
        for t, size in enumerate(self.tensor_bytes):
            producer = self.tensor_producer[t]
            made_before = producer is None or before >> producer & 1
            needed_from_here = self.tensor_kept[t] or self.tensor_consumers[t] & from_here
            if producer == op or (made_before and needed_from_here):
                total += size
        return total

    def peak(self, order: list[int], done: int = 0) -> int:
        """Highest step of `order` run after the operators in `done`."""
        live = self.live_bytes(done)
        peak = 0
        for op in order:
            during, live = self.step(done, live, op)
            done |= 1 << op
            peak = max(peak, during)
        return peak


def subgraph_problem(graph: Graph, sg_index: int, in_place: bool = False) -> SubgraphProblem:
    """With `in_place`, outputs that may share a dying input's bytes (`lowtide.memory.in_place`) cost nothing
    during their producer's step, as an offline plan can place them."""
    sg = graph.subgraphs[sg_index]
    n = len(sg.operators)
    predecessors = _order_constraints(graph, sg)
    ancestors = _closure(predecessors)
    descendants = [0] * n
    for op, mask in enumerate(ancestors):
        for a in bits(mask):
            descendants[a] |= 1 << op

    planned_ids: dict[int, int] = {}  # tensor index -> local id
    producer: list[int | None] = []

    def planned_id(t: int, made_by: int | None) -> int:
        if t not in planned_ids:
            planned_ids[t] = len(producer)
            producer.append(made_by)
        return planned_ids[t]

    # Same creation rule as lifetimes.py: a tensor is planned once it is a subgraph input or an operator output.
    for t in sg.inputs:
        if sg.tensors[t].planned:
            planned_id(t, None)
    op_creates: list[tuple[int, ...]] = []
    for operator in sg.operators:
        inputs = {t for t in operator.inputs if t >= 0}
        creates = []
        for t in dict.fromkeys(operator.outputs):
            if sg.tensors[t].planned and t not in planned_ids and t not in inputs:
                creates.append(planned_id(t, operator.index))
        op_creates.append(tuple(creates))
    consumers = [0] * len(producer)
    op_reads: list[tuple[int, ...]] = []
    for operator in sg.operators:
        reads = tuple(planned_ids[t] for t in dict.fromkeys(operator.inputs) if t in planned_ids)
        for t in reads:
            consumers[t] |= 1 << operator.index
        op_reads.append(reads)
    kept = [False] * len(producer)
    for t in sg.outputs:
        if t in planned_ids:
            kept[planned_ids[t]] = True
    sizes = [0] * len(producer)
    for t, local in planned_ids.items():
        sizes[local] = align_up(sg.tensors[t].nbytes)
    shared_bytes = [0] * n
    if in_place and sg_index == 0:
        for output, share in in_place_outputs(graph, ALIGNMENT).items():
            if output in planned_ids and planned_ids[output] in op_creates[share.op]:
                shared_bytes[share.op] += sizes[planned_ids[output]]
    return SubgraphProblem(
        subgraph=sg_index,
        op_count=n,
        predecessors=tuple(predecessors),
        ancestors=tuple(ancestors),
        descendants=tuple(descendants),
        tensor_bytes=tuple(sizes),
        tensor_consumers=tuple(consumers),
        tensor_kept=tuple(kept),
        tensor_producer=tuple(producer),
        op_reads=tuple(op_reads),
        op_creates=tuple(op_creates),
        op_scratch_bytes=tuple(sum(align_up(s) for s in scratch_sizes(graph, sg_index, i)) for i in range(n)),
        op_shared_bytes=tuple(shared_bytes),
    )


def _order_constraints(graph: Graph, sg: Subgraph) -> list[int]:
    """Per operator, the operators that must run before it. Every constraint is oriented as the operators are
    stored, so the stored order is always valid:
    - an operator that writes a tensor is ordered against every other operator that reads or writes it
      (a variable tensor counts as written by every operator that touches it: kernels update state in place);
    - operators with side effects, and control-flow operators whose called subgraphs have any, keep their
      stored relative order."""
    n = len(sg.operators)
    predecessors = [0] * n

    def constrain(a: int, b: int) -> None:
        if a != b:
            first, then = min(a, b), max(a, b)
            predecessors[then] |= 1 << first

    writers: dict[int, set[int]] = {}
    touchers: dict[int, set[int]] = {}
    for op in sg.operators:
        for t in op.outputs:
            writers.setdefault(t, set()).add(op.index)
        for t in (*op.inputs, *op.outputs):
            if t < 0:
                continue
            touchers.setdefault(t, set()).add(op.index)
            if sg.tensors[t].kind is TensorKind.VARIABLE:
                writers.setdefault(t, set()).add(op.index)
    for t, ops in writers.items():
        for w in ops:
            for other in touchers[t]:
                constrain(w, other)
    effectful = _subgraphs_with_side_effects(graph)
    ordered = [
        op.index
        for op in sg.operators
        if op.has_side_effects or any(called in effectful for called in op.called_subgraphs)
    ]
    for a, b in itertools.pairwise(ordered):
        constrain(a, b)
    return predecessors


def _subgraphs_with_side_effects(graph: Graph) -> set[int]:
    """Subgraphs that run an operator with side effects, directly or through the subgraphs they call."""
    effectful = {sg.index for sg in graph.subgraphs if any(op.has_side_effects for op in sg.operators)}
    changed = True
    while changed:
        changed = False
        for sg in graph.subgraphs:
            if sg.index not in effectful and any(
                called in effectful for op in sg.operators for called in op.called_subgraphs
            ):
                effectful.add(sg.index)
                changed = True
    return effectful


def _closure(predecessors: list[int]) -> list[int]:
    """Transitive predecessors. Every constraint points from a lower to a higher stored index, so one pass in
    stored order sees each operator's predecessors finished."""
    ancestors = [0] * len(predecessors)
    for op, direct in enumerate(predecessors):
        mask = direct
        for p in bits(direct):
            mask |= ancestors[p]
        ancestors[op] = mask
    return ancestors


def bits(mask: int) -> Iterator[int]:
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def check_order(graph: Graph, order: Order) -> None:
    """Raise LowtideError unless `order` lists every operator of every subgraph once, in a valid order."""
    if set(order) != {sg.index for sg in graph.subgraphs}:
        raise LowtideError(f"order names subgraphs {sorted(order)}, the model has {len(graph.subgraphs)}")
    for sg in graph.subgraphs:
        ops = order[sg.index]
        if sorted(ops) != list(range(len(sg.operators))):
            raise LowtideError(
                f"order of subgraph {sg.index} is not a permutation of its {len(sg.operators)} operators"
            )
        predecessors = _order_constraints(graph, sg)
        done = 0
        for op in ops:
            if predecessors[op] & ~done:
                missing = next(bits(predecessors[op] & ~done))
                raise LowtideError(
                    f"subgraph {sg.index}: operator {op} ({sg.operators[op].opcode}) is ordered before operator "
                    f"{missing} ({sg.operators[missing].opcode}), which must run first"
                )
            done |= 1 << op
