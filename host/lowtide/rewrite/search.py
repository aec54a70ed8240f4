"""Pick where to tile and how finely: the split that minimises the arena a user declares under a MAC budget: the
planned head and TFLM's persistent tail, which every patch's operators and tensors grow (`Objective`).

The structure narrows the search before anything is built:
- only regions between two cut tensors that hold the operator at the un-rewritten peak can lower it (live
  bytes counted as an offline plan can place them: in-place outputs inside the input they replace);
- each region has a floor no grid beats: the steps outside it keep their live bytes, the whole source is live
  until the first patch reads it, and the final CONCATENATION holds the target twice, or once where the patches
  are planned inside it (`lowtide.memory.in_place.concatenation_inputs`). Regions are tried lowest floor first
  and skipped once both floors reach the best figures found;
- grids whose halo recomputation goes over the MAC budget are dropped (their MACs factor into per-axis sums,
  so this costs no plan); of the rest every about-square grid (for the head alone, the finest few) and every
  stack of full-width strips are planned, each with the source kept whole (sliced per patch) and cut into row
  strips in place.
Every surviving candidate gets an exact live-memory figure for its emitted order (cheap arithmetic on the
plan), with and without the CONCATENATION inputs inside their output, and a floor of its tail counted from the
plan (`_tail_floor`); the best few by the first figure plus that floor are then
built and placed (`lowtide.memory.placed_plan`, the plan `lowtide optimize` writes), then the best few by the
second, which are kept only where they place strictly lower, and the scheduler may reorder the best one further.
Tiling one region can move the peak to another (the layers after it): the search then runs again on the tiled graph, with what is left of the MAC budget, for as
long as head + tail falls. The model returned carries its placement as its OfflineMemoryAllocation plan.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from dataclasses import dataclass

from lowtide import oracle
from lowtide.budget import WallClock, WorkBudget
from lowtide.memory import PlacedPlan, align_up, buffer_lifetimes, placed_plan, stored_order, tflm_plan
from lowtide.memory.in_place import aligned_blocks
from lowtide.memory.lifetimes import ALIGNMENT
from lowtide.memory.placement import check_no_overlap, offline_plan, placement_budget
from lowtide.memory.tail import EVAL_TENSOR_BYTES, opcode_tail_bytes, operator_tail_bytes, persistent_tail
from lowtide.model.edit import with_offline_plan
from lowtide.model.ir import Graph, Subgraph
from lowtide.model.operators import TILEABLE_OPCODES, graph_macs, op_macs
from lowtide.model.schema import ELEMENT_BYTES
from lowtide.model.validate import Reliance, reliances_passed
from lowtide.rewrite.emit import emit_tiled, is_window
from lowtide.rewrite.errors import NotApplicable
from lowtide.rewrite.regions import (
    Apply,
    Concat,
    Pad,
    Piece,
    Region,
    RegionEnds,
    Slice,
    Split,
    TilingPlan,
    cut_tensors,
    escaping_tensor,
    grid_macs,
    plan_tiling,
    region_between,
    region_end,
    whole_piece,
)
from lowtide.schedule import apply_order, find_schedule
from lowtide.settings import Settings, settings_or_read
from lowtide.validation import model_problems

# The operator each kind of step (but Apply and Pad) writes (`lowtide.rewrite.emit`).
_STEP_OPCODES = {Slice: "STRIDED_SLICE", Concat: "CONCATENATION", Split: "SPLIT_V"}
# Patches along each axis of the target, coarse to fine.
# TFLM's CONCATENATION takes at most 10 inputs (kMaxInputNum): at most 10 patches along each axis.
MAX_PATCHES_PER_AXIS = 10
GRID_STEPS = tuple(range(1, MAX_PATCHES_PER_AXIS + 1))
BUILT_CANDIDATES = 6
# Tilings of the first round whose own part peaks lowest, each continued by rounds of its own (`_rounds`' `joint`).
ALTERNATIVES = 2
# Regions around the peak end at most this many cut tensors past it, or at a tensor computed before that.
TARGET_CUTS_PAST_PEAK = 2
GRIDS_PLANNED_PER_REGION = 4  # about-square grids, the finest, where the search weighs the head alone
# Work units (`lowtide.budget`) of each search inside the rewrite search, at effort 1: a schedule of the graph
# (about 5 s of one quiet core, the former limit), a placement of each built candidate and of the model returned
# (1/8 and 1 deterministic second of CP-SAT: the former 1 s and 4 s, and enough to prove the tiled mobilenet_v2's
# placement, which needs 0.48). Fixed per call, so a round searches as much whatever the rounds before it took.
RESCHEDULE_UNITS = 1_250_000
PLACE_UNITS = 250_000
FINAL_PLACE_UNITS = 2_000_000


class Objective(enum.StrEnum):
    """What the rewrite search minimises."""

    # The arena a TFLM user declares: the head and TFLM's persistent tail, which every patch's operators and
    # tensors grow (`lowtide.memory.tail`): what `lowtide optimize` writes for.
    ARENA = "arena"
    # The head alone: the RAM of a runtime without TFLM's per-operator state (the compiled runtime).
    HEAD = "head"


@dataclass(frozen=True)
class _Limits:
    """The budgets of one rewrite search: `effort` times the fixed ones above, and the safety net; and what it
    minimises."""

    effort: float
    clock: WallClock
    settings: Settings  # the command's: the host TFLM's timeout for each candidate's run
    relies_on: frozenset[Reliance]  # what the original passes every check of, so every candidate must too
    objective: Objective

    def tail(self, graph: Graph) -> int:
        """The tail the search weighs beside the head: TFLM's, or none (`Objective.HEAD`)."""
        return persistent_tail(graph).tail_bytes if self.objective is Objective.ARENA else 0

    def tail_floor(self, graph: Graph, plan: TilingPlan, tail_bytes: int) -> int:
        return _tail_floor(graph, plan, tail_bytes) if self.objective is Objective.ARENA else 0

    def schedule(self) -> WorkBudget:
        return WorkBudget.of(self.effort * RESCHEDULE_UNITS, "rewrite: schedule", self.clock)

    def placement(self, units: float = PLACE_UNITS) -> WorkBudget:
        return WorkBudget.of(self.effort * units, "rewrite: placement", self.clock)

    def cut(self) -> bool:
        """Whether the safety net ends the search over regions and candidates here."""
        return self.clock.passed("rewrite: candidates")


