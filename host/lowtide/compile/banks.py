"""The compiled runtime's arena across a board's memory regions: each planned buffer (lowtide.compile.codegen's
plan: tensors, kernel scratch, in-place groups) goes into one region, so a model runs where the sum of the banks
holds its arena though no one bank does.

The regions come fastest first. Where the one-arena plan fits a region it stays as it is, in the fastest such
region. Otherwise the buffers are split by in-place group (a group's bytes are fixed inside each other, so they
share a region): the groups holding the kernels' scratch first, then the others by the bytes the generated code
reads from them per inference, most first; each group into the fastest region where the buffers given to it so
far, and it, still fit (lowtide.memory.placement's heuristics). Where that order leaves a group with no room, the groups are taken again,
the largest first. Each region's buffers are then placed on their own (`place`). Every step is deterministic.

The plan's offsets stay one number per buffer: region k's buffers are at its base (the heads of the regions before
it, one after another) plus their place in it, and the code generator turns an offset into its region's arena.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lowtide.errors import LowtideError
from lowtide.memory import Buffer, align_up
from lowtide.memory.placement import in_place_groups, live_lower_bound, place, placement_budget
from lowtide.model import Graph


@dataclass(frozen=True)
class DataRegion:
    """A memory region the compiled arena may use: a board's [[memory]] and the bytes its arena may take there."""

    name: str
    capacity_bytes: int


@dataclass(frozen=True)
class RegionArena:
    """The arena of one region: its bytes start at `base` in the plan's offsets."""

    region: str
    base: int
    head_bytes: int


@dataclass(frozen=True)
class BankPlan:
    """Where each buffer lives: the regions used (the first is the caller's arena) and every buffer's offset."""

    arenas: tuple[RegionArena, ...]
    offsets: tuple[int, ...] | None  # per buffer, its region's base plus its place there; None: the one-arena plan's


def _group_order(graph: Graph, buffers: Sequence[Buffer], groups: list[tuple[tuple[int, int], ...]]) -> list[int]:
    """The groups in the order they pick a region: those with kernel scratch, then by bytes read per inference
    (each buffer's bytes times the operator inputs that name it), most first; ties by the group's first buffer."""
    reads: dict[int, int] = {}
    for op in graph.main.operators:
        for t in op.inputs:
            if t >= 0:
                reads[t] = reads.get(t, 0) + 1

    def key(g: int) -> tuple[bool, int, int]:
        members = [buffers[i] for i, _ in groups[g]]
        read = sum(b.size * reads.get(b.tensor, 0) for b in members if b.subgraph == 0 and b.tensor is not None)
        return all(b.tensor is not None for b in members), -read, min(i for i, _ in groups[g])

    return sorted(range(len(groups)), key=key)


def _fits(buffers: Sequence[Buffer], capacity: int) -> bool:
    return live_lower_bound(buffers) <= capacity and place(buffers, placement_budget(0)).head_bytes <= capacity


def _assign(
    buffers: Sequence[Buffer],
    groups: list[tuple[tuple[int, int], ...]],
    order: list[int],
    regions: Sequence[DataRegion],
) -> tuple[list[list[int]] | None, int | None]:
    """The buffers each region is given, the groups taken in `order`, each into the fastest region where it still
    fits; (None, the first group that fits nowhere) where one does not."""
    given: list[list[int]] = [[] for _ in regions]
    for g in order:
        members = [i for i, _ in groups[g]]
        r = next(
            (
                r
                for r, region in enumerate(regions)
                if _fits([buffers[i] for i in given[r] + members], region.capacity_bytes)
            ),
            None,
        )
        if r is None:
            return None, g
        given[r] += members
    return given, None


def split_arena(
    graph: Graph,
    buffers: Sequence[Buffer],
    head_bytes: int,
    regions: Sequence[DataRegion],
) -> BankPlan:
    """`buffers`, planned with `head_bytes` in one arena, across `regions` (fastest first; module docstring).
    Raises LowtideError, in one line, where the split finds no region for a group."""
    if not regions:
        raise LowtideError("no memory region to place the compiled arena in")
    whole = next((r for r in regions if head_bytes <= r.capacity_bytes), None)
    if whole is not None:
        return BankPlan((RegionArena(whole.name, 0, head_bytes),), None)
    groups = in_place_groups(buffers)
    by_reads = _group_order(graph, buffers, groups)
    # Where the most-read-first order strands a group, the largest first (first fit decreasing) may still fit.
    by_size = sorted(by_reads, key=lambda g: -max(inside + buffers[i].size for i, inside in groups[g]))
    given, stranded = _assign(buffers, groups, by_reads, regions)
    if stranded is not None:
        given, _ = _assign(buffers, groups, by_size, regions)
    if given is None:
        assert stranded is not None
        where = ", ".join(f"{x.name} {x.capacity_bytes:,} B" for x in regions)
        extent = max(inside + buffers[i].size for i, inside in groups[stranded])
        count = len(groups[stranded])
        what = f"{count} buffers sharing {extent:,} B find" if count > 1 else f"a buffer of {extent:,} B finds"
        raise LowtideError(f"the compiled arena ({head_bytes:,} B) fits no split across {where}: {what} no room")
    arenas, placed, base = [], [0] * len(buffers), 0
    for region, indices in zip(regions, given):
        if not indices:
            continue
        ordered = sorted(indices)
        placement = place([buffers[i] for i in ordered])
        for i, offset in zip(ordered, placement.offsets):
            placed[i] = base + offset
        arenas.append(RegionArena(region.name, base, placement.head_bytes))
        base += align_up(placement.head_bytes)
    return BankPlan(tuple(arenas), tuple(placed))
