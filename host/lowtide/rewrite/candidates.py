"""The points the rewrite search weighs: per region around the peak, its patch grids (about-square ones and stacks
of full-width strips) within the MAC budget, each with the source sliced whole and cut into row strips in place,
counted from its plan without building it (`explore`); what a point becomes once built (`Candidate`), or why it
was dropped (`RejectedCandidate`); and the Pareto front of them all."""

from __future__ import annotations

from dataclasses import dataclass

from lowtide.model.ir import Graph
from lowtide.model.operators import op_macs
from lowtide.rewrite.cost import region_floors, tiled_live_peak
from lowtide.rewrite.errors import NotApplicable
from lowtide.rewrite.limits import Limits, Objective
from lowtide.rewrite.regions import Region, TilingPlan, grid_macs, plan_streaming, plan_tiling
from lowtide.rewrite.tiling import MAX_PATCHES_PER_AXIS, Tiling

# Patches along each axis of the target, coarse to fine.
GRID_STEPS = tuple(range(1, MAX_PATCHES_PER_AXIS + 1))
GRIDS_PLANNED_PER_REGION = 4  # about-square grids, the finest, where the search weighs the head alone
# Stacks of stream strips planned per region, each from row strips of the source (`lowtide optimize` weighs the
# source sliced whole too, `lowtide.rewrite.variants`). Every stack costs a plan as long as the region's patches
# and no MAC budget prunes it: all nine of both kinds took mobilenet_v2's search past its safety net.
STREAM_STRIPS = (2, 3, 4, 6, 8, 10)


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
    # a floor counted from the plan (`lowtide.rewrite.cost.tail_floor`)
    stream: bool = False  # full-width strips carrying their halo rows on (`plan_streaming`): no extra MACs

    @property
    def declared_bytes(self) -> int:
        """The arena a user declares for it: the head (or where not built, the live peak, which no placement
        beats) and the tail."""
        return (self.head_bytes if self.head_bytes is not None else self.live_peak_bytes) + self.tail_bytes

    @property
    def tiling(self) -> Tiling:
        return Tiling(self.source, self.target, self.grid, self.split_source, self.stream)


@dataclass(frozen=True)
class RejectedCandidate:
    """A rewritten graph dropped before it was weighed: lowtide's validator or TFLM (Prepare, one Invoke)
    refused it."""

    candidate: str  # what was tried (`Tiling.describe`)
    reason: str  # the validator's problem or TFLM's own log line

    def to_json(self) -> dict[str, str]:
        return {"candidate": self.candidate, "reason": self.reason}


@dataclass(frozen=True)
class Base:
    """The graph in its best order (the scheduler's or the stored one), untiled: what a tiling must beat."""

    model: Graph  # in that order
    order: list[int]  # of the main subgraph's operators
    head_bytes: int  # TFLM's greedy head of that order
    tail_bytes: int  # TFLM's persistent tail (`Limits.tail`)
    macs: int
    live: dict[int, int]  # live bytes at each main-subgraph operator of that order, in-place outputs counted once
    # The same with the blocks only the order allows (CONCATENATION inputs inside their output, ...), which the
    # placement also plans where that lowers the head (`placed_plan`).
    assembled_live: dict[int, int]

    @property
    def declared_bytes(self) -> int:
        return self.head_bytes + self.tail_bytes


@dataclass(frozen=True)
class Point:
    """A candidate counted from its plan, before anything is built."""

    candidate: Candidate  # not built: its live peak and tail floor
    plan: TilingPlan
    tiled_peak_bytes: int  # the live peak of the tiled part alone
    own_peak_bytes: int  # the same, the lower with and without the CONCATENATION inputs inside their output
    assembled_live_bytes: int  # the whole model's live peak with the blocks only the order allows


def square_grids(height: int, width: int) -> list[tuple[int, int]]:
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


def strip_grids(height: int) -> list[tuple[int, int]]:
    """Stacks of full-width strips, fewest first."""
    return [(rows, 1) for rows in GRID_STEPS if 1 < rows <= height]