@dataclass(frozen=True)
class Candidate:
    """One point explored: tile `source` -> `target` into `grid` patches."""

    source: str  # tensor names
    target: str
    grid: tuple[int, int]
    split_source: bool  # the source is cut into row strips in place first
    macs: int  # whole model, after rewriting
    live_peak_bytes: int  # live peak of the emitted order (exact arithmetic on the plan)
    head_bytes: int | None  # head lowtide's placement reaches on the built model; None when not built
    tail_bytes: int  # TFLM's persistent tail of the whole model after rewriting (`lowtide.memory.tail`); unbuilt:
    # a floor counted from the plan (`_tail_floor`)

    @property
    def declared_bytes(self) -> int:
        """The arena a user declares for it: the head (or where not built, the live peak, which no placement
        beats) and the tail."""
        return (self.head_bytes if self.head_bytes is not None else self.live_peak_bytes) + self.tail_bytes


@dataclass(frozen=True)
class Tiling:
    """One region run patch by patch: the tensors it goes from and to (by name, which rewriting keeps)."""

    source: str
    target: str
    grid: tuple[int, int]
    split_source: bool  # the source is cut into row strips in place first

    def describe(self) -> str:
        strips = " from row strips of the source" if self.split_source else ""
        return f"tiled {self.source} -> {self.target} as {self.grid[0]}x{self.grid[1]} patches{strips}"


@dataclass(frozen=True)
class RejectedCandidate:
    """A rewritten graph dropped before it was weighed: lowtide's validator or TFLM (Prepare, one Invoke)
    refused it."""

    candidate: str  # what was tried (`Tiling.describe`)
    reason: str  # the validator's problem or TFLM's own log line

    def to_json(self) -> dict[str, str]:
        return {"candidate": self.candidate, "reason": self.reason}


@dataclass(frozen=True)
class RewriteResult:
    model: Graph  # the rewritten graph with its offline plan, or the original in its best order when rewriting
    # does not help
    rewritten: bool
    reason: str  # what was done, or why nothing was
    head_bytes: int  # head of `model` in its stored order as lowtide places it (what an offline plan gives TFLM)
    original_head_bytes: int  # planned head of the original in its best order (scheduler's or stored)
    stock_head_bytes: int  # planned head of the original in its stored order
    tail_bytes: int  # TFLM's persistent tail of `model` on a 32-bit core (`lowtide.memory.tail`)
    original_tail_bytes: int  # the same of the original
    macs_before: int
    macs_after: int
    tilings: tuple[Tiling, ...]  # applied one after the other (`apply_tilings`); empty when not rewritten
    pareto: tuple[Candidate, ...]  # explored points no other point beats on both head (or live peak) and MACs
    wall_clock_cut: bool  # the safety net (`WallClock`) ended a search inside: the result may differ between runs
    seconds: float
    rejected: tuple[RejectedCandidate, ...] = ()  # built candidates the validator or TFLM refused

    @property
    def declared_bytes(self) -> int:
        """The 32-bit arena `model` needs: head + tail, what the search minimises."""
        return self.head_bytes + self.tail_bytes

    @property
    def original_declared_bytes(self) -> int:
        return self.original_head_bytes + self.original_tail_bytes

    @property
    def mac_overhead(self) -> float:
        return self.macs_after / self.macs_before - 1.0 if self.macs_before else 0.0


def tile(
    graph: Graph,
    source: int,
    target: int,
    grid: tuple[int, int],
    order: list[int] | None = None,
    split_source: bool = False,
) -> Graph:
    """The graph with the region `source` -> `target` (main-subgraph tensor indices; `target` a cut tensor, and
    what the region reads from before `source` held whole beside it) run as `grid` (rows, columns) patches. `order`: main-subgraph operator order for the rest (default: stored).
    `split_source`: cut the source into row strips in place first (needs an offline plan: `lowtide optimize`)."""
    escaping = escaping_tensor(graph, source, target)
    if escaping:
        raise NotApplicable(f"cannot tile tensor {source} -> {target}: {escaping}")
    try:
        region = region_between(graph, source, target)
    except NotApplicable as refused:
        raise NotApplicable(f"cannot tile tensor {source} -> {target}: {refused.message}") from None
    height, width = graph.main.tensors[target].shape[1:3]
    limit = (min(height, MAX_PATCHES_PER_AXIS), min(width, MAX_PATCHES_PER_AXIS))
    if not (1 <= grid[0] <= limit[0] and 1 <= grid[1] <= limit[1]) or grid == (1, 1):
        raise NotApplicable(
            f"grid {grid} does not fit a {height}x{width} target (2 to {MAX_PATCHES_PER_AXIS} patches along an axis)"
        )
    return _emit(graph, plan_tiling(graph, region, grid, split_source), order)


