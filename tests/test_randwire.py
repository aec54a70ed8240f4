"""RandWire graphs from the builder, and the anytime scheduling for graphs the exact search cannot finish: the
minimum-cut bound and the budgeted descent against brute force, the result against the simple heuristics."""

from __future__ import annotations

import json
import math
import os

import pytest

from lowtide.budget import WorkBudget
from lowtide.memory import tflm_plan
from lowtide.model import read_model
from lowtide.oracle import random_inputs, run
from lowtide.schedule import find_schedule, schedule_budget, subgraph_problem
from lowtide.schedule.anytime import (
    CutLookahead,
    budgeted_descent,
    divide_at_cuts,
    ordered_pair_bound,
    step_cut,
    step_cuts,
)
from lowtide.schedule.problem import bits
from lowtide.schedule.search import Block, blocks, heuristic_order, simple_orders, solve_block
from lowtide.testing.zoo import RandWireSpec, randwire_model
from support.cli import lowtide_cli
from support.schedules import assert_reordered_model_runs_identically, assert_valid, random_graph, valid_orders


def unlimited() -> WorkBudget:
    """A budget only the wall clock ends: the searches run to completion."""
    return WorkBudget.of(math.inf, "test")


def best_simple_peak(graph, in_place: bool) -> int:
    """The best of the simple heuristics (stored, depth-first, greedy) over the whole main subgraph."""
    problem = subgraph_problem(graph, 0, in_place)
    return min(peak for peak, _ in simple_orders(problem, Block(0, problem.all_ops, 0)))


# ---- the builder's RandWire graphs -----------------------------------------------------------------------
@pytest.mark.parametrize("generator", ["ws", "er", "ba"])
@pytest.mark.parametrize("aggregation", ["concat", "add"])
def test_randwire_models_run_on_tflm_with_the_predicted_head(generator, aggregation):
    spec = RandWireSpec(generator, nodes=8, stages=2, aggregation=aggregation, channels=4, size=16, seed=3)
    data = randwire_model(spec)
    graph = read_model(data)
    opcodes = {op.opcode for op in graph.main.operators}
    assert {"CONV_2D", "DEPTHWISE_CONV_2D", "CONCATENATION" if aggregation == "concat" else "ADD"} <= opcodes
    measured = run(data, random_inputs(graph))
    assert measured.head_bytes == tflm_plan(graph).head_bytes
    assert randwire_model(spec) == data  # same spec, same bytes


@pytest.mark.parametrize(
    ("spec", "ops"),
    [
        (RandWireSpec("ws", 48, 2, "concat", seed=2), 250),
        (RandWireSpec("ba", 40, 2, "concat", seed=0), 233),
        (RandWireSpec("ws", 48, 2, "add", seed=1), 319),
    ],
)
def test_benchmark_randwire_graphs_have_hundreds_of_operators(spec, ops):
    assert read_model(randwire_model(spec)).operator_count == ops


# ---- the minimum-cut bound and the descent against brute force ---------------------------------------------
@pytest.mark.parametrize("seed", range(30))
def test_cut_bound_lies_between_the_step_bound_and_the_optimum(seed):
    graph = random_graph(op_count=7 + seed % 2, seed=seed, width=3, effects=seed % 3 == 0)
    best = min(tflm_plan(graph, {0: order}).live_peak_bytes for order in valid_orders(graph))
    problem = subgraph_problem(graph, 0)
    for block in blocks(problem):
        for op in bits(block.ops):
            cut = step_cut(problem, block, op)
            assert problem.step_lower_bound(op) <= cut.bound <= best
            # The cut's "run before" set is a valid one: closed, with every ancestor and no descendant.
            assert cut.before & block.ops == cut.before
            assert problem.ancestors[op] & block.ops & ~cut.before == 0
            assert cut.before & (problem.descendants[op] | 1 << op) == 0
            assert all(problem.predecessors[o] & block.ops & ~cut.before == 0 for o in bits(cut.before))


