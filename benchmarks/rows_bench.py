"""Benchmark the row chains of `lowtide compile` (issue 38 item 3): the compiled arena with row chains (layers
run a row at a time through rings of the rows still needed) next to the whole-tensor plan of the stored order
and of the best order lowtide's scheduler finds, on the vision models and the `lowtide.testing.families` nets;
each compiled model checked bit-exact against the host TFLM on random inputs. `--qemu`: RAM (arena + writable
globals) and instructions per inference on the emulated Cortex-M4 (qemu-m4), with and without row chains,
outputs compared with the host TFLM on the board. Run from the repository root:

    python benchmarks/rows_bench.py [--qemu] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import functools
import tempfile
import time
from pathlib import Path

import lowtide.runtimes
from lowtide.compile import compile_model, verify_compiled
from lowtide.errors import LowtideError
from lowtide.pipeline.measure import measure
from lowtide.schedule import apply_order, find_schedule, schedule_budget
from lowtide.testing.families import FAMILIES
from lowtide.validation import load_model
from report import DOC, SHARED_MODELS, section_markers, write_section

SECTION = "compile-rows"
SHARED = (
    "tflm_person_detect",
    "mlperf_vww_96_int8",
    "tflm_mobilenet_v2_quantized_224",
    "mlperf_kws_dscnn_int8",
    "mlperf_str_ww_int8",
    "mltk_kws_on_off_v3",
)
# the image nets (mobilenet_v2: issue 38's RAM target), the audio nets whose one-pixel rows the instruction limit
# keeps whole (docs/firmware.md), and the families whose chains run through resizes, PRELUs, max pools, channel
# PADs and concatenations
QEMU_MODELS = (
    "tflm_person_detect",
    "mlperf_vww_96_int8",
    "tflm_mobilenet_v2_quantized_224",
    "mlperf_kws_dscnn_int8",
    "mlperf_str_ww_int8",
    "mltk_kws_on_off_v3",
    "fastdepth",
    "face_landmarks",
    "pan_detector",
)
SCHEDULE_EFFORT = 0.2


def _models(workdir: Path, only: set[str]) -> list[Path]:
    paths = [SHARED_MODELS / f"{name}.tflite" for name in SHARED]
    for name, family in FAMILIES.items():
        path = workdir / f"{name}.tflite"
        path.write_bytes(family.build(family.full).build())
        paths.append(path)
    return [p for p in paths if not only or p.stem in only]


def _best_order(path: Path, workdir: Path) -> int:
    """The whole-tensor compiled arena of the best order the scheduler finds (outputs placed over dying inputs
    counted once, as the compiled plan places them)."""
    graph = load_model(path)
    schedule = find_schedule(graph, schedule_budget(SCHEDULE_EFFORT), in_place=True)
    reordered = workdir / f"{path.stem}_best_order.tflite"
    reordered.write_bytes(apply_order(graph, schedule.order).data)
    return compile_model(load_model(reordered), row_chains=False).arena_bytes


def _row(path: Path, workdir: Path) -> str:
    started = time.monotonic()
    rows = compile_model(load_model(path))
    whole = compile_model(load_model(path), row_chains=False).arena_bytes
    best = _best_order(path, workdir)
    check = verify_compiled(load_model(path), seed=0)
    verdict = "bit-exact" if check.passed else "MISMATCH"
    rolled = sum(len(c.ops) for c in rows.row_chains)
    return (
        f"| {path.stem} | {whole:,} | {best:,} | {rows.arena_bytes:,} | {rows.arena_bytes / best:.3f} | "
        f"{len(rows.row_chains)} ({rolled} ops) | {verdict}, {time.monotonic() - started:.0f} s |"
    )


def _on_qemu(path: Path, row_chains: bool) -> tuple[int, int, bool]:
    """RAM (arena + writable globals of the generated code and runtime), instructions per inference and whether
    the outputs matched, with the compiled model built with or without row chains."""
    # what the firmware build compiles, and the plan it sizes the arena by
    replaced = {name: getattr(lowtide.runtimes, name) for name in ("compile_model", "arena_plan")}
    for name, function in replaced.items():
        setattr(lowtide.runtimes, name, functools.partial(function, row_chains=row_chains))
    try:
        result = measure(path, "qemu-m4", runtime="compiled", iterations=1, warmup=0, timeout=600)
    finally:
        for name, function in replaced.items():
            setattr(lowtide.runtimes, name, function)
    assert result.static_ram is not None and result.latency_cycles is not None
    return result.static_ram.model_ram_bytes, result.latency_cycles.median, result.outputs_match


def _previous_rows() -> tuple[dict[str, str], dict[str, str]]:
    """The section's host and qemu table rows as they stand, by model (`--only` re-makes some of them)."""
    start, end = section_markers(SECTION)
    text = DOC.read_text() if DOC.exists() else ""
    section = text[text.find(start) : text.find(end)] if start in text else ""
    host, qemu = section.split("On qemu-m4", 1) if "On qemu-m4" in section else (section, "")

    def rows(table: str) -> dict[str, str]:
        found = (line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| model "))
        return {line.split("|")[1].strip(): line for line in found}

    return rows(host), rows(qemu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--qemu", action="store_true", help="also RAM and instructions on qemu-m4")
    parser.add_argument("--only", nargs="*", default=[], help="model names (file stems) to re-make, keeping the rest")
    args = parser.parse_args()
    host_rows, qemu_rows = _previous_rows() if args.only else ({}, {})
    made = f"`python benchmarks/rows_bench.py{' --qemu' if args.qemu else ''}`"
    if args.only:
        made += (
            f"; the rows of {', '.join(args.only)} re-made with `--only` on {time.strftime('%Y-%m-%d')}, the others"
            " kept as they stood"
        )
    else:
        made += f" on {time.strftime('%Y-%m-%d')}"
    with tempfile.TemporaryDirectory(prefix="lowtide-rows-") as tmp:
        workdir = Path(tmp)
        models = _models(workdir, set(args.only))
        for path in models:
            host_rows[path.stem] = _row(path, workdir)
            print(host_rows[path.stem], flush=True)
        if args.qemu:
            for path in (p for p in models if p.stem in QEMU_MODELS):
                try:
                    ram_w, ins_w, ok_w = _on_qemu(path, False)
                    ram_r, ins_r, ok_r = _on_qemu(path, True)
                except LowtideError as exc:
                    qemu_rows[path.stem] = f"| {path.stem} | failed: {exc} | | | | | |"
                    continue
                qemu_rows[path.stem] = (
                    f"| {path.stem} | {ram_w:,} | {ram_r:,} | {ins_w:,} | {ins_r:,} | {ins_r / ins_w - 1:+.1%} | "
                    f"{'bit-exact' if ok_w and ok_r else 'MISMATCH'} |"
                )
                print(qemu_rows[path.stem], flush=True)
    lines = [
        "## `lowtide compile`: row chains",
        "",
        f"Made by {made}.",
        "",
        "Compiled arena (bytes) on whole tensors in the stored order and in the best order lowtide's scheduler finds",
        f"(effort {SCHEDULE_EFFORT}), and with row chains in the stored order (`lowtide.compile.rows`: chains of",
        "convolutions, depthwise and pointwise layers, residual ADDs, PRELUs, max pools, nearest resizes, channel",
        "CONCATENATIONs and PADs (fused or of columns and channels), run a row at a time through rings",
        "of the rows still needed, a layer that writes over its input putting its rows in the slots of the input",
        "rows it read last; a TRANSPOSE of an NCHW input read by the convolution after it as channel planes; a",
        "chain's output written over its dying input's rows already read; no chain that adds more than 15% to its",
        "layers' estimated instructions, and none away from the arena's peak that adds more than a thousandth of the",
        "model's estimate). The family",
        "nets are `lowtide.testing.families` at full size. Each model with row chains was run on random inputs and",
        "compared with the host TFLM.",
        "",
        "| model | whole tensors | whole, best order | row chains | ratio to best order | chains | check |",
        "|---|---:|---:|---:|---:|---|---|",
        *host_rows.values(),
    ]
    if qemu_rows:
        lines += [
            "",
            "On qemu-m4 (Cortex-M4 with the DSP extension): RAM = arena + writable globals; instructions per",
            "inference (`lowtide measure --runtime compiled`), outputs compared with the host TFLM on the board.",
            "",
            "| model | RAM whole | RAM rows | instructions whole | instructions rows | change | outputs |",
            "|---|---:|---:|---:|---:|---:|---|",
            *qemu_rows.values(),
        ]
    write_section(DOC, SECTION, "\n".join(lines))


if __name__ == "__main__":
    main()