def apply_tilings(graph: Graph, tilings: tuple[Tiling, ...]) -> Graph:
    """The graph with each tiling applied in turn (each to the result of the ones before it)."""
    current = graph
    for tiling in tilings:
        names = {t.name: t.index for t in current.main.tensors}
        missing = [name for name in (tiling.source, tiling.target) if name not in names]
        if missing:
            raise NotApplicable(f"cannot tile: no tensor named {missing[0]!r}")
        current = tile(
            current, names[tiling.source], names[tiling.target], tiling.grid, split_source=tiling.split_source
        )
    return current


def rewrite_auto(
    graph: Graph,
    max_mac_overhead: float = 0.20,
    effort: float = 1.0,
    clock: WallClock | None = None,
    settings: Settings | None = None,
    objective: Objective = Objective.ARENA,
) -> RewriteResult:
    """Tile the region around the memory peak; when the peak moves to another tileable region, tile that too,
    as long as the declared arena (head + TFLM's persistent tail, which every patch's operators and tensors grow)
    keeps falling and the MACs stay within `max_mac_overhead` of the original's. Every search inside gets
    `effort` times its fixed budget; `clock` is the safety net (default `WallClock()`). `objective`: what
    falls, the declared arena or (`Objective.HEAD`) the head alone, and then every tail reported is 0."""
    started = time.monotonic()
    settings = settings_or_read(settings)
    limits = _Limits(
        effort, clock or WallClock(), settings, reliances_passed(model_problems(graph, settings)), objective
    )

    def wall_clock_cut() -> bool:
        return any(where.startswith("rewrite") for where in limits.clock.cuts)

    stock = tflm_plan(graph)
    macs_before = graph_macs(graph)
    original_tail = limits.tail(graph)
    budget = macs_before * (1.0 + max_mac_overhead)
    explored: list[Candidate] = []
    rejected: list[RejectedCandidate] = []
    rounds, found, joined = _rounds(graph, budget, limits, explored, rejected, joint=True)
    if not rounds and not joined:  # `found` is the first round: the original in its best order, and why untiled
        return RewriteResult(
            found.base_model,
            False,
            found.reason,
            found.base_head_bytes,
            found.base_head_bytes,
            stock.head_bytes,
            original_tail,
            original_tail,
            macs_before,
            macs_before,
            (),
            _pareto(explored),
            wall_clock_cut(),
            time.monotonic() - started,
            tuple(rejected),
        )
    original_head = (rounds or joined)[0].base_head_bytes
    chains = [_second_looks(graph, rounds, budget, limits, explored, rejected)] if rounds else []
    chains += [(joined[-1], tuple(r.tiling for r in joined if r.tiling is not None))] if joined else []
    # The rounds that followed an alternative of the first round win where they end strictly lower (`min` keeps
    # the first of equals).
    final, tilings = min(chains, key=lambda chain: chain[0].declared_bytes)
    head, planned = planned_model(final.model, limits.placement(FINAL_PLACE_UNITS))
    reason = "; then ".join(t.describe() for t in tilings)
    ends = [note for note in (region_end(graph, t.target) for t in tilings) if note]
    if ends:
        reason += " (" + "; ".join(ends) + ")"
    return RewriteResult(
        planned,
        True,
        reason,
        head,
        original_head,
        stock.head_bytes,
        final.tail_bytes,
        original_tail,
        macs_before,
        final.macs,
        tilings,
        _pareto(explored),
        wall_clock_cut(),
        time.monotonic() - started,
        tuple(rejected),
    )


def _second_looks(
    graph: Graph,
    rounds: list[_Round],
    budget: float,
    limits: _Limits,
    explored: list[Candidate],
    rejected: list[RejectedCandidate],
) -> tuple[_Round, tuple[Tiling, ...]]:
    """The last of `rounds` (the first tiling `graph`), or where a second look at each region in turn places
    lower, that look's last round; and the tilings that lead to it."""
    final = rounds[-1]
    tilings = tuple(r.tiling for r in rounds if r.tiling is not None)  # every round after the first tiled
    current, current_tilings = final, tilings
    for _ in range(len(tilings)):
        # The first region was tiled while the peak was still elsewhere, so its grid was chosen for the MACs it
        # saves; with the later regions tiled first, its own peak is what counts, and it may get a finer grid.
        # Each region gets that second look once, in turn, while head + tail does not rise: two regions whose
        # peaks are level only go lower together, so a look that leaves it where it was still counts (its
        # region's own peak fell). The lowest head + tail seen is kept.
        if len(current_tilings) < 2 or limits.cut():
            break
        try:
            later = apply_tilings(graph, current_tilings[1:])
        except NotApplicable:
            break
        again = _rounds(later, budget, limits, explored, rejected, level=True)[0]
        if not again or again[-1].declared_bytes > current.declared_bytes:
            break
        current = again[-1]
        current_tilings = current_tilings[1:] + tuple(r.tiling for r in again if r.tiling is not None)
        if current.declared_bytes < final.declared_bytes:
            final, tilings = current, current_tilings
    return final, tilings


