"""The rewrites `lowtide optimize` weighs beside the search's own choice, by TFLM's tail for the kernels and core
asked for: the search minimises head + tail within its budgets and with the reference kernels' tail
(`lowtide.memory.tail`), but every patch adds operators whose persistent state (per-channel quantization data,
node structs) grows the tail, so fewer patches can still declare the smaller arena in all (`fewer_patches`). A
variant is weighed only once lowtide's validator and TFLM accept it (`Weigher`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from lowtide import oracle
from lowtide.budget import WallClock, WorkBudget
from lowtide.memory import placed_plan
from lowtide.memory.lifetimes import stored_order
from lowtide.memory.tail import persistent_tail
from lowtide.model.ir import Graph
from lowtide.model.validate import EVERY_RELIANCE, Reliance
from lowtide.rewrite.candidates import RejectedCandidate
from lowtide.rewrite.errors import NotApplicable
from lowtide.rewrite.tiling import Tiling, apply_tilings, describe_tilings
from lowtide.settings import Settings

# Coarse patch grids tried beside rewrite_auto's choice (see fewer_patches), each placed within these units.
COARSE_GRIDS = ((2, 2), (2, 3), (3, 2), (3, 3), (4, 4))
COARSE_PLACE_UNITS = 250_000


@dataclass(frozen=True)
class ArenaCandidate:
    """A graph `optimize` may write: the original, or a rewrite of it that the validator and TFLM accept; with
    TFLM's persistent tail on the 32-bit MCU, what each patch's operators and tensors cost."""

    graph: Graph
    tail_bytes: int
    tilings: tuple[Tiling, ...] | None  # None: the original graph

    def describe(self) -> str:
        return describe_tilings(self.tilings) if self.tilings else "the original graph"


@dataclass(frozen=True)
class Weigher:
    """Turns a rewritten model into a candidate with its 32-bit tail, or records why it is refused: lowtide's
    validator or TFLM (Prepare and one Invoke) must accept it before it is weighed, since weighing may run TFLM's
    allocator too and a model it rejects must not end the command."""

    path: str
    kernels: str  # a `lowtide.tflm.tree.KernelSet` value
    # TFLM's allocator's tail (or its estimate) for the kernels and core asked for, where lowtide's replay of
    # TFLM's persistent allocations does not hold every kernel
    allocated_tail: Callable[[Graph], int]
    rejected: list[RejectedCandidate]
    settings: Settings
    relies_on: frozenset[Reliance] = EVERY_RELIANCE  # what the original passes every check of: every candidate too

    def __call__(self, graph: Graph, tilings: tuple[Tiling, ...]) -> ArenaCandidate | None:
        refused = oracle.refusal(graph.data, self.path, self.settings, self.relies_on)
        if refused:
            self.rejected.append(RejectedCandidate(describe_tilings(tilings), refused))
            return None
        # lowtide's replay of TFLM's persistent allocations is TFLM's own figure where it holds every kernel (the
        # same on every 32-bit core), and needs no TFLM run; else TFLM's allocator (or the estimate) is asked
        tail = persistent_tail(graph, self.kernels)
        if tail.exact:
            return ArenaCandidate(graph, tail.tail_bytes, tilings)
        return ArenaCandidate(graph, self.allocated_tail(graph), tilings)


def fewer_patches(
    graph: Graph, tilings: tuple[Tiling, ...], weigh: Weigher, effort: float, clock: WallClock
) -> ArenaCandidate | None:
    """`graph` rewritten with fewer operators than `tilings` (the search's choice): only their first tilings,
    sources sliced whole instead of cut into strips, or their regions on one of `COARSE_GRIDS`; of those `weigh`
    accepts, the one whose arena (placed head + 32-bit tail) is smallest."""
    variants = []
    for count in range(1, len(tilings) + 1):
        variants.append(tilings[:count])
        # Strips add a SPLIT_V and the windows' copies: slicing the whole source has a smaller tail.
        variants.append(tuple(dataclasses.replace(t, split_source=False) for t in tilings[:count]))
    for grid in COARSE_GRIDS:
        # every region on this grid where it fits: fewer patches, or about-square ones in place of strips (the
        # search places patch-major orders, which the scheduler in `optimize` can still improve)
        variants.append(tuple(dataclasses.replace(t, grid=grid) for t in tilings))
    best: tuple[int, ArenaCandidate] | None = None
    for variant in dict.fromkeys(v for v in variants if v != tilings):
        try:
            tiled = apply_tilings(graph, variant)
        except NotApplicable:
            continue  # this variant's grid or regions do not fit the graph
        candidate = weigh(tiled, variant)
        if candidate is None:
            continue
        work = WorkBudget.of(effort * COARSE_PLACE_UNITS, "coarse grids: placement", clock)
        head = placed_plan(candidate.graph, stored_order(candidate.graph), work).placement.head_bytes
        if best is None or head + candidate.tail_bytes < best[0]:
            best = (head + candidate.tail_bytes, candidate)
    return best[1] if best else None
