"""Blocks the exact search cannot finish within its budget: a tighter lower bound, and better orders found on the way.

Lower bound, per operator, by minimum cut. While an operator runs, the operators already run form a set closed
under "must run before" that holds all its ancestors and none of its descendants. Given that set, the bytes live
are fixed: every tensor made inside it (or before the block) with a reader outside it, or kept to the end, plus
the operator's own outputs and scratch. Minimising that over all such sets is a minimum s-t cut (a tensor costs
its size when its producer is on the source side and some reader is not), so the most expensive operator's
cut is a bound no order can beat, often far above the per-operator bound the exact search starts from. Two
operators whose cheapest sets each hold the other cannot both have them: taking both cuts again under each of
the two orders of the pair, the cheaper order's cost is a bound too (`ordered_pair_bound`).

Orders, from the best heuristic order on:
- beam searches ever wider, every peak below the bound counted as the bound (fewer bytes live decide there);
- divide and conquer at those cuts: the bottleneck operator's cheapest "run before" set is scheduled first and
  the rest after it, each part split again until small enough for the exact search (SERENITY's divide and
  conquer, Ahn et al. 2020, cutting at minimum cuts rather than only at single operators);
- probes under a byte budget (the exact search for an order within the budget, deepest state first, each state
  dropped once its cuts exceed the budget), the budget moved by bisection between the bound and the best peak:
  a budget a probe meets becomes the new best, one it exhausts raises the bound, one it cannot settle within its budget
  is loosened (SERENITY's adaptive soft budgeting).
The probes use all the work left: each is the exact search from the budget with the cuts of each search state as
its lookahead (`CutLookahead`: the cut bound again, over the "run before" sets that hold what the state has run),
which drops most states before they are expanded.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from ortools.graph.python import max_flow

from lowtide.budget import WorkBudget
from lowtide.memory.lifetimes import ALIGNMENT
from lowtide.schedule.problem import SubgraphProblem, bits
from lowtide.schedule.search import (
    BEAM_WIDTH,
    Block,
    BlockResult,
    Readiness,
    beam_order,
    heuristic_order,
    solve_block,
)

# Shares of the work left (`lowtide.budget`) that each phase of `solve_hard_block` may use, in turn. The first exact
# search gets enough to prove every shared model's blocks optimal; the budget probes get whatever is left.
EXACT_SHARE = 0.05
PAIR_SHARE = 0.15
BEAM_SHARE = 0.2
DIVIDE_SHARE = 0.15
# Operators with the highest cuts whose conflicting pairs `ordered_pair_bound` tries.
PAIR_BOTTLENECKS = 12
# Parts of at most this many operators are searched exactly (within LEAF_UNITS) instead of split again.
LEAF_OPS = 30
LEAF_UNITS = 125_000
# The first budget probe may use this share of the work left (enough for the hardest RandWire block's first
# budget); each later round doubles it.
PROBE_SHARE = 0.9
# Work units (operator steps, `search.POP_UNITS`) one minimum cut costs: one max-flow on the block's network.
CUT_UNITS = 30


@dataclass(frozen=True)
class StepCut:
    op: int
    bound: int  # bytes live while `op` runs, in every valid order of the block
    before: int  # bitmask of the block's operators: a "run before `op`" set that attains `bound`


class BlockCuts:
    """The minimum-cut network of one block, built once. Nodes: the source (operators run before the one that
    runs), the sink (the others), each operator, each tensor; a query only switches which operators are tied to
    the source and which to the sink (arcs of infinite or zero capacity), so each cut costs one max-flow, charged
    to `work` (None: not counted)."""

    def __init__(self, problem: SubgraphProblem, block: Block, work: WorkBudget | None = None):
        self.problem = problem
        self.block = block
        self.work = work
        n = problem.op_count
        self._mask_bytes = (n + 7) // 8
        source, sink = 0, 1

        def node(o: int | None) -> int:
            if o is None or block.before >> o & 1:
                return source
            return 2 + o if block.ops >> o & 1 else sink

        # No cut needs more than every tensor's bytes: this capacity is never cut, it stands for "must not".
        self._infinite = sum(problem.tensor_bytes) + 1
        arcs: list[tuple[int, int, int]] = []
        for o in bits(block.ops):
            for p in bits(problem.predecessors[o] & block.ops):
                arcs.append((2 + o, 2 + p, self._infinite))  # `o` on the source side needs `p` there too
        for t, size in enumerate(problem.tensor_bytes):
            producer = node(problem.tensor_producer[t])
            if producer == sink or not size:
                continue  # made while or after the operator runs: counted in `own` or not live
            if problem.tensor_kept[t]:
                arcs.append((producer, sink, size))
                continue
            readers = {node(c) for c in bits(problem.tensor_consumers[t])} - {source}
            if len(readers) == 1:
                arcs.append((producer, readers.pop(), size))  # cut when its reader is not on the source side
            elif readers:
                # The tensor is dead only if every reader is on the source side with it.
                arcs.append((producer, 2 + n + t, size))
                arcs.extend((2 + n + t, reader, self._infinite) for reader in readers)
        first_switch = len(arcs)
        arcs.extend((source, 2 + o, 0) for o in range(n))  # infinite: `o` has run before
        arcs.extend((2 + o, sink, 0) for o in range(n))  # infinite: `o` has not
        tails, heads, capacities = zip(*arcs, strict=True)
        self._flow = max_flow.SimpleMaxFlow()
        self._flow.add_arcs_with_capacity(np.array(tails), np.array(heads), np.array(capacities))
        self._switches = np.arange(first_switch, first_switch + 2 * n)
        self._own = [
            sum(problem.tensor_bytes[t] for t in problem.op_creates[o])
            - problem.op_shared_bytes[o]
            + problem.op_scratch_bytes[o]
            for o in range(n)
        ]

    def cut(
        self, op: int, run_before: int = 0, run_after: int = 0, largest: bool = False, limit: float = math.inf
    ) -> StepCut:
        """The minimum over every valid set of operators run before `op` of the bytes live while it runs; with
        `run_before` (closed under ancestors) and `run_after` (closed under descendants), over those sets that hold
        all of the first and none of the second. The set returned is the smallest one attaining it, or with
        `largest` the largest one (which stays valid for more of the sets a search adds operators to); none (0)
        once the bound reaches `limit`, where the caller only needs the bound."""
        problem, ops, n = self.problem, self.block.ops, self.problem.op_count
        if self.work is not None:
            self.work.charge(CUT_UNITS)
        source_side = (problem.ancestors[op] | run_before) & ops
        sink_side = (problem.descendants[op] | 1 << op | run_after) & ops
        switched = np.concatenate([self._vector(source_side), self._vector(sink_side)])
        self._flow.set_arcs_capacity(self._switches, switched.astype(np.int64) * self._infinite)
        if self._flow.solve(0, 1) != self._flow.OPTIMAL:  # not expected: the per-operator bound still holds
            return StepCut(op, problem.step_lower_bound(op), problem.ancestors[op] & ops)
        bound = self._flow.optimal_flow() + self._own[op]
        if bound >= limit:
            return StepCut(op, bound, 0)
        if largest:
            sink_nodes = np.asarray(self._flow.get_sink_side_min_cut(), dtype=np.int64)
            before = ops & ~self._mask(sink_nodes[(sink_nodes >= 2) & (sink_nodes < 2 + n)] - 2)
        else:
            source_nodes = np.asarray(self._flow.get_source_side_min_cut(), dtype=np.int64)
            before = ops & self._mask(source_nodes[(source_nodes >= 2) & (source_nodes < 2 + n)] - 2)
        return StepCut(op, bound, before)

    def _vector(self, mask: int) -> np.ndarray:
        raw = np.frombuffer(mask.to_bytes(self._mask_bytes, "little"), dtype=np.uint8)
        return np.unpackbits(raw, bitorder="little")[: self.problem.op_count]

    def _mask(self, ops: np.ndarray) -> int:
        vector = np.zeros(self._mask_bytes * 8, dtype=np.uint8)
        vector[ops] = 1
        return int.from_bytes(np.packbits(vector, bitorder="little").tobytes(), "little")


def step_cut(problem: SubgraphProblem, block: Block, op: int, run_before: int = 0, run_after: int = 0) -> StepCut:
    """`BlockCuts.cut` of one operator."""
    return BlockCuts(problem, block).cut(op, run_before, run_after)


class CutLookahead:
    """A lower bound on every order that continues from a search state, for `solve_block`'s `lookahead`: the
    highest cut of an operator not yet run, over the "run before" sets that hold everything already run.

    Why it is valid: from a state (the set S already run, closed under "must run before"), an operator v still to
    run runs after a closed set C with S + ancestors(v) <= C that holds no descendant of v, and the bytes live then
    are C's cut plus v's own; the minimum over those C bounds v's step in every continuation. It only grows as S
    does (fewer sets qualify), and a set attaining it at a smaller S still attains it at S while S <= C, so a
    state reuses its parent's cut for v until it runs an operator outside that set, and then only the
    RECOMPUTED cuts with the highest (stale, still valid) bounds are taken again: the rest keep their lower
    values, a weaker but valid bound, and are taken again from a later state. (One per state proves the hardest
    RandWire block's 15-step budget infeasible in 18 s of CPU; two take 30 s, every one far longer.)"""

    RECOMPUTED = 1

    def __init__(self, problem: SubgraphProblem, block: Block, work: WorkBudget):
        self.block = block
        self.network = BlockCuts(problem, block, work)

    def __call__(self, done: int, known: list[StepCut] | None, limit: int) -> tuple[int, list[StepCut]]:
        """(bound, the cuts it rests on, highest first, for the states that follow); stops early once the bound
        reaches `limit`. `known`: the parent state's cuts."""
        run = done & self.block.ops
        if known is None:
            cuts = sorted(
                (self.network.cut(op, run, largest=True) for op in bits(self.block.ops & ~done)), key=_highest_first
            )
        else:
            cuts = [cut for cut in known if not done >> cut.op & 1]
            stale: list[int] = []
            for position, cut in enumerate(cuts):
                if cut.bound >= limit or len(stale) == self.RECOMPUTED:
                    break
                if run & ~cut.before:
                    stale.append(position)
            for position in reversed(stale):  # a cut only rises: it moves up, the others stay in order
                op = cuts.pop(position).op
                bisect.insort(cuts, self.network.cut(op, run, largest=True, limit=limit), key=_highest_first)
        return (cuts[0].bound if cuts else 0), cuts


def _highest_first(cut: StepCut) -> int:
    return -cut.bound


def cut_bound(problem: SubgraphProblem, block: Block, work: WorkBudget) -> int:
    """The highest cut of the block's operators (0 if `work` allows none): no order of the whole subgraph peaks
    lower."""
    return max((cut.bound for cut in step_cuts(problem, block, work)), default=0)


def step_cuts(problem: SubgraphProblem, block: Block, work: WorkBudget) -> list[StepCut]:
    """Every operator's cut, as many as `work` allows (each one is a valid bound on its own)."""
    network = BlockCuts(problem, block, work)
    cuts = []
    for op in bits(block.ops):
        if work.spent():
            break
        cuts.append(network.cut(op))
    return cuts


def ordered_pair_bound(
    problem: SubgraphProblem, block: Block, cuts: list[StepCut], bound: int, work: WorkBudget
) -> int:
    """`bound` raised by pairs of operators that cannot both have their cheapest cut: v's set holds u and u's set
    holds v, but one of them runs first. Whichever it is, both cuts are taken again under that order, and the
    lower of the two orders' highest cut still binds every order. Pairs are drawn around the highest cuts."""
    by_op = {c.op: c for c in cuts}
    network = BlockCuts(problem, block, work)

    def order_cost(first: int, then: int) -> int:
        """A lower bound on the peak of every order that runs `first` before `then`."""
        then_cut = network.cut(then, run_before=problem.ancestors[first] | 1 << first).bound
        if then_cut > bound:
            return then_cut  # enough to raise the bound if the other order costs more too
        run_after = problem.descendants[then] | 1 << then
        return max(then_cut, network.cut(first, run_after=run_after).bound)

    for v_cut in sorted(cuts, key=lambda c: -c.bound)[:PAIR_BOTTLENECKS]:
        v = v_cut.op
        for u in bits(v_cut.before & ~problem.ancestors[v]):
            if u not in by_op or not by_op[u].before >> v & 1:
                continue
            if work.spent():
                return bound
            bound = max(bound, min(order_cost(u, v), order_cost(v, u)))
    return bound


def solve_hard_block(
    problem: SubgraphProblem,
    block: Block,
    level: int,
    work: WorkBudget,
    fallback: tuple[list[int], int],
    tick: Callable[[], None] | None = None,
) -> BlockResult:
    """`solve_block` for part of `work`; if it cannot finish, the cut bounds, the widening beam, divide and
    conquer, and the budget probes until `work` is spent. The order returned is never worse than `fallback`."""
    exact = solve_block(problem, block, level, work.share(EXACT_SHARE), fallback, tick)
    if exact.complete:
        return exact
    order, peak, states = exact.order, exact.peak, exact.states
    cuts = step_cuts(problem, block, work)
    bound = max([exact.bound, *(c.bound for c in cuts)])
    if peak > bound:
        bound = ordered_pair_bound(problem, block, cuts, bound, work.share(PAIR_SHARE))
    if peak > bound:
        widened = widening_beam(problem, block, bound, work.share(BEAM_SHARE))
        if widened is not None and widened[1] < peak:
            order, peak = widened
    if peak > bound:
        divided, divided_peak = divide_at_cuts(problem, block, bound, work.share(DIVIDE_SHARE), cuts)
        if divided_peak < peak:
            order, peak = divided, divided_peak
    if peak > bound:
        descent = budgeted_descent(problem, block, bound, (order, peak), work, tick)
        order, peak, bound, states = descent.order, descent.peak, descent.bound, states + descent.states
    bound = max(bound, level)
    return BlockResult(order, peak, bound, states, peak <= bound)


def widening_beam(problem: SubgraphProblem, block: Block, level: int, work: WorkBudget) -> tuple[list[int], int] | None:
    """The best order of beam searches ever four times wider, ranked with `level` as the floor of every peak,
    until one would not end within `work` (None if not even the first does). A beam four times wider does about
    four times the work: one that would not end within the budget is not started, its work goes to the next
    phase."""
    best = None
    width = BEAM_WIDTH
    readiness = Readiness(problem, block)
    units = 0.0  # what the last beam took
    while 4 * units < work.left:
        width *= 4
        started = work.done
        found = beam_order(problem, block, readiness, width, work, level)
        if found is None:
            break
        units = work.done - started
        order = found[1]
        peak = problem.peak(order, block.before)
        if best is None or peak < best[1]:
            best = (order, peak)
        if peak <= level:
            break
    return best


def divide_at_cuts(
    problem: SubgraphProblem, block: Block, level: int, work: WorkBudget, cuts: list[StepCut] | None = None
) -> tuple[list[int], int]:
    """The block's bottleneck operator (the highest cut) splits it in two: its cheapest "run before" set, then the
    rest; each part is split again, or searched exactly once small. Each level keeps the heuristic order where
    that peaks lower, so the result never peaks above `heuristic_order`."""
    best_order, best_peak = heuristic_order(problem, block, work)
    if block.size <= LEAF_OPS or work.spent():
        if block.size <= LEAF_OPS and best_peak > level:
            result = solve_block(problem, block, level, work.limit(LEAF_UNITS), (best_order, best_peak))
            return result.order, result.peak
        return best_order, best_peak
    if cuts is None:
        cuts = step_cuts(problem, block, work)
    splitting = [c for c in cuts if c.before & block.ops]  # an empty "before" set would not shrink the block
    if not splitting:
        return best_order, best_peak
    first_ops = max(splitting, key=lambda c: c.bound).before & block.ops
    first = Block(block.subgraph, first_ops, block.before)
    rest = Block(block.subgraph, block.ops & ~first_ops, block.before | first_ops)
    order = divide_at_cuts(problem, first, level, work)[0] + divide_at_cuts(problem, rest, level, work)[0]
    peak = problem.peak(order, block.before)
    return (order, peak) if peak < best_peak else (best_order, best_peak)


@dataclass(frozen=True)
class DescentResult:
    order: list[int]
    peak: int
    bound: int  # raised past every budget the descent exhausted
    states: int


def budgeted_descent(
    problem: SubgraphProblem,
    block: Block,
    bound: int,
    start: tuple[list[int], int],
    work: WorkBudget,
    tick: Callable[[], None] | None = None,
) -> DescentResult:
    """Bisect a byte budget between `bound` and the best peak until they meet or `work` is spent: each probe is
    `solve_block` with the byte budget as its level, only orders within it sought, and the cut lookahead."""
    order, peak = start
    floor = bound  # budgets below `floor` are proven impossible or were too slow to settle this round
    probe_units = PROBE_SHARE * work.left
    lookahead = CutLookahead(problem, block, work)
    states = 0
    while bound < peak and not work.spent():
        if floor >= peak:  # every budget between bound and peak was too slow: try them again for longer
            floor, probe_units = bound, 2 * probe_units
        budget = (floor + peak - ALIGNMENT) // 2 // ALIGNMENT * ALIGNMENT
        budget = max(budget, floor)
        # Every step is a multiple of ALIGNMENT bytes: no order within the budget means none below budget + that,
        # or even none below the lowest cost the probe dropped.
        probe = solve_block(
            problem, block, budget, work.limit(probe_units), (order, peak), None, lookahead, beat=budget + ALIGNMENT
        )
        states += probe.states
        if probe.peak <= budget:
            order, peak = probe.order, probe.peak
        elif probe.complete:
            bound = floor = probe.bound
        else:
            floor = budget + ALIGNMENT  # SERENITY: a budget too tight to refute quickly is loosened
        if tick is not None:
            tick()
    return DescentResult(order, peak, bound, states)