def _rounds(
    graph: Graph,
    budget: float,
    limits: _Limits,
    explored: list[Candidate],
    rejected: list[RejectedCandidate],
    level: bool = False,
    joint: bool = False,
) -> tuple[list[_Round], _Round, list[_Round]]:
    """Tile around the peak, then around the peak of the tiled graph, for as long as head + tail falls: the rounds
    that lowered it, the last round searched, and the rounds that followed one of the first round's alternatives
    and ended lowest, where they end below the first rounds (else none; two regions whose peaks compete only go
    lower together). Adds every point explored to `explored`, and every built candidate refused to `rejected`.
    `level`: the first round is a second look (`_tile_peak`). `joint`: the first round also builds its
    alternatives."""
    first = _tile_peak(graph, budget, limits, level, alternatives=joint)
    explored.extend(first.explored)
    rejected.extend(first.rejected)
    rounds, last = _rounds_after([first], budget, limits, explored, rejected) if first.tiling else ([], first)
    reached = rounds[-1].declared_bytes if rounds else first.base_declared_bytes
    # An alternative's own tiled part stays in every later round: below the head reached, or it cannot win. Its
    # grid was chosen by live bytes, which do not say how well the patches place: each gets its chain.
    joined: list[_Round] = []
    for other in first.alternatives:
        if other.own_peak_bytes + other.tail_bytes >= reached or limits.cut():
            continue
        chain, _ = _rounds_after([other], budget, limits, explored, rejected)
        if len(chain) > 1 and chain[-1].declared_bytes < (joined[-1].declared_bytes if joined else reached):
            joined = chain
    return rounds, last, joined


def _rounds_after(
    rounds: list[_Round],
    budget: float,
    limits: _Limits,
    explored: list[Candidate],
    rejected: list[RejectedCandidate],
) -> tuple[list[_Round], _Round]:
    """`rounds` continued on the tiled graph of the last, for as long as head + tail falls (`_rounds`)."""
    rounds = list(rounds)
    while True:  # a round without a better tiling ends the loop
        found = _tile_peak(rounds[-1].model, budget, limits)
        explored.extend(found.explored)
        rejected.extend(found.rejected)
        if found.tiling is None or found.declared_bytes >= rounds[-1].declared_bytes:
            return rounds, found
        rounds.append(found)


@dataclass(frozen=True)
class _Round:
    """One search around the peak of one graph."""

    base_model: Graph  # the graph in its best order (scheduler's or stored), untiled
    base_head_bytes: int  # TFLM's greedy head of that order
    base_tail_bytes: int  # TFLM's persistent tail of base_model (`lowtide.memory.tail`)
    tiling: Tiling | None  # the best tiling found, None if none beats the base
    model: Graph  # the tiled graph (no offline plan), or base_model
    head_bytes: int  # placed head of `model`
    tail_bytes: int  # TFLM's persistent tail of `model`
    macs: int  # of `model`
    reason: str  # why nothing was tiled
    explored: tuple[Candidate, ...]
    rejected: tuple[RejectedCandidate, ...] = ()
    # Where asked (`_rounds`' `joint`): the built tilings whose own tiled parts peak lowest (`ALTERNATIVES`) while
    # the peak outside their region sets the live peak, but the best; each with its own peak. Tiling that region
    # first leaves the peak outside it for the next round, where the best tiling may leave it inside.
    alternatives: tuple[_Round, ...] = ()
    own_peak_bytes: int = 0

    @property
    def declared_bytes(self) -> int:
        """What the search minimises: the arena a user declares for `model`, head + tail."""
        return self.head_bytes + self.tail_bytes

    @property
    def base_declared_bytes(self) -> int:
        return self.base_head_bytes + self.base_tail_bytes


