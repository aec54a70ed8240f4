"""The whole optimization of one model: schedule the operators, place the tensors, write the model with its
offline plan, and measure both models on the host TFLM. Used by `lowtide optimize` and the benchmark.

Every search runs to a budget of work units (`lowtide.budget`), scaled by `effort`, so the same model and options
write the same bytes on any machine; the time limit is only the safety net of the whole run."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lowtide import oracle
from lowtide.budget import DEFAULT_WALL_SECONDS, WallClock, WorkBudget
from lowtide.errors import LowtideError
from lowtide.export.offline_plan import ExportResult, export_optimized
from lowtide.memory import PlacedPlan, footprint_bound_bytes, placed_plan, tflm_plan
from lowtide.memory.lifetimes import Order, stored_order
from lowtide.memory.placement import Placement
from lowtide.model import Graph
from lowtide.model.operators import graph_macs
from lowtide.rewrite import (
    ArenaCandidate,
    RejectedCandidate,
    RewriteResult,
    Tiling,
    Weigher,
    fewer_patches,
    rewrite_auto,
)
from lowtide.schedule import Schedule, find_schedule
from lowtide.settings import Settings, settings_or_read
from lowtide.stale import StaleReport, check_stale
from lowtide.tflm import DEFAULT_CORE, Arena32Mode, Mcu32Arena, mcu32_arena
from lowtide.tflm.tree import KernelSet
from lowtide.validation import load_checked

# Work units (`lowtide.budget`) of scheduling and placing the graph at effort 1: the operator-order search may use
# SCHEDULE_SHARE of them (the default `find_schedule` budget), placement gets what it leaves (the default `place`
# budget, 1.5 deterministic seconds of CP-SAT, when the search used all of its share).
PLAN_UNITS = 6_000_000
SCHEDULE_SHARE = 0.5
# With --rewrite, the candidate graphs (original, tiled, fewer patches) share PLAN_UNITS one after another, each
# taking its share of what the ones before it left; the rewrite search and its variants (`lowtide.rewrite.variants`)
# have budgets of their own.
# Placement of the stored order, when the schedule's order placed above TFLM's own head.
STORED_PLACE_UNITS = 250_000

# (phase, fraction of the phase done or None, what it has found so far)
PhaseProgress = Callable[[str, float | None, str], None]


@dataclass(frozen=True)
class Verification:
    outputs_identical: bool  # every output byte of both models the same, on the same random inputs, in this run
    # Every byte that does not depend on stale memory (`stale`) the same: what a correct plan guarantees. Equal
    # to outputs_identical when the original model reads and leaves no stale memory.
    determined_identical: bool
    measured_head_bytes: int  # head the host TFLM reports for the optimized model
    measured_total_bytes: int
    stale: StaleReport  # which operators of the original model read or leave stale memory, and which output bytes


@dataclass(frozen=True)
class WeighedGraph:
    """A graph `optimize --rewrite` weighed: the original or a tiling of it, by the 32-bit arena it declares."""

    describe: str  # "the original graph", or its tilings (`Tiling.describe`)
    head_bytes: int  # placed head of its best order
    tail_bytes: int  # TFLM's persistent tail on the 32-bit MCU
    written: bool

    @property
    def declared_bytes(self) -> int:
        return self.head_bytes + self.tail_bytes

    def to_json(self) -> dict:
        return {
            "candidate": self.describe,
            "head_bytes": self.head_bytes,
            "tail_bytes": self.tail_bytes,
            "declared_bytes": self.declared_bytes,
            "written": self.written,
        }


@dataclass(frozen=True)
class OptimizeResult:
    model_path: Path
    stock_head_bytes: int  # measured: host TFLM on the original model
    stock_total_bytes: int
    stock_mcu32: Mcu32Arena  # the original model's TFLM arena on the 32-bit MCU
    stock_live_peak_bytes: int  # lower bound for the stored order
    schedule: Schedule
    placement: Placement
    order: Order  # the order written (the schedule's, or the stored one if that places better)
    export: ExportResult
    total_bytes: int  # measured: host TFLM on the optimized model (after one invoke when verified)
    verification: Verification | None  # only with verify=True
    wall_clock_cuts: tuple[str, ...]  # searches the time limit (the safety net) cut, in order: none, or the
    # written files may differ between runs
    seconds: float
    rewrite: RewriteResult | None = None  # only with rewrite=True
    rewrite_tilings: tuple[Tiling, ...] | None = None  # tilings of the written model; None: the original was kept
    rewrite_macs: int | None = None  # MACs of the written model when it is a rewritten one
    # Rewritten graphs dropped because the validator or TFLM refused them (in the search, when weighed, exported
    # or verified)
    rejected: tuple[RejectedCandidate, ...] = ()
    weighed: tuple[WeighedGraph, ...] = ()  # with rewrite=True: every graph weighed, smallest declared arena first
    footprint_bound_bytes: int | None = None  # only when the plan holds blocks in place (`lower_bound_bytes`)
    # What the model was taken in with (`Problem.warning`): optimizing relies on no shape an operator computes.
    warnings: tuple[str, ...] = ()

    @property
    def planned_head_bytes(self) -> int:
        return self.export.planned_head_bytes

    @property
    def lower_bound_bytes(self) -> int:
        """No operator order and no placement gives a smaller head: the schedule's bound, or where the plan holds
        CONCATENATION inputs inside their output, which that bound does not count, the weaker one of each
        operator's own bytes (`memory.footprint_bound_bytes`)."""
        return self.footprint_bound_bytes if self.footprint_bound_bytes is not None else self.schedule.lower_bound_bytes

    @property
    def optimal(self) -> bool:
        return self.planned_head_bytes == self.lower_bound_bytes

    @property
    def gap_bytes(self) -> int:
        """How far the planned head may be above the best any order and placement can do; 0 when proven."""
        return self.planned_head_bytes - self.lower_bound_bytes


