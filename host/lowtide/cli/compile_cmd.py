"""`lowtide compile`: ahead-of-time C99 for a model on the lowtide runtime, optionally checked against TFLM."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape as escape_markup

from lowtide import oracle
from lowtide.cli.application import app
from lowtide.cli.tables import Column, Kind, TerminalTable
from lowtide.compile import CompiledModel, VerifyResult, compile_model, verify_compiled
from lowtide.compile.banks import DataRegion
from lowtide.compile.codegen import Blocker, check_model
from lowtide.compile.lowering import NOT_IN_TFLM, UNDEFINED_IN_TFLM, support_rows
from lowtide.compile.rows import DEFAULT_MAX_ROW_OVERHEAD
from lowtide.device.spec import get_board_spec
from lowtide.errors import LowtideError
from lowtide.model.ir import Graph
from lowtide.pipeline.firmware import compiled_data_regions
from lowtide.project import Runtime
from lowtide.resources import RUNTIME_DIR
from lowtide.runtimes import RUNTIMES, widens_filters
from lowtide.settings import Settings, read_settings
from lowtide.validation import load_model


def compile_report(
    model: Path,
    compiled: CompiledModel,
    output_dir: Path,
    written: list[Path],
    tflm_total: int,
    tflm_head: int,
    result: VerifyResult | None,
) -> dict:
    """The JSON object of `lowtide compile --json`."""
    fixed_state = result.fixed_state_bytes if result else compiled.fixed_state_bytes
    return {
        "model": str(model),
        "output_dir": str(output_dir),
        "files": [str(p) for p in written],
        "runtime_dir": str(RUNTIME_DIR),
        "prefix": compiled.prefix,
        "model_hash": compiled.model_hash,
        "operators": compiled.operator_count,
        "arena_bytes": compiled.arena_bytes,
        "arenas": [{"region": a.region, "bytes": a.head_bytes} for a in compiled.region_arenas],
        "fixed_state_bytes": fixed_state,
        "ram_bytes": compiled.total_arena_bytes + fixed_state,
        "tflm_total_bytes": tflm_total,
        "tflm_head_bytes": tflm_head,
        "row_chains": [
            {
                "operators": list(c.ops),
                "sources": list(c.sources),
                "output": c.output,
                "rings": [{"tensor": t, "rows": rows} for t, rows in c.ring_rows],
                "ring_bytes": c.ring_bytes,
                "whole_bytes": c.whole_bytes,
                "output_over": None if c.overlap is None else {"tensor": c.overlap[0], "offset": c.overlap[1]},
                "estimated_instructions_whole": c.whole_instructions,
                "estimated_extra_instructions": c.extra_instructions,
            }
            for c in compiled.row_chains
        ],
        "row_refusals": [{"operators": list(r.ops), "reason": r.reason} for r in compiled.row_refusals],
        "inputs": [asdict(t) for t in compiled.inputs],
        "outputs": [asdict(t) for t in compiled.outputs],
        "verify": None
        if result is None
        else {
            "passed": result.passed,
            "seed": result.seed,
            "invocations": result.invocations,
            "hook_pairs": result.hook_pairs,
            "outputs": [dict(asdict(o), passed=o.passed) for o in result.outputs],
        },
    }


def support_table_markdown() -> str:
    """The operator support table of docs/operators.md, generated from the lowerings' kernel table."""
    lines = ["| operator | types | runtime | notes |", "| --- | --- | --- | --- |"]
    for row in support_rows():
        types = ", ".join(t.replace("->", " → ").replace("*", "any") for t in row.types) or "-"
        lines.append(f"| {row.opcode} | {types} | `{row.family}` | {row.notes} |")
    lines += ["", "Not compiled because TFLM itself has no kernel for them:", ""]
    lines += [f"- {opcode}: {reason}" for opcode, reason in sorted(NOT_IN_TFLM.items())]
    lines += ["", "Not compiled because TFLM's kernel gives no defined result for these types:", ""]
    lines += [
        f"- {opcode} {sig.replace('->', ' → ')}: {reason}"
        for (opcode, sig), reason in sorted(UNDEFINED_IN_TFLM.items())
    ]
    return "\n".join(lines) + "\n"


def _check(model: Path, json_output: bool, settings: Settings) -> None:
    blockers: list[Blocker] = check_model(load_model(model, settings))
    if json_output:
        print(json.dumps({"model": str(model), "compiles": not blockers, "blockers": [asdict(b) for b in blockers]}))
    elif blockers:
        for b in blockers:
            print(f"{model}: {b}")
    else:
        print(f"{model}: compiles")
    if blockers:
        raise typer.Exit(1)