def test_ordered_pair_bound_stays_below_the_exact_optimum_and_raises_the_cut_bound():
    """24 operators: too many for brute force, few enough for the exact search (itself checked against brute
    force in test_schedule.py) to finish."""
    raised = 0
    for seed in range(20):
        graph = random_graph(op_count=24, seed=seed, width=5)
        problem = subgraph_problem(graph, 0)
        block = Block(0, problem.all_ops, 0)
        exact = solve_block(problem, block, 0, unlimited(), heuristic_order(problem, block))
        assert exact.complete
        cuts = step_cuts(problem, block, unlimited())
        cut_bound = max(c.bound for c in cuts)
        pair_bound = ordered_pair_bound(problem, block, cuts, cut_bound, unlimited())
        assert cut_bound <= pair_bound <= exact.peak
        raised += pair_bound > cut_bound
    assert raised >= 2


@pytest.mark.parametrize("seed", range(20))
def test_cut_lookahead_stays_below_the_best_continuation_of_every_state(seed):
    """Brute force: from every set of operators some valid order runs first, the lookahead (fresh, and reusing
    the cuts of the states on the way there) is at most the lowest peak of the steps still to come."""
    graph = random_graph(op_count=8, seed=seed, width=3, effects=seed % 4 == 0)
    problem = subgraph_problem(graph, 0)
    block = Block(0, problem.all_ops, 0)
    lookahead = CutLookahead(problem, block, unlimited())
    best_after: dict[int, int] = {}
    paths = []
    for order in valid_orders(graph):
        done = 0
        path = []
        for k, op in enumerate(order):
            rest = problem.peak(order[k:], done)
            best_after[done] = min(best_after.get(done, rest), rest)
            path.append(done)
            done |= 1 << op
        paths.append(path)
    for done, best in best_after.items():
        bound, _ = lookahead(done, None, math.inf)
        assert bound <= best
        if not done:  # from the start: the highest cut, at least every operator's own bound
            assert bound >= max(problem.step_lower_bound(op) for op in range(problem.op_count))
    for path in paths[:50]:
        cuts = None
        for done in path:
            bound, cuts = lookahead(done, cuts, math.inf)
            assert bound <= best_after[done]


