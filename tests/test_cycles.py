"""The emulated boards' cycle model (firmware/timing/lt_cycles_plugin.c, lowtide.device.drivers.cycle_model): the
plugin builds into the cache, charges a known loop the cycles the Cortex-M4 TRM gives it, and `measure` reports
modelled cycles beside instructions, the same on every run; without QEMU's plugin header, one warning line."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, SHARED_MODELS, needs_firmware_tools
from lowtide.device.drivers import cycle_model
from lowtide.hil.baselines import Baseline, BaselineKey
from lowtide.hil.compare import Tolerances, compare
from lowtide.pipeline.measure import measure
from lowtide.settings import QEMU_PLUGIN_HEADER_SETTING, read_settings

HEADER_DIR = REPO.parent / "shared" / "qemu-plugin"
HELLO_WORLD = SHARED_MODELS / "tflm_hello_world_int8.tflite"

# A loop whose cycles the Cortex-M4 TRM (table 3-1 and its load/store notes) fixes, between the two marks:
#   mov, nop: 1 + 1; each of 100 passes: ldr 2, ldr pipelined behind it 1, adds 1, subs 1, bne taken 1 + P with
#   P = 1 (a direct branch to an aligned 16-bit target), the last pass not taken: 1; the closing mark 1.
LOOP_PASSES = 100
LOOP_CYCLES_M4 = 2 + (LOOP_PASSES - 1) * 7 + 6 + 1
LOOP_INSTRUCTIONS = 2 + LOOP_PASSES * 5 + 1
LOOP_SOURCE = r"""
__attribute__((naked, noreturn)) void reset(void) {
  __asm volatile(
      "mov r2, sp\n"
      ".p2align 2\n"
      "dbg #1\n"
      "movs r0, #%d\n"
      "nop\n"
      "1: ldr r1, [r2]\n"
      "ldr r3, [r2, #4]\n"
      "adds r1, r1, r3\n"
      "subs r0, #1\n"
      "bne 1b\n"
      "dbg #2\n"
      "movs r0, #0x20\n"
      "ldr r1, =exit_block\n"
      "bkpt 0xAB\n"
      "2: b 2b\n"
      ".p2align 2\n"
      "exit_block: .word 0x20026, 0\n");
}
__attribute__((section(".vectors"), used)) const void *const vectors[2] = {(void *)0x20010000, (void *)reset};
""".replace("%d", str(LOOP_PASSES))


# A Helium loop on the Cortex-M55: two vector loads and a multiply-accumulate-across in a low-overhead loop. Each
# 128-bit instruction takes two beats on the M55's 64-bit datapath, overlapping the next of the other kind (a load
# beside arithmetic): vldrb 2, vldrb 2, vmladava 1 (overlapped), le 1 with no refill; movs, dls and the mark 1 each.
HELIUM_PASSES = 50
HELIUM_CYCLES = 3 + HELIUM_PASSES * 6
HELIUM_INSTRUCTIONS = 3 + HELIUM_PASSES * 4
HELIUM_SOURCE = r"""
__attribute__((naked, noreturn)) void reset(void) {
  __asm volatile(
      "ldr r0, =0xE000ED88\n ldr r1, [r0]\n orr r1, r1, #0xF00000\n str r1, [r0]\n dsb\n isb\n"
      "mov r0, sp\n sub r0, r0, #1024\n mov r1, r0\n"
      ".p2align 2\n"
      "dbg #1\n"
      "movs r3, #%d\n"
      "dls lr, r3\n"
      "1: vldrb.s8 q0, [r0]\n"
      "vldrb.s8 q1, [r1]\n"
      "vmladava.s8 r4, q0, q1\n"
      "le lr, 1b\n"
      "dbg #2\n"
      "movs r0, #0x20\n ldr r1, =exit_block\n bkpt 0xAB\n"
      "2: b 2b\n"
      ".p2align 2\n"
      "exit_block: .word 0x20026, 0\n");
}
__attribute__((section(".vectors"), used)) const void *const vectors[2] = {(void *)0x20010000, (void *)reset};
""".replace("%d", str(HELIUM_PASSES))


@pytest.fixture(scope="module")
def settings():
    """The user cache (the firmware builds are there), QEMU's header from ../shared."""
    return read_settings({**os.environ, QEMU_PLUGIN_HEADER_SETTING: str(HEADER_DIR)})


