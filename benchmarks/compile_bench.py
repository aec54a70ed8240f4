"""Benchmark `lowtide compile`: RAM of the compiled model next to TFLM's, on every shared model it supports, and
(`--speed`) instructions per inference of the compiled model, TFLM with its reference kernels and TFLM with
CMSIS-NN on the emulated Cortex-M4 and M7; (`--armv8m`) the same three runtimes on the emulated Cortex-M33 and
Cortex-M55 (Helium) for the MLPerf Tiny models, with each TFLM arena measured against lowtide's prediction.

For each model: TFLM's arena total for the stock model (host interpreter), then the compiled model's RAM (arena
head + writable globals) for the stock operator order and for the model after `lowtide optimize`. Both compiled
models are checked bit-exact against the host TFLM first. `--speed` runs `lowtide measure --json` on qemu-m4 and
qemu-m7 for each runtime (outputs compared with the host TFLM on the board). Run from the repository root:

    python benchmarks/compile_bench.py
    python benchmarks/compile_bench.py --speed [--only MODEL ...]
    python benchmarks/compile_bench.py --armv8m [--only MODEL ...]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.console import Console
from rich.progress import Progress, TaskID

from lowtide.compile import verify_compiled
from lowtide.errors import LowtideError
from lowtide.pipeline.optimize import optimize_model
from lowtide.validation import load_model
from report import DOC, SHARED_MODELS, geomean, section_markers, write_section

SECTION = "compile"
SPEED_SECTION = "compile-speed"
# The closed and open stacks issue 27 measures against: MLPerf Tiny's published median throughput on a Cortex-M4
# at 120 MHz (NUCLEO-L4R5ZI-P) as cycles per inference (one instruction retires per cycle at most, so these bound
# the instructions of the same work from above).
REFERENCE_CYCLES = {
    "mlperf_kws_dscnn_int8": ("X-CUBE-AI", 5.21e6),
    "mlperf_vww_96_int8": ("X-CUBE-AI", 10.73e6),
    "mlperf_ic_resnet8_int8": ("X-CUBE-AI", 19.88e6),
    "mlperf_ad01_int8": ("Plumerai", 0.486e6),
}
SLOWEST_LAYERS = 3
SPEED_BOARDS = ("qemu-m4", "qemu-m7")
SPEED_RUNTIMES = ("compiled", "tflm", "tflm-cmsis-nn")
ARMV8M_SECTION = "compile-armv8m"
ARMV8M_BOARDS = {"qemu-m33": "cortex-m33", "qemu-m55": "cortex-m55"}
ARMV8M_MODELS = ("mlperf_ad01_int8", "mlperf_ic_resnet8_int8", "mlperf_kws_dscnn_int8", "mlperf_vww_96_int8")


def measure(path: Path, board: str, runtime: str, profile: bool = False) -> dict | str:
    """`lowtide measure --json` on an emulated board (`profile`: with instructions per operator); the error's last
    line where it fails."""
    result = subprocess.run(
        [
            "lowtide",
            "measure",
            str(path),
            "--board",
            board,
            "--runtime",
            runtime,
            "--iterations",
            "1",
            "--timeout",
            "300",
            "--json",
            *(["--profile-ops"] if profile else []),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        return (result.stderr.strip().splitlines() or ["failed"])[-1]
    return json.loads(result.stdout)


def slowest_layers(path: Path, console: Console) -> str:
    """The compiled model's slowest operators on qemu-m4 (a second run, with the per-operator hook, whose own
    instructions are not in the totals), as `index OPCODE instructions`."""
    profile = measure(path, "qemu-m4", "compiled", profile=True)
    if isinstance(profile, str):
        console.print(f"{path.stem}: no profile: {profile}")
        return ""
    operators = load_model(path).main.operators
    ranked = sorted(enumerate(profile["op_cycles"]), key=lambda item: -item[1])[:SLOWEST_LAYERS]
    return ", ".join(f"{i} {operators[i].opcode} {count / 1e3:,.0f} k" for i, count in ranked)


def speed_row(path: Path, progress: Progress, task: TaskID, console: Console) -> tuple[str, dict[str, float], int]:
    """One model's table row, its compiled / CMSIS-NN ratio per board, and how many of its figures failed."""
    name = path.stem
    cells, ram, ratios, failures = [], "", {}, 0
    for board in SPEED_BOARDS:
        figures = {}
        for runtime in SPEED_RUNTIMES:
            progress.update(task, description=f"{name} {runtime} on {board}")
            figures[runtime] = measure(path, board, runtime)
            progress.advance(task)
        text = []
        for runtime in SPEED_RUNTIMES:
            f = figures[runtime]
            if isinstance(f, str):
                failures += 1
                text.append(f"failed: {f[:60]}")
                continue
            exact = "" if f["outputs_match"] else " MISMATCH"
            failures += not f["outputs_match"]
            text.append(f"{f['latency_cycles']['median'] / 1e6:,.2f} M{exact}")
        compiled, cmsis = figures["compiled"], figures["tflm-cmsis-nn"]
        if not isinstance(compiled, str) and not isinstance(cmsis, str):
            ratios[board] = compiled["latency_cycles"]["median"] / cmsis["latency_cycles"]["median"]
            text.append(f"{ratios[board]:.2f}")
        else:
            text.append("")
        cells += text
        reference = figures["tflm"]
        if board == "qemu-m4" and not isinstance(compiled, str) and not isinstance(reference, str):
            # static RAM holds the arena and the runtime's state in both firmwares; the TFLM arena is
            # arena_capacity_bytes (its size), the compiled one the plan + 1 KiB painted slack
            tflm_total = reference["static_ram_bytes"]
            compiled_total = compiled["static_ram_bytes"]
            ram = f"{compiled_total:,} | {tflm_total:,} | {compiled_total / tflm_total:.2f}"
    reference_cycles = REFERENCE_CYCLES.get(name)
    best = f"{reference_cycles[1] / 1e6:,.3f} M ({reference_cycles[0]})" if reference_cycles else ""
    row = f"| {name} | {' | '.join(cells)} | {ram or ' | | '} | {best} | {slowest_layers(path, console)} |"
    return row, ratios, failures


