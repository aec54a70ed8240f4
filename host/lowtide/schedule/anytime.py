"""Blocks the exact search cannot finish in time: a tighter lower bound, and better orders found along the way.

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
- a depth-first descent under a byte budget, with memoised dead ends, the budget moved by bisection between the
  bound and the best peak: a budget the descent meets becomes the new best, one it exhausts raises the bound,
  one it cannot settle in time is loosened (SERENITY's adaptive soft budgeting).
Last, the exact search runs again from the raised bound, with the best order as its upper bound: it often
finishes now, or raises the bound further.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ortools.graph.python import max_flow

from lowtide.memory.lifetimes import ALIGNMENT
from lowtide.schedule.problem import SubgraphProblem, bits
from lowtide.schedule.search import (
    BEAM_WIDTH, CLOCK_EVERY, MAX_STATES, Block, BlockResult, Readiness, beam_order, heuristic_order, solve_block,
)

# Shares of the time left that each phase of `solve_hard_block` may use, in turn. The first exact search gets
# enough to prove every shared model's blocks optimal, as before; the last one gets whatever is left.
EXACT_SHARE = 0.1
PAIR_SHARE = 0.15
BEAM_SHARE = 0.2
DIVIDE_SHARE = 0.15
DESCENT_SHARE = 0.25
# Operators with the highest cuts whose conflicting pairs `ordered_pair_bound` tries.
PAIR_BOTTLENECKS = 12
# Parts of at most this many operators are searched exactly (in at most LEAF_SECONDS) instead of split again.
LEAF_OPS = 30
LEAF_SECONDS = 0.5
# The first budgeted descent may use this share of the time left; each later round doubles it.
PROBE_SHARE = 0.25


@dataclass(frozen=True)
class StepCut:
    op: int
    bound: int  # bytes live while `op` runs, in every valid order of the block
    before: int  # bitmask of the block's operators: a "run before `op`" set that attains `bound`


def step_cut(problem: SubgraphProblem, block: Block, op: int, run_before: int = 0, run_after: int = 0) -> StepCut:
    """The minimum over every valid set of operators run before `op` of the bytes live while it runs; with
    `run_before` (closed under ancestors) and `run_after` (closed under descendants), over those sets that hold
    all of the first and none of the second."""
    fixed_in = block.before | problem.ancestors[op] | run_before
    fixed_out = (problem.all_ops & ~(block.before | block.ops)) | problem.descendants[op] | 1 << op | run_after
    # Nodes: the source (operators run before `op`), the sink (the others), each free operator, each tensor.
    source, sink = 0, 1

    def node(o: int | None) -> int:
        if o is None or fixed_in >> o & 1:
            return source
        return sink if fixed_out >> o & 1 else 2 + o

    def tensor_node(t: int) -> int:
        return 2 + problem.op_count + t

    # No cut needs more than every tensor's bytes: this capacity is never cut, it stands for "must not".
    infinite = sum(problem.tensor_bytes) + 1
    flow = max_flow.SimpleMaxFlow()
    for o in bits(block.ops & ~fixed_in & ~fixed_out):
        for p in bits(problem.predecessors[o] & ~fixed_in):
            flow.add_arc_with_capacity(2 + o, node(p), infinite)  # `o` on the source side needs `p` there too
    for t, size in enumerate(problem.tensor_bytes):
        producer = node(problem.tensor_producer[t])
        if producer == sink or not size:
            continue  # made while or after `op` runs: counted below or not live
        if problem.tensor_kept[t]:
            flow.add_arc_with_capacity(producer, sink, size)
            continue
        readers = {node(c) for c in bits(problem.tensor_consumers[t])} - {source}
        if readers:
            # The tensor is dead only if every reader is on the source side with it.
            flow.add_arc_with_capacity(producer, tensor_node(t), size)
            for reader in readers:
                flow.add_arc_with_capacity(tensor_node(t), reader, infinite)
    before = problem.ancestors[op] & block.ops
    if not flow.num_arcs():
        cut = 0
    elif flow.solve(source, sink) == flow.OPTIMAL:
        cut = flow.optimal_flow()
        for n in flow.get_source_side_min_cut():
            if 2 <= n < 2 + problem.op_count:
                before |= 1 << (n - 2)
    else:  # not expected with these capacities; the per-operator bound is still a valid one
        return StepCut(op, problem.step_lower_bound(op), before)
    own = (sum(problem.tensor_bytes[t] for t in problem.op_creates[op]) - problem.op_shared_bytes[op]
           + problem.op_scratch_bytes[op])
    return StepCut(op, cut + own, before)


def step_cuts(problem: SubgraphProblem, block: Block, deadline: float) -> list[StepCut]:
    """Every operator's cut, as many as `deadline` allows (each one is a valid bound on its own)."""
    cuts = []
    for op in bits(block.ops):
        if time.monotonic() > deadline:
            break
        cuts.append(step_cut(problem, block, op))
    return cuts


