"""`lowtide optimize`: reorder operators and plan every tensor's offset, writing a model TFLM runs in less memory."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from lowtide.budget import DEFAULT_WALL_SECONDS
from lowtide.cli.application import app
from lowtide.cli.build_cmd import ARENA_REGION_HELP, PERSISTENT_REGION_HELP
from lowtide.cli.memories import board_memories, memories_table
from lowtide.cli.options import Arena32Option
from lowtide.cli.plots import checked_plot_path, plot_optimized_maps, plot_pareto_front, plots_json
from lowtide.cli.progress import progress_bars
from lowtide.cli.tables import Column, Kind, TerminalTable
from lowtide.cli.warnings import print_warnings
from lowtide.device.spec import get_board_spec
from lowtide.errors import LowtideError
from lowtide.model import read_model
from lowtide.pipeline.firmware import ArenaRegions, MemoryUse, requested_regions
from lowtide.pipeline.optimize import OptimizeResult, PhaseProgress, Verification, WeighedGraph, optimize_model
from lowtide.project import Runtime
from lowtide.rewrite import RewriteResult, Tiling
from lowtide.runtimes import runtime_named
from lowtide.settings import read_settings
from lowtide.tflm import DEFAULT_CORE, Arena32Mode
from lowtide.tflm.tree import KernelSet


class RewriteMode(enum.StrEnum):
    none = "none"
    auto = "auto"


# The runtime the written model runs on: stock TFLM with the kernels the header is sized for.
_TFLM_RUNTIMES = {KernelSet.REFERENCE: Runtime.TFLM, KernelSet.CMSIS_NN: Runtime.TFLM_CMSIS_NN}

_PHASES = {
    "rewrite": "searching patch tilings",
    "schedule": "searching operator orders",
    "place": "placing tensors",
    "export": "writing model and memory plan",
    "verify": "running both models on host TFLM",
}


def optimize_report(result: OptimizeResult) -> dict:
    """The JSON object of `lowtide optimize --json`."""
    export, schedule, placement = result.export, result.schedule, result.placement
    report: dict[str, Any] = {
        "model": str(result.model_path),
        "output": str(export.model_path),
        "header": str(export.header_path),
        "sidecar": str(export.json_path),
        "before": {
            "tflm_head_bytes": result.stock_head_bytes,
            "tflm_total_bytes": result.stock_total_bytes,
            "live_peak_bytes": result.stock_live_peak_bytes,
            "mcu32": result.stock_mcu32.to_json(),
        },
        "after": {
            "planned_head_bytes": result.planned_head_bytes,
            "tflm_total_bytes": result.total_bytes,
            "live_peak_bytes": placement.lower_bound_bytes,
            "arena_size_bytes_mcu32": export.arena_size_bytes,
            "mcu32": export.mcu32.to_json(),
        },
        "lower_bound_bytes": result.lower_bound_bytes,
        "optimal": result.optimal,
        "gap_bytes": result.gap_bytes,
        "gap": round(result.gap_bytes / result.lower_bound_bytes, 4) if result.lower_bound_bytes else 0.0,
        "schedule_optimal": schedule.optimal,
        "schedule_gap_bytes": schedule.gap_bytes,
        "schedule_unfinished": schedule.unfinished,
        "placement_optimal": placement.optimal,
        "placement_method": placement.method,
        "schedule_seconds": round(schedule.seconds, 3),
        "placement_seconds": round(placement.seconds, 3),
        "seconds": round(result.seconds, 3),
        # The time limit is only a safety net: when it cut a search, the written files may differ between runs.
        "wall_clock_cut": bool(result.wall_clock_cuts),
        "wall_clock_cut_at": list(result.wall_clock_cuts),
        "verified": result.verification is not None,
        "warnings": list(result.warnings),
    }
    if result.verification:
        report["after"]["tflm_head_bytes"] = result.verification.measured_head_bytes
        report["outputs_identical"] = result.verification.outputs_identical
        report["determined_outputs_identical"] = result.verification.determined_identical
        report["stale"] = result.verification.stale.to_json()
    if result.rewrite:
        r = result.rewrite
        macs_after = result.rewrite_macs or r.macs_before
        report["rewrite"] = {
            "used": result.rewrite_tilings is not None,
            "reason": r.reason,
            "tilings": [_tiling_json(t) for t in result.rewrite_tilings or ()],  # as written
            "search_tilings": [_tiling_json(t) for t in r.tilings],  # the search's lowest declared arena
            # what the search minimised: head + TFLM's 32-bit persistent tail (`lowtide.memory.tail`)
            "search_head_bytes": r.head_bytes,
            "search_tail_bytes": r.tail_bytes,
            "search_declared_bytes": r.declared_bytes,
            "original_declared_bytes": r.original_declared_bytes,
            "candidates": [w.to_json() for w in result.weighed],
            "macs_before": r.macs_before,
            "macs_after": macs_after,
            "mac_overhead": round(macs_after / r.macs_before - 1, 4) if r.macs_before else 0.0,
            "pareto": [
                {
                    "source": c.source,
                    "target": c.target,
                    "grid": list(c.grid),
                    "kind": c.tiling.kind,
                    "split_source": c.split_source,
                    "stream": c.stream,
                    "macs": c.macs,
                    "live_peak_bytes": c.live_peak_bytes,
                    "head_bytes": c.head_bytes,
                    "tail_bytes": c.tail_bytes,
                    "tail_added_bytes": c.tail_bytes - r.original_tail_bytes,
                    "declared_bytes": c.declared_bytes,
                }
                for c in r.pareto
            ],
            "wall_clock_cut": r.wall_clock_cut,
            "seconds": round(r.seconds, 3),
            "rejected_candidates": [c.to_json() for c in result.rejected],
        }
    return report


def _tiling_json(tiling: Tiling) -> dict:
    return {
        "source": tiling.source,
        "target": tiling.target,
        "grid": list(tiling.grid),
        "kind": tiling.kind,
        "split_source": tiling.split_source,
        "stream": tiling.stream,
    }


def _show(console: Console, result: OptimizeResult) -> None:
    table = TerminalTable(
        Column(),
        Column("arena head", Kind.FIGURE),
        Column("arena total (host TFLM)", Kind.FIGURE),
        title=f"{result.model_path.name} -> {result.export.model_path.name}",
        title_justify="left",
    )
    table.add_row("stock TFLM", f"{result.stock_head_bytes:,} B", f"{result.stock_total_bytes:,} B")
    saved = result.stock_head_bytes - result.planned_head_bytes
    table.add_row("lowtide", f"{result.planned_head_bytes:,} B", f"{result.total_bytes:,} B", style="bold green")
    table.add_row("lower bound", f"{result.lower_bound_bytes:,} B", "", style="dim")
    share = result.gap_bytes / max(result.lower_bound_bytes, 1)
    table.add_row(
        "gap", "proven optimal" if result.optimal else f"{result.gap_bytes:,} B ({share:.1%})", "", style="dim"
    )
    console.print(table)
    verdict = (
        "proven optimal"
        if result.optimal
        else (f"{result.gap_bytes:,} B ({share:.1%}) above the lower bound, not proven optimal")
    )
    console.print(
        f"head saved: {saved:,} B ({saved / max(result.stock_head_bytes, 1):.1%}); {verdict}; {result.seconds:.1f} s"
    )
    if result.rewrite:
        r, tilings = result.rewrite, result.rewrite_tilings
        if tilings:
            overhead = (result.rewrite_macs or r.macs_before) / max(r.macs_before, 1) - 1
            console.print(f"rewrite: {'; then '.join(t.describe() for t in tilings)} (+{overhead:.1%} MACs)")
            if tilings != r.tilings:
                console.print(
                    f"  the search's choice: {'; then '.join(t.describe() for t in r.tilings)}; "
                    "the graph written declares less with TFLM's own tail for these kernels"
                )
        elif r.rewritten:
            console.print(
                f"rewrite: {r.reason}; kept the original: with the tiled graph's extra operators and "
                "tensors, TFLM's total is larger"
            )
        else:
            console.print(f"rewrite: {r.reason}")
        for c in result.rejected:
            console.print(f"  dropped {escape(c.candidate)}: {escape(c.reason)}")
        if result.weighed:
            console.print(_weighed_table(result.weighed))
        if r.pareto:
            console.print(_pareto_table(r, tilings or ()))
    if result.verification:
        _show_verification(console, result.verification)
    if result.wall_clock_cuts:
        console.print(
            f"[yellow]the time limit cut {', '.join(result.wall_clock_cuts)}[/]: this result may differ "
            "between runs (a higher --time-limit lets every search finish its --effort budget)"
        )
    before, after = result.stock_mcu32, result.export.mcu32
    console.print(
        f"TFLM arena on {after.core} ({after.kernels} kernels): used {before.used_bytes:,} B -> "
        f"{after.used_bytes:,} B; declare {after.arena_bytes:,} B (see {result.export.header_path.name})"
        + ("" if after.exact else f" [dim]({escape(after.method)})[/]")
    )


def _weighed_table(weighed: tuple[WeighedGraph, ...]) -> TerminalTable:
    """Every graph `optimize` weighed, by the 32-bit arena it declares: placed head + TFLM's persistent tail."""
    table = TerminalTable(
        Column("graph", Kind.NAME),
        Column("head", Kind.FIGURE),
        Column("tail", Kind.FIGURE),
        Column("declared", Kind.FIGURE),
        Column(),
        title="rewrite: graphs weighed, declared 32-bit arena = head + TFLM's tail",
        title_justify="left",
    )
    for w in weighed:
        mark = "written" if w.written else ""
        table.add_row(
            escape(w.describe),
            f"{w.head_bytes:,} B",
            f"{w.tail_bytes:,} B",
            f"{w.declared_bytes:,} B",
            mark,
            style="bold green" if mark else None,
        )
    return table


