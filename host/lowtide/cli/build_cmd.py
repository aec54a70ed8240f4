"""`lowtide build` and `lowtide flash`: the firmware for a board (boards/*.toml) with a model in it.

    lowtide build MODEL --board qemu-m4             # ELF path, flash and static RAM use, arena
    lowtide build MODEL --board qemu-m4 --project-dir fw   # the same, and the PlatformIO project left in fw/
    lowtide build MODEL --board qemu-m4 --runtime tflm --persistent-region psram   # TFLM's two arenas, the
                                                    # persistent one in the board's [[memory]] named psram
    lowtide flash MODEL --board nucleo-f746zg       # build, then PlatformIO's upload to the board's USB port
    lowtide flash MODEL --board nucleo-f746zg --probe 066DFF...   # the board whose ST-LINK has that serial number
                                                    # (lowtide measure --board nucleo-f746zg does this, then measures)

Both refuse a model that cannot fit the board before building (arena + static RAM against SRAM, weights + code
against flash), and check the built ELF again.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from lowtide.cli.application import app
from lowtide.cli.tables import Column, TerminalTable
from lowtide.device.drivers.platformio import FirmwareImage
from lowtide.device.drivers.serialport import detect_serial_port
from lowtide.device.spec import BoardSpec, get_board_spec, with_probe
from lowtide.errors import LowtideError
from lowtide.mlperf.benchmarks import benchmark_named, mlperf_protocol
from lowtide.pipeline.firmware import (
    IN_BSS,
    ArenaRegions,
    arena_layout,
    build_board_firmware,
    predicted_head_and_used,
    requested_regions,
    tflm_arena_layout,
    upload_firmware,
)
from lowtide.runtimes import CompiledArenaLayout, FirmwareRuntime, planned_head_bytes, runtime_for, runtime_named
from lowtide.settings import Settings, read_settings
from lowtide.validation import load_model


@dataclass(frozen=True)
class BuildReport:
    model: str
    board: str
    platformio_env: str
    emulated: bool
    runtime: str
    elf: str
    project_dir: str  # the self-contained PlatformIO project that built it (lowtide.project)
    flash_bytes: int
    flash_capacity_bytes: int
    static_ram_bytes: int  # .data + .bss: the arena is in .bss
    stack_bytes: int  # the linker script's stack region, on top of the static RAM
    sram_capacity_bytes: int
    arena_planned_bytes: int  # TFLM's arena head as lowtide plans it
    # compiled: its own plan plus the slack the firmware paints; TFLM: its whole predicted arena (head and tail)
    arena_capacity_bytes: int
    # TFLM's two arenas (--persistent-region): the non-persistent and the persistent one declared; else None
    non_persistent_arena_bytes: int | None
    persistent_arena_bytes: int | None
    arena_region: str | None  # the board memory holding the (non-persistent) arena; None: .bss
    # the compiled runtime's arena split across the board's memories (lowtide.compile.banks): each memory and the
    # plan's bytes there, the first the arena the firmware passes; empty: one arena in .bss
    compiled_arenas: list[dict]
    persistent_region: str | None


def build_report(
    model: Path,
    spec: BoardSpec,
    image: FirmwareImage,
    runtime: FirmwareRuntime | None,
    settings: Settings,
    regions: ArenaRegions = IN_BSS,
) -> BuildReport:
    runtime = runtime_for(spec.runtime, runtime)
    regions = requested_regions(spec, runtime, regions)
    graph = load_model(model, settings)
    tflm_arena = runtime.predict_arena(graph, spec.core, settings)
    planned = planned_head_bytes(graph, tflm_arena)
    estimate = runtime.estimate_footprint(graph, tflm_arena)
    capacity = estimate.arena_bytes
    layout = None
    compiled = arena_layout(spec, graph, None, regions, estimate) if tflm_arena is None else None
    if isinstance(compiled, CompiledArenaLayout):
        capacity = sum(a.head_bytes for a in compiled.arenas) + runtime.arena_slack_bytes
    if tflm_arena is not None:
        planned = predicted_head_and_used(tflm_arena, regions)[0]
        layout = tflm_arena_layout(spec, tflm_arena, regions)
        capacity = layout.arena_bytes + (layout.persistent_bytes or 0)
    return BuildReport(
        model=str(model),
        board=spec.name,
        platformio_env=spec.platformio_env,
        emulated=spec.emulated,
        runtime=runtime.name,
        elf=str(image.elf),
        project_dir=str(image.project_dir),
        flash_bytes=image.flash_bytes,
        flash_capacity_bytes=spec.flash_bytes,
        static_ram_bytes=image.static_ram_bytes,
        stack_bytes=image.stack_bytes,
        sram_capacity_bytes=spec.sram_bytes,
        arena_planned_bytes=planned,
        arena_capacity_bytes=capacity,
        non_persistent_arena_bytes=layout.arena_bytes if layout and layout.persistent_bytes else None,
        persistent_arena_bytes=layout.persistent_bytes if layout else None,
        arena_region=regions.arena,
        persistent_region=regions.persistent,
        compiled_arenas=[{"region": a.region, "bytes": a.head_bytes} for a in compiled.arenas]
        if isinstance(compiled, CompiledArenaLayout)
        else [],
    )


_BOARD_HELP = "a shipped board (`lowtide boards` lists them) or a board file's path"
ARENA_REGION_HELP = (
    "the board memory ([[memory]] name, `lowtide boards --map`) that holds TFLM's arena, or with --persistent-region "
    "its non-persistent arena (default: with the image's static data)"
)
PERSISTENT_REGION_HELP = (
    "give TFLM its two arenas, each sized to the byte, and put the persistent one in this board memory"
)


def _build(
    model: Path,
    spec: BoardSpec,
    console: Console | None,
    runtime: FirmwareRuntime | None,
    settings: Settings,
    project_dir: Path | None = None,
    mlperf_benchmark: str | None = None,
    regions: ArenaRegions = IN_BSS,
) -> BuildReport:
    protocol = (
        mlperf_protocol(load_model(model, settings), benchmark_named(mlperf_benchmark)).firmware_defines()
        if mlperf_benchmark
        else None
    )
    if console is None:
        image = build_board_firmware(spec, model, runtime, project_dir, protocol, settings=settings, regions=regions)
    else:
        with console.status(f"building the {spec.platformio_env} firmware for {model.name}"):
            image = build_board_firmware(
                spec, model, runtime, project_dir, protocol, settings=settings, regions=regions
            )
    return build_report(model, spec, image, runtime, settings, regions)


_RUNTIME_HELP = "compiled, tflm or tflm-cmsis-nn (default: the board file's)"


def _share(used: int, capacity: int) -> str:
    return f"{used:,} B of {capacity:,} B ({100 * used / capacity:.1f}%)"


def _table(report: BuildReport, title: str) -> TerminalTable:
    table = TerminalTable(Column("figure"), Column("value", justify="right"), title=title, show_header=False)
    table.add_row("ELF", report.elf)
    table.add_row("PlatformIO project", report.project_dir)
    table.add_row("flash (code, weights, .data)", _share(report.flash_bytes, report.flash_capacity_bytes))
    table.add_row("static RAM (.data + .bss)", _share(report.static_ram_bytes, report.sram_capacity_bytes))
    if report.stack_bytes:
        table.add_row("stack region", f"{report.stack_bytes:,} B")
    table.add_row("arena planned (TFLM head)", f"{report.arena_planned_bytes:,} B")
    table.add_row("arena in the image (painted)", f"{report.arena_capacity_bytes:,} B")
    if report.persistent_arena_bytes is not None:
        where = f" in {report.arena_region}" if report.arena_region else ""
        table.add_row(f"non-persistent arena{where}", f"{report.non_persistent_arena_bytes:,} B")
        table.add_row(f"persistent arena in {report.persistent_region}", f"{report.persistent_arena_bytes:,} B")
    elif report.arena_region:
        table.add_row("arena's memory", report.arena_region)
    for arena in report.compiled_arenas:
        table.add_row(f"compiled arena in {arena['region']}", f"{arena['bytes']:,} B")
    return table


@app.command()
def build(
    model: Annotated[Path, typer.Argument(help=".tflite model to build into the firmware")],
    board: Annotated[str, typer.Option(help=_BOARD_HELP)],
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object instead of a table")] = False,
    runtime: Annotated[str | None, typer.Option(help=_RUNTIME_HELP)] = None,
    project_dir: Annotated[
        Path | None,
        typer.Option(
            help="write the self-contained PlatformIO project here and build it there (then `pio run -d DIR`, "
            "`pio debug`, an IDE); default: the user cache"
        ),
    ] = None,
    mlperf: Annotated[
        str | None,
        typer.Option(
            help="answer MLPerf Tiny's serial grammar as this benchmark (kws01, vww01, ic01, ad01, or your own id) "
            "instead of lowtide's protocol (docs/mlperf.md)"
        ),
    ] = None,
    arena_region: Annotated[str | None, typer.Option(help=ARENA_REGION_HELP)] = None,
    persistent_region: Annotated[str | None, typer.Option(help=PERSISTENT_REGION_HELP)] = None,
) -> None:
    """Build the firmware image for BOARD's PlatformIO env with MODEL in it."""
    settings = read_settings()
    report = _build(
        model,
        get_board_spec(board),
        None if as_json else Console(stderr=True),
        runtime_named(runtime) if runtime else None,
        settings,
        project_dir,
        mlperf,
        ArenaRegions(arena_region, persistent_region),
    )
    if as_json:
        print(json.dumps(asdict(report)))
        return
    Console().print(_table(report, f"{model.name} for {report.board} ({report.platformio_env})"))