def _same_outputs(
    a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...], compared: tuple[np.ndarray, ...] | None = None
) -> bool:
    """Bit for bit, or only on the bytes `compared` marks (a bool per byte of each output)."""
    if len(a) != len(b) or any(x.dtype != y.dtype or x.shape != y.shape for x, y in zip(a, b)):
        return False
    masks = compared or tuple(np.ones(x.nbytes, bool) for x in a)
    return all(
        np.array_equal(np.frombuffer(x.tobytes(), np.uint8)[m], np.frombuffer(y.tobytes(), np.uint8)[m])
        for x, y, m in zip(a, b, masks)
    )


def optimize_model(
    model_path: str | Path,
    out_path: str | Path,
    time_limit: float = DEFAULT_WALL_SECONDS,
    verify: bool = False,
    progress: PhaseProgress | None = None,
    rewrite: bool = False,
    max_mac_overhead: float = 0.20,
    kernels: KernelSet = KernelSet.REFERENCE,
    core: str = DEFAULT_CORE,
    arena32: Arena32Mode = Arena32Mode.AUTO,
    effort: float = 1.0,
    settings: Settings | None = None,
) -> OptimizeResult:
    """Optimize `model_path` into `out_path` (+ .h, .json), the header sized for TFLM on `core` with `kernels`.
    With `verify`, both models run on the host TFLM on the same random inputs; differing outputs or a head other
    than planned raise LowtideError. Files are written only once every check has passed: a failure leaves none.
    With `rewrite`, the graph is also rewritten (patch tiling within `max_mac_overhead` extra MACs); every
    rewritten graph is validated and run once on TFLM before it is weighed, and one that fails (there, or when
    exported and verified) is dropped with its reason (`OptimizeResult.rejected`) for the next, down to the
    original. The candidate with the smallest 32-bit arena is written. Every search gets `effort` times its budget
    of work units; `time_limit` (seconds) only stops searches that run far longer than that, and the result names
    them (`wall_clock_cuts`)."""
    started = time.monotonic()
    settings = settings_or_read(settings)
    clock = WallClock(time_limit)
    report = progress or (lambda phase, fraction, detail: None)
    model_path, out_path = Path(model_path), Path(out_path)
    if out_path.resolve() == model_path.resolve():
        raise LowtideError("output would overwrite the input model; choose another -o path", out_path)
    # Ordering and planning work on the declared shapes, which TFLM allocates; the rewrite tiles only operators
    # whose declared shapes are the ones they compute (`lowtide.rewrite.regions`).
    loaded = load_checked(model_path, settings, relies_on=frozenset())
    graph = loaded.graph
    inputs = oracle.random_inputs(graph)
    stock_run = oracle.run(graph.data, inputs, path=str(model_path), settings=settings) if verify else None
    stock = stock_run.arena if stock_run else oracle.allocate(graph.data, path=str(model_path), settings=settings)
    stock_plan = tflm_plan(graph)
    stock_mcu32 = mcu32_arena(graph, stock_plan.head_bytes, kernels, core, mode=arena32, settings=settings)

    def tail_bytes(g: Graph) -> int:
        return mcu32_arena(g, 0, kernels, core, mode=arena32, settings=settings).tail_bytes

    candidates = [ArenaCandidate(graph, stock_mcu32.tail_bytes, None)]
    rejected: list[RejectedCandidate] = []
    rewritten = None
    if rewrite:
        report("rewrite", None, "")
        rewritten = rewrite_auto(graph, max_mac_overhead, effort, clock, settings)
        report("rewrite", 1.0, rewritten.reason)
        rejected.extend(rewritten.rejected)
        if rewritten.rewritten:
            weigh = Weigher(str(model_path), kernels.value, tail_bytes, rejected, settings, loaded.passed)
            candidates += _tiled_candidates(graph, rewritten, weigh, effort, clock)
    plans = _planned(candidates, WorkBudget.of(effort * PLAN_UNITS, "plan", clock), effort, report)
    by_arena = sorted(range(len(plans)), key=lambda i: plans[i][2].placement.head_bytes + candidates[i].tail_bytes)
    exports = _Exports(graph, candidates, plans, out_path, kernels, core, arena32, settings, report)
    verify_run = _VerifyRun(stock_run, inputs, out_path, settings) if stock_run else None
    written = _first_verified(graph, candidates, by_arena, exports, verify_run, rejected, report)
    if written.verification and written.verification.stale.outputs_undefined:
        raise LowtideError(_undefined_outputs(written.verification), out_path)
    written.export.write()
    schedule, order, plan = plans[written.index]
    candidate = candidates[written.index]
    return OptimizeResult(
        model_path=model_path,
        stock_head_bytes=stock.head_bytes,
        stock_total_bytes=stock.total_bytes,
        stock_mcu32=stock_mcu32,
        stock_live_peak_bytes=stock_plan.live_peak_bytes,
        schedule=schedule,
        placement=plan.placement,
        order=order,
        export=written.export,
        total_bytes=(
            written.verification.measured_total_bytes if written.verification else written.export.measured_total_bytes
        ),
        verification=written.verification,
        wall_clock_cuts=tuple(clock.cuts),
        seconds=time.monotonic() - started,
        rewrite=rewritten,
        rewrite_tilings=candidate.tilings,
        rewrite_macs=graph_macs(candidate.graph) if candidate.tilings else None,
        rejected=tuple(rejected),
        weighed=tuple(
            WeighedGraph(
                candidates[i].describe(),
                plans[i][2].placement.head_bytes,
                candidates[i].tail_bytes,
                i == written.index,
            )
            for i in by_arena
        )
        if rewrite
        else (),
        footprint_bound_bytes=footprint_bound_bytes(candidate.graph) if plan.blocks else None,
        warnings=tuple(w.warning for w in loaded.warnings),
    )


