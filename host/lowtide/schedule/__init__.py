"""Stage 3: the operator order with the lowest live-memory peak, proven optimal where the search completes.

`find_schedule` schedules every subgraph on its own cost (`problem`), split at cut points and searched exactly
block by block (`search`); a block the exact search cannot finish in its share of the work budget gets a
minimum-cut lower bound and the anytime searches (`anytime`), so the result is the best order found with an honest
gap. Every budget is counted in units of work (`lowtide.budget`), so the order found is the same on any machine. The result is checked against the memory model everyone else uses (`tflm_plan`), so
its figures are the ones the rest of lowtide reports. `apply_order` gives the graph with an order stored.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass

from lowtide.budget import WallClock, WorkBudget
from lowtide.memory import live_peak_bytes, tflm_plan
from lowtide.memory.lifetimes import Order, stored_order
from lowtide.model.edit import with_operator_order
from lowtide.model.ir import Graph
from lowtide.schedule.anytime import budgeted_descent, cut_bound, solve_hard_block
from lowtide.schedule.problem import SubgraphProblem, check_order, subgraph_problem
from lowtide.schedule.search import Block, BlockResult, blocks, heuristic_order

# Work units (`search.POP_UNITS`: operator steps) of one search when the caller gives none: about 12 s of one quiet
# core of the machine the budgets were tuned on (some 250,000 units a second there), the schedule's share of the
# former 30 s time limit. It proves every shared model's order optimal (docs/benchmarks.md).
SCHEDULE_UNITS = 3_000_000
# Share of the budget the beam searches (upper bounds, fallback orders) may use before the exact search.
HEURISTIC_SHARE = 0.25
# progress(fraction of operators whose block is settled, best own-cost peak so far)
Progress = Callable[[float, int], None]


@dataclass(frozen=True)
class Schedule:
    order: Order  # every subgraph's operators in the chosen execution order
    live_peak_bytes: int  # most bytes live in one step of `order` (lowtide.memory.live_peak_bytes)
    head_bytes: int  # tflm_plan(graph, order).head_bytes: TFLM's greedy planner on this order
    stored_peak_bytes: int  # live peak of the order stored in the model
    stored_head_bytes: int
    lower_bound_bytes: int  # no valid order has a lower live peak
    optimal: bool  # live_peak_bytes == lower_bound_bytes
    unfinished: bool  # the work budget (or a search's state cap) ended the search before it proved its order optimal
    wall_clock_cut: bool  # the safety net (`WallClock`) ended a search: the order may differ between runs
    seconds: float
    explored_states: int

    @property
    def saved_bytes(self) -> int:
        return self.stored_peak_bytes - self.live_peak_bytes

    @property
    def gap_bytes(self) -> int:
        """How far the order's live peak may be above the best order's: 0 when proven optimal."""
        return self.live_peak_bytes - self.lower_bound_bytes

    @property
    def gap(self) -> float:
        return self.gap_bytes / self.lower_bound_bytes if self.lower_bound_bytes else 0.0


def schedule_budget(effort: float = 1.0, clock: WallClock | None = None) -> WorkBudget:
    """`effort` times the default budget of `find_schedule`, on its own counter."""
    return WorkBudget.of(effort * SCHEDULE_UNITS, "schedule", clock)


def find_schedule(
    graph: Graph, work: WorkBudget | None = None, progress: Progress | None = None, in_place: bool = False
) -> Schedule:
    """The best order found within `work` (default: `schedule_budget()`). With `in_place`, costs and live peaks
    count outputs that an offline plan may place inside a dying input (`lowtide.memory.in_place`) once; TFLM's own
    planner (`head_bytes`) never does that."""
    started = time.monotonic()
    work = work or schedule_budget()
    heuristic_work = work.share(HEURISTIC_SHARE)
    problems = {i: subgraph_problem(graph, i, in_place) for i in sorted(_reachable_subgraphs(graph))}
    # Every operator's unavoidable step is a lower bound on the model's peak: the first target level.
    level = max((p.step_lower_bound(op) for p in problems.values() for op in range(p.op_count)), default=0)
    pending: list[tuple[tuple[list[int], int], Block, int]] = []  # (heuristic order and peak, block, position)
    block_orders: dict[int, list[list[int]]] = {}
    for sg, problem in problems.items():
        split = blocks(problem)
        block_orders[sg] = [[] for _ in split]
        for position, block in enumerate(split):
            heuristic = heuristic_order(problem, block, heuristic_work)
            if heuristic[1] > level:
                # A block's highest cut binds the model too: blocks that peak no higher are settled at once, and
                # the work goes to those that do not.
                level = max(level, cut_bound(problem, block, heuristic_work))
            pending.append((heuristic, block, position))
    # Hardest blocks first: their optimum raises the level, which lets easier blocks stop sooner.
    pending.sort(key=lambda item: -item[0][1])
    total_ops = max(sum(p.op_count for p in problems.values()), 1)
    settled_ops = 0
    settled_peak = 0
    explored = 0
    results: list[BlockResult] = []

    def report(next_block: int) -> None:
        """Blocks from `next_block` on are unsettled; the first of them has the highest heuristic peak."""
        if progress is not None:
            unsettled_peak = pending[next_block][0][1] if next_block < len(pending) else 0
            progress(settled_ops / total_ops, max(settled_peak, unsettled_peak))

    for index, (heuristic, block, _position) in enumerate(pending):
        # A block's share of the work left is its share of the operators still to search: those of the blocks
        # whose heuristic order peaks above the bound (the others are settled at once).
        unsearched_ops = sum(b.size for (_, peak), b, _ in pending[index:] if b.size > 1 and peak > level)
        share = block.size / unsearched_ops if block.size > 1 and heuristic[1] > level else 0.0
        result = solve_hard_block(
            problems[block.subgraph], block, level, work.share(share), heuristic, functools.partial(report, index)
        )
        results.append(result)
        explored += result.states
        level = max(level, result.bound)
        settled_ops += block.size
        settled_peak = max(settled_peak, result.peak)
        report(index + 1)
    # Work the easier blocks left goes to budget probes (`anytime.budgeted_descent`), from the level now proven, on
    # the block that sets the model's peak (the other blocks' gaps do not count) while it is not proven optimal.
    while not work.spent():
        peak_index = max(range(len(results)), key=lambda i: results[i].peak, default=None)
        if peak_index is None or results[peak_index].peak <= level:
            break
        _, block, _ = pending[peak_index]
        result = results[peak_index]
        descent = budgeted_descent(
            problems[block.subgraph],
            block,
            level,
            (result.order, result.peak),
            work,
            functools.partial(report, len(pending)),
        )
        level = max(level, descent.bound)
        results[peak_index] = BlockResult(
            descent.order, descent.peak, level, result.states + descent.states, descent.peak <= level
        )
        explored += descent.states
        if descent.peak > level:
            break  # out of work
    for (_, block, position), result in zip(pending, results):
        block_orders[block.subgraph][position] = result.order

    order = stored_order(graph)
    for sg, parts in block_orders.items():
        order[sg] = [op for part in parts for op in part]
    check_order(graph, order)
    peak = live_peak_bytes(graph, order, in_place)
    stored_peak = live_peak_bytes(graph, stored_order(graph), in_place)
    # Keep the model as it is unless the new order is better; the stored order can even beat it when control
    # flow couples subgraphs, which are searched one at a time.
    if stored_peak <= peak:
        order, peak = stored_order(graph), stored_peak
    return Schedule(
        order=order,
        live_peak_bytes=peak,
        head_bytes=tflm_plan(graph, order).head_bytes,
        stored_peak_bytes=stored_peak,
        stored_head_bytes=tflm_plan(graph).head_bytes,
        lower_bound_bytes=level,
        optimal=peak == level,
        unfinished=any(result.peak > level for result in results),
        wall_clock_cut=work.where in work.clock.cuts,
        seconds=time.monotonic() - started,
        explored_states=explored,
    )


def apply_order(graph: Graph, order: Order) -> Graph:
    """`graph` with each subgraph's operators stored in `order` (a new graph; the operators and tensors are
    shared with `graph`, whose own order is left as it is)."""
    check_order(graph, order)
    return with_operator_order(graph, order)


def _reachable_subgraphs(graph: Graph) -> set[int]:
    """Subgraphs TFLM runs: the main one and every subgraph a control-flow operator calls, transitively."""
    seen = {0}
    stack = [0]
    while stack:
        for op in graph.subgraphs[stack.pop()].operators:
            for called in op.called_subgraphs:
                if called not in seen:
                    seen.add(called)
                    stack.append(called)
    return seen


__all__ = [
    "Progress",
    "Schedule",
    "SubgraphProblem",
    "apply_order",
    "check_order",
    "find_schedule",
    "schedule_budget",
    "subgraph_problem",
]