def _tile_peak(graph: Graph, budget: float, limits: _Limits, level: bool = False, alternatives: bool = False) -> _Round:
    """The best tiling of one region around the peak of `graph` whose whole-model MACs stay within `budget`;
    `level`: among grids of the same live peak, the one whose tiled part peaks lowest, not the fewest MACs;
    `alternatives`: also the `_Round.alternatives`, for which regions are planned whose own floor is below the
    live peak reached, whatever the peak outside them."""
    sg = graph.main
    stock = tflm_plan(graph)
    schedule = find_schedule(graph, limits.schedule(), in_place=True)
    # The scheduler minimises the live peak; TFLM's greedy planner can still place the stored order tighter.
    base_orders = schedule.order if schedule.head_bytes < stock.head_bytes else stored_order(graph)
    base_order = base_orders[0]
    base = tflm_plan(graph, base_orders)
    base_steps = buffer_lifetimes(graph, base_orders, in_place=True)[1]
    # The same with the blocks only the order allows (CONCATENATION inputs inside their output, ...), which the
    # placement also plans where that lowers the head (`placed_plan`): the peak to tile is then theirs.
    assembled_steps = buffer_lifetimes(graph, base_orders, in_place=True, blocks=True)[1]
    macs_before = graph_macs(graph)
    base_model = apply_order(graph, base_orders)
    base_tail = limits.tail(graph)
    base_declared = base.head_bytes + base_tail

    rejected: list[RejectedCandidate] = []

    def unchanged(reason: str, explored: tuple[Candidate, ...] = ()) -> _Round:
        return _Round(
            base_model,
            base.head_bytes,
            base_tail,
            None,
            base_model,
            base.head_bytes,
            base_tail,
            macs_before,
            reason,
            explored,
            tuple(rejected),
        )

    if not base_steps or not any(step.live_bytes for step in base_steps):
        return unchanged("the model has no activations to tile")
    assembled_peak = max(assembled_steps, key=lambda step: step.live_bytes)
    peak = max(base_steps, key=lambda step: step.live_bytes)
    peak = assembled_peak if assembled_peak.live_bytes < peak.live_bytes else peak
    if peak.subgraph != 0:
        return unchanged("the memory peak is inside a called subgraph")
    regions, reason = _regions_at_peak(graph, peak.op)
    if not regions:
        return unchanged(reason)

    outside_live = {step.op: step.live_bytes for step in base_steps if step.subgraph == 0}
    outside_assembled = {step.op: step.live_bytes for step in assembled_steps if step.subgraph == 0}
    explored: list[tuple[Candidate, TilingPlan]] = []
    tiled_peaks: dict[int, int] = {}  # by index into `explored`: the live peak of the tiled part alone
    own_peaks: dict[int, int] = {}  # the same, the lower with and without the CONCATENATION inputs inside it
    assembled_live: dict[int, int] = {}  # by index into `explored`: the live peak with `assembled_steps`' blocks
    # The objective is the declared arena, head + tail: the lowest live peak + tail so far, without and with
    # those blocks. Tiling adds operators, so no region's floor + the untiled tail beats it.
    best_live = best_assembled = base_declared
    floors = zip(
        _region_floors(sg, regions, outside_live),
        _region_floors(sg, regions, outside_assembled, assembled=True),
        _region_floors(sg, regions, {}, assembled=True),
    )
    for (floor, outside, region), (assembled_floor, assembled_outside, _), (own_floor, _, _) in sorted(
        floors, key=lambda f: f[0][0]
    ):
        if limits.cut():
            break
        if (
            floor + base_tail >= best_live
            and assembled_floor + base_tail >= best_assembled
            and not (alternatives and own_floor + base_tail < best_live)
        ):
            continue
        region_macs = sum(op_macs(sg, sg.operators[rop.op]) for rop in region.ops)
        height, width = sg.tensors[region.target].shape[1:3]

        def affordable(
            grids: list[tuple[int, int]], region: Region = region, region_macs: int = region_macs
        ) -> list[tuple[int, int]]:
            return [grid for grid in grids if macs_before - region_macs + grid_macs(graph, region, grid) <= budget]

        # Finer grids shrink the patches' buffers until the halos dominate, and grow the tail with every patch:
        # for the head alone plan the finest few affordable, for the declared arena every affordable one; and
        # every affordable stack of full-width strips (where cutting the source into strips pays most).
        grids = affordable(_grids(height, width))
        grids = grids[-GRIDS_PLANNED_PER_REGION:] if limits.objective is Objective.HEAD else grids
        grids += [grid for grid in affordable(_strip_grids(height)) if grid not in grids]
        for grid in grids:
            for split_source in (False, True):
                if limits.cut():
                    break
                plan = plan_tiling(graph, region, grid, split_source)
                if split_source and not plan.split_source:
                    continue  # too few rows to cut: the same plan as without
                tiled = _tiled_live_peak(sg, plan)
                live = max(outside, tiled)
                tail = limits.tail_floor(graph, plan, base_tail)
                best_live = min(best_live, live + tail)
                tiled_assembled = _tiled_live_peak(sg, plan, assembled=True)
                assembled_live[len(explored)] = max(assembled_outside, tiled_assembled)
                best_assembled = min(best_assembled, assembled_live[len(explored)] + tail)
                explored.append(
                    (
                        Candidate(
                            sg.tensors[region.source].name,
                            sg.tensors[region.target].name,
                            grid,
                            plan.split_source,
                            macs_before - region_macs + plan.macs,
                            live,
                            None,
                            tail,
                        ),
                        plan,
                    )
                )
                tiled_peaks[len(explored) - 1] = tiled
                own_peaks[len(explored) - 1] = min(tiled, tiled_assembled)
    if not explored:
        return unchanged(
            f"no tiling of the {len(regions)} regions around the peak fits the budget or beats "
            f"{base_declared:,} bytes (head + tail)"
        )

    # Lowest declared arena first (live peak + tail). In a second look (`rewrite_auto`), where the peak outside
    # the region sets the live peak, the region's own peak breaks the tie: its peak is level with another
    # region's, and both only go lower together. Otherwise the fewest MACs do (finer grids also cost the
    # schedule and the placement more).
    ranked = sorted(
        range(len(explored)),
        key=lambda i: (explored[i][0].declared_bytes, tiled_peaks[i] if level else 0, explored[i][0].macs),
    )
    explored = [explored[i] for i in ranked]
    assembled_live = {new: assembled_live[old] for new, old in enumerate(ranked)}
    own_peaks = {new: own_peaks[old] for new, old in enumerate(ranked)}
    best: tuple[int, Graph, Candidate] | None = None
    built: dict[int, tuple[int, Graph, Candidate]] = {}
    tried: set[int] = set()

    def build(index: int) -> None:
        nonlocal best
        tried.add(index)
        candidate, plan = explored[index]
        tiled = _emit(graph, plan, base_order)
        # the host TFLM runs in a child: bytes
        refused = oracle.refusal(tiled.data, graph.source, limits.settings, limits.relies_on)
        if refused:
            rejected.append(RejectedCandidate(_tiling(candidate).describe(), refused))
            return
        head = _placed_head(tiled, limits)
        built[index] = (head, tiled, _with_head(candidate, head, limits.tail(tiled)))
        if best is None or head + candidate.tail_bytes < best[0] + best[2].tail_bytes:
            best = built[index]

    def beaten(declared_at_least: int) -> bool:
        """Whether the search ends before a point no placement takes below `declared_at_least`."""
        return best is not None and (limits.cut() or declared_at_least >= best[0] + best[2].tail_bytes)

    for index in _to_build(graph, explored):
        if beaten(explored[index][0].declared_bytes):
            break
        build(index)
    # Then the points whose live peak falls most with CONCATENATION inputs inside their output: after the others,
    # so that one of them is taken only where it places strictly lower.
    assembling = sorted(
        (i for i in range(len(explored)) if assembled_live[i] < explored[i][0].live_peak_bytes and i not in tried),
        key=lambda i: (assembled_live[i] + explored[i][0].tail_bytes, explored[i][0].macs),
    )
    for index in assembling[:BUILT_CANDIDATES]:
        if beaten(assembled_live[index] + explored[index][0].tail_bytes):
            break
        build(index)
    # The alternatives: the lowest own tiled peaks among points whose live peak is set outside their region.
    outside_set = [i for i in range(len(explored)) if own_peaks[i] < explored[i][0].live_peak_bytes]
    others = (
        sorted(outside_set, key=lambda i: (own_peaks[i] + explored[i][0].tail_bytes, explored[i][0].macs))[
            :ALTERNATIVES
        ]
        if alternatives
        else []
    )
    for index in others:
        if index not in tried and not limits.cut():
            build(index)
    points = tuple(built[i][2] if i in built else c for i, (c, _) in enumerate(explored))
    if best is None:
        return unchanged(f"TFLM or lowtide's validator refused every tiling built ({rejected[0].reason})", points)
    head, rewritten, candidate = best
    # The scheduler may find a better order of the rewritten graph than patch-major.
    if not limits.cut():
        reordered = find_schedule(rewritten, limits.schedule(), in_place=True)
        if reordered.live_peak_bytes < head:
            reordered_graph = apply_order(rewritten, reordered.order)
            reordered_head = _placed_head(reordered_graph, limits)
            if reordered_head < head:
                rewritten, head = reordered_graph, reordered_head
    joint: list[_Round] = []
    for index in others:
        if index in built and built[index] is not best:
            other_head, other_graph, other = built[index]
            joint.append(
                _Round(
                    base_model,
                    base.head_bytes,
                    base_tail,
                    _tiling(other),
                    other_graph,
                    other_head,
                    other.tail_bytes,
                    other.macs,
                    "",
                    (),
                    own_peak_bytes=own_peaks[index],
                )
            )
    if head + candidate.tail_bytes >= base_declared:
        return dataclasses.replace(
            unchanged(
                f"the best tiling found declares {head + candidate.tail_bytes:,} bytes (head {head:,} + tail "
                f"{candidate.tail_bytes:,}), not below {base_declared:,}",
                points,
            ),
            alternatives=tuple(joint),
        )
    return _Round(
        base_model,
        base.head_bytes,
        base_tail,
        _tiling(candidate),
        rewritten,
        head,
        candidate.tail_bytes,
        candidate.macs,
        "",
        points,
        tuple(rejected),
        tuple(joint),
    )


