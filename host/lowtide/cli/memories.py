"""What a board's firmware puts in each of its memories, and whether it fits: `inspect --board` for a model,
`optimize --board` for the model it writes."""

from __future__ import annotations

from lowtide.cli.tables import Column, TerminalTable
from lowtide.device.spec import get_board_spec
from lowtide.errors import LowtideError
from lowtide.model import Graph
from lowtide.pipeline.firmware import ArenaRegions, MemoryUse, arena_layout, memory_use, requested_regions
from lowtide.runtimes import runtime_for, runtime_named
from lowtide.settings import Settings


def board_memories(
    graph: Graph, board: str, runtime: str | None, regions: ArenaRegions, settings: Settings
) -> list[MemoryUse]:
    """What `board`'s firmware for `graph` (run by `runtime`, the board's own for None) puts in each memory."""
    spec = get_board_spec(board)
    if not spec.memories:
        raise LowtideError(f"--board {spec.name}: its board file describes no memories ([[memory]] tables)")
    chosen = runtime_for(spec.runtime, runtime_named(runtime) if runtime else None)
    if chosen.kernels is None and not regions.default:
        raise LowtideError(f"--arena-region and --persistent-region place TFLM's arenas: the {chosen} runtime has none")
    regions = requested_regions(spec, chosen, regions)
    arena = chosen.predict_arena(graph, spec.core, settings)
    estimate = chosen.estimate_footprint(graph, arena)
    return memory_use(spec, estimate, arena_layout(spec, graph, arena, regions, estimate))


def memories_table(uses: list[MemoryUse], board: str) -> TerminalTable:
    table = TerminalTable(
        Column("memory"),
        Column("address", justify="right"),
        Column("size", justify="right"),
        Column("holds"),
        Column("used", justify="right"),
        Column("fits"),
        title=f"{board}'s memories (stack not counted)",
    )
    for use in uses:
        holds = "; ".join(f"{what} {nbytes:,} B" for what, nbytes in use.contents) or "-"
        table.add_row(
            use.memory,
            f"0x{use.address:08X}",
            f"{use.size_bytes:,} B",
            holds,
            f"{use.used_bytes:,} B",
            "yes" if use.fits else "[bold red]NO[/]",
        )
    return table
