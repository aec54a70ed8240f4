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
plan (`cost.tail_floor`); the best few by the first figure plus that floor are then
built and placed (`lowtide.memory.placed_plan`, the plan `lowtide optimize` writes), then the best few by the
second, which are kept only where they place strictly lower, and the scheduler may reorder the best one further.
Tiling one region can move the peak to another (the layers after it): the search then runs again on the tiled graph, with what is left of the MAC budget, for as
long as head + tail falls. The model returned carries its placement as its OfflineMemoryAllocation plan.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from lowtide import oracle
from lowtide.budget import WallClock
from lowtide.memory import buffer_lifetimes, stored_order, tflm_plan
from lowtide.memory.lifetimes import Step
from lowtide.model.ir import Graph
from lowtide.model.operators import graph_macs
from lowtide.model.validate import reliances_passed
from lowtide.rewrite.candidates import Base, Candidate, Point, RejectedCandidate, explore, pareto
from lowtide.rewrite.cost import placed_head
from lowtide.rewrite.emit import emit_in_order, planned_model
from lowtide.rewrite.errors import NotApplicable
from lowtide.rewrite.limits import FINAL_PLACE_UNITS, Limits, Objective
from lowtide.rewrite.peak_regions import regions_at_peak
from lowtide.rewrite.regions import cut_tensors, region_end
from lowtide.rewrite.tiling import Tiling, apply_tilings, describe_tilings
from lowtide.schedule import apply_order, find_schedule
from lowtide.settings import Settings, settings_or_read
from lowtide.validation import model_problems

