"""`lowtide savings`: how much SRAM lowtide saves on a board, measured there.

Three variants of one model are built and measured on the board with one runtime: the model as it is (stock),
`optimize` (best operator order and offline plan), and `optimize --rewrite auto` (patch tiling too). Every figure
is what the board reports; for TFLM runtimes lowtide's 32-bit prediction stands beside it.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from lowtide.budget import DEFAULT_WALL_SECONDS
from lowtide.cli.application import app
from lowtide.cli.plots import checked_plot_path, plots_json, pyplot, save_figure
from lowtide.cli.tables import Column, Kind, TerminalTable
from lowtide.device.measure import MeasureResult
from lowtide.device.spec import get_board_spec
from lowtide.pipeline.measure import measure
from lowtide.pipeline.optimize import optimize_model
from lowtide.runtimes import FirmwareRuntime, runtime_for, runtime_named
from lowtide.settings import Settings, read_settings
from lowtide.tflm.tree import KernelSet
from lowtide.validation import load_model

VARIANTS = ("stock", "optimize", "optimize --rewrite auto")


@dataclass(frozen=True)
class VariantFigures:
    variant: str
    model: str
    arena_used_bytes: int | None
    arena_head_bytes: int | None
    arena_tail_bytes: int | None
    arena_predicted_used_bytes: int | None
    arena_high_water_bytes: int | None
    static_ram_bytes: int | None
    instructions: int | None  # median per inference: instructions on QEMU, cycles on a real board
    cycles: int | None  # median modelled cycles per inference: an emulated board's cycle model; None without one
    outputs_identical: bool  # to the host TFLM running the stock model on the same inputs
    rewrite: str | None  # what the rewrite did, for the rewritten variant


def _figures(variant: str, result: MeasureResult, stock_outputs_match: bool, rewrite: str | None) -> VariantFigures:
    return VariantFigures(
        variant=variant,
        model=result.model,
        arena_used_bytes=result.arena_used_bytes,
        arena_head_bytes=result.board_planned_bytes,
        arena_tail_bytes=result.arena_tail_bytes,
        arena_predicted_used_bytes=result.arena_predicted_used_bytes,
        arena_high_water_bytes=result.arena_high_water_bytes,
        static_ram_bytes=result.static_ram_bytes,
        instructions=result.latency_cycles.median if result.latency_cycles else None,
        cycles=result.modelled_cycles.median if result.modelled_cycles else None,
        outputs_identical=result.outputs_match and stock_outputs_match,
        rewrite=rewrite,
    )


def measure_savings(
    model: Path,
    board: str,
    runtime: FirmwareRuntime,
    out_dir: Path,
    time_limit: float,
    iterations: int,
    timeout: float,
    settings: Settings,
    report=lambda text: None,
) -> list[VariantFigures]:
    """Builds and measures the three variants, run by `runtime`; the optimized models are written into `out_dir`."""
    load_model(model, settings)  # validated before anything is built
    spec = get_board_spec(board)
    kernels = runtime.kernels or KernelSet.REFERENCE  # optimize sizes a TFLM arena: the compiled runtime has none
    optimized = out_dir / f"{model.stem}_optimized.tflite"
    rewritten = out_dir / f"{model.stem}_rewritten.tflite"
    report("measuring the stock model")
    stock = measure(model, board, runtime=runtime.name, iterations=iterations, timeout=timeout, settings=settings)
    # The optimized models' outputs are compared with the host TFLM running each of them; `optimize --verify` shows
    # those equal the stock model's, so a variant is identical when both hold.
    report("optimizing")
    plain = optimize_model(
        model, optimized, time_limit, verify=True, kernels=kernels, core=spec.core, settings=settings
    )
    report("optimizing with rewriting")
    tiled = optimize_model(
        model, rewritten, time_limit, verify=True, rewrite=True, kernels=kernels, core=spec.core, settings=settings
    )
    figures = [_figures(VARIANTS[0], stock, True, None)]
    for variant, path, result in ((VARIANTS[1], optimized, plain), (VARIANTS[2], rewritten, tiled)):
        report(f"measuring {variant}")
        identical = result.verification is not None and result.verification.outputs_identical
        rewrite = result.rewrite.reason if result.rewrite else None
        measured = measure(path, board, runtime=runtime.name, iterations=iterations, timeout=timeout, settings=settings)
        figures.append(_figures(variant, measured, identical, rewrite))
    return figures


def _bytes(value: int | None) -> str:
    return f"{value:,}" if value is not None else "-"


def _table(model: Path, board: str, runtime: FirmwareRuntime, figures: list[VariantFigures]) -> TerminalTable:
    table = TerminalTable(
        Column("variant"),
        *(
            Column(name, Kind.FIGURE)
            for name in (
                "arena used B",
                "head B",
                "tail B",
                "predicted B",
                "high-water B",
                "static RAM B",
                "instructions",
                "cycles (model)",
            )
        ),
        Column("outputs", justify="right"),
        title=f"{model.name} on {board} ({runtime})",
        title_justify="left",
    )
    stock = figures[0].arena_used_bytes
    for f in figures:
        used = _bytes(f.arena_used_bytes)
        if stock and f.arena_used_bytes is not None and f is not figures[0]:
            used += f" ({f.arena_used_bytes / stock - 1:+.1%})"
        table.add_row(
            f.variant,
            used,
            _bytes(f.arena_head_bytes),
            _bytes(f.arena_tail_bytes),
            _bytes(f.arena_predicted_used_bytes),
            _bytes(f.arena_high_water_bytes),
            _bytes(f.static_ram_bytes),
            _bytes(f.instructions),
            _bytes(f.cycles),
            "[green]identical[/]" if f.outputs_identical else "[red]differ[/]",
        )
    return table


def _plot(model: Path, board: str, runtime: FirmwareRuntime, figures: list[VariantFigures], path: Path) -> None:
    fig, ax = pyplot().subplots(figsize=(7, 4))
    names = [f.variant for f in figures]
    heads = [f.arena_head_bytes or 0 for f in figures]
    tails = [f.arena_tail_bytes or 0 for f in figures]
    ax.bar(names, heads, label="head (activations, scratch)", color="#4c72b0")
    ax.bar(names, tails, bottom=heads, label="tail (persistent)", color="#dd8452")
    for x, f in enumerate(figures):
        if f.arena_used_bytes is not None:
            ax.annotate(f"{f.arena_used_bytes:,} B", (x, f.arena_used_bytes), ha="center", va="bottom")
    ax.set_ylabel("arena bytes, measured on the board")
    ax.set_title(f"{model.name} on {board} ({runtime})")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)


@app.command()
def savings(
    model: Annotated[Path, typer.Argument(help=".tflite model")],
    board: Annotated[str, typer.Option(help="a board lowtide builds firmware for (boards/*.toml), e.g. qemu-m4")],
    runtime: Annotated[str | None, typer.Option(help="compiled, tflm or tflm-cmsis-nn (default: the board's)")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out-dir", help="keep the optimized models here")] = None,
    time_limit: Annotated[
        float,
        typer.Option(
            "--time-limit", min=1.0, help="safety net, in seconds, of each optimize (see lowtide optimize --help)"
        ),
    ] = DEFAULT_WALL_SECONDS,
    iterations: Annotated[int, typer.Option(min=1, help="measured invocations per variant (after one warm-up)")] = 1,
    timeout: Annotated[
        float,
        typer.Option(
            min=0.1,
            help="longest wait, in seconds, for the board (one inference "
            "of a large model takes minutes under emulation)",
        ),
    ] = 300.0,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="bar chart of the arena per variant (PNG or SVG)", callback=checked_plot_path),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table")] = False,
) -> None:
    """Measure on BOARD how much arena lowtide saves: the stock model, optimize, and optimize --rewrite auto."""
    settings = read_settings()
    spec = get_board_spec(board)
    chosen = runtime_for(spec.runtime, runtime_named(runtime) if runtime else None)
    console = Console(stderr=True)
    with tempfile.TemporaryDirectory() as scratch:
        directory = out_dir or Path(scratch)
        directory.mkdir(parents=True, exist_ok=True)
        if json_output:
            figures = measure_savings(model, board, chosen, directory, time_limit, iterations, timeout, settings)
        else:
            with console.status("") as status:
                figures = measure_savings(
                    model,
                    board,
                    chosen,
                    directory,
                    time_limit,
                    iterations,
                    timeout,
                    settings,
                    lambda text: status.update(f"{text}..."),
                )
    if plot:
        _plot(model, board, chosen, figures, plot)
    if json_output:
        print(
            json.dumps(
                {"model": str(model), "board": board, "runtime": chosen.name, "variants": [asdict(f) for f in figures]}
                | plots_json(plot)
            )
        )
        return
    Console().print(_table(model, board, chosen, figures))
    if plot:
        Console().print(f"plot written to {plot}")