def explore(
    graph: Graph, regions: list[Region], base: Base, budget: float, limits: Limits, alternatives: bool
) -> list[Point]:
    """Every point of `regions` worth planning, within `budget` whole-model MACs: regions are taken lowest floor
    first (`region_floors`), and one is skipped once both its floors + the untiled tail reach the best live peak
    + tail so far, without and with the blocks only the order allows (tiling adds operators, so no region's floor
    + the untiled tail beats it); with `alternatives`, a region whose own floor is below the best is planned
    whatever the peak outside it."""
    sg = graph.main
    floors = zip(
        region_floors(sg, regions, base.live),
        region_floors(sg, regions, base.assembled_live, assembled=True),
        region_floors(sg, regions, {}, assembled=True),
    )
    points: list[Point] = []
    best_live = best_assembled = base.declared_bytes
    for (floor, outside, region), (assembled_floor, assembled_outside, _), (own_floor, _, _) in sorted(
        floors, key=lambda f: f[0][0]
    ):
        if limits.cut():
            break
        if (
            floor + base.tail_bytes >= best_live
            and assembled_floor + base.tail_bytes >= best_assembled
            and not (alternatives and own_floor + base.tail_bytes < best_live)
        ):
            continue
        found = _region_points(graph, region, (outside, assembled_outside), base, budget, limits)
        for point in found:
            best_live = min(best_live, point.candidate.live_peak_bytes + point.candidate.tail_bytes)
            best_assembled = min(best_assembled, point.assembled_live_bytes + point.candidate.tail_bytes)
        points += found
    return points


def _region_points(
    graph: Graph, region: Region, outside: tuple[int, int], base: Base, budget: float, limits: Limits
) -> list[Point]:
    """The points of one region, each grid with the source sliced whole and cut into row strips, then each stack
    of `STREAM_STRIPS` stream strips (no extra MACs, so always within the budget); `outside`: the live peak outside
    the region, without and with the blocks only the order allows."""
    sg = graph.main
    region_macs = sum(op_macs(sg, sg.operators[rop.op]) for rop in region.ops)
    plans = [
        plan_tiling(graph, region, grid, split_source)
        for grid in _region_grids(graph, region, region_macs, base.macs, budget, limits)
        for split_source in (False, True)
    ]
    patches = len(plans)
    height = sg.tensors[region.target].shape[1]
    try:
        plans += [
            plan_streaming(graph, region, rows, True) for rows in STREAM_STRIPS if limits.streams and rows <= height
        ]
    except NotApplicable:
        pass  # the region's rows cannot be streamed, in any number of strips: its patches recompute
    points: list[Point] = []
    for index, plan in enumerate(plans):
        if limits.cut():
            break
        if index < patches and index % 2 and not plan.split_source:
            continue  # too few rows to cut: the same plan as without
        tiled = tiled_live_peak(sg, plan)
        tiled_assembled = tiled_live_peak(sg, plan, assembled=True)
        candidate = Candidate(
            sg.tensors[region.source].name,
            sg.tensors[region.target].name,
            plan.grid,
            plan.split_source,
            base.macs - region_macs + plan.macs,
            max(outside[0], tiled),
            None,
            limits.tail_floor(graph, plan, base.tail_bytes),
            plan.stream,
        )
        points.append(Point(candidate, plan, tiled, min(tiled, tiled_assembled), max(outside[1], tiled_assembled)))
    return points


def _region_grids(
    graph: Graph, region: Region, region_macs: int, macs_before: int, budget: float, limits: Limits
) -> list[tuple[int, int]]:
    """The grids of `region` to plan, within the MAC budget. Finer grids shrink the patches' buffers until the
    halos dominate, and grow the tail with every patch: for the head alone the finest few affordable, for the
    declared arena every affordable one; and every affordable stack of full-width strips (where cutting the
    source into strips pays most)."""
    height, width = graph.main.tensors[region.target].shape[1:3]

    def affordable(grids: list[tuple[int, int]]) -> list[tuple[int, int]]:
        return [grid for grid in grids if macs_before - region_macs + grid_macs(graph, region, grid) <= budget]

    grids = affordable(square_grids(height, width))
    grids = grids[-GRIDS_PLANNED_PER_REGION:] if limits.objective is Objective.HEAD else grids
    return grids + [grid for grid in affordable(strip_grids(height)) if grid not in grids]


def pareto(candidates: list[Candidate]) -> tuple[Candidate, ...]:
    """The points no other beats on both MACs and declared arena (head, or live peak where not built, + tail)."""
    front: list[Candidate] = []
    for c in sorted(candidates, key=lambda c: (c.macs, c.declared_bytes)):
        if not front or c.declared_bytes < front[-1].declared_bytes:
            front.append(c)
    return tuple(front)
