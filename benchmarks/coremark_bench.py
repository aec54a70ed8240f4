"""Validate the emulated boards' cycle model (firmware/timing/lt_cycles_plugin.c) against a workload nobody here
wrote: EEMBC's CoreMark, built unmodified from ../shared/coremark with the Arm GCC the firmware uses and the
firmware's flags (-O2, and -O3), run in QEMU under the model on each emulated core. CoreMark/MHz under the model is
iterations / (modelled cycles / 10^6), tabled beside the figures published for GCC on that core.

    python benchmarks/coremark_bench.py [--iterations N] [--json]

Needs arm-none-eabi-gcc, qemu-system-arm and QEMU's plugin header (LOWTIDE_QEMU_PLUGIN_HEADER, default
../shared/qemu-plugin). CoreMark's own validation (its seed CRCs) must pass, or the row says so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from lowtide.device.drivers import cycle_model
from lowtide.settings import QEMU_PLUGIN_HEADER_SETTING, read_settings

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
COREMARK_ARCHIVE = SHARED / "coremark" / "coremark-d5fad6b.tar.gz"
PORT = Path(__file__).resolve().parent / "coremark_port"
TIMING_HEADER_DIR = REPO / "firmware" / "bsp"
COREMARK_SOURCES = ("core_list_join.c", "core_main.c", "core_matrix.c", "core_state.c", "core_util.c")


@dataclass(frozen=True)
class Core:
    board_core: str  # as the board files name it
    cpu: str
    fpu: str
    machine: str
    ram_origin: int  # where the board's linker script puts data (firmware/platform/ldscripts)
    # CoreMark/MHz published for GCC builds on this core, and where: the figure the model is compared with.
    published: float | None
    published_source: str
    loader: bool = False  # boot with QEMU's generic loader, as the board file does (-kernel does not suit AN505)


# Published CoreMark/MHz of GCC builds on real parts of each core, running where memory costs no wait states or
# nearly (docs/benchmarks.md names the sources): the M7 from the i.MX RT1062's tightly coupled memory (Teensy 4.0,
# 2313.57 at 600 MHz, Teensyduino's GCC -O2), the M4 from the K66's flash behind its cache (Teensy 3.6, 440.72 at
# 180 MHz, GCC -O2). No GCC figure was found for the M33 and M55: their rows have none.
CORES = (
    Core("cortex-m4f", "cortex-m4", "fpv4-sp-d16", "mps2-an386", 0x20000000, 2.448, "Teensy 3.6, GCC -O2"),
    Core("cortex-m7", "cortex-m7", "fpv5-d16", "mps2-an500", 0x20000000, 3.856, "Teensy 4.0, GCC -O2"),
    Core("cortex-m33", "cortex-m33", "fpv5-sp-d16", "mps2-an505", 0x00200000, None, "", True),
    Core("cortex-m55", "cortex-m55", "auto", "mps3-an547", 0x21000000, None, ""),
)
FIRMWARE_FLAGS = ("-ffunction-sections", "-fdata-sections", "-ffp-contract=off")


@dataclass(frozen=True)
class Row:
    core: str
    optimisation: str
    iterations: int
    modelled_cycles: int
    instructions: int
    coremark_per_mhz: float
    instructions_per_cycle: float
    validated: bool
    published: float | None
    published_source: str
    error_percent: float | None


def build(core: Core, optimisation: str, iterations: int, source: Path, out: Path) -> Path:
    elf = out / f"coremark-{core.cpu}{optimisation}.elf"
    flags = [f"-mcpu={core.cpu}", "-mthumb", f"-mfpu={core.fpu}", "-mfloat-abi=hard", optimisation, *FIRMWARE_FLAGS]
    command = [
        "arm-none-eabi-gcc",
        *flags,
        f"-DITERATIONS={iterations}",
        f'-DCOMPILER_FLAGS="{" ".join(flags)}"',
        f"-I{PORT}",
        f"-I{source}",
        f"-I{TIMING_HEADER_DIR}",
        *(str(source / name) for name in COREMARK_SOURCES),
        str(PORT / "core_portme.c"),
        str(PORT / "startup.c"),
        "--specs=nano.specs",
        "--specs=nosys.specs",
        "-nostartfiles",
        "-Wl,--gc-sections",
        "-Wl,--no-warn-rwx-segments",
        f"-Wl,--defsym=RAM_ORIGIN={core.ram_origin:#x}",
        f"-T{PORT / 'coremark.ld'}",
        "-o",
        str(elf),
    ]
    # coremark.ld's MEMORY uses RAM_ORIGIN: defined on the command line before the script is read
    subprocess.run(command, check=True)
    return elf


def run(core: Core, elf: Path, plugin: Path, windows: Path) -> tuple[int, int, bool]:
    command = [
        "qemu-system-arm",
        "-machine",
        core.machine,
        "-display",
        "none",
        "-monitor",
        "none",
        "-serial",
        "null",
        "-icount",
        "shift=0",
        "-semihosting-config",
        "enable=on,target=native",
        *(("-device", f"loader,file={elf},cpu-num=0") if core.loader else ("-kernel", str(elf))),
        *cycle_model.CycleModel(plugin, core.board_core, windows).qemu_arguments(),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    window = cycle_model.CycleModel(plugin, core.board_core, windows).read_windows()
    if result.returncode != 0 or len(window) != 1:
        raise SystemExit(f"{core.cpu}: CoreMark run failed ({result.returncode}): {result.stderr.strip()[:200]}")
    # CoreMark's own check of its results (the list, matrix and state CRCs of the performance run's seeds); its
    # "must execute for 10 s" error is about wall time, which the model replaces.
    report = result.stderr  # semihosting writes go to QEMU's stderr
    validated = "seedcrc          : 0xe9f5" in report and "]ERROR!" not in report
    return window[0].cycles, window[0].instructions, validated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=400)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault(QEMU_PLUGIN_HEADER_SETTING, str(SHARED / "qemu-plugin"))
    settings = read_settings()
    header = cycle_model.plugin_header_dir(settings)
    if header is None:
        raise SystemExit(cycle_model.header_missing_warning())
    plugin = cycle_model.build_plugin(header, settings)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        with tarfile.open(COREMARK_ARCHIVE) as tar:
            tar.extractall(work, filter="data")
        source = work / "coremark"
        for core in CORES:
            for optimisation in ("-O2", "-O3"):
                elf = build(core, optimisation, args.iterations, source, work)
                cycles, instructions, validated = run(core, elf, plugin, work / f"{elf.stem}.windows")
                score = args.iterations * 1e6 / cycles
                # The error against a published figure is stated for the same optimisation level only.
                comparable = core.published is not None and optimisation in core.published_source
                error = 100 * (score - core.published) / core.published if comparable and core.published else None
                rows.append(
                    Row(
                        core.board_core,
                        optimisation,
                        args.iterations,
                        cycles,
                        instructions,
                        round(score, 3),
                        round(instructions / cycles, 3),
                        validated,
                        core.published,
                        core.published_source,
                        round(error, 1) if error is not None else None,
                    )
                )
    if args.json:
        print(json.dumps([asdict(row) for row in rows], indent=1))
        return
    print("| core | flags | CoreMark/MHz (model) | instructions/cycle | validated | published (GCC) | error |")
    print("| --- | --- | ---: | ---: | --- | --- | ---: |")
    for row in rows:
        published = f"{row.published} ({row.published_source})" if row.published else "none"
        error = f"{row.error_percent:+.1f}%" if row.error_percent is not None else ""
        print(
            f"| {row.core} | {row.optimisation} | {row.coremark_per_mhz:.2f} | {row.instructions_per_cycle:.2f} | "
            f"{'yes' if row.validated else 'NO'} | {published} | {error} |"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
