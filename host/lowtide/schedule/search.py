"""Exact minimum-peak search over sets of run operators, one block of a subgraph at a time.

Blocks: an operator that every other operator must precede or follow (a cut point of the dependency graph)
splits a subgraph into runs that every valid order executes one after another. What runs before a block is
then a fixed set, so each block is an independent problem and the subgraph's peak is the highest block peak.

Within a block, best-first search pops states (sets of run operators) by the highest step on the way there,
so the first time the full block is popped its peak is optimal. Three reductions keep the state count small:
- memoisation: a set reached again with no lower peak is dropped;
- the target `level`, a proven lower bound on the whole model's peak: steps below it cost nothing, since no
  order can beat it anyway, and among states at the same cost the deepest goes first;
- a dominance rule: an available operator that frees at least as many bytes as it creates, and whose step
  stays within the cost so far, can be run at once: moving it earlier in any continuation never raises a later
  step, so some optimal continuation starts with it, and it is the only successor tried.
A heuristic order bounds the search from above: states that cannot beat it are never pushed. A lookahead (a lower
bound on what is still to come from a state: `anytime.CutLookahead`) can raise a state's cost and drop states
that cannot beat it.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lowtide.budget import WorkBudget
from lowtide.schedule.problem import SubgraphProblem, bits

# How many states to pop between looks at the work budget and calls of the progress callback.
CHECK_EVERY = 64
# Work units (`lowtide.budget`) are operator steps evaluated (`SubgraphProblem.step`): a beam search charges one per
# step. Popping a state of the exact search costs about as much as this many steps (the steps to its successors,
# the heap and the memo), measured on the RandWire blocks.
POP_UNITS = 12
# States the beam search keeps per depth for the starting upper bound: enough to beat the greedy order on wide
# graphs, cheap enough (width x available operators steps per depth) to run on every block.
BEAM_WIDTH = 64
# Memoised states at which a block's search gives up as if out of work (about 200 bytes each, with the heap).
MAX_STATES = 6_000_000


@dataclass(frozen=True)
class Block:
    """Operators that every valid order runs contiguously, after exactly the operators in `before`."""

    subgraph: int
    ops: int  # bitmask
    before: int  # bitmask

    @property
    def size(self) -> int:
        return self.ops.bit_count()


@dataclass(frozen=True)
class BlockResult:
    order: list[int]
    peak: int  # highest step of `order`
    bound: int  # proven lower bound on max(level, best peak of this block)
    states: int  # states popped
    complete: bool  # False when the work budget or MAX_STATES stopped the search


def blocks(problem: SubgraphProblem) -> list[Block]:
    """The subgraph split at its cut points; each cut point is a block of its own."""
    full = problem.all_ops
    cuts = [op for op in range(problem.op_count) if problem.ancestors[op] | problem.descendants[op] | 1 << op == full]
    cuts.sort(key=lambda op: problem.ancestors[op].bit_count())
    result = []
    before = 0
    for cut in cuts:
        run = problem.ancestors[cut] & ~before
        if run:
            result.append(Block(problem.subgraph, run, before))
            before |= run
        result.append(Block(problem.subgraph, 1 << cut, before))
        before |= 1 << cut
    if full & ~before:
        result.append(Block(problem.subgraph, full & ~before, before))
    return result


class Readiness:
    """Which operators of a block can run next, updated per step instead of rescanned."""

    def __init__(self, problem: SubgraphProblem, block: Block):
        self.predecessors = problem.predecessors
        self.unblocks: dict[int, list[int]] = {op: [] for op in bits(block.ops)}
        for op in bits(block.ops):
            for p in bits(self.predecessors[op] & block.ops):
                self.unblocks[p].append(op)
        self.first = sum(1 << op for op in bits(block.ops) if not self.predecessors[op] & ~block.before)

    def after(self, ready: int, op: int, done: int) -> int:
        """Ready operators once `op`, one of `ready`, has run and `done` includes it."""
        now = ready & ~(1 << op)
        for successor in self.unblocks[op]:
            if not self.predecessors[successor] & ~done:
                now |= 1 << successor
        return now


def simple_orders(problem: SubgraphProblem, block: Block) -> list[tuple[int, list[int]]]:
    """(peak, order) of the simple heuristics: the stored order, the two depth-first orders and the greedy order,
    stored first. Whatever the search returns peaks no higher than the best of them."""
    stored = list(bits(block.ops))
    candidates = [(problem.peak(stored, block.before), stored)]
    if block.size > 1:
        for reverse in (False, True):
            order = _depth_first_order(problem, block, reverse)
            candidates.append((problem.peak(order, block.before), order))
        greedy = beam_order(problem, block, Readiness(problem, block), 1)
        assert greedy is not None  # with no work budget the beam always ends
        candidates.append(greedy)
    return candidates


def heuristic_order(problem: SubgraphProblem, block: Block, work: WorkBudget | None = None) -> tuple[list[int], int]:
    """The best of the simple orders and a beam search (if it ends within `work`; None: no limit): each an upper
    bound for the exact search and the fallback when its budget runs out."""
    candidates = simple_orders(problem, block)
    if block.size > 1:
        beam = beam_order(problem, block, Readiness(problem, block), BEAM_WIDTH, work)
        if beam is not None:
            candidates.append(beam)
    # On equal peaks the stored order wins (it compares lowest), so a model is only reordered for a gain.
    peak, order = min(candidates)
    return order, peak


def _depth_first_order(problem: SubgraphProblem, block: Block, reverse: bool) -> list[int]:
    """Post-order from the block's last operators back through what they depend on: each input's whole
    producing branch runs just before its reader, so a narrow branch result replaces its wide intermediates
    before the next branch starts (where a greedy choice, seeing one step ahead, would start every branch)."""

    def inputs_of(op: int) -> list[int]:
        ops = list(bits(problem.predecessors[op] & block.ops))
        return ops[::-1] if reverse else ops

    sinks = [op for op in bits(block.ops) if not problem.descendants[op] & block.ops]
    visited = 0
    order = []
    for sink in reversed(sinks) if reverse else sinks:
        stack = [(sink, iter(inputs_of(sink)))]
        visited |= 1 << sink
        while stack:
            op, pending = stack[-1]
            following = next((p for p in pending if not visited >> p & 1), None)
            if following is None:
                stack.pop()
                order.append(op)
            else:
                visited |= 1 << following
                stack.append((following, iter(inputs_of(following))))
    return order


# A beam state, keyed by the set of run operators: (peak so far, live bytes, ready operators, previous set, operator
# run last).
_BeamState = tuple[int, int, int, int | None, int]


def beam_order(
    problem: SubgraphProblem,
    block: Block,
    readiness: Readiness,
    width: int,
    work: WorkBudget | None = None,
    level: int = 0,
) -> tuple[int, list[int]] | None:
    """Run the block one operator at a time, keeping the `width` best distinct sets of run operators at each
    depth, best = lowest peak so far, then fewest bytes live (width 1 is the plain greedy order). Peaks up to
    `level`, a proven lower bound, count as `level`: no order avoids them, so fewer bytes live decides. None if
    `work` is spent first (None: no limit); each step evaluated is charged to it."""
    beam: dict[int, _BeamState] = {block.before: (0, problem.live_bytes(block.before), readiness.first, None, -1)}
    history = []
    for _ in range(block.size):
        if work is not None:
            if work.spent():
                return None
            work.charge(sum(ready.bit_count() for _, _, ready, _, _ in beam.values()))
        following: dict[int, _BeamState] = {}
        for done, (peak, live, ready, _, _) in beam.items():
            for op in bits(ready):
                during, after = problem.step(done, live, op)
                mask = done | 1 << op
                state = (max(peak, during, level), after)
                if mask not in following or state < following[mask][:2]:
                    following[mask] = (*state, readiness.after(ready, op, mask), done, op)
        history.append(beam)
        beam = dict(heapq.nsmallest(width, following.items(), key=lambda item: item[1][:2]))
    ((_, (peak, _, _, previous, op)),) = beam.items()
    order = []
    for layer in reversed(history):
        order.append(op)
        assert previous is not None  # only the block's starting state has none, and no layer looks it up
        _, _, _, previous, op = layer[previous]
    order.reverse()
    return peak, order


# lookahead(set run, the parent state's token or None, limit) -> (bound, token): a lower bound on the peak of every
# order that continues from that set (it may stop early once the bound reaches `limit`), and what the states
# after it may reuse (`lowtide.schedule.anytime.CutLookahead`).
Lookahead = Callable[[int, Any, int], tuple[int, Any]]


def solve_block(
    problem: SubgraphProblem,
    block: Block,
    level: int,
    work: WorkBudget,
    fallback: tuple[list[int], int],
    tick: Callable[[], None] | None = None,
    lookahead: Lookahead | None = None,
    beat: int | None = None,
) -> BlockResult:
    """The block's best order if found within `work` (bound == max(level, peak)); otherwise `fallback`
    (an order and its peak, from `heuristic_order`), with the lowest cost not yet ruled out as bound.

    Only orders peaking below `beat` (by default the fallback's peak) are searched for: if there is none, the
    result is the fallback, complete, with the lowest cost the search dropped as its bound (at least `beat`: every
    order's path was cut there or higher). As a feasibility probe, `level` may be any budget below `beat` instead
    of a proven bound: then the search finds an order within the budget, or proves the bound above it.

    With `lookahead`, a state's cost is also raised to its bound when it is popped (once): states that cannot
    beat `fallback` are dropped, and the cost popped stays a lower bound on every order not yet ruled out (A*
    with an admissible estimate, for the highest step instead of a sum)."""
    fallback_order, fallback_peak = fallback
    if fallback_peak <= level or block.size == 1:
        return BlockResult(fallback_order, fallback_peak, max(level, fallback_peak), 0, True)
    beat = fallback_peak if beat is None else beat
    goal = block.before | block.ops
    step = problem.step
    readiness = Readiness(problem, block)
    # mask -> (highest step on the way there, at least `level`; operator run last)
    reached: dict[int, tuple[int, int]] = {block.before: (level, -1)}
    # (cost: a lower bound on every order through the state, -depth, tie, set run, bytes live, ready operators,
    #  highest step on the way there, the lookahead's token, whether the lookahead has raised the cost yet)
    tie = itertools.count()
    heap = [
        (
            level,
            0,
            next(tie),
            block.before,
            problem.live_bytes(block.before),
            readiness.first,
            level,
            None,
            lookahead is None,
        )
    ]
    popped = 0
    dropped = fallback_peak  # the lowest cost of a state dropped for reaching `beat`, or the fallback's peak
    while heap:
        cost, depth, _, done, live, ready, way, token, looked = heapq.heappop(heap)
        if reached[done][0] < way:
            continue
        if lookahead is not None and not looked:
            ahead, token = lookahead(done, token, beat)
            if ahead >= beat:
                dropped = min(dropped, ahead)  # no continuation beats it
                continue
            if ahead > cost:
                heapq.heappush(heap, (ahead, depth, next(tie), done, live, ready, way, token, True))
                continue
        if done == goal:
            order = _path(reached, block.before, goal)
            return BlockResult(order, problem.peak(order, block.before), cost, popped, True)
        popped += 1
        if popped % CHECK_EVERY == 0:
            if tick is not None:
                tick()
            work.charge(CHECK_EVERY * POP_UNITS)
            if work.spent() or len(reached) > MAX_STATES:
                return BlockResult(fallback_order, fallback_peak, cost, popped, False)
        successors = []
        for op in bits(ready):
            during, after = step(done, live, op)
            if during <= cost and after <= live:
                successors = [(op, during, after)]
                break
            successors.append((op, during, after))
        for op, during, after in successors:
            next_cost = max(cost, during)
            if next_cost >= beat:
                dropped = min(dropped, next_cost)
                continue
            following = done | 1 << op
            next_way = max(way, during)
            seen = reached.get(following)
            if seen is not None and seen[0] <= next_way:
                continue
            reached[following] = (next_way, op)
            heapq.heappush(
                heap,
                (
                    next_cost,
                    depth - 1,
                    next(tie),
                    following,
                    after,
                    readiness.after(ready, op, following),
                    next_way,
                    token,
                    lookahead is None,
                ),
            )
    # No order beats `beat` (by default the fallback is optimal), nor even the lowest cost dropped.
    return BlockResult(fallback_order, fallback_peak, max(level, dropped), popped, True)


def _path(reached: dict[int, tuple[int, int]], start: int, goal: int) -> list[int]:
    order = []
    done = goal
    while done != start:
        op = reached[done][1]
        order.append(op)
        done &= ~(1 << op)
    order.reverse()
    return order
