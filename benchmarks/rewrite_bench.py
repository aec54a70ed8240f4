"""Spatial tiling on the shared models: TFLM arena head before and after `lowtide.rewrite.rewrite_auto`.

Prints a markdown table: stock head (stored order, measured by the host TFLM), best-order head without rewriting
(the scheduler's order, planned), rewritten head (measured by the host TFLM, outputs checked bit-identical),
MAC overhead, patch grid and seconds. Run: python benchmarks/rewrite_bench.py [model names...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from lowtide import oracle
from lowtide.model import load_model
from lowtide.rewrite import rewrite_auto

MODELS = Path(__file__).resolve().parents[1] / ".." / "shared" / "models"
DEFAULT = ["tflm_mobilenet_v2_quantized_224", "tflm_person_detect", "mlperf_vww_96_int8", "mcunet_vww"]


def main(names: list[str]) -> None:
    print("| model | stock head | best-order head | rewritten head (TFLM) | vs stock | MACs overhead | grid | "
          "identical | seconds |")
    print("|---|---:|---:|---:|---:|---:|---|---|---:|")
    for name in names:
        path = MODELS / f"{name}.tflite"
        graph = load_model(path)
        inputs = oracle.random_inputs(graph)
        stock = oracle.run(path.read_bytes(), inputs)
        started = time.monotonic()
        result = rewrite_auto(graph, max_mac_overhead=0.20, time_limit=60)
        seconds = time.monotonic() - started
        run = oracle.run(result.model, inputs)
        identical = all(np.array_equal(a, b) for a, b in zip(stock.outputs, run.outputs))
        grid = f"{result.grid[0]}x{result.grid[1]}" if result.grid else f"none ({result.reason})"
        print(f"| {name} | {stock.head_bytes:,} | {result.original_head_bytes:,} | {run.head_bytes:,} | "
              f"{stock.head_bytes / run.head_bytes:.2f}x | {100 * result.mac_overhead:.1f}% | {grid} | "
              f"{'yes' if identical else 'NO'} | {seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or DEFAULT)
