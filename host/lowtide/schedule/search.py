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
  stays within the cost so far, can be run at once in every optimal continuation (moving it earlier never
  raises a later step), so it is the only successor tried.
A heuristic order bounds the search from above: states that cannot beat it are never pushed.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass

from lowtide.schedule.problem import SubgraphProblem, bits

# How many states to pop between looks at the clock and calls of the progress callback.
CLOCK_EVERY = 512


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
    complete: bool  # False when the deadline stopped the search


def blocks(problem: SubgraphProblem) -> list[Block]:
    """The subgraph split at its cut points; each cut point is a block of its own."""
    full = problem.all_ops
    cuts = [
        op for op in range(problem.op_count)
        if problem.ancestors[op] | problem.descendants[op] | 1 << op == full
    ]
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


def heuristic_order(problem: SubgraphProblem, block: Block) -> tuple[list[int], int]:
    """The better of the stored order and a greedy order (lowest step, then fewest bytes left live)."""
    stored = list(bits(block.ops))
    best = (problem.peak(stored, block.before), stored)
    done, live, peak, greedy = block.before, problem.live_bytes(block.before), 0, []
    remaining = block.ops
    while remaining:
        choice = None
        for op in bits(remaining):
            if problem.predecessors[op] & ~done:
                continue
            during, after = problem.step(done, live, op)
            key = (max(peak, during), after, op)
            if choice is None or key < choice[0]:
                choice = (key, op, during, after)
        _, op, during, live = choice
        peak = max(peak, during)
        greedy.append(op)
        done |= 1 << op
        remaining &= ~(1 << op)
    best = min(best, (peak, greedy))
    return best[1], best[0]


def solve_block(
    problem: SubgraphProblem,
    block: Block,
    level: int,
    deadline: float,
    tick: Callable[[int], None] | None = None,
) -> BlockResult:
    """The block's best order if found before `deadline` (bound == max(level, peak)); otherwise the heuristic
    order, with the lowest cost the search had not yet ruled out as bound."""
    fallback, fallback_peak = heuristic_order(problem, block)
    if fallback_peak <= level or block.size == 1:
        return BlockResult(fallback, fallback_peak, max(level, fallback_peak), 0, True)
    goal = block.before | block.ops
    predecessors = problem.predecessors
    step = problem.step
    block_ops = list(bits(block.ops))
    # mask -> (cost to reach it, operator run last); cost = max(level, highest step on the way)
    reached: dict[int, tuple[int, int]] = {block.before: (level, -1)}
    heap = [(level, 0, block.before, problem.live_bytes(block.before))]
    popped = 0
    while heap:
        cost, _, done, live = heapq.heappop(heap)
        if reached[done][0] < cost:
            continue
        if done == goal:
            order = _path(reached, block.before, goal)
            return BlockResult(order, problem.peak(order, block.before), cost, popped, True)
        popped += 1
        if popped % CLOCK_EVERY == 0:
            if tick is not None:
                tick(CLOCK_EVERY)
            if time.monotonic() > deadline:
                return BlockResult(fallback, fallback_peak, cost, popped, False)
        successors = []
        for op in block_ops:
            if done >> op & 1 or predecessors[op] & ~done:
                continue
            during, after = step(done, live, op)
            if during <= cost and after <= live:
                successors = [(op, during, after)]
                break
            successors.append((op, during, after))
        depth = -(done.bit_count() + 1)
        for op, during, after in successors:
            next_cost = max(cost, during)
            if next_cost >= fallback_peak:
                continue
            following = done | 1 << op
            seen = reached.get(following)
            if seen is not None and seen[0] <= next_cost:
                continue
            reached[following] = (next_cost, op)
            heapq.heappush(heap, (next_cost, depth, following, after))
    # Nothing beats the heuristic order: it is optimal.
    return BlockResult(fallback, fallback_peak, max(level, fallback_peak), popped, True)


def _path(reached: dict[int, tuple[int, int]], start: int, goal: int) -> list[int]:
    order = []
    done = goal
    while done != start:
        op = reached[done][1]
        order.append(op)
        done &= ~(1 << op)
    order.reverse()
    return order