def previous_speed_rows(doc: Path) -> dict[str, tuple[str, dict[str, float]]]:
    """The rows of the speed table as `doc` holds it, by model, with their compiled / CMSIS-NN ratio per board
    (the 5th and 9th cells)."""
    start, end = section_markers(SPEED_SECTION)
    text = doc.read_text() if doc.exists() else ""
    section = text[text.find(start) : text.find(end)] if start in text else ""
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("| ") or len(cells) < 9 or cells[0].startswith(("model", "**", "---")):
            continue
        ratios = {
            board: float(cells[column])
            for board, column in zip(SPEED_BOARDS, (4, 8), strict=True)
            if re.fullmatch(r"\d+\.\d+", cells[column])
        }
        rows[cells[0]] = (line, ratios)
    return rows


def speed(args, command: str, console: Console) -> int:
    """Instructions per inference under QEMU -icount for every runtime and board, and the compiled RAM next to
    TFLM's measured total (arena + static RAM of the TFLM firmware less the compiled firmware's own). `--jobs`
    models at a time: every figure is an instruction count, the same under any load."""
    models = args.only or sorted(path.stem for path in args.models.glob("*.tflite"))
    with Progress(console=console) as progress, ThreadPoolExecutor(max_workers=args.jobs) as pool:
        task = progress.add_task("measuring", total=len(models) * len(SPEED_BOARDS) * len(SPEED_RUNTIMES))
        results = list(
            pool.map(lambda name: speed_row(args.models / f"{name}.tflite", progress, task, console), models)
        )
    # --only measures some models again: the other models keep their rows (and ratios) from the section as it is
    measured = {name: (row, ratio) for name, (row, ratio, _) in zip(models, results, strict=True)}
    kept = {name: entry for name, entry in previous_speed_rows(args.doc).items() if name not in measured}
    table = dict(sorted({**kept, **measured}.items()))
    rows = [row for row, _ in table.values()]
    failures = sum(count for _, _, count in results)
    ratios = {board: [r[board] for _, r in table.values() if board in r] for board in SPEED_BOARDS}
    m4, m7 = geomean(ratios["qemu-m4"]), geomean(ratios["qemu-m7"])
    body = "\n".join(
        [
            "## `lowtide compile`: instructions per inference next to TFLM and TFLM with CMSIS-NN",
            "",
            f"Made by `{command}` on {time.strftime('%Y-%m-%d')}"
            + (f" (the other models' rows are from the runs before: {len(kept)} rows)." if kept else "."),
            "",
            "Instructions per inference under QEMU `-icount shift=0` (`lowtide measure --json`, one run after a warm-up;",
            "every figure is exact and repeatable), for the compiled C (fast int8 kernels, `firmware/runtime/lt_conv_dsp.h`:",
            "SXTB16/SMLAD/SMMULR on both cores, which have the DSP extension), TFLM with its reference kernels and TFLM",
            "with CMSIS-NN. Ratio = compiled / CMSIS-NN. Every output was compared with the host TFLM on the board.",
            "RAM = static RAM of each firmware image (`.data` + `.bss`: the arena with its painted slack, the input",
            "staging buffer and the runtime's state), compiled next to TFLM with reference kernels, on qemu-m4.",
            "",
            "What an instruction count cannot show: QEMU counts every instruction as one, so it sees neither cycles",
            "per instruction (SMLAD and SMMULR take 1 cycle on a Cortex-M4 and M7, a load 2 on the M4, a taken branch",
            "2-4, LDRD/LDM 1 + N) nor memory wait states (flash at 216 MHz on an STM32F7 needs 7 wait states, hidden",
            "by the ART accelerator and caches only when the weights stream sequentially). The compiled code reads",
            "weights once per pair of output pixels and keeps the im2col rows in SRAM, as CMSIS-NN does, so the",
            "ranking should hold on silicon; where the gap is small (a few percent) a different load/branch mix, the",
            "M7's dual issue or flash wait states on weight-heavy layers could swap the two.",
            "",
            "Best published = the fastest closed stack on a Cortex-M4 in MLPerf Tiny's results, as cycles per",
            "inference at 120 MHz on a NUCLEO-L4R5ZI-P: ST's X-CUBE-AI (v1.3, closed division: kws 23.032, vww 11.181,",
            "ic 6.036 inferences/s) and, on ad, Plumerai's (v1.1: 246.814/s; X-CUBE-AI's 208.608/s is 0.58 M);",
            "MLPerf Tiny results, https://mlcommons.org/benchmarks/inference-tiny/, as issue 27 quotes them). A",
            "Cortex-M4 retires at most one instruction a cycle, so fewer compiled instructions than those cycles is",
            "necessary (not sufficient) to be faster on the board. TinyEngine, the fastest open stack, needs 51 ms",
            "against CMSIS-NN's 97 ms on mcunet-vww1 on an STM32H743 (https://github.com/mit-han-lab/tinyengine, as",
            "issue 27 quotes it). Slowest layers = the compiled model's three slowest operators on qemu-m4 (index,",
            "opcode, instructions), from a second run with the per-operator hook.",
            "",
            "| model | m4 compiled | m4 TFLM ref | m4 CMSIS-NN | m4 ratio | m7 compiled | m7 TFLM ref | m7 CMSIS-NN "
            "| m7 ratio | compiled RAM | TFLM RAM | RAM ratio | best published, m4 | slowest layers, m4 |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
            *rows,
            f"| **geometric mean** | | | | **{m4:.2f}** | | | | **{m7:.2f}** | | | | | |",
            "",
            *(
                f"On {board}: compiled <= TFLM + CMSIS-NN on {sum(r <= 1 for r in ratios[board])} of "
                f"{len(ratios[board])} models (largest ratio {max(ratios[board], default=0):.2f})."
                for board in SPEED_BOARDS
            ),
        ]
    )
    write_section(args.doc, SPEED_SECTION, body)
    console.print(f"wrote the {SPEED_SECTION} section of {args.doc}")
    return 1 if failures else 0