def _pareto_table(rewrite: RewriteResult, written: tuple[Tiling, ...]) -> TerminalTable:
    """The rewrite's Pareto front: each point's declared arena (head, placed or the live peak of one not built,
    + TFLM's tail) against its MAC overhead, with the tail its patches add; the written tilings marked, or the
    search's own when `optimize` wrote other grids or the original."""
    table = TerminalTable(
        Column("region", Kind.NAME),
        Column("grid"),
        Column("extra MACs", Kind.FIGURE),
        Column("head", Kind.FIGURE),
        Column("tail added", Kind.FIGURE),
        Column("declared", Kind.FIGURE),
        Column(),
        title="rewrite: Pareto front, declared arena against extra MACs",
        title_justify="left",
    )
    label = "written" if written else "search's best, not written"
    chosen = set(written or rewrite.tilings)
    for c in rewrite.pareto:
        overhead = c.macs / max(rewrite.macs_before, 1) - 1
        head = f"{c.head_bytes:,} B" if c.head_bytes is not None else f"{c.live_peak_bytes:,} B live"
        grid = c.tiling.kind + (" strips" if c.split_source else "")
        mark = label if c.tiling in chosen else ""
        table.add_row(
            escape(f"{c.source} -> {c.target}"),
            grid,
            f"{overhead:+.1%}",
            head,
            f"{c.tail_bytes - rewrite.original_tail_bytes:+,} B",
            f"{c.declared_bytes:,} B",
            mark,
            style="bold green" if mark else None,
        )
    return table