def _regions(graph: Graph, board: str | None, regions: list[str]) -> tuple[DataRegion, ...]:
    """The memory regions the arena may use: a board's (`lowtide.pipeline.firmware.compiled_data_regions`), or
    the user's NAME=BYTES, fastest first."""
    if board is not None and regions:
        raise LowtideError("give --board or --region, not both")
    if board is not None:
        spec = get_board_spec(board)
        estimate = RUNTIMES[Runtime.COMPILED].estimate_footprint(graph)
        found = compiled_data_regions(spec, estimate)
        if not found:
            raise LowtideError(f"--board {spec.name}: its board file has no [[memory]] regions lowtide can place in")
        return found
    parsed = []
    for region in regions:
        name, _, nbytes = region.partition("=")
        if not name or not nbytes.isdigit():
            raise LowtideError(f"--region {region}: give NAME=BYTES (a memory region and the arena bytes it may hold)")
        parsed.append(DataRegion(name, int(nbytes)))
    names = [r.name for r in parsed]
    if len(set(names)) < len(names):
        raise LowtideError(f"--region names repeat: {', '.join(sorted({n for n in names if names.count(n) > 1}))}")
    return tuple(parsed)


@app.command("compile")
def compile_command(
    model: Annotated[Path | None, typer.Argument(help=".tflite model to compile")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Directory for the generated C files")] = None,
    prefix: Annotated[str, typer.Option("--prefix", help="C identifier prefix of the generated API")] = "model",
    verify: Annotated[
        bool, typer.Option("--verify", help="Build with the host C compiler and compare with TFLM")
    ] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random inputs used by --verify")] = 0,
    invocations: Annotated[
        int,
        typer.Option(
            "--invocations", min=1, help="--verify: invocations in a row (state carries over), each on new inputs"
        ),
    ] = 1,
    keep_model_plan: Annotated[
        bool,
        typer.Option(
            "--keep-model-plan", help="Use the model's OfflineMemoryAllocation even where lowtide's plan is smaller"
        ),
    ] = False,
    max_row_overhead: Annotated[
        float,
        typer.Option(
            "--max-row-overhead",
            min=0,
            help="Run operators a row at a time (less RAM) only where that adds at most this percentage to their "
            "estimated instructions",
        ),
    ] = DEFAULT_MAX_ROW_OVERHEAD * 100,
    board: Annotated[
        str | None,
        typer.Option(
            "--board",
            help="Compile for this board's core (int8 filters for Helium's kernels on a Cortex-M55) and split the "
            "arena across its memory regions where its RAM cannot hold it whole",
        ),
    ] = None,
    regions: Annotated[
        list[str] | None,
        typer.Option(
            "--region",
            help="NAME=BYTES: a memory region the arena may use and its room there, fastest first (repeat it)",
        ),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables")] = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check", help="List everything that keeps MODEL from compiling (exit 1 if anything), write nothing"
        ),
    ] = False,
    support_table: Annotated[
        bool,
        typer.Option("--support-table", help="Print the operators and types the runtime compiles (Markdown) and exit"),
    ] = False,
) -> None:
    """Generate C99 (weights in flash, activations where lowtide plans them for this runtime) and report its RAM."""
    if support_table:
        print(support_table_markdown(), end="")
        return
    if model is None:
        raise LowtideError("give a MODEL (or --support-table)")
    settings = read_settings()
    if check:
        _check(model, json_output, settings)
        return
    if output is None:
        raise LowtideError("give --output/-o DIR for the generated files (or --check)")
    # The validator, then TFLM (whose Prepare checks every operator's shapes), then the lowering: each sees only
    # models the one before accepted.
    graph = load_model(model, settings)
    places = _regions(graph, board, regions or [])
    # int16 filters speed the DSP kernels up and slow Helium's down; without a board, the DSP kernels' layout
    wide_weights = widens_filters(get_board_spec(board).core) if board is not None else True
    reference = oracle.run(graph.data, path=str(model), settings=settings)
    overhead = max_row_overhead / 100
    # raises before writing
    compiled = compile_model(
        graph, prefix, keep_model_plan, max_row_overhead=overhead, regions=places, wide_weights=wide_weights
    )
    result = (
        verify_compiled(
            graph,
            seed,
            prefix=prefix,
            invocations=invocations,
            keep_model_plan=keep_model_plan,
            settings=settings,
            max_row_overhead=overhead,
            wide_weights=wide_weights,
            regions=places,
        )
        if verify
        else None
    )
    if result:
        tflm_total, tflm_head = result.tflm_total_bytes, result.tflm_head_bytes
    else:
        tflm_total, tflm_head = reference.total_bytes, reference.head_bytes
    try:
        written = compiled.write(output)  # last: a model TFLM rejects leaves no files behind
    except OSError as exc:
        raise LowtideError(f"cannot write: {exc.strerror}", exc.filename or output) from None
    report = compile_report(model, compiled, output, written, tflm_total, tflm_head, result)
    if json_output:
        print(json.dumps(report))
    else:
        _print(report)
    if result is not None and not result.passed:
        raise typer.Exit(1)


