"""Spatial tiling on the shared models and on builder stems: TFLM arena before and after
`lowtide.rewrite.rewrite_auto`, and what the halo recomputation costs in instructions on qemu-m4.

For each model: stock head and total (host TFLM, stored order), best-order head without rewriting (planned),
rewritten head and total (host TFLM, outputs checked bit-identical), MAC overhead, patch grid, and with `--qemu` the
instructions per inference of the compiled original and the compiled rewritten model on the emulated Cortex-M4.
Writes the rewrite section of docs/benchmarks.md; with `--families`, the full-size family models of
`lowtide.testing.families` (FPN/PAN detectors, FastDepth, a landmark regressor, MobileNetV3 and EfficientNet with
squeeze-and-excitation) and their head against the best operator order, in a section of their own. Run from the
repository root:

    python benchmarks/rewrite_bench.py --qemu [model names...]
    python benchmarks/rewrite_bench.py --families [family names...]
    python benchmarks/rewrite_bench.py --declared --qemu [--budgets 0.2 0 ...] [model names...]

With `--declared`, its own section: what `lowtide optimize --rewrite auto` declares (the 32-bit arena, head + TFLM's
tail) at each MAC budget, which tilings it wrote (patches or stream strips), and with `--qemu` the instructions per
inference of the written model with TFLM + CMSIS-NN on qemu-m4 against the original's.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from lowtide import oracle
from lowtide.errors import LowtideError
from lowtide.model import read_model
from lowtide.model.ir import Graph
from lowtide.pipeline.measure import measure
from lowtide.pipeline.optimize import optimize_model
from lowtide.rewrite import Objective, RewriteResult, rewrite_auto
from lowtide.testing.families import FAMILIES
from lowtide.testing.zoo import STEMS
from lowtide.validation import load_model
from report import DOC, SHARED_MODELS, grid_text, write_section

SECTION = "rewrite"
FAMILIES_SECTION = "rewrite-families"
DECLARED_SECTION = "rewrite-declared"
WALL_SECONDS = 3600.0
DECLARED_DEFAULT = ["tflm_person_detect", "mlperf_vww_96_int8", "tflm_mobilenet_v2_quantized_224"]
DEFAULT = [
    "tflm_mobilenet_v2_quantized_224",
    "tflm_person_detect",
    "mlperf_vww_96_int8",
    "mcunet_vww",
    "mcunetv2_large",
    "mcunet_detection",
    "mltk_rock_paper_scissors",
    "mltk_image_example1",
    *STEMS,
]


def _instructions(path: Path, runtime: str | None = None) -> str:
    """Instructions per inference on qemu-m4 (`runtime`: the board's own, the compiled runtime, by default)."""
    try:
        result = measure(path, "qemu-m4", iterations=1, warmup=0, timeout=3600, runtime=runtime)
    except LowtideError as exc:
        return f"n/a ({str(exc).split(': ')[-1]})"
    if not result.outputs_match or result.latency_cycles is None:
        return "MISMATCH"
    return f"{result.latency_cycles.median:,}"


def _rewritten(graph: Graph, data: bytes) -> tuple[RewriteResult, oracle.OracleRun, oracle.OracleRun, float, bool]:
    """`rewrite_auto` at a 20% MAC budget, the original and the rewritten model run on the host TFLM on the same
    inputs, the search's wall-clock seconds, and whether the outputs are bit-identical."""
    inputs = oracle.random_inputs(graph)
    stock = oracle.run(data, inputs)
    started = time.monotonic()
    result = rewrite_auto(graph, max_mac_overhead=0.20, objective=Objective.HEAD)
    seconds = time.monotonic() - started
    run = oracle.run(result.model.data, inputs)
    return result, stock, run, seconds, all(np.array_equal(a, b) for a, b in zip(stock.outputs, run.outputs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=DEFAULT)
    parser.add_argument("--qemu", action="store_true", help="also count instructions on qemu-m4")
    parser.add_argument("--doc", type=Path, default=DOC)
    parser.add_argument(
        "--families", action="store_true", help="the full-size family models (names: lowtide.testing.families.FAMILIES)"
    )
    parser.add_argument(
        "--declared", action="store_true", help="what `optimize --rewrite auto` declares at each MAC budget"
    )
    parser.add_argument("--budgets", type=float, nargs="+", default=[0.20, 0.0], help="with --declared: MAC budgets")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.families:
        return _families(args.models if args.models != DEFAULT else list(FAMILIES), args.doc, argv)
    if args.declared:
        models = args.models if args.models != DEFAULT else DECLARED_DEFAULT
        return _declared(models, args.budgets, args.qemu, args.doc, argv)
    rows, failures = [], 0
    with tempfile.TemporaryDirectory(prefix="lowtide-bench-") as tmp:
        for name in args.models:
            path = SHARED_MODELS / f"{name}.tflite"
            if name in STEMS:  # builder models in the shapes of MobileNetV3, YOLOv8, BlazeFace and U-Net
                path = Path(tmp) / f"{name}.tflite"
                path.write_bytes(STEMS[name]().build())
            result, stock, run, seconds, identical = _rewritten(load_model(path), path.read_bytes())
            failures += not identical
            grid = " + ".join(grid_text(t) for t in result.tilings) or f"none: {result.reason}"
            instructions = ""
            if args.qemu:
                rewritten_path = Path(tmp) / f"{name}_tiled.tflite"
                rewritten_path.write_bytes(result.model.data)
                before, after = _instructions(path), _instructions(rewritten_path)
                instructions = f" {before} | {after} |"
            row = (
                f"| {name} | {stock.head_bytes:,} | {stock.total_bytes:,} | {result.original_head_bytes:,} | "
                f"{run.head_bytes:,} | {run.total_bytes:,} | {stock.head_bytes / run.head_bytes:.2f}x | "
                f"{100 * result.mac_overhead:.1f}% | {grid} | {'yes' if identical else 'NO'} |{instructions} "
                f"{seconds:.1f} s |"
            )
            print(row, flush=True)
            rows.append(row)
    qemu_columns = (
        (" instructions qemu-m4, original | instructions qemu-m4, tiled |", "---:|---:|") if args.qemu else ("", "")
    )
    body = "\n".join(
        [
            "## Graph rewriting: patch tiling (`rewrite_auto`, MAC budget 20%)",
            "",
            f"Made by `python benchmarks/rewrite_bench.py {' '.join(argv)}`.".replace(" `.", "`."),
            "",
            "Heads and totals are measured by the host TFLM interpreter on the model as `rewrite_auto` returns it (stored",
            "order, lowtide's placement as its OfflineMemoryAllocation plan). Grids: one per tiled region, in the order",
            "they were tiled; \"strips\": a SPLIT_V first cuts the region's input into row strips inside its own bytes",
            "(mcunet_vww's float input is also quantized in place). `lowtide optimize --rewrite auto` may reorder further.",
            "Totals include TFLM's persistent tail, which grows with the extra operators and tensors of the patches:",
            "`lowtide optimize` writes fewer patches or the original when that outweighs the smaller head. The compiled",
            "runtime (`lowtide compile`) has no such tail: there the tiled head is the whole RAM.",
            *(
                [
                    "Instructions: the compiled model on qemu-m4 (`-icount shift=0`), one inference after none of warm-up;",
                    "both versions' outputs matched the host TFLM.",
                ]
                if args.qemu
                else []
            ),
            "Placements and reorderings are searched within budgets of work units (`lowtide.budget`), so every figure",
            "but the time is the same on any machine under any load.",
            "",
            "The `*_stem` models are made by `lowtide.testing.zoo.STEMS`: MobileNetV3-Small's first blocks (hard-swish,",
            "squeeze-and-excitation: its global MEAN ends a region), a YOLOv8 stem with a C2f block (SiLU as LOGISTIC",
            "and MUL, SPLIT, CONCATENATION), BlazeFace's front (5x5 depthwise blocks, residual paths padded along",
            "channels and max-pooled) and a small U-Net (max-pool encoder, nearest and bilinear upsampling, skip",
            "concatenations, full-resolution output assembled from patches).",
            "",
            "| model | stock head | stock total | best-order head | tiled head | tiled total | head vs stock | extra MACs |"
            f" grid | bit-identical |{qemu_columns[0]} rewrite time |",
            f"|---|---:|---:|---:|---:|---:|---:|---:|---|---|{qemu_columns[1]}---:|",
            *rows,
        ]
    )
    write_section(args.doc, SECTION, body)
    return 1 if failures else 0


def _declared(names: list[str], budgets: list[float], qemu: bool, doc: Path, argv: list[str]) -> int:
    """Per model and MAC budget: the 32-bit arena `optimize --rewrite auto` declares (outputs verified
    bit-identical on the host TFLM), the tilings written, their extra MACs, and with `qemu` the instructions of
    the written model with TFLM + CMSIS-NN on qemu-m4 against the original's."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="lowtide-bench-") as tmp:
        for name in names:
            path = SHARED_MODELS / f"{name}.tflite"
            original = _instructions(path, "tflm-cmsis-nn") if qemu else ""
            for budget in budgets:
                out = Path(tmp) / f"{name}_{budget}.tflite"
                started = time.monotonic()
                # the safety net well past the searches' work budgets, which fix every figure, even on a busy machine
                result = optimize_model(
                    path, out, rewrite=True, max_mac_overhead=budget, verify=True, time_limit=WALL_SECONDS
                )
                if result.wall_clock_cuts:
                    print(f"{name}: the wall clock cut {', '.join(result.wall_clock_cuts)}", file=sys.stderr)
                seconds = time.monotonic() - started
                assert result.rewrite is not None  # rewrite=True
                tilings = result.rewrite_tilings
                grid = " + ".join(grid_text(t) for t in tilings) if tilings else "original"
                macs = (result.rewrite_macs or result.rewrite.macs_before) / result.rewrite.macs_before - 1
                instructions = ""
                if qemu:
                    written = _instructions(out, "tflm-cmsis-nn")
                    extra = _overhead(original, written)
                    instructions = f" {original} | {written} | {extra} |"
                row = (
                    f"| {name} | {budget:.0%} | {result.export.arena_size_bytes:,} | {grid} | {macs:+.1%} |"
                    f"{instructions} {seconds:.0f} s |"
                )
                print(row, flush=True)
                rows.append(row)
    qemu_columns = (
        (" instructions, original | instructions, written | extra instructions |", "---:|---:|---:|")
        if qemu
        else ("", "")
    )
    body = "\n".join(
        [
            "## `optimize --rewrite auto`: declared arena and instructions, patches and stream strips",
            "",
            f"Made by `python benchmarks/rewrite_bench.py {' '.join(argv)}`.",
            "",
            "The 32-bit arena `lowtide optimize --rewrite auto --max-mac-overhead BUDGET` declares (head + TFLM's",
            "persistent tail, reference kernels, Cortex-M4; the written model's outputs verified bit-identical on the",
            "host TFLM), the tilings it wrote (one per region: \"NxM\" patches recomputing their halos, \"Nx1 stream\"",
            "strips carrying them on, \"strips\": the source cut into row strips in place) and their extra MACs.",
            *(
                [
                    "Instructions: one inference of the original and of the written model with TFLM + CMSIS-NN on",
                    "qemu-m4 (`-icount shift=0`), outputs matching the host TFLM.",
                ]
                if qemu
                else []
            ),
            "",
            f"| model | MAC budget | declared arena | tilings | extra MACs |{qemu_columns[0]} optimize time |",
            f"|---|---:|---:|---|---:|{qemu_columns[1]}---:|",
            *rows,
        ]
    )
    write_section(doc, DECLARED_SECTION, body)
    return 0


def _overhead(original: str, written: str) -> str:
    """The written model's extra instructions over the original's, where both were counted."""
    try:
        before, after = int(original.replace(",", "")), int(written.replace(",", ""))
    except ValueError:
        return "n/a"
    return f"{after / before - 1:+.1%}"


def _families(names: list[str], doc: Path, argv: list[str]) -> int:
    """Head per full-size family model: stock (host TFLM), best operator order (planned), `rewrite_auto` (host
    TFLM, outputs compared with the original's)."""
    unknown = sorted(set(names) - set(FAMILIES))
    if unknown:
        raise SystemExit(f"unknown family {unknown[0]!r} (one of {', '.join(FAMILIES)})")
    rows, failures = [], 0
    for name in names:
        family = FAMILIES[name]
        data = family.build(family.full).build()
        result, stock, run, seconds, identical = _rewritten(read_model(data), data)
        failures += not identical
        count = len(result.tilings)
        regions = f"{count} region{'s' if count != 1 else ''}" if result.tilings else f"none: {result.reason}"
        row = (
            f"| {name} | {family.full}x{family.full} | {stock.head_bytes:,} | {result.original_head_bytes:,} | "
            f"{run.head_bytes:,} | {result.original_head_bytes / run.head_bytes:.2f}x | "
            f"{stock.head_bytes / run.head_bytes:.2f}x | {100 * result.mac_overhead:.1f}% | {regions} | "
            f"{'yes' if identical else 'NO'} | {seconds:.1f} s |"
        )
        print(row, flush=True)
        rows.append(row)
    body = "\n".join(
        [
            "## Graph rewriting on the families of issue #23 (`rewrite_auto`, MAC budget 20%)",
            "",
            f"Made by `python benchmarks/rewrite_bench.py {' '.join(argv)}`.",
            "",
            "Builder models in the shapes of public nets, at their own input sizes (`lowtide.testing.families`):",
            "MobileNetV3-Small's and EfficientNet-B0's first stages (squeeze-and-excitation), a BlazeFace/palm-style FPN",
            "detector and a YOLO-style PAN detector (upsampling merges, per-anchor RESHAPE + CONCATENATION heads),",
            "FastDepth (the peak in the decoder: skip ADDs and upsampling at 1/2 resolution), a face-mesh-style landmark",
            "regressor. Stock and tiled heads are measured by the host TFLM (the tiled model with lowtide's placement as",
            "its offline plan), the best-order head is planned; \"vs best\" is the best-order head over the tiled one",
            "(the issue's target: 2x). \"regions\": how many regions were tiled, one after another.",
            "",
            "| model | input | stock head | best-order head | rewrite auto head | vs best | vs stock | extra MACs |"
            " regions | bit-identical | rewrite time |",
            "|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|",
            *rows,
            "",
            "pan_detector's int8 input (76,800 B) is 86% of the 2x target (89,600 B), and its three peaks (the stem, the",
            "residual block, the neck's 20x20 channel concatenation) only go below it together. Tiling the lowest-head",
            "region first ends at 101,936 B (1.76x); the search also follows the first round's alternatives, the two",
            "tilings whose own part peaks lowest while a peak outside them sets the head (`rewrite.search.ALTERNATIVES`),",
            "each with rounds of its own. The stem's 10x10 patches peak lowest live (88,400 B) but place at 98,816 B with",
            "the other two regions tiled; its 10x9 patches (88,784 B live) place at 89,504 B.",
        ]
    )
    write_section(doc, FAMILIES_SECTION, body)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
