"""`lowtide inspect`: what TFLM will allocate for a model, operator by operator; with `--board`, what the model's
firmware puts in each of the board's memories and whether it fits."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape as escape_markup

from lowtide import oracle
from lowtide.cli.application import app
from lowtide.cli.build_cmd import ARENA_REGION_HELP, PERSISTENT_REGION_HELP
from lowtide.cli.memories import board_memories, memories_table
from lowtide.cli.options import Arena32Option
from lowtide.cli.plots import checked_plot_path, plot_model_map, plots_json, pyplot, save_figure
from lowtide.cli.progress import progress_bars
from lowtide.cli.tables import Bar, Column, Kind, TerminalTable
from lowtide.cli.warnings import print_warnings
from lowtide.device.spec import get_board_spec
from lowtide.errors import LowtideError
from lowtide.memory import MemoryPlan, tflm_plan
from lowtide.model import Graph
from lowtide.pipeline.firmware import ArenaRegions
from lowtide.settings import read_settings
from lowtide.stale import ByteRanges, StaleReport, check_stale
from lowtide.tflm import DEFAULT_CORE, Arena32Mode, Mcu32Arena, mcu32_arena
from lowtide.tflm.tree import KernelSet
from lowtide.validation import load_checked


def inspect_report(model: Path, graph: Graph, plan: MemoryPlan, arena: Mcu32Arena | None) -> dict:
    """The JSON object of `lowtide inspect --json`."""
    tensor_span = {
        (b.subgraph, b.tensor): (b, off) for b, off in zip(plan.buffers, plan.offsets) if b.tensor is not None
    }
    tensors = []
    for sg in graph.subgraphs:
        for t in sg.tensors:
            buffer, offset = tensor_span.get((sg.index, t.index), (None, None))
            tensors.append(
                {
                    "subgraph": sg.index,
                    "index": t.index,
                    "name": t.name,
                    "shape": list(t.shape),
                    "dtype": t.dtype,
                    "bytes": t.nbytes,
                    "kind": t.kind.value,
                    "first_scope": buffer.first if buffer else None,
                    "last_scope": buffer.last if buffer else None,
                    "tflm_offset": offset,
                }
            )
    ops = []
    for step in plan.steps:
        op = graph.subgraphs[step.subgraph].operators[step.op]
        ops.append(
            {
                "subgraph": step.subgraph,
                "index": step.op,
                "opcode": op.opcode,
                "scope": step.scope,
                "inputs": list(op.inputs),
                "outputs": list(op.outputs),
                "side_effects": op.has_side_effects,
                "live_tensors": [plan.buffers[i].label for i in step.buffers],
                "live_bytes": step.live_bytes,
            }
        )
    peak = plan.steps[plan.peak_step] if plan.peak_step is not None else None
    return {
        "model": str(model),
        "sha256": graph.sha256,
        "subgraphs": len(graph.subgraphs),
        "ops": ops,
        "tensors": tensors,
        "tflm_head_bytes": plan.head_bytes,
        "live_peak_bytes": plan.live_peak_bytes,
        "peak_op": {"subgraph": peak.subgraph, "index": peak.op, "opcode": peak.opcode} if peak else None,
        "mcu32": arena.to_json() if arena else None,
    }


def _table(graph: Graph, plan: MemoryPlan) -> TerminalTable:
    table = TerminalTable(
        Column("step", Kind.FIGURE),
        Column("sg", Kind.FIGURE),
        Column("op", Kind.FIGURE),
        Column("opcode"),
        Column("live tensors", Kind.FIGURE),
        Column("live bytes", Kind.FIGURE),
        Column("", Kind.BAR),
        title=f"{graph.name}: operators in execution order",
        title_justify="left",
    )
    for i, step in enumerate(plan.steps):
        peak = i == plan.peak_step
        table.add_row(
            str(i),
            str(step.subgraph),
            str(step.op),
            escape_markup(step.opcode),
            str(len(step.buffers)),
            f"{step.live_bytes:,}",
            Bar(step.live_bytes / plan.live_peak_bytes if plan.live_peak_bytes else 0.0, "← peak" if peak else ""),
            style="bold red" if peak else None,
        )
    return table


def _stale_table(report: StaleReport) -> TerminalTable:
    table = TerminalTable(
        Column("op", Kind.FIGURE),
        Column("opcode"),
        Column("tensor", Kind.NAME),
        Column("unwritten bytes", Kind.FIGURE),
        Column("from stale bytes", Kind.FIGURE),
        Column("seen by fills", Kind.FIGURE),
        Column(""),
        Column("first byte ranges"),
        title="operators whose outputs depend on stale arena memory",
        title_justify="left",
    )
    for s in report.operators:
        table.add_row(
            str(s.op),
            escape_markup(s.opcode),
            escape_markup(f"t{s.tensor} {s.tensor_name}"),
            f"{sum(b - a for a, b in s.unwritten):,} / {s.tensor_bytes:,}",
            f"{sum(b - a for a, b in s.stale_read):,}",
            f"{sum(b - a for a, b in s.observed):,}",
            "origin" if s.origin else "passed on",
            _first_ranges(s.unwritten or s.stale_read),
            style="bold red" if s.origin else None,
        )
    return table


def _first_ranges(ranges: ByteRanges, shown: int = 3) -> str:
    text = ", ".join(f"[{a}, {b})" for a, b in ranges[:shown])
    return text + (f" and {len(ranges) - shown} more" if len(ranges) > shown else "")


def _plot(graph: Graph, plan: MemoryPlan, path: Path) -> None:
    plt = pyplot()
    steps = range(len(plan.steps))
    live = [s.live_bytes for s in plan.steps]
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.step(steps, live, where="mid", label="live bytes (lower bound per step)")
    ax.axhline(plan.head_bytes, color="tab:red", linestyle="--", label=f"TFLM greedy head {plan.head_bytes:,} B")
    if plan.peak_step is not None:
        ax.plot([plan.peak_step], [plan.live_peak_bytes], "o", color="black")
        peak = plan.steps[plan.peak_step]
        ax.annotate(
            f"peak {plan.live_peak_bytes:,} B\n{peak.opcode} (op {peak.op})",
            (plan.peak_step, plan.live_peak_bytes),
            textcoords="offset points",
            xytext=(10, -30),
        )
    ax.set_xlabel("execution step")
    ax.set_ylabel("bytes")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{graph.name}: live arena memory")
    ax.legend(loc="upper right")
    fig.tight_layout()
    save_figure(fig, path)


@app.command()
def inspect(
    model: Annotated[Path, typer.Argument(help=".tflite model to inspect")],
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables")] = False,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="Draw live memory per step into this PNG or SVG", callback=checked_plot_path),
    ] = None,
    plot_map: Annotated[
        Path | None,
        typer.Option(
            "--plot-map",
            help="Draw the arena map (each tensor at its offset over the steps it is live) into this PNG or SVG",
            callback=checked_plot_path,
        ),
    ] = None,
    verify: Annotated[bool, typer.Option("--verify", help="Also run the host TFLM and compare its head")] = False,
    check_stale_memory: Annotated[
        bool,
        typer.Option(
            "--check-stale",
            help="Prove which output bytes depend on stale arena memory: operators that leave or "
            "read it (from their geometry and host-TFLM runs under different arena fills), "
            "followed through every operator's reads",
        ),
    ] = False,
    kernels: Annotated[KernelSet, typer.Option(help="TFLM kernels the 32-bit arena is predicted for")] = (
        KernelSet.REFERENCE
    ),
    core: Annotated[
        str | None,
        typer.Option(help=f"MCU core the 32-bit arena is predicted for (default: --board's, else {DEFAULT_CORE})"),
    ] = None,
    arena32: Arena32Option = Arena32Mode.AUTO,
    board: Annotated[
        str | None,
        typer.Option(help="also show what the firmware for this board puts in each of its memories, and if it fits"),
    ] = None,
    runtime: Annotated[
        str | None, typer.Option(help="with --board: compiled, tflm or tflm-cmsis-nn (default: the board file's)")
    ] = None,
    arena_region: Annotated[str | None, typer.Option(help=f"with --board: {ARENA_REGION_HELP}")] = None,
    persistent_region: Annotated[str | None, typer.Option(help=f"with --board: {PERSISTENT_REGION_HELP}")] = None,
) -> None:
    """Show live memory per operator, TFLM's predicted arena head and the lower bound, and TFLM's whole arena on
    a 32-bit MCU."""
    settings = read_settings()
    regions = ArenaRegions(arena_region, persistent_region)
    if board is None and (runtime or not regions.default):
        raise LowtideError("--runtime, --arena-region and --persistent-region go with --board")
    # Inspecting predicts what TFLM allocates for the declared shapes: it relies on no shape an operator computes.
    loaded = load_checked(model, settings, relies_on=frozenset())
    graph = loaded.graph
    memories = board_memories(graph, board, runtime, regions, settings) if board else None
    core = core or (get_board_spec(board).core if board else DEFAULT_CORE)
    plan = tflm_plan(graph)
    try:
        with progress_bars(disable=json_output) as bars:
            building = partial(bars.update, f"building TFLM for {core} (once)")
            arena = mcu32_arena(graph, plan.head_bytes, kernels, core, building, arena32, settings=settings)
    except LowtideError:
        if kernels is not KernelSet.REFERENCE or arena32 is Arena32Mode.EXACT:
            raise
        arena = None  # a model TFLM cannot load still gets its head predicted; the total needs TFLM's tail
    measured = (
        oracle.run(graph.data, oracle.random_inputs(graph), path=str(model), settings=settings).arena
        if verify
        else None
    )
    stale = check_stale(graph, settings=settings) if check_stale_memory else None
    if plot:
        _plot(graph, plan, plot)
    if plot_map:
        plot_model_map(graph, plan, plot_map)
    report = inspect_report(model, graph, plan, arena) | plots_json(plot, plot_map)
    report["warnings"] = [w.warning for w in loaded.warnings]
    print_warnings(model, report["warnings"])
    if stale:
        report["stale"] = stale.to_json()
    if memories is not None:
        report["board_memories"] = [use.to_json() for use in memories]
    if measured:
        report["measured"] = {
            "tflm_head_bytes": measured.head_bytes,
            "tflm_total_bytes": measured.total_bytes,
            "tflm_tail_bytes": measured.tail_bytes,
            "head_matches": measured.head_bytes == plan.head_bytes,
        }
    if json_output:
        print(json.dumps(report))
    else:
        console = Console()
        console.print(_table(graph, plan))
        summary = TerminalTable(Column(), Column(), show_header=False, ruled=False)
        summary.add_row("predicted TFLM head", f"{plan.head_bytes:,} B")
        summary.add_row("lower bound (live peak, this order)", f"{plan.live_peak_bytes:,} B")
        if arena:
            summary.add_row(
                f"TFLM arena on {arena.core}, {arena.kernels} kernels",
                f"{arena.used_bytes:,} B used (head {arena.head_bytes:,} + tail {arena.tail_bytes:,}); "
                f"declare {arena.arena_bytes:,} B" + ("" if arena.exact else " (estimate*)"),
            )
        if measured:
            verdict = "[green]match[/]" if measured.head_bytes == plan.head_bytes else "[bold red]MISMATCH[/]"
            summary.add_row("measured head (host TFLM)", f"{measured.head_bytes:,} B  {verdict}")
            summary.add_row("measured total (host TFLM, 64-bit)", f"{measured.total_bytes:,} B")
        console.print(summary)
        if memories is not None:
            console.print(memories_table(memories, str(board)))
        if stale:
            if stale.operators:
                console.print(_stale_table(stale))
            for i, (determined, ranges) in enumerate(zip(stale.output_determined, stale.independent_ranges)):
                if not determined.all():
                    console.print(
                        f"output {i}: {int(determined.sum()):,} of {determined.size:,} bytes proven "
                        "independent of stale memory" + (f": {_first_ranges(ranges)}" if ranges else "")
                    )
            console.print(
                ("[green]" if stale.clean else "[bold red]") + f"stale memory[/]: {escape_markup(stale.summary())}"
            )
        if arena and not arena.exact:
            console.print(f"[dim]* {escape_markup(arena.method)}.[/]")
        for written in (plot, plot_map):
            if written:
                console.print(f"plot written to {written}")
    if measured and measured.head_bytes != plan.head_bytes:
        raise LowtideError(f"predicted head {plan.head_bytes} B but TFLM measured {measured.head_bytes} B", model)