BUILT_CANDIDATES = 6
# Stream strips built beside them (`_to_build`), so that they add to the patches' candidates and crowd none out.
BUILT_STREAM_CANDIDATES = 2
# Tilings of the first round whose own part peaks lowest, each continued by rounds of its own (`_rounds`' `joint`).
ALTERNATIVES = 2


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
    falls, the declared arena or (`Objective.HEAD`) the head alone, and then every tail reported is 0.

    Patches are searched first. Where they find no tiling within the MAC budget, or the budget is 0 (no halo may be
    recomputed: `--max-mac-overhead 0`), the search runs again weighing stream strips beside them, which recompute
    nothing. Stream strips are not weighed when patches found a tiling within a budget: their candidates share the
    rounds' work units, and greedy rounds that try them can end above the patches alone (FastDepth's head: 35,488 B
    by patches alone, 45,472 B with both weighed), while on the models measured patches declare less within 20%
    extra MACs (docs/rewrite.md). Of the two searches the lower declared arena is returned, with the points of both."""
    settings = settings_or_read(settings)
    relies_on = reliances_passed(model_problems(graph, settings))
    limits = Limits(effort, clock or WallClock(), settings, relies_on, objective, streams=False)
    patches = _search(graph, max_mac_overhead, limits)
    if patches.rewritten and max_mac_overhead > 0:
        return patches
    streamed = _search(graph, max_mac_overhead, dataclasses.replace(limits, streams=True))
    best = patches if patches.declared_bytes < streamed.declared_bytes else streamed
    return dataclasses.replace(
        best,
        pareto=pareto([*streamed.pareto, *patches.pareto]),
        wall_clock_cut=streamed.wall_clock_cut or patches.wall_clock_cut,
        seconds=streamed.seconds + patches.seconds,
        rejected=streamed.rejected + patches.rejected,
    )


def _search(graph: Graph, max_mac_overhead: float, limits: Limits) -> RewriteResult:
    """`rewrite_auto` within `limits` (which say whether stream strips are weighed)."""
    started = time.monotonic()

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
            pareto(explored),
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
    reason = describe_tilings(tilings)
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
        pareto(explored),
        wall_clock_cut(),
        time.monotonic() - started,
        tuple(rejected),
    )


def _second_looks(
    graph: Graph,
    rounds: list[_Round],
    budget: float,
    limits: Limits,
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
    limits: Limits,
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
    limits: Limits,
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


def _tile_peak(graph: Graph, budget: float, limits: Limits, level: bool = False, alternatives: bool = False) -> _Round:
    """The best tiling of one region around the peak of `graph` whose whole-model MACs stay within `budget`;
    `level`: among grids of the same live peak, the one whose tiled part peaks lowest, not the fewest MACs;
    `alternatives`: also the `_Round.alternatives`, for which regions are planned whose own floor is below the
    live peak reached, whatever the peak outside them. The steps: the best order of the untiled graph and its
    peak, the regions around that peak, their points counted from plans, the best few of those built and
    placed, the best one reordered, and the round."""
    base, peak = _best_order(graph, limits)
    if isinstance(peak, str):
        return _unchanged(base, peak)
    regions, reason = regions_at_peak(graph, peak.op)
    if not regions:
        return _unchanged(base, reason)
    points = explore(graph, regions, base, budget, limits, alternatives)
    if not points:
        return _unchanged(
            base,
            f"no tiling of the {len(regions)} regions around the peak fits the budget or beats "
            f"{base.declared_bytes:,} bytes (head + tail)",
        )
    points = _ranked(points, level)
    builds = _Builds(graph, points, base.order, limits)
    others = builds.run(alternatives)
    explored = builds.explored()
    if builds.best is None:
        reason = f"TFLM or lowtide's validator refused every tiling built ({builds.rejected[0].reason})"
        return _unchanged(base, reason, explored, builds.rejected)
    rewritten, head = _reordered(builds.best.model, builds.best.head_bytes, limits)
    candidate = builds.best.candidate
    joint = tuple(
        _Round(
            base.model,
            base.head_bytes,
            base.tail_bytes,
            built.candidate.tiling,
            built.model,
            built.head_bytes,
            built.candidate.tail_bytes,
            built.candidate.macs,
            "",
            (),
            own_peak_bytes=points[index].own_peak_bytes,
        )
        for index in others
        if (built := builds.built.get(index)) is not None and built is not builds.best
    )
    if head + candidate.tail_bytes >= base.declared_bytes:
        reason = (
            f"the best tiling found declares {head + candidate.tail_bytes:,} bytes (head {head:,} + tail "
            f"{candidate.tail_bytes:,}), not below {base.declared_bytes:,}"
        )
        return dataclasses.replace(_unchanged(base, reason, explored, builds.rejected), alternatives=joint)
    return _Round(
        base.model,
        base.head_bytes,
        base.tail_bytes,
        candidate.tiling,
        rewritten,
        head,
        candidate.tail_bytes,
        candidate.macs,
        "",
        explored,
        tuple(builds.rejected),
        joint,
    )


def _best_order(graph: Graph, limits: Limits) -> tuple[Base, Step | str]:
    """The untiled graph in its best order, and the step at its live peak to tile (or why there is none). The
    scheduler minimises the live peak; TFLM's greedy planner can still place the stored order tighter. Where the
    blocks only the order allows (CONCATENATION inputs inside their output, ...) lower the peak, which the
    placement also plans where that lowers the head (`placed_plan`), the peak to tile is theirs."""
    stock = tflm_plan(graph)
    schedule = find_schedule(graph, limits.schedule(), in_place=True)
    orders = schedule.order if schedule.head_bytes < stock.head_bytes else stored_order(graph)
    steps = buffer_lifetimes(graph, orders, in_place=True)[1]
    assembled_steps = buffer_lifetimes(graph, orders, in_place=True, blocks=True)[1]
    base = Base(
        apply_order(graph, orders),
        orders[0],
        tflm_plan(graph, orders).head_bytes,
        limits.tail(graph),
        graph_macs(graph),
        {step.op: step.live_bytes for step in steps if step.subgraph == 0},
        {step.op: step.live_bytes for step in assembled_steps if step.subgraph == 0},
    )
    if not steps or not any(step.live_bytes for step in steps):
        return base, "the model has no activations to tile"
    assembled_peak = max(assembled_steps, key=lambda step: step.live_bytes)
    peak = max(steps, key=lambda step: step.live_bytes)
    peak = assembled_peak if assembled_peak.live_bytes < peak.live_bytes else peak
    return base, peak if peak.subgraph == 0 else "the memory peak is inside a called subgraph"


def _unchanged(
    base: Base, reason: str, explored: tuple[Candidate, ...] = (), rejected: list[RejectedCandidate] | None = None
) -> _Round:
    """A round that tiles nothing: the untiled graph in its best order, and why."""
    return _Round(
        base.model,
        base.head_bytes,
        base.tail_bytes,
        None,
        base.model,
        base.head_bytes,
        base.tail_bytes,
        base.macs,
        reason,
        explored,
        tuple(rejected or ()),
    )


def _ranked(points: list[Point], level: bool) -> list[Point]:
    """Lowest declared arena first (live peak + tail). In a second look (`rewrite_auto`), where the peak outside
    the region sets the live peak, the region's own peak breaks the tie: its peak is level with another region's,
    and both only go lower together. Otherwise the fewest MACs do (finer grids also cost the schedule and the
    placement more)."""
    return sorted(
        points,
        key=lambda p: (p.candidate.declared_bytes, p.tiled_peak_bytes if level else 0, p.candidate.macs),
    )


@dataclass(frozen=True)
class _Built:
    """A point built, validated and run on the host TFLM, and placed."""

    head_bytes: int  # lowtide's placement of its stored order
    model: Graph
    candidate: Candidate  # with that head and the built graph's tail


class _Builds:
    """The points of one round built, best first: each is emitted, refused or not by lowtide's validator and the
    host TFLM, and placed; the best by head + tail is kept."""

    def __init__(self, graph: Graph, points: list[Point], order: list[int], limits: Limits) -> None:
        self.graph, self.points, self.order, self.limits = graph, points, order, limits
        self.best: _Built | None = None
        self.built: dict[int, _Built] = {}  # by index into `points`
        self.tried: set[int] = set()
        self.rejected: list[RejectedCandidate] = []

    def run(self, alternatives: bool) -> list[int]:
        """Build the best points by live peak + tail, then those whose live peak falls most with CONCATENATION
        inputs inside their output (after the others, so that one of them is taken only where it places strictly
        lower), then with `alternatives` the points whose own tiled peak is lowest while the peak outside their
        region sets the live peak; those last (`_Round.alternatives`) are returned."""
        points = self.points
        for index in _to_build(self.graph, points):
            if self.beaten(points[index].candidate.declared_bytes):
                break
            self.build(index)
        assembling = sorted(
            (
                i
                for i, p in enumerate(points)
                if p.assembled_live_bytes < p.candidate.live_peak_bytes and i not in self.tried and not p.plan.stream
            ),
            key=lambda i: (points[i].assembled_live_bytes + points[i].candidate.tail_bytes, points[i].candidate.macs),
        )
        for index in assembling[:BUILT_CANDIDATES]:
            if self.beaten(points[index].assembled_live_bytes + points[index].candidate.tail_bytes):
                break
            self.build(index)
        outside_set = [
            i for i, p in enumerate(points) if p.own_peak_bytes < p.candidate.live_peak_bytes and not p.plan.stream
        ]
        others = (
            sorted(
                outside_set,
                key=lambda i: (points[i].own_peak_bytes + points[i].candidate.tail_bytes, points[i].candidate.macs),
            )[:ALTERNATIVES]
            if alternatives
            else []
        )
        for index in others:
            if index not in self.tried and not self.limits.cut():
                self.build(index)
        return others

    def build(self, index: int) -> None:
        self.tried.add(index)
        candidate, plan = self.points[index].candidate, self.points[index].plan
        tiled = emit_in_order(self.graph, plan, self.order)
        # the host TFLM runs in a child: bytes
        refused = oracle.refusal(tiled.data, self.graph.source, self.limits.settings, self.limits.relies_on)
        if refused:
            self.rejected.append(RejectedCandidate(candidate.tiling.describe(), refused))
            return
        head = placed_head(tiled, self.limits.placement())
        built = _Built(head, tiled, dataclasses.replace(candidate, head_bytes=head, tail_bytes=self.limits.tail(tiled)))
        self.built[index] = built
        # The point's tail floor beside the best's built tail, as the search has always weighed them.
        if self.best is None or head + candidate.tail_bytes < self.best.head_bytes + self.best.candidate.tail_bytes:
            self.best = built

    def beaten(self, declared_at_least: int) -> bool:
        """Whether the search ends before a point no placement takes below `declared_at_least`."""
        best = self.best
        return best is not None and (
            self.limits.cut() or declared_at_least >= best.head_bytes + best.candidate.tail_bytes
        )

    def explored(self) -> tuple[Candidate, ...]:
        """Every point, built ones with their head and tail."""
        return tuple(self.built[i].candidate if i in self.built else p.candidate for i, p in enumerate(self.points))


def _reordered(rewritten: Graph, head: int, limits: Limits) -> tuple[Graph, int]:
    """The rewritten graph in the scheduler's order where that places lower than patch-major, and its head."""
    if limits.cut():
        return rewritten, head
    reordered = find_schedule(rewritten, limits.schedule(), in_place=True)
    if reordered.live_peak_bytes < head:
        reordered_graph = apply_order(rewritten, reordered.order)
        reordered_head = placed_head(reordered_graph, limits.placement())
        if reordered_head < head:
            return reordered_graph, reordered_head
    return rewritten, head


def _to_build(graph: Graph, points: list[Point]) -> list[int]:
    """Which of the points (lowest live peak + tail first) to build: the first `BUILT_CANDIDATES` grids of
    patches, and the first as many of regions between two cut tensors; and the first `BUILT_STREAM_CANDIDATES`
    stacks of stream strips. Regions holding skip tensors or ending before a cut add points whose live peak is
    low but whose placement may not be, and must not crowd out the plain regions' best; nor must stream strips,
    which weigh their fewer MACs against more operators and carried rows."""
    cuts = set(cut_tensors(graph))
    patches = [i for i, p in enumerate(points) if not p.plan.stream]
    streams = [i for i, p in enumerate(points) if p.plan.stream]
    plain = [i for i in patches if points[i].plan.region.source in cuts and points[i].plan.region.target in cuts]
    return sorted(
        set(patches[:BUILT_CANDIDATES]) | set(plain[:BUILT_CANDIDATES]) | set(streams[:BUILT_STREAM_CANDIDATES])
    )