def _arena_cell(figures: dict) -> str:
    """A TFLM run's arena: what its allocator used on the board against lowtide's prediction for the core."""
    used, predicted = figures["arena_used_bytes"], figures["arena_predicted_used_bytes"]
    if used == predicted:
        return f"{used:,} exact"
    return f"{used:,} vs {predicted:,} ({used - predicted:+,})"


def armv8m(args, command: str, console: Console) -> int:
    """Instructions per inference of every runtime on the Cortex-M33 and M55 boards, TFLM's arena on each against
    lowtide's prediction for that core, and the outputs against the host TFLM."""
    rows, ratios, failures = [], {b: [] for b in ARMV8M_BOARDS}, 0
    exact = identical = tflm_runs = runs = 0
    models = args.only or list(ARMV8M_MODELS)
    with Progress(console=console) as progress:
        task = progress.add_task("measuring", total=len(models) * len(ARMV8M_BOARDS) * len(SPEED_RUNTIMES))
        for name in models:
            path = args.models / f"{name}.tflite"
            for board, core in ARMV8M_BOARDS.items():
                figures: dict[str, dict | str] = {}
                for runtime in SPEED_RUNTIMES:
                    progress.update(task, description=f"{name} {runtime} on {board}")
                    figures[runtime] = measure(path, board, runtime)
                    progress.advance(task)
                instructions, arenas, mismatches = [], [], []
                for runtime in SPEED_RUNTIMES:
                    f = figures[runtime]
                    if isinstance(f, str):
                        failures += 1
                        instructions.append(f"failed: {f}")
                        arenas.append("")
                        continue
                    runs += 1
                    identical += f["outputs_match"]
                    if not f["outputs_match"]:
                        failures += 1
                        mismatches.append(runtime)
                    instructions.append(f"{f['latency_cycles']['median'] / 1e6:,.2f} M")
                    if runtime == "compiled":
                        arenas.append(f"{f['board_planned_bytes']:,} / {f['arena_high_water_bytes']:,}")
                    else:
                        tflm_runs += 1
                        exact += f["arena_used_bytes"] == f["arena_predicted_used_bytes"]
                        failures += f["arena_used_bytes"] != f["arena_predicted_used_bytes"]
                        arenas.append(_arena_cell(f))
                compiled, cmsis = figures["compiled"], figures["tflm-cmsis-nn"]
                ratio = ""
                if not isinstance(compiled, str) and not isinstance(cmsis, str):
                    ratios[board].append(compiled["latency_cycles"]["median"] / cmsis["latency_cycles"]["median"])
                    ratio = f"{ratios[board][-1]:.2f}"
                measured = len(SPEED_RUNTIMES) - sum(isinstance(f, str) for f in figures.values())
                outputs = (
                    f"MISMATCH: {', '.join(mismatches)}"
                    if mismatches
                    else f"bit-identical ({measured} of {len(SPEED_RUNTIMES)})"
                )
                rows.append(
                    f"| {name} | {core} | {' | '.join(instructions)} | {ratio} | {' | '.join(arenas)} | {outputs} |"
                )
    body = "\n".join(
        [
            "## Cortex-M33 and Cortex-M55: instructions per inference and TFLM's arena, MLPerf Tiny models",
            "",
            f"Made by `{command}` on {time.strftime('%Y-%m-%d')}.",
            "",
            "`lowtide measure --json` on `qemu-m33` (QEMU `mps2-an505`, Cortex-M33: Armv8-M Mainline with the DSP",
            "extension and a single-precision FPU) and `qemu-m55` (QEMU `mps3-an547`, Cortex-M55: Armv8.1-M with",
            "Helium, MVE integer and float), one run after a warm-up, instructions counted under QEMU `-icount shift=0`",
            "(exact and repeatable; not cycles: see the Cortex-M4/M7 section above). Runtimes: lowtide's compiled C,",
            "TFLM with its reference kernels, and TFLM with CMSIS-NN, whose kernels the M33 build compiles with their",
            "DSP paths and the M55 build with their MVE (Helium) paths (`-mfpu=auto`; `tests/test_armv8m_boards.py`",
            "checks the M55 image's `Tag_MVE_arch` and its tail-predicated loops). Ratio = compiled / CMSIS-NN.",
            "",
            "On the M33 the compiled C's int8 convolutions use the DSP extension's 32-bit SIMD (SXTB16/SMLAD,",
            "`firmware/runtime/lt_conv_dsp.h`: two products an instruction); on the M55 its Helium kernels",
            "(`firmware/runtime/lt_mve_conv.h`, `lt_mve_elementwise.c`: VMLADAVA multiply-accumulates sixteen int8",
            "lanes in one instruction, the filters kept int8 for the core) stand against CMSIS-NN's MVE kernels. An",
            "instruction count flatters Helium: the Cortex-M55 has a 64-bit vector datapath, so a 128-bit MVE",
            "instruction takes two beats (overlapped with its neighbours), which QEMU counts as one instruction; the",
            "modelled cycles of both runtimes on the M55 are in the section \"Cortex-M55: the Helium kernels\" below.",
            "CMSIS-NN's MVE kernels also ask for scratch buffers of other sizes than its DSP kernels, so its arena on",
            "the M55 differs from the M33's; the prediction, from TFLM's allocator built for each core, follows it.",
            "",
            "TFLM arena = `arena_used_bytes()` of the interpreter on the board after `AllocateTensors` (head and tail)",
            "against lowtide's prediction for that core and kernel set (`lowtide inspect --core CORE --kernels K",
            "--arena32 exact`: TFLM's allocator built for the core, run in QEMU on the model); \"exact\" where they are",
            "equal to the byte. Compiled arena = the compiled runtime's planned arena / its painted high-water mark.",
            "Outputs = every output byte compared with the host TFLM interpreter on the same inputs.",
            "",
            "| model | core | compiled | TFLM ref | CMSIS-NN | ratio | compiled arena, B | TFLM ref arena, B "
            "| CMSIS-NN arena, B | outputs |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
            *rows,
            "",
            f"TFLM arenas as predicted to the byte: {exact} of {tflm_runs}; outputs bit-identical with the host TFLM: "
            f"{identical} of {runs} runs.",
            *(
                f"On {board} ({core}): compiled / CMSIS-NN geometric mean {geomean(ratios[board]):.2f} over "
                f"{len(ratios[board])} models."
                for board, core in ARMV8M_BOARDS.items()
            ),
        ]
    )
    write_section(args.doc, ARMV8M_SECTION, body)
    console.print(f"wrote the {ARMV8M_SECTION} section of {args.doc}")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=SHARED_MODELS)
    parser.add_argument("--doc", type=Path, default=DOC)
    parser.add_argument("--speed", action="store_true", help="instructions per inference on qemu-m4 and qemu-m7")
    parser.add_argument(
        "--armv8m",
        action="store_true",
        help="instructions per inference and TFLM's arena on qemu-m33 and qemu-m55, MLPerf Tiny models",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="MODEL",
        help="with --speed or --armv8m: these models (default: --speed every model in --models, "
        "--armv8m the four MLPerf Tiny models)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="with --speed: models measured at a time")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    command = " ".join(["python benchmarks/compile_bench.py", *argv])
    if args.speed:
        return speed(args, command, Console(stderr=True))
    if args.armv8m:
        return armv8m(args, command, Console(stderr=True))
    rows, ratios, failures = [], [], 0
    paths = sorted(args.models.glob("*.tflite"))
    console = Console(stderr=True)
    with tempfile.TemporaryDirectory(prefix="lowtide-bench-") as tmp, Progress(console=console) as progress:
        task = progress.add_task("compiling", total=len(paths))
        for path in paths:
            progress.update(task, description=f"compiling {path.stem}")
            started = time.monotonic()
            try:
                stock = verify_compiled(load_model(path))
                optimized_path = Path(tmp) / path.name
                optimize_model(path, optimized_path)
                optimized = verify_compiled(load_model(optimized_path))
            except LowtideError as exc:
                if "cannot compile" in str(exc):
                    rows.append(f"| {path.stem} | | | | | not compiled: {str(exc).split(': ', 1)[-1]} |")
                else:
                    failures += 1
                    rows.append(f"| {path.stem} | | | | | FAILED: {exc} |")
                progress.advance(task)
                continue
            exact = "bit-exact" if stock.passed and optimized.passed else "MISMATCH"
            failures += exact != "bit-exact"
            ratios.append(optimized.ram_bytes / stock.tflm_total_bytes)
            rows.append(
                f"| {path.stem} | {stock.tflm_total_bytes:,} | {stock.ram_bytes:,} | {optimized.ram_bytes:,} | "
                f"{optimized.ram_bytes / stock.tflm_total_bytes:.3f} | {exact}, {time.monotonic() - started:.1f} s |"
            )
            progress.advance(task)
    body = "\n".join(
        [
            "## `lowtide compile`: RAM of the compiled model next to TFLM",
            "",
            f"Made by `{command}` on {time.strftime('%Y-%m-%d')}.",
            "",
            "TFLM total = the host interpreter's arena (head + tail; the tail is 64-bit here, somewhat smaller on an MCU).",
            "Compiled RAM = arena head + the writable globals of the generated code and kernels (`.data` + `.bss`,",
            "measured with `size`); weights, quantization parameters and the schedule are in flash. The stack is not",
            "counted (the deepest kernel frame is 160 B on Cortex-M4). Both compiled models were run on random inputs",
            "and compared with the host TFLM: outputs must be bit-exact.",
            "",
            "| model | TFLM total | compiled RAM, stock order | compiled RAM, after `lowtide optimize` | ratio to TFLM | check |",
            "|---|---:|---:|---:|---:|---|",
            *rows,
            f"| **geometric mean** | | | | **{geomean(ratios):.3f}** | |",
        ]
    )
    write_section(args.doc, SECTION, body)
    console.print(f"wrote the compile section of {args.doc}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