@pytest.fixture(scope="module")
def plugin(settings) -> Path:
    header = cycle_model.plugin_header_dir(settings)
    assert header == HEADER_DIR, "the tests read QEMU's plugin header from ../shared/qemu-plugin"
    return cycle_model.build_plugin(header, settings)


def test_the_plugin_builds_once_into_the_cache(tmp_path):
    settings = read_settings({"LOWTIDE_CACHE_DIR": str(tmp_path), QEMU_PLUGIN_HEADER_SETTING: str(HEADER_DIR)})
    plugin = cycle_model.build_plugin(HEADER_DIR, settings)
    assert plugin.is_file() and plugin.parent.parent == tmp_path / "cycle-model"
    built_at = plugin.stat().st_mtime_ns
    assert cycle_model.build_plugin(HEADER_DIR, settings) == plugin and plugin.stat().st_mtime_ns == built_at


LINKER_SCRIPT = (
    "MEMORY { CODE (rx) : ORIGIN = 0, LENGTH = 64K }\nSECTIONS { .text : { KEEP(*(.vectors)) *(.text*) } > CODE }\n"
)


def build_loop(folder: Path, source: str, cpu_flags: list[str]) -> Path:
    (folder / "loop.c").write_text(source)
    (folder / "loop.ld").write_text(LINKER_SCRIPT)
    elf = folder / "loop.elf"
    subprocess.run(
        ["arm-none-eabi-gcc", *cpu_flags, "-mthumb", "-O2", "-nostdlib", "-T", str(folder / "loop.ld")]
        + [str(folder / "loop.c"), "-o", str(elf)],
        check=True,
    )
    return elf


@pytest.fixture(scope="module")
def loop_elf(tmp_path_factory) -> Path:
    return build_loop(tmp_path_factory.mktemp("loop"), LOOP_SOURCE, ["-mcpu=cortex-m4"])


def run_loop(
    elf: Path, plugin: Path, core: str, windows: Path, machine: str = "mps2-an386"
) -> list[cycle_model.CycleWindow]:
    model = cycle_model.CycleModel(plugin, core, windows)
    subprocess.run(
        ["qemu-system-arm", "-machine", machine, "-display", "none", "-monitor", "none", "-serial", "null"]
        + ["-icount", "shift=0", "-semihosting-config", "enable=on,target=native", "-kernel", str(elf)]
        + list(model.qemu_arguments()),
        check=True,
        timeout=60,
    )
    return model.read_windows()


@needs_firmware_tools
def test_a_known_loop_costs_the_cycles_the_trm_gives(loop_elf, plugin, tmp_path):
    (m4,) = run_loop(loop_elf, plugin, "cortex-m4f", tmp_path / "m4.txt")
    assert (m4.cycles, m4.instructions) == (LOOP_CYCLES_M4, LOOP_INSTRUCTIONS)
    assert m4.cycles > m4.instructions
    # The M7 issues the two loads' neighbours in pairs and predicts the branch: fewer cycles, same instructions.
    (m7,) = run_loop(loop_elf, plugin, "cortex-m7", tmp_path / "m7.txt")
    assert m7.instructions == LOOP_INSTRUCTIONS and m7.cycles < m4.cycles


@needs_firmware_tools
def test_a_helium_loop_costs_the_m55s_beats(plugin, tmp_path):
    elf = build_loop(tmp_path, HELIUM_SOURCE, ["-mcpu=cortex-m55", "-mfloat-abi=hard"])
    (m55,) = run_loop(elf, plugin, "cortex-m55", tmp_path / "m55.txt", machine="mps3-an547")
    assert (m55.cycles, m55.instructions) == (HELIUM_CYCLES, HELIUM_INSTRUCTIONS)