def _tiled_candidates(
    graph: Graph, rewritten: RewriteResult, weigh: Weigher, effort: float, clock: WallClock
) -> list[ArenaCandidate]:
    """The search's tiled graph and the one with fewer patches (`fewer_patches`), those the weigher keeps."""
    tiled = weigh(rewritten.model, rewritten.tilings)
    fewer = fewer_patches(graph, rewritten.tilings, weigh, effort, clock)
    return [c for c in (tiled, fewer) if c]


def _planned(
    candidates: list[ArenaCandidate], work: WorkBudget, effort: float, report: PhaseProgress
) -> list[tuple[Schedule, Order, PlacedPlan]]:
    """Each candidate graph scheduled and placed, each taking its share of what the ones before it left of `work`.
    Tiling shrinks the head but adds operators and tensors, whose persistent structs grow the tail: the caller
    writes the one with the smaller arena on a 32-bit MCU. The original is always a candidate, so rewriting can
    never end above plain optimization."""
    plans: list[tuple[Schedule, Order, PlacedPlan]] = []
    for candidate in candidates:
        share = work.share(1 / (len(candidates) - len(plans)))
        plans.append(_plan(candidate.graph, tflm_plan(candidate.graph).head_bytes, share, effort, report))
    return plans


class _Exports:
    """Each candidate exported at most once, when the choice reaches it."""

    def __init__(
        self,
        original: Graph,
        candidates: list[ArenaCandidate],
        plans: list[tuple[Schedule, Order, PlacedPlan]],
        out_path: Path,
        kernels: KernelSet,
        core: str,
        arena32: Arena32Mode,
        settings: Settings,
        report: PhaseProgress,
    ):
        self._original = original
        self._candidates, self._plans = candidates, plans
        self._out_path, self._kernels, self._core, self._arena32 = out_path, kernels, core, arena32
        self._settings, self._report = settings, report
        self._done: dict[int, ExportResult] = {}

    def __call__(self, index: int) -> ExportResult:
        if index not in self._done:
            self._report("export", None, "")
            _, order, plan = self._plans[index]
            export = export_optimized(
                self._candidates[index].graph,
                order,
                dict(zip(plan.buffers, plan.placement.offsets)),
                self._out_path,
                self._kernels,
                self._core,
                self._arena32,
                self._settings,
                plan.blocks,
                original=self._original,  # the model the user gave, which the candidate may be a rewrite of
            )
            if export.planned_head_bytes != plan.placement.head_bytes:  # both come from the greedy replica
                raise LowtideError(
                    f"internal error: placed head {plan.placement.head_bytes} B but plan head "
                    f"{export.planned_head_bytes} B",
                    self._out_path,
                )
            self._done[index] = export
        return self._done[index]


