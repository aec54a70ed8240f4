"""The four MLPerf Tiny models' modelled cycles per inference on the emulated Cortex-M4, M7, M33 and M55 (the cycle
model, firmware/timing/lt_cycles_plugin.c), compiled by lowtide and with TFLM + CMSIS-NN, beside the best published
MLPerf Tiny closed-division results for the core (cycles = latency x clock; issue 42 names them; none for the M55,
where the comparison is with TFLM + CMSIS-NN's Helium kernels on the same model of the core).

    python benchmarks/mlperf_cycles_bench.py [--boards qemu-m4 qemu-m7 qemu-m33 qemu-m55] [--json]

Every row's outputs are checked bit for bit against the host TFLM (`lowtide measure`); a row whose outputs differ
says so. Needs the emulated boards' tools and QEMU's plugin header (LOWTIDE_QEMU_PLUGIN_HEADER, default
../shared/qemu-plugin).
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from lowtide.pipeline.measure import measure
from lowtide.settings import QEMU_PLUGIN_HEADER_SETTING, read_settings

SHARED = Path(__file__).resolve().parents[2] / "shared"
MODELS = {
    "kws": "mlperf_kws_dscnn_int8.tflite",
    "vww": "mlperf_vww_96_int8.tflite",
    "ic": "mlperf_ic_resnet8_int8.tflite",
    "ad": "mlperf_ad01_int8.tflite",
}
# The best published MLPerf Tiny closed-division results per core, in millions of cycles (latency x clock): on the
# M4, NUCLEO-L4R5ZI at 120 MHz with X-CUBE-AI 9.0 (ad: Plumerai); on the M7, NUCLEO-H7A3ZI at 280 MHz with X-CUBE-AI
# 9.0 (ad: Bosch); on the M33, NUCLEO-U575ZI at 160 MHz (kws, vww: X-CUBE-AI 10.2; ic: Plumerai; ad: Bosch). All run
# from flash behind ST's ART accelerator and caches.
PUBLISHED_MCYCLES = {
    "qemu-m4": {"kws": 5.18, "vww": 10.67, "ic": 19.82, "ad": 0.486},
    "qemu-m7": {"kws": 3.17, "vww": 6.67, "ic": 11.44, "ad": 0.303},
    "qemu-m33": {"kws": 4.64, "vww": 9.48, "ic": 16.69, "ad": 0.495},
}
RUNTIMES = {
    "qemu-m4": ("compiled", "tflm-cmsis-nn"),
    "qemu-m7": ("compiled",),
    "qemu-m33": ("compiled",),
    "qemu-m55": ("compiled", "tflm-cmsis-nn"),
}


@dataclass(frozen=True)
class Row:
    board: str
    benchmark: str
    runtime: str
    instructions: int
    modelled_cycles: int
    published_cycles: int | None  # None: no published result for the core
    ratio: float | None  # modelled / published
    outputs_match: bool


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--boards", nargs="+", choices=sorted(RUNTIMES), default=sorted(RUNTIMES))
    args = parser.parse_args()
    os.environ.setdefault(QEMU_PLUGIN_HEADER_SETTING, str(SHARED / "qemu-plugin"))
    settings = read_settings()
    rows = []
    for board, runtimes in RUNTIMES.items():
        if board not in args.boards:
            continue
        for runtime in runtimes:
            for benchmark, name in MODELS.items():
                result = measure(
                    SHARED / "models" / name,
                    board,
                    runtime=runtime,
                    iterations=1,
                    warmup=0,
                    timeout=600,
                    settings=settings,
                )
                if result.modelled_cycles is None or result.latency_cycles is None:
                    raise SystemExit(f"{board}: no cycle model ({'; '.join(result.warnings)})")
                best = PUBLISHED_MCYCLES.get(board, {}).get(benchmark)
                published = None if best is None else round(best * 1e6)
                cycles = result.modelled_cycles.median
                rows.append(
                    Row(
                        board,
                        benchmark,
                        runtime,
                        result.latency_cycles.median,
                        cycles,
                        published,
                        None if published is None else round(cycles / published, 3),
                        result.outputs_match,
                    )
                )
    if args.json:
        print(json.dumps([asdict(row) for row in rows], indent=1))
        return
    print(
        "| board | model | runtime | instructions | modelled cycles | published best | modelled / published | outputs |"
    )
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | --- |")
    for row in rows:
        published = "-" if row.published_cycles is None else f"{row.published_cycles:,}"
        ratio = "-" if row.ratio is None else f"{row.ratio:.2f}"
        print(
            f"| {row.board} | {row.benchmark} | {row.runtime} | {row.instructions:,} | {row.modelled_cycles:,} | "
            f"{published} | {ratio} | {'bit-exact' if row.outputs_match else 'DIFFER'} |"
        )
    by_key = {(row.board, row.benchmark, row.runtime): row for row in rows}
    for (board, benchmark, runtime), row in by_key.items():
        cmsis = by_key.get((board, benchmark, "tflm-cmsis-nn"))
        if runtime == "compiled" and cmsis is not None:
            print(
                f"{board} {benchmark}: compiled / TFLM + CMSIS-NN {row.instructions / cmsis.instructions:.2f} in "
                f"instructions, {row.modelled_cycles / cmsis.modelled_cycles:.2f} in modelled cycles"
            )


if __name__ == "__main__":
    main()