@needs_firmware_tools
def test_measure_reports_modelled_cycles_the_same_on_every_run(settings):
    first, second = (
        measure(HELLO_WORLD, "qemu-m4", iterations=3, warmup=1, timeout=60, settings=settings) for _ in range(2)
    )
    assert first.outputs_match and first.cycle_model == cycle_model.CycleModelInfo("cortex-m4f")
    assert first.modelled_cycles is not None and first.latency_cycles is not None
    assert first.modelled_cycles == second.modelled_cycles
    assert first.modelled_cycles.min == first.modelled_cycles.max  # one model, one input: every invocation alike
    assert first.modelled_cycles.median > first.latency_cycles.median  # cycles, not instructions
    assert not any("cycle model" in warning for warning in first.warnings)


@needs_firmware_tools
def test_without_the_header_measure_warns_once_and_reports_instructions():
    environ = {key: value for key, value in os.environ.items() if key != QEMU_PLUGIN_HEADER_SETTING}
    command = "from lowtide.cli import main; import lowtide.cli.measure_cmd; main()"
    run = subprocess.run(
        [sys.executable, "-c", command, "measure", str(HELLO_WORLD), "--board", "qemu-m4"]
        + ["--iterations", "1", "--warmup", "0", "--json"],
        capture_output=True,
        text=True,
        env=environ,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["modelled_cycles"] is None and data["cycle_model"] is None
    assert data["latency_cycles"]["unit"] == "instructions"
    warnings = [line for line in run.stderr.splitlines() if "cycle model" in line]
    assert warnings == [f"lowtide: warning: {HELLO_WORLD}: {cycle_model.header_missing_warning()}"]


def test_the_header_setting_is_read_by_its_documented_name():
    assert read_settings({QEMU_PLUGIN_HEADER_SETTING: "/q"}).qemu_plugin_header == "/q"
    assert read_settings({}).qemu_plugin_header is None
    assert cycle_model.plugin_header_dir(read_settings({QEMU_PLUGIN_HEADER_SETTING: "/nowhere"})) is None


def test_baselines_hold_modelled_cycles_to_the_cycle_tolerance():
    """An emulated board's counter counts instructions; its modelled cycles are held too, in cycles: a change that
    trades single-cycle arithmetic for loads and branches (as many instructions, more cycles) regresses."""
    key = BaselineKey("qemu-mps2-an386", "lowtide-compiled", "n")
    figures = {"latency_median_cycles": 10_000, "modelled_cycles_median": 13_000, "outputs_match": True}
    base = Baseline("m.tflite", "0" * 64, "0", "2026-12-07T00:00:00+00:00", figures)
    slower = dataclasses.replace(base, figures={**figures, "modelled_cycles_median": 13_131})
    comparison = compare(key, base, slower, Tolerances(cycles_percent=1.0), counter_unit="instructions")
    assert comparison.regressed and [c.figure for c in comparison.regressions] == ["modelled_cycles_median"]
    assert "13,000 cycles -> 13,131 cycles" in comparison.message()
    within = dataclasses.replace(base, figures={**figures, "modelled_cycles_median": 13_130})
    assert not compare(key, base, within, Tolerances(cycles_percent=1.0), counter_unit="instructions").regressed
    # more instructions in fewer cycles (single loads that pipeline in place of LDM) is faster: the instructions are
    # listed, the modelled cycles compared
    faster = dataclasses.replace(
        base, figures={**figures, "latency_median_cycles": 11_840, "modelled_cycles_median": 12_285}
    )
    comparison = compare(key, base, faster, Tolerances(cycles_percent=1.0), counter_unit="instructions")
    assert not comparison.regressed
    assert "+18.4%), listed (modelled cycles compared)" in comparison.message()
    # without the model's cycles on both sides, the instructions are what is compared
    alone = {"latency_median_cycles": 10_000, "outputs_match": True}
    before, after = (dataclasses.replace(base, figures=f) for f in (alone, {**alone, "latency_median_cycles": 11_840}))
    assert compare(key, before, after, Tolerances(cycles_percent=1.0), counter_unit="instructions").regressed