def _show_verification(console: Console, verification: Verification) -> None:
    stale = verification.stale
    if stale.clean:
        console.print("[green]verified[/]: outputs bit-identical, measured head = planned head")
        return
    console.print(f"[yellow]the original model's outputs depend on stale memory[/]: {escape(stale.summary())}")
    determined = stale.output_bytes - stale.undetermined_output_bytes
    same = (
        "and the rest happen to match in this run"
        if verification.outputs_identical
        else "the rest differ, as they may between any two plans"
    )
    console.print(
        f"[green]verified[/]: the {determined:,} output bytes proven independent of it are bit-identical "
        f"({same}); measured head = planned head"
    )
    for s in stale.origins:
        if s.fix:
            console.print(f"  to make operator {s.op} deterministic: {escape(s.fix)}")


@app.command()
def optimize(
    model: Annotated[Path, typer.Argument(help=".tflite model to optimize")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Optimized .tflite to write (.h and .json beside it)")],
    time_limit: Annotated[
        float,
        typer.Option(
            "--time-limit",
            min=1.0,
            help="Safety net, in seconds: searches stop at their work budgets (--effort), the "
            "same on any machine; only one that runs past this is cut, and the output says so",
        ),
    ] = DEFAULT_WALL_SECONDS,
    effort: Annotated[
        float,
        typer.Option(
            "--effort", min=0.0, help="Multiplies every search's budget of work units (same effort, same output)"
        ),
    ] = 1.0,
    verify: Annotated[bool, typer.Option("--verify", help="Run both models on host TFLM and compare")] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables")] = False,
    rewrite: Annotated[
        RewriteMode, typer.Option("--rewrite", help="auto: also try patch tiling of the graph")
    ] = RewriteMode.none,
    max_mac_overhead: Annotated[
        float, typer.Option("--max-mac-overhead", min=0.0, help="Extra MACs rewriting may add (0.2 = 20%)")
    ] = 0.20,
    kernels: Annotated[KernelSet, typer.Option(help="TFLM kernels the arena header is sized for")] = (
        KernelSet.REFERENCE
    ),
    core: Annotated[
        str | None,
        typer.Option(help=f"MCU core the arena header is sized for (default: --board's, else {DEFAULT_CORE})"),
    ] = None,
    arena32: Arena32Option = Arena32Mode.AUTO,
    board: Annotated[
        str | None,
        typer.Option(help="also show what the firmware for this board puts in each of its memories, and if it fits"),
    ] = None,
    arena_region: Annotated[str | None, typer.Option(help=f"with --board: {ARENA_REGION_HELP}")] = None,
    persistent_region: Annotated[str | None, typer.Option(help=f"with --board: {PERSISTENT_REGION_HELP}")] = None,
    plot_map: Annotated[
        Path | None,
        typer.Option(
            "--plot-map",
            help="Draw the arena maps (TFLM's plan of MODEL beside the one written) into this PNG or SVG",
            callback=checked_plot_path,
        ),
    ] = None,
    plot_front: Annotated[
        Path | None,
        typer.Option(
            "--plot-front",
            help="With --rewrite auto: draw the tilings' Pareto front (head + tail against extra MACs), PNG or SVG",
            callback=checked_plot_path,
        ),
    ] = None,
) -> None:
    """Reorder operators and plan every tensor's offset (OfflineMemoryAllocation) to shrink TFLM's arena."""
    rewriting = rewrite is RewriteMode.auto
    if plot_front and not rewriting:
        raise LowtideError("--plot-front draws the rewrite's tilings: add --rewrite auto")
    settings = read_settings()
    regions = ArenaRegions(arena_region, persistent_region)
    if board is None and not regions.default:
        raise LowtideError("--arena-region and --persistent-region go with --board")
    spec = get_board_spec(board) if board else None
    if spec:  # an unknown board or region is refused before anything is written
        requested_regions(spec, runtime_named(_TFLM_RUNTIMES[kernels]), regions)
    core = core or (spec.core if spec else DEFAULT_CORE)

    def run(on_progress: PhaseProgress | None) -> OptimizeResult:
        return optimize_model(
            model,
            output,
            time_limit,
            verify,
            on_progress,
            rewriting,
            max_mac_overhead,
            kernels,
            core,
            arena32,
            effort,
            settings,
        )

    def memories(result: OptimizeResult) -> list[MemoryUse] | None:
        """The written model on `board`, run by stock TFLM with the kernels its header is sized for."""
        if board is None:
            return None
        written = read_model(result.export.model_data, str(result.export.model_path))
        return board_memories(written, board, _TFLM_RUNTIMES[kernels], regions, settings)

    if json_output:
        result = run(None)
        print_warnings(model, result.warnings)
        if plot_map:
            plot_optimized_maps(result, plot_map, settings)
        if plot_front:
            plot_pareto_front(result, plot_front)
        report = optimize_report(result) | plots_json(plot_map, plot_front)
        uses = memories(result)
        if uses is not None:
            report["board_memories"] = [use.to_json() for use in uses]
        print(json.dumps(report))
        return
    with progress_bars() as bars:
        result = run(lambda phase, fraction, detail: bars.phase(_PHASES[phase], fraction, detail))
    print_warnings(model, result.warnings)
    _show(Console(), result)
    uses = memories(result)
    if uses is not None:
        Console().print(memories_table(uses, str(board)))
    if plot_map:
        plot_optimized_maps(result, plot_map, settings)
        Console().print(f"memory maps written to {plot_map}")
    if plot_front:
        plot_pareto_front(result, plot_front)
        Console().print(f"Pareto front written to {plot_front}")