@app.command()
def flash(
    model: Annotated[Path, typer.Argument(help=".tflite model to build into the firmware")],
    board: Annotated[str, typer.Option(help=_BOARD_HELP)],
    port: Annotated[
        str | None, typer.Option(help="upload port; default: the one port with the board file's USB ID")
    ] = None,
    probe: Annotated[
        str | None,
        typer.Option(
            help="the USB serial number of the board's probe (ST-LINK), where several boards with the same USB VID:PID "
            "are attached (default: the board file's probe_serial)"
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object instead of a table")] = False,
    runtime: Annotated[str | None, typer.Option(help=_RUNTIME_HELP)] = None,
) -> None:
    """Build the firmware for BOARD with MODEL and upload it with PlatformIO (emulated boards: build only)."""
    settings = read_settings()
    spec = get_board_spec(board)
    chosen = runtime_named(runtime) if runtime else None
    if not spec.emulated:
        if spec.serial is None:
            raise LowtideError(
                f"{spec.name} is reached through its labgrid place, not a local port: "
                f"`lowtide measure {model} --board {spec.name}` builds, flashes and measures it"
            )
        spec = with_probe(spec, probe)
        assert spec.serial is not None
        port = (
            port
            or spec.serial.port
            or detect_serial_port(
                spec.name,
                spec.serial.usb_ids,  # before building
                spec.serial.probe_serial,
            )
        )
    elif probe is not None:
        raise LowtideError(f"{spec.name} is emulated: there is no probe to choose")
    console = None if as_json else Console(stderr=True)
    report = _build(model, spec, console, chosen, settings)
    if spec.emulated:
        message = (
            f"{spec.name} is emulated: nothing to flash; `lowtide measure {model} --board {spec.name}` boots "
            f"this image in QEMU"
        )
    else:
        assert port is not None
        if console is None:
            upload_firmware(spec, model, port, chosen, settings=settings)
        else:
            with console.status(f"uploading to {spec.name} on {port}"):
                upload_firmware(spec, model, port, chosen, settings=settings)
        message = (
            f"flashed {spec.name} on {port}; measure it as it is with `lowtide measure {model} --board serial "
            f"--port {port}`, or build, flash and measure in one with `lowtide measure {model} --board "
            f"{spec.name}`"
        )
    if as_json:
        print(json.dumps({**asdict(report), "flashed": not spec.emulated, "port": port, "message": message}))
        return
    Console().print(_table(report, f"{model.name} for {report.board} ({report.platformio_env})"))
    Console().print(message)