def _to_build(graph: Graph, explored: list[tuple[Candidate, TilingPlan]]) -> list[int]:
    """Which of the explored points (lowest live peak + tail first) to build: the first `BUILT_CANDIDATES`, and the first
    as many of regions between two cut tensors. Regions holding skip tensors or ending before a cut add points
    whose live peak is low but whose placement may not be, and must not crowd out the plain regions' best."""
    cuts = set(cut_tensors(graph))
    plain = [i for i, (_, plan) in enumerate(explored) if plan.region.source in cuts and plan.region.target in cuts]
    return sorted(set(range(min(BUILT_CANDIDATES, len(explored)))) | set(plain[:BUILT_CANDIDATES]))


def _tiling(candidate: Candidate) -> Tiling:
    return Tiling(candidate.source, candidate.target, candidate.grid, candidate.split_source)


def _placement(graph: Graph, work: WorkBudget | None = None) -> PlacedPlan:
    """lowtide's placement of the stored order, in-place outputs inside their inputs and CONCATENATION inputs
    inside their output where that places lower: the offline plan `lowtide optimize` writes (`work`: default
    `place`'s, and as much again for those, `placed_plan`)."""
    return placed_plan(graph, None, work or placement_budget())


def _placed_head(graph: Graph, limits: _Limits) -> int:
    return _placement(graph, limits.placement()).placement.head_bytes


def planned_model(graph: Graph, work: WorkBudget | None = None) -> tuple[int, Graph]:
    """The graph with its placement as an OfflineMemoryAllocation plan, so stock TFLM allocates exactly that
    head (a SPLIT_V's strips only share their source's bytes through such a plan); and the head."""
    plan = _placement(graph, work)
    check_no_overlap(plan.buffers, plan.placement.offsets)
    return plan.placement.head_bytes, with_offline_plan(
        graph, offline_plan(graph, plan.buffers, plan.placement.offsets)
    )


def _region_floors(
    sg: Subgraph, regions: list[Region], outside_live: dict[int, int], assembled: bool = False
) -> list[tuple[int, int, Region]]:
    """(floor, outside peak, region): no grid of a region plans below its floor. Steps outside the region keep
    their live bytes; the source is whole until the first patch reads it (cut into strips or not); the final
    CONCATENATION holds the target twice, or once where its inputs sit inside it (`assembled`)."""
    floors = []
    for region in regions:
        region_ops = {rop.op for rop in region.ops} | set(region.folded_pads) | set(region.broadcast_ops)
        outside = max((b for op, b in outside_live.items() if op not in region_ops), default=0)
        source = sum(_piece_bytes(sg, _whole(sg, t)) for t in region.held_whole)
        target = _piece_bytes(sg, _whole(sg, region.target))
        floors.append((max(outside, (1 if assembled else 2) * target, source), outside, region))
    return floors


