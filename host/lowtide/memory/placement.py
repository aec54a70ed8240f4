"""Optimal placement of planned buffers in the arena head (dynamic storage allocation with fixed lifetimes).

Each buffer is a rectangle: scopes [first, last + 1) by bytes [offset, offset + size). The head is the top of
the highest rectangle; no placement can beat the most bytes live in one scope (`lower_bound_bytes`).

Fast first-fit heuristics run first; if none reaches the lower bound, OR-Tools CP-SAT searches for the best
placement (2-D no-overlap, offsets in 16-byte units), hinted with the best heuristic, and may prove it optimal.
CP-SAT runs one worker with a fixed seed and stops at a deterministic time (`lowtide.budget`), so the placement is
the same on any machine under any load.

TFLM cannot be told where kernel scratch buffers go: with an offline plan its greedy planner still places them,
around the tensors whose offsets are fixed. Every candidate is therefore judged by the head TFLM will really
have (`tflm_offsets_with_plan`), not by where the search put the scratch buffers.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lowtide.budget import WallClock, WorkBudget
from lowtide.errors import LowtideError
from lowtide.memory.greedy import arena_head, greedy_offsets
from lowtide.memory.lifetimes import ALIGNMENT, Buffer
from lowtide.model.ir import Graph
from lowtide.model.offline_memory import OfflinePlan

# Work units (`lowtide.budget`) per second of CP-SAT's deterministic time: on one worker, a deterministic second took
# about 8 s of one core of the machine the budgets were tuned on, as long as this many units of the schedule search.
UNITS_PER_DETERMINISTIC_SECOND = 2_000_000
# Units of `place` when the caller gives none: 1.5 deterministic seconds (about 12 s, placement's share of the
# former 30 s time limit).
PLACE_UNITS = 3_000_000
# One worker: CP-SAT's parallel portfolio is not reproducible (its workers race), and one sequential search proved
# the tiled person_detect and mobilenet_v2 placements optimal sooner (0.2 s and 3.7 s) than two racing workers.
# Any fixed seed would do.
CP_SAT_WORKERS = 1
CP_SAT_SEED = 0


@dataclass(frozen=True)
class Placement:
    offsets: tuple[int, ...]  # byte offset of each buffer, as TFLM will place it given this plan
    head_bytes: int  # arena head TFLM will have with this plan
    lower_bound_bytes: int  # most aligned bytes live in any one scope: no placement can do better
    optimal: bool  # head_bytes is proven minimal for these lifetimes
    method: str  # which heuristic or solver produced the placement
    wall_clock_cut: bool  # the safety net (`WallClock`) stopped CP-SAT: the placement may differ between runs
    seconds: float


def live_lower_bound(buffers: Sequence[Buffer]) -> int:
    """Most bytes live in one scope. Only scopes where some buffer starts can hold the maximum."""
    return max((sum(b.size for b in buffers if b.first <= s <= b.last) for s in {b.first for b in buffers}), default=0)


def tflm_offsets_with_plan(buffers: Sequence[Buffer], offsets: Sequence[int]) -> list[int]:
    """Offsets TFLM ends up with when every tensor buffer is given its offset in an offline plan: the tensors
    stay where they are put, and the greedy planner fits the scratch buffers around them."""
    return greedy_offsets(
        [dataclasses.replace(b, offline_offset=None if b.tensor is None else o) for b, o in zip(buffers, offsets)]
    )


def offline_plan(graph: Graph, buffers: Sequence[Buffer], offsets: Sequence[int]) -> OfflinePlan:
    """The plan giving every tensor buffer its offset; tensors TFLM plans itself stay online (and so do constants
    and variables, which must not move into the head)."""
    return OfflinePlan.from_offsets(
        graph.tensor_counts,
        {(b.subgraph, b.tensor): offset for b, offset in zip(buffers, offsets) if b.tensor is not None},
    )


def check_no_overlap(buffers: Sequence[Buffer], offsets: Sequence[int]) -> None:
    """Raise LowtideError naming two buffers that are live at the same time and share bytes. TFLM checks
    nothing when it loads an offline plan, so an overlap would silently corrupt outputs."""
    if len(offsets) != len(buffers):
        raise LowtideError(f"memory plan has {len(offsets)} offsets for {len(buffers)} buffers")
    for b, o in zip(buffers, offsets):
        if o < 0 or o % ALIGNMENT:
            raise LowtideError(f"memory plan puts {b.label} at offset {o}, not a non-negative multiple of {ALIGNMENT}")
    # An in-place output's lifetime starts after its producer's scope only because it sits inside its input.
    for group in in_place_groups(buffers):
        (root, _), *rest = group
        for j, inside in rest:
            if offsets[j] != offsets[root] + inside:
                raise LowtideError(
                    f"memory plan moves in-place output {buffers[j].label} off the bytes it shares "
                    f"(offset {offsets[j]}, expected {offsets[root] + inside})"
                )
    overlap = first_overlap(buffers, offsets)
    if overlap is not None:
        (a, oa), (b, ob) = ((buffers[i], offsets[i]) for i in overlap)
        raise LowtideError(
            f"memory plan overlaps: {a.label} [{oa}, {oa + a.size}) and {b.label} [{ob}, {ob + b.size}) "
            f"are both live in scope {b.first}"
        )


def first_overlap(
    buffers: Sequence[Buffer], offsets: Sequence[int], in_place: Callable[[Buffer, Buffer], bool] | None = None
) -> tuple[int, int] | None:
    """The first two buffers live at the same time on shared bytes, as indices into `buffers`, the one live first
    first; None if there are none. The one overlap check of every plan: the plans lowtide makes
    (`check_no_overlap`) and a model's own (`lowtide.memory.plan_check`). An output lowtide places in place
    (`lowtide.memory.in_place`, `Buffer.shares`) is live only after the scope in which it shares its input's
    bytes, so it never overlaps that input; `in_place` says which other pairs may share bytes (a model's own
    plan's, by `in_place.tflm_runs_in_place`)."""
    by_first = sorted(range(len(buffers)), key=lambda i: buffers[i].first)
    for k, i in enumerate(by_first):
        a, oa = buffers[i], offsets[i]
        for j in by_first[k + 1 :]:
            b, ob = buffers[j], offsets[j]
            if b.first > a.last:
                break
            if oa < ob + b.size and ob < oa + a.size and not (in_place and in_place(a, b)):
                return i, j
    return None


def _lowest_fit(size: int, busy: list[tuple[int, int]], best_fit: bool) -> int:
    """Offset for `size` bytes given the (start, end) ranges already taken, sorted by start: the lowest gap
    that fits, or the tightest one (ties go low); above everything if no gap fits."""
    candidate, best, best_slack = 0, None, None
    for start, end in busy:
        gap = start - candidate
        if gap >= size:
            if not best_fit:
                return candidate
            if best_slack is None or gap - size < best_slack:
                best, best_slack = candidate, gap - size
        candidate = max(candidate, end)
    return best if best is not None else candidate


def in_place_groups(buffers: Sequence[Buffer]) -> list[tuple[tuple[int, int], ...]]:
    """Buffers that must be placed together: each in-place output (`Buffer.shares`) sits at a fixed offset inside
    the buffer whose bytes it shares. One group per root buffer: ((buffer index, offset from the root), ...), the
    root first."""
    index = {(b.subgraph, b.tensor): i for i, b in enumerate(buffers) if b.tensor is not None}
    members: dict[int, list[tuple[int, int]]] = {}
    for i in range(len(buffers)):
        root, offset = i, 0
        while (shared := buffers[root].shares) is not None:
            tensor, inside = shared
            parent = index.get((buffers[root].subgraph, tensor))
            if parent is None:
                raise LowtideError(f"{buffers[root].label} shares the bytes of t{tensor}, which is not planned")
            root, offset = parent, offset + inside
        group = members.setdefault(root, [(root, 0)])
        if i != root:
            group.append((i, offset))
    return [tuple(group) for group in members.values()]


def _first_fit(
    buffers: Sequence[Buffer], priority: Sequence[int], best_fit: bool, groups: Sequence[tuple[tuple[int, int], ...]]
) -> list[int]:
    """Place groups in the order their first member appears in `priority`. A single buffer goes into the lowest
    (or tightest) gap; a group goes to the lowest offset where every member fits."""
    group_of = {i: g for g, group in enumerate(groups) for i, _ in group}
    offsets = [0] * len(buffers)
    placed: list[int] = []
    done: set[int] = set()

    def busy(b: Buffer) -> list[tuple[int, int]]:
        return sorted(
            (offsets[j], offsets[j] + buffers[j].size)
            for j in placed
            if buffers[j].first <= b.last and b.first <= buffers[j].last
        )

    for i in priority:
        g = group_of[i]
        if g in done:
            continue
        done.add(g)
        group = groups[g]
        if len(group) == 1:
            offsets[i] = _lowest_fit(buffers[i].size, busy(buffers[i]), best_fit)
        else:
            taken = [(inside, buffers[j].size, busy(buffers[j])) for j, inside in group]
            base = 0
            moved = True
            while moved:  # jump past the first clash until none is left: the base only grows
                moved = False
                for inside, size, ranges in taken:
                    clash = next(
                        (end for start, end in ranges if start < base + inside + size and base + inside < end), None
                    )
                    if clash is not None:
                        base, moved = clash - inside, True
                        break
            for j, inside in group:
                offsets[j] = base + inside
        placed.extend(j for j, _ in group)
    return offsets


def _lowest_offset_first(buffers: Sequence[Buffer]) -> list[int]:
    """Greedy by offset (Pisarchyk & Lee, 2020): repeatedly place the buffer that can go lowest, largest first
    among ties. Strong on chains, where TFLM's largest-first order leaves holes."""
    n = len(buffers)
    overlapping = [
        [j for j in range(n) if j != i and buffers[j].first <= buffers[i].last and buffers[i].first <= buffers[j].last]
        for i in range(n)
    ]
    offsets = [0] * n
    lowest = [0] * n  # lowest offset each unplaced buffer could take now
    placed = [False] * n
    for _ in range(n):
        i = min((k for k in range(n) if not placed[k]), key=lambda k: (lowest[k], -buffers[k].size, -buffers[k].last))
        offsets[i], placed[i] = lowest[i], True
        for k in overlapping[i]:
            if not placed[k]:
                busy = sorted((offsets[j], offsets[j] + buffers[j].size) for j in overlapping[k] if placed[j])
                lowest[k] = _lowest_fit(buffers[k].size, busy, best_fit=False)
    return offsets


def _heuristics(
    buffers: Sequence[Buffer], groups: Sequence[tuple[tuple[int, int], ...]]
) -> list[tuple[str, Callable[[], list[int]]]]:
    n = range(len(buffers))
    length = [b.last - b.first + 1 for b in buffers]
    orders = {
        "size": sorted(n, key=lambda i: (-buffers[i].size, -length[i], buffers[i].first)),
        "lifetime": sorted(n, key=lambda i: (-length[i], -buffers[i].size, buffers[i].first)),
        "area": sorted(n, key=lambda i: (-buffers[i].size * length[i], buffers[i].first)),
        "first scope": sorted(n, key=lambda i: (buffers[i].first, -buffers[i].size)),
    }
    candidates: list[tuple[str, Callable[[], list[int]]]] = []
    if len(groups) == len(buffers):  # TFLM's planner and greedy-by-offset know nothing of shared bytes
        online = [dataclasses.replace(b, offline_offset=None) for b in buffers]
        candidates.append(("tflm greedy", lambda: greedy_offsets(online)))
    for name, order in orders.items():
        candidates.append((f"first fit by {name}", functools.partial(_first_fit, buffers, order, False, groups)))
        candidates.append((f"best fit by {name}", functools.partial(_first_fit, buffers, order, True, groups)))
    if len(groups) == len(buffers):
        candidates.append(("greedy by offset", lambda: _lowest_offset_first(buffers)))
    return candidates


def _solve_cp_sat(
    buffers: Sequence[Buffer],
    groups: Sequence[tuple[tuple[int, int], ...]],
    hint: Sequence[int],
    lower: int,
    upper: int,
    work: WorkBudget,
) -> tuple[list[int], int, bool] | None:
    """Minimise the head exactly within `work`. Returns (offsets, head, proven optimal), or None if no solution
    within it."""
    from ortools.sat.python import cp_model

    unit = ALIGNMENT
    model = cp_model.CpModel()
    top = upper // unit
    head = model.new_int_var(lower // unit, top, "head")
    ys, xs, y_intervals = [], [], []
    for i, b in enumerate(buffers):
        size = b.size // unit
        y = model.new_int_var(0, top - size, f"y{i}")
        ys.append(y)
        xs.append(model.new_fixed_size_interval_var(b.first, b.last + 1 - b.first, f"x{i}"))
        y_intervals.append(model.new_fixed_size_interval_var(y, size, f"yi{i}"))
        model.add(head >= y + size)
        model.add_hint(y, hint[i] // unit)
    model.add_no_overlap_2d(xs, y_intervals)
    for group in groups:
        (root, _), *rest = group
        for j, inside in rest:
            model.add(ys[j] == ys[root] + inside // unit)
    model.minimize(head)
    solver = cp_model.CpSolver()
    solver.parameters.max_deterministic_time = work.left / UNITS_PER_DETERMINISTIC_SECOND
    solver.parameters.max_time_in_seconds = work.clock.seconds_left()  # the safety net only
    solver.parameters.num_workers = CP_SAT_WORKERS
    solver.parameters.random_seed = CP_SAT_SEED
    status = solver.solve(model)
    work.charge(work.left)  # what it was given, not what it took: the same figure whatever the machine
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    offsets = [solver.value(y) * unit for y in ys]
    return offsets, solver.value(head) * unit, status == cp_model.OPTIMAL


def placement_budget(effort: float = 1.0, clock: WallClock | None = None) -> WorkBudget:
    """`effort` times the default budget of `place`, on its own counter (effort 0: the heuristics only)."""
    return WorkBudget.of(effort * PLACE_UNITS, "placement", clock)


def place(buffers: Sequence[Buffer], work: WorkBudget | None = None) -> Placement:
    """Best placement found within `work` (default `placement_budget()`; none left: the heuristics only, no
    solver). Buffer sizes must be multiples of 16 (they are, as `buffer_lifetimes` returns them)."""
    started = time.monotonic()
    work = work or placement_budget()
    buffers = list(buffers)
    lower = live_lower_bound(buffers)

    def result(offsets: list[int], method: str, proven_head: int | None = None) -> Placement:
        """`proven_head`: a head the solver proved minimal. TFLM reaches it only if it put the scratch buffers
        where the solver did."""
        realised = tflm_offsets_with_plan(buffers, offsets)
        head = arena_head(buffers, realised)
        return Placement(
            tuple(realised), head, lower, head in (lower, proven_head), method, False, time.monotonic() - started
        )

    best: Placement | None = None
    groups = in_place_groups(buffers)
    for method, heuristic in _heuristics(buffers, groups):
        candidate = result(heuristic(), method)
        if best is None or candidate.head_bytes < best.head_bytes:
            best = candidate
        if best.optimal:
            return best
    assert best is not None  # the heuristics list is never empty
    if work.spent():
        return dataclasses.replace(best, seconds=time.monotonic() - started)
    solved = _solve_cp_sat(buffers, groups, best.offsets, lower, best.head_bytes, work)
    # The clock's deadline was CP-SAT's time limit: if it has passed, the solver may have stopped there.
    cut = work.clock.passed(work.where)
    if solved is not None:
        offsets, cp_head, proven = solved
        candidate = result(offsets, "cp-sat", cp_head if proven else None)
        if candidate.head_bytes < best.head_bytes or (candidate.optimal and candidate.head_bytes == best.head_bytes):
            best = candidate
    return dataclasses.replace(best, wall_clock_cut=cut, seconds=time.monotonic() - started)
