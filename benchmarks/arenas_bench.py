"""Benchmark TFLM's two arenas on the emulated Cortex-M4: for every shared model and both kernel sets (reference,
CMSIS-NN), the non-persistent and the persistent arena lowtide's sizer predicts against what TFLM reports on the
board, the persistent arena placed in the board's PSRAM (`--persistent-region psram`). Run from the repository root:

    python benchmarks/arenas_bench.py [--only NAME ...] [--runtimes tflm tflm-cmsis-nn] [--results FILE]
                                      [--merge FILE ...] [--table]

Every figure is measured by `lowtide measure` on qemu-m4 (one invocation, outputs compared with the host TFLM); the
image declares exactly the predicted arenas, so a run at all shows the prediction is enough. Each model's figures
are kept in a results file (by default under .pio/bench/) as soon as they are measured, so a stopped sweep resumes
where it stopped. The table (docs/benchmarks.md) is written from every model in the results file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from lowtide.errors import LowtideError
from lowtide.pipeline.firmware import ArenaRegions
from lowtide.pipeline.measure import measure
from lowtide.settings import read_settings
from lowtide.tflm.sizer import predict_arena32
from lowtide.tflm.tree import KernelSet
from lowtide.validation import load_model
from report import DOC, REPO, SHARED_MODELS, write_section

SECTION = "arenas"
BOARD = "qemu-m4"
RUNTIMES = {"tflm": KernelSet.REFERENCE, "tflm-cmsis-nn": KernelSet.CMSIS_NN}
REGIONS = ArenaRegions(persistent="psram")
COMMAND = "python benchmarks/arenas_bench.py"


def measure_split(path: Path, runtime: str) -> dict:
    """One model on one runtime: predicted and measured figures of each arena, or the error."""
    graph = load_model(path)
    try:
        arena = predict_arena32(graph, RUNTIMES[runtime], read_settings())
        assert arena.split is not None
        result = measure(path, BOARD, runtime=runtime, iterations=1, warmup=0, timeout=1800.0, regions=REGIONS)
    except LowtideError as exc:
        return {"error": str(exc)}
    return {
        "non_persistent_predicted": arena.split.non_persistent_used_bytes,
        "non_persistent_measured": result.board_planned_bytes,
        "persistent_predicted": arena.split.persistent_used_bytes,
        "persistent_measured": (result.arena_used_bytes or 0) - (result.board_planned_bytes or 0),
        "declared": arena.split.non_persistent_arena_bytes + arena.split.persistent_arena_bytes,
        "one_arena_used": arena.used_bytes,
        "outputs_match": result.outputs_match,
    }


def _exact(figures: dict) -> bool:
    return "error" not in figures and (
        figures["non_persistent_predicted"] == figures["non_persistent_measured"]
        and figures["persistent_predicted"] == figures["persistent_measured"]
    )


def _cell(figures: dict, what: str) -> str:
    if "error" in figures:
        return "-"
    predicted, measured = figures[f"{what}_predicted"], figures[f"{what}_measured"]
    return f"{measured:,}" if predicted == measured else f"{measured:,} (predicted {predicted:,})"


def table(results: dict[str, dict[str, dict]]) -> str:
    lines = [
        "## TFLM's two arenas on `qemu-m4`: predicted and measured, each part",
        "",
        f"`{COMMAND}`. Each shared model with TFLM's reference and CMSIS-NN kernels, built with "
        "`--persistent-region psram` (TFLM's two arenas through `MicroAllocator::Create(persistent, size, "
        "non_persistent, size)`, the persistent one in the board's PSRAM, the non-persistent one in .bss) and run "
        "once. Non-persistent = the head TFLM reports on the board (`GetNonPersistentUsedBytes()`); persistent = "
        "`arena_used_bytes()` less it. A figure in brackets is lowtide's prediction where it differs; the image "
        "declares exactly the predicted arenas. Outputs: bit-identical to the host TFLM with both kernel sets.",
        "",
        "| model | non-persistent, ref | persistent, ref | non-persistent, CMSIS-NN | persistent, CMSIS-NN | outputs |",
        "|---|---:|---:|---:|---:|---|",
    ]
    exact = measured = 0
    missing = []
    for model in sorted({p.stem for p in SHARED_MODELS.glob("*.tflite")} | set(results)):
        runs = results.get(model, {})
        missing += [f"{model} ({runtime})" for runtime in RUNTIMES if runtime not in runs]
        figures = [runs.get(runtime, {"error": "not run"}) for runtime in RUNTIMES]
        outputs = [f["outputs_match"] for f in figures if "error" not in f]
        lines.append(
            f"| {model} | "
            + " | ".join(_cell(f, part) for f in figures for part in ("non_persistent", "persistent"))
            + f" | {('yes' if all(outputs) else 'no') if outputs else '-'} |"
        )
        exact += sum(_exact(f) for f in figures)
        measured += sum("error" not in f for f in figures)
    errors = [f"{m} ({rt}): {f['error']}" for m, runs in results.items() for rt, f in runs.items() if "error" in f]
    lines += ["", f"Both parts predicted to the byte on {exact} of {measured} runs measured."]
    lines += [f"Failed: {e}" for e in errors]
    if missing:
        lines.append(
            f"Not run yet ({len(missing)} of {len(RUNTIMES) * len(list(SHARED_MODELS.glob('*.tflite')))}): {', '.join(missing)}."
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", help="model names (file stems) to measure again")
    parser.add_argument("--runtimes", nargs="*", choices=list(RUNTIMES), default=list(RUNTIMES))
    parser.add_argument("--results", type=Path, default=REPO / ".pio" / "bench" / "arenas.json")
    parser.add_argument("--merge", type=Path, nargs="*", default=[], help="other sweeps' results files, taken in")
    parser.add_argument("--table", action="store_true", help="measure nothing: write the table from the results")
    args = parser.parse_args()
    results: dict[str, dict[str, dict]] = json.loads(args.results.read_text()) if args.results.is_file() else {}
    for other in args.merge:
        for model, runs in json.loads(other.read_text()).items():
            results.setdefault(model, {}).update(runs)
    console = Console(stderr=True)
    for path in sorted(SHARED_MODELS.glob("*.tflite")) if not args.table else ():
        if args.only and path.stem not in args.only:
            continue
        for runtime in args.runtimes:
            if not args.only and runtime in results.get(path.stem, {}):
                continue
            console.print(f"{path.stem} ({runtime})")
            results.setdefault(path.stem, {})[runtime] = measure_split(path, runtime)
            args.results.parent.mkdir(parents=True, exist_ok=True)
            args.results.write_text(json.dumps(results, indent=1, sort_keys=True))
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(results, indent=1, sort_keys=True))
    write_section(DOC, SECTION, table(results))
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
