"""`lowtide measure`: run a model on a board and report the arena it used, its latency and whether its outputs match
the host TFLM interpreter.

    lowtide measure MODEL --board qemu-m4              # build, boot in QEMU, measure
    lowtide measure MODEL --board nucleo-f746zg        # build, flash (PlatformIO), find the port, measure
    lowtide measure MODEL --board nucleo-f746zg --probe 066DFF...   # the one whose ST-LINK has that serial number
    lowtide measure MODEL --board labgrid:PLACE        # acquire a labgrid place, measure, release it
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import typer
from rich.console import Console

from lowtide.cli.application import app
from lowtide.cli.build_cmd import ARENA_REGION_HELP, PERSISTENT_REGION_HELP
from lowtide.cli.plots import checked_plot_path, plot_operator_counts, plots_json
from lowtide.cli.progress import progress_bars
from lowtide.cli.tables import Column, TerminalTable
from lowtide.cli.warnings import print_warnings
from lowtide.device.boards import DEFAULT_WAIT_S, LABGRID_PREFIX
from lowtide.device.measure import MeasureResult
from lowtide.pipeline.firmware import ArenaRegions
from lowtide.pipeline.measure import measure as measure_on_board
from lowtide.settings import read_settings

_PHASE_LABELS = {"upload": "sending inputs (bytes)", "run": "running (invocations)"}


@app.command()
def measure(
    model: Path = typer.Argument(..., help=".tflite model to measure"),
    board: str = typer.Option(
        "host-tflm",
        help="board to run on: host-tflm, serial, a shipped board (`lowtide "
        f"boards` lists them), {LABGRID_PREFIX}PLACE, or a board file's path",
    ),
    port: str | None = typer.Option(
        None,
        help="serial device, socket://host:port or rfc2217://...; real boards: default the board file's port, "
        "else the one with its USB VID:PID; host-tflm: tcp:0 or pty",
    ),
    iterations: int = typer.Option(10, min=1, help="measured invocations"),
    warmup: int = typer.Option(1, min=0, help="invocations run before measuring"),
    timeout: float = typer.Option(10.0, min=0.1, help="longest wait, in seconds, for any answer from the board"),
    seed: int = typer.Option(0, help="seed of the random inputs (lowtide.oracle.random_inputs)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of a table"),
    runtime: str | None = typer.Option(
        None,
        help="what runs the model on a board lowtide builds for: compiled, tflm or tflm-cmsis-nn "
        "(default: the board file's)",
    ),
    probe: str | None = typer.Option(
        None,
        help="real boards: the USB serial number of the board's probe (ST-LINK), where several boards with "
        "the same USB VID:PID are attached (default: the board file's probe_serial)",
    ),
    profile_ops: bool = typer.Option(False, "--profile-ops", help="also count cycles per operator"),
    plot_ops: Path | None = typer.Option(
        None,
        "--plot-ops",
        help="draw the count per operator into this PNG or SVG (implies --profile-ops)",
        callback=checked_plot_path,
    ),
    lock_timeout: float = typer.Option(
        DEFAULT_WAIT_S, min=0, help="longest wait, in seconds, for a board another run or labgrid client is using"
    ),
    arena_region: str | None = typer.Option(None, help=ARENA_REGION_HELP),
    persistent_region: str | None = typer.Option(None, help=PERSISTENT_REGION_HELP),
) -> None:
    """Measure MODEL's arena use and latency on a board, and check its outputs against the host interpreter."""
    settings = read_settings()
    waiting = Console(stderr=True)

    def say_wait(phase: str, holder: str) -> None:
        where = "another run on this machine" if phase == "lock" else "another labgrid client"
        waiting.print(
            f"lowtide: board {board} is in use by {where} ({holder}); waiting up to {lock_timeout:g} s "
            f"(--lock-timeout)",
            markup=False,
            highlight=False,
        )

    run = functools.partial(
        measure_on_board,
        model,
        board,
        port,
        iterations=iterations,
        warmup=warmup,
        timeout=timeout,
        seed=seed,
        runtime=runtime,
        profile_ops=profile_ops or plot_ops is not None,
        lock_timeout=lock_timeout,
        on_wait=say_wait,
        probe=probe,
        settings=settings,
        regions=ArenaRegions(arena_region, persistent_region),
    )
    if as_json:
        result = run()
        print_warnings(model, result.warnings)
        if plot_ops:
            plot_operator_counts(result, plot_ops, settings)
        print(json.dumps(result.to_json() | plots_json(plot_ops)))
        return
    console = Console()
    with progress_bars() as bars:
        result = run(progress=lambda phase, done, total: bars.update(_PHASE_LABELS[phase], done, total))
    print_warnings(model, result.warnings)
    console.print(_table(result))
    if plot_ops:
        plot_operator_counts(result, plot_ops, settings)
        console.print(f"plot written to {plot_ops}")