@dataclass(frozen=True)
class _Written:
    index: int  # of the candidate written
    export: ExportResult
    verification: Verification | None


@dataclass(frozen=True)
class _VerifyRun:
    """What `--verify` compares a written model with: the original's run on the host TFLM, on `inputs`."""

    stock_run: oracle.OracleRun
    inputs: list[np.ndarray]
    out_path: Path
    settings: Settings


def _first_verified(
    graph: Graph,
    candidates: list[ArenaCandidate],
    by_arena: list[int],
    exported: _Exports,
    verify: _VerifyRun | None,
    rejected: list[RejectedCandidate],
    report: PhaseProgress,
) -> _Written:
    """The candidate to write: the first by declared arena that exports (and verifies, with `verify`); a rewritten
    one that fails goes to `rejected` with its reason and the next is tried, down to the original, whose failure
    raises."""
    original = 0  # candidates[0], the graph as it came
    stale = None  # of the original model, computed once if a verification needs it
    for best in by_arena:
        candidate = candidates[best]
        try:
            export = exported(best)
            # Head + tail ranked the candidates, but the arena to declare can be larger: AllocateTensors' temporary
            # allocations may need more than a small planned head. The original is kept where it declares no more.
            if best != original and exported(original).arena_size_bytes <= export.arena_size_bytes:
                best, candidate, export = original, candidates[original], exported(original)
            verification = None
            if verify:
                report("verify", None, "")
                # Bytes that depend on stale memory differ between plans of the same model; only the others,
                # proven independent, must match.
                stale = stale or check_stale(graph, verify.inputs, verify.settings)
                verification = _verify(export, verify.stock_run, verify.inputs, stale, verify.out_path, verify.settings)
        except LowtideError as exc:
            if candidate.tilings is None:
                raise
            rejected.append(RejectedCandidate(candidate.describe(), exc.message))
            continue
        return _Written(best, export, verification)
    raise AssertionError("the original graph is always a candidate and raises where it fails")


