"""Benchmark stock TFLite Micro on the emulated Cortex-M4: the arena lowtide predicts against the arena TFLM reports on
the board, before and after `lowtide optimize`, and instructions per inference for TFLM's reference kernels, Arm's
CMSIS-NN kernels and lowtide's compiled code. Run from the repository root:

    python benchmarks/tflm_bench.py [--board qemu-m4] [--models DIR] [--only NAME ...] [--column RUNTIME]
                                    [--results FILE]

Every figure is measured by `lowtide measure` on the board (one invocation after one warm-up; instructions under
QEMU's -icount shift=0); the prediction is lowtide.tflm's 32-bit arena (TFLM's allocator built for the core).
A sweep takes hours on two cores, so each model's figures are kept in a results file (by default under .pio/bench/)
as soon as they are measured: a stopped sweep resumes where it stopped, and `--only` re-measures just those models.
The table (in docs/benchmarks.md and docs/firmware.md) is written from every model in the results file.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from lowtide.device.measure import MeasureResult
from lowtide.errors import LowtideError
from lowtide.pipeline.measure import measure
from lowtide.pipeline.optimize import optimize_model
from report import DOC, REPO, SHARED_MODELS, geomean, write_section

SECTION = "tflm"
FIRMWARE_DOC = REPO / "docs" / "firmware.md"
INSTRUCTION_RUNTIMES = ("tflm", "tflm-cmsis-nn", "compiled")


@dataclass
class ArenaFigures:
    """One TFLM run's arena on the board, and lowtide's prediction of it."""

    used: int
    tail: int
    predicted: int | None

    @classmethod
    def of(cls, result: MeasureResult) -> ArenaFigures:
        return cls(result.arena_used_bytes, result.arena_tail_bytes, result.arena_predicted_used_bytes)

    @property
    def exact(self) -> bool:
        return self.predicted == self.used


@dataclass
class ModelFigures:
    model: str
    error: str | None = None
    stock: ArenaFigures | None = None
    optimized: ArenaFigures | None = None
    cmsis_nn: ArenaFigures | None = None
    # Instructions per inference by runtime; None where the runtime cannot run the model or its outputs differ.
    instructions: dict[str, int | None] | None = None
    outputs_match: bool = False
    seconds: float = 0.0

    @classmethod
    def from_json(cls, data: dict) -> ModelFigures:
        arenas = {
            key: ArenaFigures(**data[key]) if data.get(key) else None for key in ("stock", "optimized", "cmsis_nn")
        }
        return cls(**{**data, **arenas})


def _measure_model(path: Path, board: str, tmp: Path, timeout: float) -> ModelFigures:
    started = time.monotonic()
    optimized_path = tmp / path.name
    optimize_model(path, optimized_path)
    stock = measure(path, board, runtime="tflm", iterations=1, timeout=timeout)
    optimized = measure(optimized_path, board, runtime="tflm", iterations=1, timeout=timeout)
    figures = ModelFigures(
        path.stem,
        stock=ArenaFigures.of(stock),
        optimized=ArenaFigures.of(optimized),
        outputs_match=stock.outputs_match and optimized.outputs_match,
        instructions={},
    )
    figures.instructions["tflm"] = stock.latency_cycles.median if stock.outputs_match else None
    for runtime in INSTRUCTION_RUNTIMES[1:]:
        _measure_runtime(figures, path, board, runtime, timeout)
    figures.seconds = time.monotonic() - started
    return figures


def _measure_runtime(figures: ModelFigures, path: Path, board: str, runtime: str, timeout: float) -> None:
    """Fills in the column of `runtime` (other than the stock TFLM run)."""
    try:
        result = measure(path, board, runtime=runtime, iterations=1, timeout=timeout)
    except LowtideError:
        figures.instructions[runtime] = None
        return
    figures.instructions[runtime] = result.latency_cycles.median if result.outputs_match else None
    if runtime == "tflm-cmsis-nn":
        figures.cmsis_nn = ArenaFigures.of(result)


def _millions(value: int | None) -> str:
    if not value:
        return "-"
    return f"{value / 1e6:,.1f} M" if value >= 1e6 else f"{value / 1e3:,.1f} k"


def _row(figures: ModelFigures) -> str:
    if figures.error:
        return f"| {figures.model} | | | | | | | | | | {figures.error[:120]} |"
    stock, optimized, cmsis_nn = figures.stock, figures.optimized, figures.cmsis_nn
    arenas = [a for a in (stock, optimized, cmsis_nn) if a]
    prediction = f"{sum(a.exact for a in arenas)} of {len(arenas)}"
    instructions = figures.instructions
    return (
        f"| {figures.model} | {stock.used:,} | {stock.tail:,} | {optimized.used:,} | "
        f"{optimized.used / stock.used - 1:+.1%} | {f'{cmsis_nn.used:,}' if cmsis_nn else '-'} | {prediction} | "
        f"{_millions(instructions['tflm'])} | {_millions(instructions['tflm-cmsis-nn'])} | "
        f"{_millions(instructions['compiled'])} | {'yes' if figures.outputs_match else 'NO'} |"
    )


def _section(
    commands: list[str],
    board: str,
    results: dict[str, ModelFigures],
    total: int,
    docs: tuple[Path, ...] = (DOC, FIRMWARE_DOC),
) -> str:
    """Writes the table into docs/benchmarks.md and docs/firmware.md's TFLM section (the same markers in both)."""
    measured = [f for f in results.values() if not f.error]
    arenas = [a for f in measured for a in (f.stock, f.optimized, f.cmsis_nn) if a]
    exact = sum(a.exact for a in arenas)
    drops = [f.optimized.used / f.stock.used for f in measured]
    drop_exact = sum(f.optimized.used - f.stock.used == f.optimized.predicted - f.stock.predicted for f in measured)
    hours = sum(f.seconds for f in results.values()) / 3600
    body = "\n".join(
        [
            f"## Stock TFLM on `{board}`: predicted and measured arena, before and after `optimize`",
            "",
            f"{', then '.join(f'`{c}`' for c in commands)} ({hours:.1f} h of measuring in all). "
            "Arena = `arena_used_bytes()` as TFLM reports it on the board (reference kernels unless named); tail = its "
            "persistent part; optimized = the model `lowtide optimize` writes (operator order and OfflineMemoryAllocation "
            "plan), run by the same stock TFLM. Predicted = measured: how many of the model's measured arenas (stock, "
            "optimized, stock under CMSIS-NN) lowtide's 32-bit figure (`lowtide inspect --kernels ...`, the header "
            "`optimize` writes) matched to the byte. Instructions per inference under QEMU (`-icount shift=0`): TFLM with "
            "reference kernels, TFLM with CMSIS-NN, lowtide's compiled C ('-' where a runtime cannot run the model). "
            "Outputs: the stock and optimized models bit-identical to the host TFLM on TFLM reference kernels.",
            "",
            "| model | arena, stock | tail | arena, optimized | change | arena, CMSIS-NN | predicted = measured | "
            "TFLM ref | TFLM CMSIS-NN | compiled | outputs |",
            "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---|",
            *(_row(results[name]) for name in sorted(results)),
            "",
            f"Prediction exact on {exact} of {len(arenas)} measured arenas; the drop after `optimize` equals the predicted "
            f"drop on {drop_exact} of {len(measured)} models; geomean arena after/before {geomean(drops):.3f}; "
            f"{len(results) - len(measured)} models not measured; {len(results)} of {total} models done.",
        ]
    )
    for doc in docs:
        write_section(doc, SECTION, body)
    return body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=SHARED_MODELS)
    parser.add_argument("--board", default="qemu-m4")
    parser.add_argument("--only", nargs="*", help="model names (file stems) to measure again")
    parser.add_argument(
        "--column",
        choices=INSTRUCTION_RUNTIMES[1:],
        help="measure only this runtime again, for the models already in the results file",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="seconds to wait for the board's answer (TFLM's reference kernels take minutes on the "
        "largest models under emulation)",
    )
    parser.add_argument("--results", type=Path, help="results file (default .pio/bench/tflm-BOARD.json)")
    parser.add_argument("--doc", type=Path, nargs="+", default=[DOC, FIRMWARE_DOC])
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    results_path = args.results or REPO / ".pio" / "bench" / f"tflm-{args.board}.json"
    stored = json.loads(results_path.read_text()) if results_path.exists() else {"commands": [], "models": {}}
    results = {name: ModelFigures.from_json(data) for name, data in stored["models"].items()}
    command = " ".join(["python benchmarks/tflm_bench.py", *argv])
    commands = [*stored["commands"], *([command] if command not in stored["commands"] else [])]
    all_paths = sorted(args.models.glob("*.tflite"))
    if args.column:  # a runtime changed since the sweep: its column alone, for every model measured
        paths = [
            p
            for p in all_paths
            if p.stem in results and not results[p.stem].error and (not args.only or p.stem in args.only)
        ]
    else:
        paths = [p for p in all_paths if (p.stem in args.only if args.only else p.stem not in results)]
    console = Console(stderr=True)
    with tempfile.TemporaryDirectory(prefix="lowtide-bench-") as tmp, Progress(console=console) as progress:
        task = progress.add_task("measuring", total=len(paths))
        for path in paths:
            progress.update(task, description=f"measuring {path.stem}")
            try:
                if args.column:
                    started = time.monotonic()
                    _measure_runtime(results[path.stem], path, args.board, args.column, args.timeout)
                    results[path.stem].seconds += time.monotonic() - started
                else:
                    results[path.stem] = _measure_model(path, args.board, Path(tmp), args.timeout)
            except LowtideError as exc:
                results[path.stem] = ModelFigures(path.stem, error=str(exc).split(": ", 1)[-1])
            results_path.parent.mkdir(parents=True, exist_ok=True)
            results_path.write_text(
                json.dumps({"commands": commands, "models": {name: asdict(f) for name, f in results.items()}}, indent=1)
            )
            _section(commands, args.board, results, len(all_paths), tuple(args.doc))
            progress.advance(task)
    body = _section(commands, args.board, results, len(all_paths), tuple(args.doc))
    console.print(body)
    failed = [
        f
        for f in results.values()
        if f.error or not f.outputs_match or not all(a.exact for a in (f.stock, f.optimized, f.cmsis_nn) if a)
    ]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