def _grids(height: int, width: int) -> list[tuple[int, int]]:
    """Patch grids with about square patches, fewest patches first."""
    grids = {
        (rows, cols)
        for rows in GRID_STEPS
        for cols in GRID_STEPS
        if rows <= height
        and cols <= width
        and (rows, cols) != (1, 1)
        and abs(rows * width - cols * height) <= max(height, width)
    }
    return sorted(grids, key=lambda g: (g[0] * g[1], g))


def _strip_grids(height: int) -> list[tuple[int, int]]:
    """Stacks of full-width strips, fewest first."""
    return [(rows, 1) for rows in GRID_STEPS if 1 < rows <= height]


def _regions_at_peak(graph: Graph, peak_op: int) -> tuple[list[Region], str]:
    """Tileable regions whose operators include the one at the memory peak, shallow targets first."""
    sg = graph.main
    cuts = cut_tensors(graph)
    if not cuts:
        return [], "no tensor cuts the graph in two (no single spatial prefix)"
    producers = sg.producers()
    sources = [t for t in _sources(graph, cuts, peak_op) if _feeds_spatial(graph, t)]
    regions: list[Region] = []
    refusals: list[str] = []  # why regions from each source end before the peak's tensors are done, each once
    ends = RegionEnds(graph)
    for source in sources:
        for target in _targets(graph, ends, cuts, source, peak_op):
            if producers.get(target, -1) < peak_op or sg.operators[producers[target]].opcode == "PAD":
                continue  # a PAD's output is reassembled unpadded by its consumer's patches instead
            try:
                region = region_between(graph, source, target)
            except NotApplicable as refused:
                if producers.get(target, -1) > peak_op:
                    refusals += [refused.message] if refused.message not in refusals else []
                    break
                continue
            if peak_op in {rop.op for rop in region.ops} | set(region.folded_pads) | set(region.broadcast_ops):
                regions.append(region)
    reason = f"the peak (operator {peak_op}, {sg.operators[peak_op].opcode}) is in no tileable region"
    return regions, ("" if regions else ": ".join([reason, "; ".join(refusals)] if refusals else [reason]))


def _sources(graph: Graph, cuts: list[int], peak_op: int) -> list[int]:
    """Where a region around the peak may start: the cut tensors before it, and every 4-D activation computed
    after the last of them and before the peak (a region starting there holds what it reads from before it
    whole: a decoder's skip tensors, a residual block's input)."""
    sg = graph.main
    producers = sg.producers()
    before = [t for t in cuts if producers.get(t, -1) < peak_op]
    last = producers.get(before[-1], -1) if before else -1
    inside = [
        t
        for op in sg.operators[last + 1 : peak_op]
        for t in op.outputs
        if t not in cuts
        and sg.tensors[t].planned
        and len(sg.tensors[t].shape) == 4
        and not is_window(sg.tensors[t].name)
    ]
    return before + inside


def _targets(graph: Graph, ends: RegionEnds, cuts: list[int], source: int, peak_op: int) -> list[int]:
    """Where a region from `source` around the peak may end, nearest first: the cut tensors after it, and the
    4-D activations computed from the peak up to the second cut after it that no later operator reads but
    through them (`escaping_tensor`: an encoder's block output while its input is still read by the decoder, a
    backbone's stage read again by the FPN)."""
    sg = graph.main
    producers = sg.producers()
    after = [t for t in cuts if producers.get(t, -1) > producers.get(source, -1)]
    later = [producers[t] for t in after if producers[t] >= peak_op]
    end = later[TARGET_CUTS_PAST_PEAK - 1] if len(later) >= TARGET_CUTS_PAST_PEAK else len(sg.operators)
    inside = [
        t
        for op in sg.operators[peak_op:end]
        for t in op.outputs
        if t not in cuts
        and sg.tensors[t].planned
        and len(sg.tensors[t].shape) == 4
        and not is_window(sg.tensors[t].name)
        and not ends.escaping(source, t)
    ]
    return sorted(set(after) | set(inside), key=lambda t: producers[t])


def _feeds_spatial(graph: Graph, tensor: int) -> bool:
    sg = graph.main
    return any(sg.operators[c].opcode in TILEABLE_OPCODES for c in sg.consumers().get(tensor, []))


def _emit(graph: Graph, plan: TilingPlan, order: list[int] | None) -> Graph:
    """The plan placed in `order`: operators the source depends on, the region's broadcast branch, the patches,
    then everything else."""
    sg = graph.main
    order = order if order is not None else list(range(len(sg.operators)))
    region_ops = {rop.op for rop in plan.region.ops} | set(plan.region.folded_pads) | set(plan.region.broadcast_ops)
    producers = sg.producers()
    before_mask: set[int] = set()
    stack = [producers[t] for t in plan.region.held_whole if t in producers]
    while stack:
        op = stack.pop()
        if op not in before_mask:
            before_mask.add(op)
            stack.extend(producers[t] for t in sg.operators[op].inputs if t in producers)
    before = [op for op in order if op in before_mask or op in plan.region.broadcast_ops]
    after = [op for op in order if op not in before_mask and op not in region_ops]
    return emit_tiled(graph, plan, before, after)


def _whole(sg: Subgraph, tensor: int) -> Piece:
    height, width = sg.tensors[tensor].shape[1:3]
    return Piece(tensor, (0, height), (0, width), tensor)


