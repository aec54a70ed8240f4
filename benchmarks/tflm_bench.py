"""Benchmark stock TFLite Micro on the emulated Cortex-M4: the arena lowtide predicts against the arena TFLM reports on
the board, before and after `lowtide optimize`, and instructions per inference for TFLM's reference kernels, Arm's
CMSIS-NN kernels and lowtide's compiled code. Run from the repository root:

    python benchmarks/tflm_bench.py [--board qemu-m4] [--models DIR] [--only NAME ...]

Every figure is measured by `lowtide measure` on the board (one invocation after one warm-up; instructions under
QEMU's -icount shift=0); the prediction is lowtide.tflm's 32-bit arena (TFLM's allocator built for the core).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from lowtide.device.measure import measure
from lowtide.errors import LowtideError
from lowtide.export import optimize_model
from report import DOC, SHARED_MODELS, geomean, write_section

SECTION = "tflm"
RUNTIMES = ("tflm", "tflm-cmsis-nn", "compiled")


def _millions(value: int | None) -> str:
    return f"{value / 1e6:,.1f} M" if value else "-"


def _section(command: str, board: str, rows: list[str], exact: int, compared: int, drops: list[float], failures: int,
             started: float, total: int, doc: Path = DOC) -> str:
    """Writes the section with the rows so far (a long sweep leaves its finished rows if it is stopped)."""
    minutes = (time.monotonic() - started) / 60
    body = "\n".join([
        f"## Stock TFLM on `{board}`: predicted and measured arena, before and after `optimize`",
        "",
        f"`{command}` ({minutes:.0f} min). Arena = `arena_used_bytes()` as TFLM reports it on the board (reference "
        "kernels); tail = its persistent part; optimized = the model `lowtide optimize` writes (operator order and "
        "OfflineMemoryAllocation plan), run by the same stock TFLM. Prediction: lowtide's 32-bit figure "
        "(`lowtide inspect`, the header `optimize` writes) against the board's, for both models (and for the stock "
        "model under CMSIS-NN, counted in the summary). Instructions per "
        "inference under QEMU (`-icount shift=0`): TFLM with reference kernels, TFLM with CMSIS-NN, lowtide's "
        "compiled C ('-' where a runtime cannot run the model). Outputs: both models bit-identical to the host TFLM.",
        "",
        "| model | arena, stock | tail | arena, optimized | change | predicted = measured | TFLM ref | "
        "TFLM CMSIS-NN | compiled | outputs |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---|",
        *rows,
        "",
        f"Prediction exact on {exact} of {compared} measured arenas; geomean arena after/before "
        f"{geomean(drops):.3f}; {failures} models not measured; {len(rows)} of {total} models done.",
    ])
    write_section(doc, SECTION, body)
    return body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=SHARED_MODELS)
    parser.add_argument("--board", default="qemu-m4")
    parser.add_argument("--only", nargs="*", help="model names (file stems) to measure")
    parser.add_argument("--doc", type=Path, default=DOC)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    command = " ".join(["python benchmarks/tflm_bench.py", *argv])
    paths = [p for p in sorted(args.models.glob("*.tflite")) if not args.only or p.stem in args.only]
    rows, drops, exact, compared, failures = [], [], 0, 0, 0
    console = Console(stderr=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lowtide-bench-") as tmp, Progress(console=console) as progress:
        task = progress.add_task("measuring", total=len(paths))
        for path in paths:
            progress.update(task, description=f"measuring {path.stem}")
            try:
                optimized_path = Path(tmp) / path.name
                optimize_model(path, optimized_path, time_limit=10)
                stock = measure(path, args.board, runtime="tflm", iterations=1, timeout=300.0)
                optimized = measure(optimized_path, args.board, runtime="tflm", iterations=1, timeout=300.0)
                instructions = {}
                for runtime in RUNTIMES:
                    try:
                        result = stock if runtime == "tflm" else measure(path, args.board, runtime=runtime,
                                                                         iterations=1, timeout=300.0)
                        instructions[runtime] = result.latency_cycles.median if result.outputs_match else None
                        if runtime == "tflm-cmsis-nn":
                            compared += 1
                            exact += result.arena_used_bytes == result.arena_predicted_used_bytes
                    except LowtideError:
                        instructions[runtime] = None
            except LowtideError as exc:
                failures += 1
                rows.append(f"| {path.stem} | | | | | | | | | {str(exc).split(': ', 1)[-1][:120]} |")
                progress.advance(task)
                continue
            for result in (stock, optimized):
                compared += 1
                exact += result.arena_used_bytes == result.arena_predicted_used_bytes
            drops.append(optimized.arena_used_bytes / stock.arena_used_bytes)
            verdict = "yes" if stock.outputs_match and optimized.outputs_match else "NO"
            prediction = ("exact" if stock.arena_used_bytes == stock.arena_predicted_used_bytes
                          and optimized.arena_used_bytes == optimized.arena_predicted_used_bytes else "DIFFERS")
            rows.append(
                f"| {path.stem} | {stock.arena_used_bytes:,} | {stock.arena_tail_bytes:,} | "
                f"{optimized.arena_used_bytes:,} | {optimized.arena_used_bytes / stock.arena_used_bytes - 1:+.1%} | "
                f"{prediction} | {_millions(instructions['tflm'])} | {_millions(instructions['tflm-cmsis-nn'])} | "
                f"{_millions(instructions['compiled'])} | {verdict} |")
            progress.advance(task)
            _section(command, args.board, rows, exact, compared, drops, failures, started, len(paths), args.doc)
    body = _section(command, args.board, rows, exact, compared, drops, failures, started, len(paths), args.doc)
    console.print(body)
    return 1 if failures or exact != compared else 0


if __name__ == "__main__":
    sys.exit(main())
