"""A tiling as the search picks it and a user applies it: one region, named by the tensors it goes from and to,
run as a grid of patches (`Tiling`, `tile`, `apply_tilings`)."""

from __future__ import annotations

from dataclasses import dataclass

from lowtide.model.ir import Graph
from lowtide.rewrite.emit import emit_in_order
from lowtide.rewrite.errors import NotApplicable
from lowtide.rewrite.regions import escaping_tensor, plan_streaming, plan_tiling, region_between

# TFLM's CONCATENATION takes at most 10 inputs (kMaxInputNum): at most 10 patches along each axis.
MAX_PATCHES_PER_AXIS = 10


@dataclass(frozen=True)
class Tiling:
    """One region run patch by patch: the tensors it goes from and to (by name, which rewriting keeps)."""

    source: str
    target: str
    grid: tuple[int, int]
    split_source: bool  # the source is cut into row strips in place first
    stream: bool = False  # full-width strips carrying their halo rows on, recomputing nothing (`plan_streaming`)

    @property
    def kind(self) -> str:
        """How the tables name the grid: "3x2", "4x1 stream"."""
        return f"{self.grid[0]}x{self.grid[1]}" + (" stream" if self.stream else "")

    def describe(self) -> str:
        strips = " from row strips of the source" if self.split_source else ""
        patches = "stream strips" if self.stream else "patches"
        return f"tiled {self.source} -> {self.target} as {self.grid[0]}x{self.grid[1]} {patches}{strips}"


def describe_tilings(tilings: tuple[Tiling, ...]) -> str:
    """Tilings applied one after the other, as the reports name them."""
    return "; then ".join(t.describe() for t in tilings)


def tile(
    graph: Graph,
    source: int,
    target: int,
    grid: tuple[int, int],
    order: list[int] | None = None,
    split_source: bool = False,
    stream: bool = False,
) -> Graph:
    """The graph with the region `source` -> `target` (main-subgraph tensor indices; `target` a cut tensor, and
    what the region reads from before `source` held whole beside it) run as `grid` (rows, columns) patches. `order`: main-subgraph operator order for the rest (default: stored).
    `split_source`: cut the source into row strips in place first (needs an offline plan: `lowtide optimize`).
    `stream`: `grid` is (strips, 1) full-width strips that carry their halo rows on instead of recomputing them."""
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
    if stream:
        if grid[1] != 1:
            raise NotApplicable(f"grid {grid}: stream strips span the whole width (N x 1)")
        return emit_in_order(graph, plan_streaming(graph, region, grid[0], split_source), order)
    return emit_in_order(graph, plan_tiling(graph, region, grid, split_source), order)


def apply_tilings(graph: Graph, tilings: tuple[Tiling, ...]) -> Graph:
    """The graph with each tiling applied in turn (each to the result of the ones before it)."""
    current = graph
    for tiling in tilings:
        names = {t.name: t.index for t in current.main.tensors}
        missing = [name for name in (tiling.source, tiling.target) if name not in names]
        if missing:
            raise NotApplicable(f"cannot tile: no tensor named {missing[0]!r}")
        current = tile(
            current,
            names[tiling.source],
            names[tiling.target],
            tiling.grid,
            split_source=tiling.split_source,
            stream=tiling.stream,
        )
    return current
