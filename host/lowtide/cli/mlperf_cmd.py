"""`lowtide mlperf`: MLCommons' MLPerf Tiny runner against a board running the model (docs/mlperf.md).

lowtide mlperf MODEL --board qemu-m4 --benchmark kws01 --runner tiny/          # performance, random inputs
lowtide mlperf MODEL --board nucleo-l4r5zi --benchmark kws01 --mode accuracy --dataset datasets/ --runner tiny/
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from lowtide.cli.application import app
from lowtide.cli.tables import Column, TerminalTable
from lowtide.cli.warnings import print_warnings
from lowtide.mlperf.benchmarks import BENCHMARKS
from lowtide.mlperf.runner import MODES, MlperfResult, run_mlperf
from lowtide.settings import RUNNER_ENV, read_settings


def _table(result: MlperfResult) -> TerminalTable:
    table = TerminalTable(
        Column("figure"),
        Column("value", justify="right"),
        title=f"MLPerf Tiny {result.benchmark} ({result.mode}): {result.model} on {result.board}, {result.runtime}",
    )
    if result.median_throughput is not None:
        table.add_row("median throughput (the runner's)", f"{result.median_throughput:.3f} inf./s")
        table.add_row("windows (the runner's)", ", ".join(f"{t:.3f}" for t in result.window_throughputs))
    if result.median_throughput_from_timestamps is not None:
        table.add_row(
            "median throughput (lowtide's: N / (T1 - T0) of each window's m-lap-us-)",
            f"{result.median_throughput_from_timestamps:.6f} inf./s",
        )
    if result.modelled_cycles_per_inference is not None and result.cycle_model is not None:
        table.add_row(
            f"cycles per inference ({result.cycle_model.core} model, median)",
            f"{result.modelled_cycles_per_inference:,}",
        )
        table.add_row("  the model assumes", result.cycle_model.assumes)
    if result.top1_percent is not None:
        table.add_row("Top-1 (the runner's)", f"{result.top1_percent:.1f} %")
    if result.auc is not None:
        table.add_row("AUC (the runner's)", f"{result.auc:.3f}")
    table.add_row("dataset", "random inputs of the benchmark's format" if result.generated_dataset else result.dataset)
    table.add_row("session", result.session_dir)
    return table


@app.command()
def mlperf(
    model: Annotated[Path, typer.Argument(help=".tflite model to benchmark")],
    board: Annotated[str, typer.Option(help="an emulated board (qemu-m4) or a real one on USB: `lowtide boards`")],
    benchmark: Annotated[
        str, typer.Option(help=f"the benchmark id the board reports: {', '.join(BENCHMARKS)}, or your own")
    ],
    mode: Annotated[str, typer.Option(help=" or ".join(MODES))] = "performance",
    dataset: Annotated[
        Path | None,
        typer.Option(
            help="the runner's datasets folder (holding BENCHMARK/y_labels.csv); "
            "default: random inputs of the benchmark's format"
        ),
    ] = None,
    runner: Annotated[
        Path | None,
        typer.Option(
            help=f"MLCommons' tiny checkout, its benchmark/runner, or an archive of it (default: ${RUNNER_ENV})"
        ),
    ] = None,
    runtime: Annotated[
        str | None, typer.Option(help="compiled, tflm or tflm-cmsis-nn (default: the board file's)")
    ] = None,
    port: Annotated[str | None, typer.Option(help="a real board's upload port (default: by its USB VID:PID)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object instead of a table")] = False,
) -> None:
    """Run MLPerf Tiny's runner on MODEL as BENCHMARK on a board; its session goes to ./sessions/."""
    result = run_mlperf(model, board, benchmark, mode, dataset, runner, runtime, port, settings=read_settings())
    print_warnings(model, result.warnings)
    if as_json:
        print(json.dumps(asdict(result)))
    else:
        Console().print(_table(result))