def ordered_pair_bound(problem: SubgraphProblem, block: Block, cuts: list[StepCut], bound: int,
                       deadline: float) -> int:
    """`bound` raised by pairs of operators that cannot both have their cheapest cut: v's set holds u and u's set
    holds v, but one of them runs first. Whichever it is, both cuts are taken again under that order, and the
    lower of the two orders' highest cut still binds every order. Pairs are drawn around the highest cuts."""
    by_op = {c.op: c for c in cuts}

    def order_cost(first: int, then: int) -> int:
        """A lower bound on the peak of every order that runs `first` before `then`."""
        then_cut = step_cut(problem, block, then, run_before=problem.ancestors[first] | 1 << first).bound
        if then_cut > bound:
            return then_cut  # enough to raise the bound if the other order costs more too
        run_after = problem.descendants[then] | 1 << then
        return max(then_cut, step_cut(problem, block, first, run_after=run_after).bound)

    for v_cut in sorted(cuts, key=lambda c: -c.bound)[:PAIR_BOTTLENECKS]:
        v = v_cut.op
        for u in bits(v_cut.before & ~problem.ancestors[v]):
            if u not in by_op or not by_op[u].before >> v & 1:
                continue
            if time.monotonic() > deadline:
                return bound
            bound = max(bound, min(order_cost(u, v), order_cost(v, u)))
    return bound


def solve_hard_block(
    problem: SubgraphProblem,
    block: Block,
    level: int,
    deadline: float,
    fallback: tuple[list[int], int],
    tick: Callable[[], None] | None = None,
) -> BlockResult:
    """`solve_block` for part of the time; if it cannot finish, the cut bounds, the widening beam, divide and
    conquer, the budgeted descent, and the exact search again from the raised bound. The order returned is never worse than
    `fallback`."""

    def until(share: float) -> float:
        """The deadline of a phase that may use `share` of the time left."""
        now = time.monotonic()
        return now + share * max(deadline - now, 0.0)

    exact = solve_block(problem, block, level, until(EXACT_SHARE), fallback, tick)
    if exact.complete:
        return exact
    order, peak, states = exact.order, exact.peak, exact.states
    cuts = step_cuts(problem, block, deadline)
    bound = max([exact.bound, *(c.bound for c in cuts)])
    if peak > bound:
        bound = ordered_pair_bound(problem, block, cuts, bound, until(PAIR_SHARE))
    if peak > bound:
        widened = widening_beam(problem, block, bound, until(BEAM_SHARE))
        if widened is not None and widened[1] < peak:
            order, peak = widened
    if peak > bound:
        divided, divided_peak = divide_at_cuts(problem, block, bound, until(DIVIDE_SHARE), cuts)
        if divided_peak < peak:
            order, peak = divided, divided_peak
    if peak > bound:
        descent = budgeted_descent(problem, block, bound, (order, peak), until(DESCENT_SHARE), tick)
        order, peak, bound, states = descent.order, descent.peak, descent.bound, states + descent.states
    if peak > bound and time.monotonic() < deadline:
        # From the raised bound, the exact search may now finish, or raise it further.
        again = solve_block(problem, block, bound, deadline, (order, peak), tick)
        order, peak, bound, states = again.order, again.peak, again.bound, states + again.states
    bound = max(bound, level)
    return BlockResult(order, peak, bound, states, peak <= bound)


def widening_beam(problem: SubgraphProblem, block: Block, level: int,
                  deadline: float) -> tuple[list[int], int] | None:
    """The best order of beam searches ever four times wider, ranked with `level` as the floor of every peak,
    until one would not end before `deadline` (None if not even the first does)."""
    best = None
    width = BEAM_WIDTH
    readiness = Readiness(problem, block)
    while time.monotonic() < deadline:
        width *= 4
        found = beam_order(problem, block, readiness, width, deadline, level)
        if found is None:
            break
        order = found[1]
        peak = problem.peak(order, block.before)
        if best is None or peak < best[1]:
            best = (order, peak)
        if peak <= level:
            break
    return best