def _piece_bytes(sg: Subgraph, piece: Piece) -> int:
    t = sg.tensors[piece.tensor]
    return align_up(piece.height * piece.width * t.shape[3] * ELEMENT_BYTES[t.dtype])


def _tiled_live_peak(sg: Subgraph, plan: TilingPlan, assembled: bool = False) -> int:
    """Live bytes of the tiled part in its emitted order, under TFLM's lifetime rules (an operator's inputs and
    outputs are live together; a tensor lives from its producer to its last reader), except that the strips
    of a `Split` occupy the source's own bytes, and with `assembled` the inputs of a `Concat` that may sit inside
    its result its bytes (`in_place.concatenation_inputs`). The source and the skip tensors are whole at the
    start."""
    reads: list[tuple[Piece, ...]] = []
    writes: list[tuple[Piece, ...]] = []
    for step in plan.steps:
        if isinstance(step, (Slice, Pad, Split)):
            reads.append((step.source,))
        elif isinstance(step, Apply):
            reads.append(tuple(p for _, p in step.inputs))
        elif isinstance(step, Concat):
            reads.append(step.sources)
        writes.append(step.results if isinstance(step, (Split, Apply)) else (step.result,))
    last: dict[Piece, int] = {}
    for i, pieces in enumerate(reads):
        for p in pieces:
            last[p] = i
    last[writes[-1][0]] = len(writes)  # the target outlives the tiled part
    region_ops = {rop.op for rop in plan.region.ops} | set(plan.region.folded_pads) | set(plan.region.broadcast_ops)
    for t in plan.region.held_whole:  # and so does a tensor held whole that is read after it
        if any(c not in region_ops for c in sg.consumers().get(t, [])):
            last[_whole(sg, t)] = len(writes)
    freed_after: dict[int, int] = {}
    for p, i in last.items():
        freed_after[i] = freed_after.get(i, 0) + _piece_bytes(sg, p)
    live = sum(_piece_bytes(sg, _whole(sg, t)) for t in plan.region.held_whole)
    peak = live
    strips = {p for step in plan.steps if isinstance(step, Split) for p in step.results}
    for i, (step, results) in enumerate(zip(plan.steps, writes)):
        made = sum(_piece_bytes(sg, p) for p in results)
        inside = _inside_result(sg, step, strips) if assembled and isinstance(step, Concat) else 0
        peak = max(peak, live if isinstance(step, Split) else live + made - inside)
        live += made - freed_after.get(i, 0)
    return peak


def _inside_result(sg: Subgraph, step: Concat, strips: set[Piece]) -> int:
    """Bytes of `step`'s sources that may sit inside its result, each one contiguous block of it at an aligned
    offset (`in_place.concatenation_inputs`); a strip of a `Split` already sits inside the source."""
    if step.axis == 2 and step.result.height != 1:
        return 0  # the columns' blocks interleave row by row
    t = sg.tensors[step.result.tensor]
    sizes = [p.height * p.width * t.shape[3] * ELEMENT_BYTES[t.dtype] for p in step.sources]
    return sum(
        _piece_bytes(sg, p)
        for p, offset in zip(step.sources, aligned_blocks(sizes, ALIGNMENT))
        if offset is not None and p not in strips
    )


def _with_head(candidate: Candidate, head: int, tail: int) -> Candidate:
    return dataclasses.replace(candidate, head_bytes=head, tail_bytes=tail)


def _tail_floor(graph: Graph, plan: TilingPlan, tail_bytes: int) -> int:
    """TFLM's persistent tail of `graph` (`tail_bytes`) once `plan` is emitted, counted from the plan without
    building the graph: the region's operators and the tensors only they wrote go, each step's operator and the
    windows it writes come. The int32 constants of slices, pads and splits (shared by equal values) are left
    out, so it is at most the emitted graph's tail (`lowtide.memory.tail.persistent_tail`, which a built
    candidate is weighed by) but for alignment."""
    sg = graph.main
    region = plan.region
    removed = [rop.op for rop in region.ops] + list(region.folded_pads)
    kept = {*region.held_whole, region.target}
    dropped = {t for op in removed for t in sg.operators[op].outputs} - kept
    costs = {op: operator_tail_bytes(graph, 0, op) for op in {*removed, *(rop.op for rop in region.ops)}}
    windows: set[Piece] = set()
    added = 0
    for step in plan.steps:
        if isinstance(step, Apply):
            added += costs[step.op]
        elif isinstance(step, Pad):
            added += opcode_tail_bytes("PADV2" if step.lowest else "PAD")
        else:
            added += opcode_tail_bytes(_STEP_OPCODES[type(step)])
        windows.update(step.results if isinstance(step, (Split, Apply)) else (step.result,))
    last = plan.steps[-1]
    assert not isinstance(last, Split)  # a plan ends in the step that writes its target
    existing = {whole_piece(sg, t) for t in region.held_whole} | {last.result}  # as `emit_tiled` has them
    new_tensors = len(windows - existing)
    return (
        tail_bytes
        - sum(costs[op] for op in removed)
        - EVAL_TENSOR_BYTES * len(dropped)
        + added
        + EVAL_TENSOR_BYTES * new_tensors
    )


def _pareto(candidates: list[Candidate]) -> tuple[Candidate, ...]:
    """The points no other beats on both MACs and declared arena (head, or live peak where not built, + tail)."""

    def memory(c: Candidate) -> int:
        return c.declared_bytes

    front: list[Candidate] = []
    for c in sorted(candidates, key=lambda c: (c.macs, memory(c))):
        if not front or memory(c) < memory(front[-1]):
            front.append(c)
    return tuple(front)
