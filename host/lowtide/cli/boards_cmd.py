"""`lowtide boards`: the boards lowtide ships, with what each runs and whether it can be built here (the Arduino
envs need PlatformIO's registry: where it cannot be reached, they are listed as not built here, and why).

    lowtide boards           # table: name, core, SRAM, flash, runtimes, emulated, buildable here
    lowtide boards --map     # and each board's RAM banks: name, address, size, speed, DMA, cache
    lowtide boards --json    # one JSON object: {"boards": [...]}, each with its "memory" banks
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from typing import Annotated

import typer
from rich.console import Console

from lowtide.cli.application import app
from lowtide.cli.tables import Column, Kind, TerminalTable
from lowtide.device.drivers.platformio import EMULATOR_TOOLS, registry_needed
from lowtide.device.spec import BoardSpec, load_board_specs
from lowtide.platformio_archives import ARCHIVES_SETTING, ST_PLATFORM, st_archives_missing
from lowtide.project import LOCAL_PLATFORM_URI, env_option, env_platform, platform_installed
from lowtide.runtimes import RUNTIMES
from lowtide.settings import Settings, read_settings


@dataclass(frozen=True)
class BoardListing:
    name: str
    description: str
    core: str
    sram_bytes: int
    flash_bytes: int
    clock_hz: int
    runtimes: list[str]
    emulated: bool
    platformio_env: str
    platform: str
    buildable_here: bool
    why_not: str | None  # what building it here lacks
    memory: list[MemoryListing]  # the part's RAM banks; empty where its board file names none
    arena_region: str | None  # where TFLM's (non-persistent) arena goes unless an option says (None: with .bss)
    persistent_region: str | None  # given: TFLM's two arenas by default, the persistent one there


@dataclass(frozen=True)
class MemoryListing:
    name: str
    address: int
    size_bytes: int
    speed: str
    dma: bool
    cacheable: bool


def _runtimes(spec: BoardSpec) -> list[str]:
    return [name for name, runtime in RUNTIMES.items() if runtime.runs_on(spec.core)]


def _listing(spec: BoardSpec, settings: Settings) -> BoardListing:
    platform = env_platform(spec.platformio_env, spec.platformio_config)
    why_not = None
    if platform == LOCAL_PLATFORM_URI:
        missing = [tool for tool in EMULATOR_TOOLS if shutil.which(tool) is None]
        why_not = f"{', '.join(missing)} not installed" if missing else None
        platform = "lowtide's local dev-platform"
    elif platform == ST_PLATFORM and settings.platformio_archives and not platform_installed(platform, settings):
        why_not = st_archives_missing(env_option(spec.platformio_env, spec.platformio_config, "board"), settings)
        if why_not is None:
            platform = f"{ST_PLATFORM} (from ${ARCHIVES_SETTING})"
    elif not platform_installed(platform, settings):
        why_not = registry_needed(spec, settings)
        if why_not is None:
            platform = f"{platform} (from PlatformIO's registry)"
    return BoardListing(
        spec.name,
        spec.description,
        spec.core,
        spec.sram_bytes,
        spec.flash_bytes,
        spec.clock_hz,
        _runtimes(spec),
        spec.emulated,
        spec.platformio_env,
        platform,
        why_not is None,
        why_not,
        [MemoryListing(m.name, m.address, m.size_bytes, m.speed.value, m.dma, m.cacheable) for m in spec.memories],
        spec.arena_region,
        spec.persistent_region,
    )


@app.command("boards")
def boards_command(
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object instead of a table")] = False,
    memory_map: Annotated[bool, typer.Option("--map", help="also show each board's RAM banks")] = False,
) -> None:
    """List the boards lowtide ships (use one with --board NAME, or your own board file with --board PATH)."""
    settings = read_settings()
    listings = [_listing(spec, settings) for spec in load_board_specs().values()]
    if as_json:
        print(json.dumps({"boards": [asdict(listing) for listing in listings]}))
        return
    table = TerminalTable(
        Column("board"),
        Column("core"),
        Column("SRAM KiB", Kind.FIGURE),
        Column("flash KiB", Kind.FIGURE),
        Column("runtimes"),
        Column("emulated"),
        Column("builds here"),
        title="boards lowtide ships (host-tflm and serial are built in)",
    )
    notes = []
    for listing in listings:
        if not listing.buildable_here:
            notes.append(f"{listing.name}: {listing.why_not}")
        table.add_row(
            listing.name,
            listing.core,
            f"{listing.sram_bytes // 1024:,}",
            f"{listing.flash_bytes // 1024:,}",
            " ".join(listing.runtimes),
            "yes" if listing.emulated else "no",
            "yes" if listing.buildable_here else f"no [{len(notes)}]",
        )
    console = Console()
    console.print(table)
    for number, note in enumerate(notes, start=1):
        console.print(f"[{number}] {note}", markup=False, highlight=False)
    if memory_map:
        for listing in listings:
            _print_map(console, listing)


def _print_map(console: Console, listing: BoardListing) -> None:
    if not listing.memory:
        console.print(f"{listing.name}: SRAM {listing.sram_bytes:,} B (its board file names no banks)", highlight=False)
        return
    table = TerminalTable(
        Column("bank"),
        Column("address", Kind.FIGURE),
        Column("KiB", Kind.FIGURE),
        Column("speed"),
        Column("DMA"),
        Column("cache"),
        title=f"{listing.name}: RAM banks"
        + (
            f" (TFLM's persistent arena in {listing.persistent_region} by default)" if listing.persistent_region else ""
        ),
    )
    for bank in listing.memory:
        table.add_row(
            bank.name,
            f"0x{bank.address:08X}",
            f"{bank.size_bytes / 1024:,.0f}",
            bank.speed,
            "yes" if bank.dma else "no",
            "yes" if bank.cacheable else "no",
        )
    console.print(table)