def _verify(
    export: ExportResult,
    stock_run: oracle.OracleRun,
    inputs: list[np.ndarray],
    stale: StaleReport,
    out_path: Path,
    settings: Settings,
) -> Verification:
    """Run the exported model on the host TFLM: LowtideError unless its outputs match the original's (but for
    bytes that may depend on stale memory) and its head is the planned one. Where every output byte may, only
    the head is checked here: `optimize_model` then refuses the model, whose outputs nothing can verify."""
    after = oracle.run(export.model_data, inputs, path=str(out_path), settings=settings)
    verification = Verification(
        _same_outputs(stock_run.outputs, after.outputs),
        _same_outputs(stock_run.outputs, after.outputs, stale.output_determined),
        after.head_bytes,
        after.total_bytes,
        stale,
    )
    problems = []
    if not verification.determined_identical:
        problems.append(
            "outputs differ from the original model's"
            + ("" if stale.clean else " on bytes proven independent of stale memory")
        )
    if verification.measured_head_bytes != export.planned_head_bytes:
        problems.append(
            f"TFLM measured a head of {verification.measured_head_bytes:,} B, planned {export.planned_head_bytes:,} B"
        )
    if problems:
        raise LowtideError(f"verification failed: {'; '.join(problems)} (nothing written)", out_path)
    return verification


def _undefined_outputs(verification: Verification) -> str:
    """Why `--verify` cannot pass on a model none of whose output bytes is defined, and what it did check."""
    stale = verification.stale
    origins = "; ".join(s.describe() for s in stale.origins)
    fixes = "".join(f"; to make operator {s.op} deterministic, {s.fix}" for s in stale.origins if s.fix)
    return (
        f"cannot verify: the original model's outputs are themselves undefined under TFLM: every one of its "
        f"{stale.output_bytes:,} output bytes depends on stale memory ({origins}), so two plans, TFLM's own "
        f"among them, may give any outputs and none can be compared; what can be checked holds: no two tensors "
        f"live at once overlap, and TFLM measured the planned head ({verification.measured_head_bytes:,} B)"
        f"{fixes}; without --verify, optimize writes the model with the overlap check only (nothing written)"
    )


def _plan(
    graph: Graph, stock_head_bytes: int, work: WorkBudget, effort: float, report: PhaseProgress
) -> tuple[Schedule, Order, PlacedPlan]:
    """Best operator order, then the best placement of its buffers, within `work`."""
    report("schedule", 0.0, "")
    schedule = find_schedule(
        graph,
        work.share(SCHEDULE_SHARE, "schedule"),
        lambda fraction, peak: report("schedule", fraction, f"best live peak {peak:,} B"),
        in_place=True,
    )
    report("schedule", 1.0, f"live peak {schedule.live_peak_bytes:,} B")

    report("place", None, "")
    order = schedule.order
    plan = placed_plan(graph, order, work.share(1.0, "placement"))
    if plan.plain_head_bytes > stock_head_bytes:
        # A lower live peak does not guarantee a lower head if the placement search ran out of work; the stored
        # order always places at least as well as TFLM (its greedy planner is one of the heuristics). It is
        # taken unless CONCATENATION inputs inside their output placed the schedule's order lower still.
        stored = placed_plan(
            graph, stored_order(graph), WorkBudget.of(effort * STORED_PLACE_UNITS, "placement", work.clock)
        )
        if not plan.blocks or stored.placement.head_bytes <= plan.placement.head_bytes:
            order, plan = stored_order(graph), stored
    report("place", 1.0, f"head {plan.placement.head_bytes:,} B ({plan.placement.method})")
    return schedule, order, plan