def _print(report: dict) -> None:
    console = Console()
    summary = TerminalTable(
        Column(),
        Column(justify="right"),
        title=f"{Path(report['model']).name} -> {report['output_dir']}",
        title_justify="left",
        show_header=False,
    )
    summary.add_row("operators", str(report["operators"]))
    summary.add_row("model hash", report["model_hash"])
    summary.add_row("arena (caller-provided)", f"{report['arena_bytes']:,} B")
    for i, arena in enumerate(report["arenas"]):
        where = "the caller's" if i == 0 else f"{report['prefix']}_arena_{arena['region']}"
        summary.add_row(f"  in {escape_markup(arena['region'])} ({where})", f"{arena['bytes']:,} B")
    summary.add_row("fixed state (.data + .bss)", f"{report['fixed_state_bytes']:,} B")
    summary.add_row("[bold]compiled model RAM[/]", f"[bold]{report['ram_bytes']:,} B[/]")
    chains = report["row_chains"]
    if chains:
        rolled = sum(len(c["operators"]) for c in chains)
        summary.add_row("row chains (operators a row at a time)", f"{len(chains)} ({rolled} operators)")
        extra = sum(c["estimated_extra_instructions"] for c in chains)
        whole = sum(c["estimated_instructions_whole"] for c in chains)
        summary.add_row("  their estimated extra instructions", f"+{extra:,} (+{extra / max(whole, 1):.1%})")
    summary.add_row("TFLM arena total (host interpreter)", f"{report['tflm_total_bytes']:,} B")
    summary.add_row("  of which head", f"{report['tflm_head_bytes']:,} B")
    console.print(summary)
    io = TerminalTable(
        Column(),
        Column("name", Kind.NAME),
        Column("type"),
        Column("shape"),
        *(Column(name, Kind.FIGURE) for name in ("arena offset", "bytes", "scale", "zero point")),
        title="inputs and outputs",
        title_justify="left",
    )
    for kind in ("inputs", "outputs"):
        for i, t in enumerate(report[kind]):
            io.add_row(
                f"{kind[:-1]} {i}",
                escape_markup(t["name"]),
                t["dtype"],
                str(tuple(t["shape"])),
                str(t["offset"]),
                f"{t['nbytes']:,}",
                f"{t['scale']:.6g}",
                str(t["zero_point"]),
            )
    console.print(io)
    verify = report["verify"]
    if verify:
        checks = TerminalTable(
            Column("output", Kind.FIGURE),
            Column("type"),
            *(Column(name, Kind.FIGURE) for name in ("elements", "mismatches", "max abs diff", "max rel diff")),
            Column(),
            title=f"host check against TFLM (seed {verify['seed']})",
            title_justify="left",
        )
        for o in verify["outputs"]:
            checks.add_row(
                str(o["index"]),
                o["dtype"],
                f"{o['elements']:,}",
                str(o["mismatches"]),
                f"{o['max_abs_diff']:.3g}",
                f"{o['max_rel_diff']:.3g}",
                "[green]exact[/]"
                if o["passed"] and o["max_abs_diff"] == 0
                else ("[green]within 1e-5[/]" if o["passed"] else "[bold red]MISMATCH[/]"),
            )
        console.print(checks)
        console.print("[green]bit-exact with TFLM[/]" if verify["passed"] else "[bold red]differs from TFLM[/]")
    console.print(
        f"files: {', '.join(Path(f).name for f in report['files'])}; "
        f"build with -I {report['runtime_dir']} and {report['runtime_dir']}/*.c"
    )