def divide_at_cuts(problem: SubgraphProblem, block: Block, level: int, deadline: float,
                   cuts: list[StepCut] | None = None) -> tuple[list[int], int]:
    """The block's bottleneck operator (the highest cut) splits it in two: its cheapest "run before" set, then the
    rest; each part is split again, or searched exactly once small. Each level keeps the heuristic order where
    that peaks lower, so the result never peaks above `heuristic_order`."""
    best_order, best_peak = heuristic_order(problem, block, deadline)
    if block.size <= LEAF_OPS or time.monotonic() > deadline:
        if block.size <= LEAF_OPS and best_peak > level:
            leaf_deadline = min(deadline, time.monotonic() + LEAF_SECONDS)
            result = solve_block(problem, block, level, leaf_deadline, (best_order, best_peak))
            return result.order, result.peak
        return best_order, best_peak
    if cuts is None:
        cuts = step_cuts(problem, block, deadline)
    splitting = [c for c in cuts if c.before & block.ops]  # an empty "before" set would not shrink the block
    if not splitting:
        return best_order, best_peak
    first_ops = max(splitting, key=lambda c: c.bound).before & block.ops
    first = Block(block.subgraph, first_ops, block.before)
    rest = Block(block.subgraph, block.ops & ~first_ops, block.before | first_ops)
    order = divide_at_cuts(problem, first, level, deadline)[0] + divide_at_cuts(problem, rest, level, deadline)[0]
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
    deadline: float,
    tick: Callable[[], None] | None = None,
) -> DescentResult:
    """Bisect a byte budget between `bound` and the best peak until they meet or `deadline` passes."""
    order, peak = start
    dead_ends: dict[int, int] = {}  # set of run operators -> highest budget no continuation from it meets
    floor = bound  # budgets below `floor` are proven impossible or were too slow to settle this round
    probe_seconds = PROBE_SHARE * max(deadline - time.monotonic(), 0.0)
    states = 0
    while bound < peak and time.monotonic() < deadline:
        if floor >= peak:  # every budget between bound and peak was too slow: try them again for longer
            floor, probe_seconds = bound, 2 * probe_seconds
        budget = (floor + peak - ALIGNMENT) // 2 // ALIGNMENT * ALIGNMENT
        budget = max(budget, floor)
        probe = _descend(problem, block, budget, min(deadline, time.monotonic() + probe_seconds), dead_ends)
        states += probe.states
        if probe.order is not None:
            order, peak = probe.order, problem.peak(probe.order, block.before)
        elif probe.exhausted:
            bound = floor = budget + ALIGNMENT  # every step is a multiple of ALIGNMENT bytes
        else:
            floor = budget + ALIGNMENT  # SERENITY: a budget too tight to refute quickly is loosened
        if tick is not None:
            tick()
    return DescentResult(order, peak, bound, states)


@dataclass(frozen=True)
class _Probe:
    order: list[int] | None  # an order within the budget, if one was found
    exhausted: bool  # no order is within the budget (proven)
    states: int


def _descend(problem: SubgraphProblem, block: Block, budget: int, deadline: float,
             dead_ends: dict[int, int]) -> _Probe:
    """Depth first from the block's start, steps above `budget` pruned, the operator leaving the fewest bytes live
    tried first. Sets recorded in `dead_ends` at this budget or above are not entered again: what can follow a
    set does not depend on how it was reached."""
    readiness = Readiness(problem, block)
    goal = block.before | block.ops
    step = problem.step

    def successors(done: int, live: int, ready: int) -> list[tuple[int, int]]:
        """(operator, bytes live after it), best first."""
        options = []
        for op in bits(ready):
            during, after = step(done, live, op)
            if during > budget or dead_ends.get(done | 1 << op, -1) >= budget:
                continue
            if after <= live:
                return [(op, after)]  # frees at least what it makes, within budget: some best order runs it now
            options.append((after, during, op))
        options.sort()
        return [(op, after) for after, _, op in options]

    live = problem.live_bytes(block.before)
    # Per depth: (set run, bytes live, ready operators, untried successors, operator run last)
    stack = [(block.before, live, readiness.first, iter(successors(block.before, live, readiness.first)), -1)]
    states = 0
    while stack:
        done, live, ready, untried, _ = stack[-1]
        if done == goal:
            return _Probe([frame[4] for frame in stack[1:]], False, states)
        states += 1
        if states % CLOCK_EVERY == 0 and (time.monotonic() > deadline or len(dead_ends) > MAX_STATES):
            return _Probe(None, False, states)
        following = next(untried, None)
        if following is None:
            dead_ends[done] = max(dead_ends.get(done, -1), budget)
            stack.pop()
            continue
        op, after = following
        mask = done | 1 << op
        ready_after = readiness.after(ready, op, mask)
        stack.append((mask, after, ready_after, iter(successors(mask, after, ready_after)), op))
    return _Probe(None, True, states)