def _bytes(value: int | None, why_missing: str) -> str:
    return f"{value:,} B" if value is not None else f"[dim]{why_missing}[/dim]"


def _table(result: MeasureResult) -> TerminalTable:
    table = TerminalTable(
        Column("figure"),
        Column("value", justify="right"),
        title=f"{Path(result.model).name} on {result.board}",
        show_header=False,
    )
    table.add_row("runtime", result.runtime)
    table.add_row("port", result.port)
    table.add_row("head planned (lowtide)", _bytes(result.arena_planned_bytes, ""))
    table.add_row("head planned (board)", _bytes(result.board_planned_bytes, "not reported"))
    table.add_row("arena used", _bytes(result.arena_used_bytes, "not reported"))
    if result.arena_tail_bytes is not None:
        table.add_row("arena tail (persistent)", _bytes(result.arena_tail_bytes, ""))
    if result.arena_predicted_used_bytes is not None:
        verdict = (
            "[green]exact[/green]"
            if result.arena_predicted_used_bytes == result.arena_used_bytes
            else "[bold red]differs[/bold red]"
        )
        table.add_row("arena used, predicted (lowtide)", f"{result.arena_predicted_used_bytes:,} B {verdict}")
    table.add_row("arena high-water", _bytes(result.arena_high_water_bytes, "cannot paint"))
    table.add_row("static RAM (.data + .bss)", _bytes(result.static_ram_bytes, "firmware not built by lowtide"))
    if result.static_ram is not None:
        split = result.static_ram
        table.add_row(
            "  arena + runtime globals",
            f"{split.arena_bytes:,} + {split.runtime_bytes:,} = {split.model_ram_bytes:,} B",
        )
        table.add_row("  measuring harness", _bytes(split.harness_bytes, ""))
    stack = _bytes(result.stack_high_water_bytes, "not reported")
    if result.stack_size_bytes is not None:
        stack += f" of {result.stack_size_bytes:,} B"
    table.add_row("stack high-water", stack)
    for lat in (result.latency, result.latency_cycles):
        if lat is not None:
            table.add_row(
                f"latency, {lat.unit} min/med/max ({lat.iterations})", f"{lat.min:,} / {lat.median:,} / {lat.max:,}"
            )
    if (modelled := result.modelled_cycles) is not None and result.cycle_model is not None:
        table.add_row(
            f"latency, cycles ({result.cycle_model.core} model)",
            f"{modelled.min:,} / {modelled.median:,} / {modelled.max:,}",
        )
        table.add_row("  the model assumes", result.cycle_model.assumes)
    if result.clock_hz:
        table.add_row("clock", f"{result.clock_hz / 1e6:g} MHz")
    if result.op_cycles:
        table.add_row("per operator (sum)", f"{len(result.op_cycles)} operators, {sum(result.op_cycles):,}")
    verdict = (
        "[green]yes[/green]"
        if result.outputs_match
        else (f"[red]no[/red] (outputs {', '.join(map(str, result.mismatched_outputs))})")
    )
    table.add_row(f"outputs match host TFLM (seed {result.seed})", verdict)
    if result.damaged_frames or result.resends:
        table.add_row("link: damaged frames / resends", f"{result.damaged_frames} / {result.resends}")
    return table