def test_budget_probes_with_the_lookahead_agree_with_the_exact_search():
    """24 operators (the exact search is checked against brute force in test_schedule.py): a probe below the
    optimum finds nothing and proves a bound above its budget but not above the optimum; a probe at the optimum
    finds an order within it; the exact search with the lookahead finds the same optimum."""
    for seed in range(12):
        graph = random_graph(op_count=24, seed=seed, width=5)
        problem = subgraph_problem(graph, 0)
        block = Block(0, problem.all_ops, 0)
        fallback = heuristic_order(problem, block)
        best = solve_block(problem, block, 0, unlimited(), fallback).peak
        lookahead = CutLookahead(problem, block, unlimited())
        assert solve_block(problem, block, 0, unlimited(), fallback, None, lookahead).peak == best
        below = solve_block(problem, block, best - 16, unlimited(), fallback, None, lookahead, beat=best)
        assert below.complete and below.peak > best - 16 and below.bound == best
        at = solve_block(problem, block, best, unlimited(), fallback, None, lookahead, beat=best + 16)
        assert at.peak == problem.peak(at.order) <= best
        if best >= 256:
            low = solve_block(problem, block, best // 2, unlimited(), fallback, None, lookahead, beat=best // 2 + 16)
            assert low.complete and best // 2 < low.bound <= best


@pytest.mark.parametrize("seed", range(30))
def test_budgeted_descent_reaches_and_proves_the_brute_force_optimum(seed):
    graph = random_graph(op_count=8, seed=seed, width=3)
    best = min(tflm_plan(graph, {0: order}).live_peak_bytes for order in valid_orders(graph))
    problem = subgraph_problem(graph, 0)
    block = Block(0, problem.all_ops, 0)
    start = heuristic_order(problem, block)
    descent = budgeted_descent(problem, block, 0, start, unlimited())
    assert descent.peak == descent.bound == best == problem.peak(descent.order)
    assert sorted(descent.order) == list(range(problem.op_count))


@pytest.mark.parametrize("seed", range(5))
def test_divide_and_conquer_is_valid_and_never_worse_than_the_heuristic_order(seed):
    graph = random_graph(op_count=80, seed=seed, width=5)
    problem = subgraph_problem(graph, 0)
    for block in blocks(problem):
        order, peak = divide_at_cuts(problem, block, 0, unlimited())
        assert sorted(order) == sorted(bits(block.ops))
        assert peak == problem.peak(order, block.before) <= heuristic_order(problem, block)[1]


# ---- find_schedule on RandWire graphs ----------------------------------------------------------------------
@pytest.mark.parametrize("spec", [RandWireSpec("ws", 48, 2, "concat", seed=2), RandWireSpec("ba", 40, 2, "concat")])
def test_randwire_schedule_is_within_ten_percent_and_never_worse_than_simple_heuristics(spec):
    graph = read_model(randwire_model(spec))
    assert graph.operator_count >= 200
    schedule = find_schedule(graph, in_place=True)
    assert_valid(graph, schedule.order)
    assert schedule.live_peak_bytes <= best_simple_peak(graph, in_place=True)
    assert schedule.lower_bound_bytes <= schedule.live_peak_bytes
    assert schedule.optimal or schedule.gap <= 0.10, (schedule.live_peak_bytes, schedule.lower_bound_bytes)


def test_randwire_graph_beyond_the_exact_search_is_proven_optimal_and_runs_identically():
    """Alone, the exact search does not prove this graph's optimum within the default budget (the per-operator
    bound is far below it); with the cut bounds it is proven within half of it. The reordered model on the host TFLM: outputs bit-identical,
    head as predicted."""
    graph = read_model(randwire_model(RandWireSpec("ws", 48, 2, "concat", seed=1)))
    work = schedule_budget()
    schedule = find_schedule(graph, work)
    assert schedule.optimal and not schedule.unfinished and schedule.gap_bytes == 0
    assert work.done < work.until / 2
    assert_valid(graph, schedule.order)
    assert schedule.live_peak_bytes == tflm_plan(graph, schedule.order).live_peak_bytes
    assert schedule.live_peak_bytes < best_simple_peak(graph, in_place=False)
    problem = subgraph_problem(graph, 0)
    assert schedule.lower_bound_bytes > max(problem.step_lower_bound(op) for op in range(problem.op_count))
    assert_reordered_model_runs_identically(graph, schedule.order)


def test_unfinished_randwire_graph_reports_its_gap():
    graph = read_model(randwire_model(RandWireSpec("ws", 48, 2, "add", seed=2)))
    schedule = find_schedule(graph, schedule_budget(0.3), in_place=True)
    assert schedule.unfinished and not schedule.optimal
    assert schedule.lower_bound_bytes < schedule.live_peak_bytes <= best_simple_peak(graph, in_place=True)
    assert schedule.gap_bytes == schedule.live_peak_bytes - schedule.lower_bound_bytes
    assert schedule.gap == schedule.gap_bytes / schedule.lower_bound_bytes


def test_optimize_cli_reports_the_gap_and_that_it_is_not_proven(tmp_path):
    model = tmp_path / "randwire.tflite"
    model.write_bytes(randwire_model(RandWireSpec("ws", 48, 2, "add", seed=2)))
    done = lowtide_cli("optimize", str(model), "-o", str(tmp_path / "out.tflite"), "--effort", "0.3", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["optimal"] is False and report["schedule_unfinished"] is True
    assert report["gap_bytes"] == report["after"]["planned_head_bytes"] - report["lower_bound_bytes"] > 0
    assert report["gap"] == round(report["gap_bytes"] / report["lower_bound_bytes"], 4)
    assert 0 < report["schedule_gap_bytes"] <= report["gap_bytes"]
    done = lowtide_cli(
        "optimize",
        str(model),
        "-o",
        str(tmp_path / "out.tflite"),
        "--effort",
        "0.3",
        env={**os.environ, "COLUMNS": "160"},
    )
    assert done.returncode == 0, done.stderr
    assert "lower bound" in done.stdout and "gap" in done.stdout
    assert "above the lower bound, not proven optimal" in done.stdout
