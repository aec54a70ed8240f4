"""TFLM's two arenas (persistent and non-persistent), each sized to the byte by lowtide's sizer and placed in a memory
of the board (`--arena-region`, `--persistent-region`), checked on QEMU's mps2-an386 against what TFLM reports on the
board, with outputs bit-identical to the host TFLM's.

Real parts: TFLM built from the pinned tree for the Cortex-M4 (reference and CMSIS-NN kernels), PlatformIO, QEMU.
The arenas the image declares are exactly the predicted sizes, so AllocateTensors succeeding on the board shows the
prediction is enough, and the figures TFLM reports there show it is exact.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import SHARED_MODELS, needs_firmware_tools
from lowtide.device.drivers.platformio import elf_sections
from lowtide.device.spec import get_board_spec
from lowtide.pipeline.firmware import ArenaRegions, tflm_arena_layout
from lowtide.pipeline.measure import measure
from lowtide.settings import read_settings
from lowtide.tflm.sizer import Arena32, SplitArena32, predict_arena32
from lowtide.tflm.tree import KernelSet
from lowtide.validation import load_model
from support.cli import run_lowtide

HELLO = SHARED_MODELS / "tflm_hello_world_int8.tflite"
KWS = SHARED_MODELS / "mlperf_kws_dscnn_int8.tflite"
MWW = SHARED_MODELS / "mww_v1_okay_nabu.tflite"  # CALL_ONCE and resource variables: they live in the persistent arena
AD = SHARED_MODELS / "mlperf_ad01_int8.tflite"
ON_OFF = SHARED_MODELS / "mltk_kws_on_off_v3.tflite"  # a persistent tail (72 KB) larger than its head (22 KB)

_KERNELS = {"tflm": KernelSet.REFERENCE, "tflm-cmsis-nn": KernelSet.CMSIS_NN}


def _check_split_on_board(model: Path, runtime: str, regions: ArenaRegions, board: str = "qemu-m4") -> None:
    split = predict_arena32(load_model(model), _KERNELS[runtime], read_settings()).split
    assert split is not None
    result = measure(model, board, runtime=runtime, iterations=1, timeout=60.0, regions=regions)
    assert result.outputs_match, f"outputs {result.mismatched_outputs} differ from the host TFLM"
    # Each part as predicted, to the byte: the non-persistent arena's use (TFLM's planned head) and the persistent's.
    assert result.board_planned_bytes == split.non_persistent_used_bytes == result.arena_planned_bytes
    assert result.arena_used_bytes - result.board_planned_bytes == split.persistent_used_bytes
    assert result.arena_used_bytes == result.arena_predicted_used_bytes
    # The image declares exactly the predicted arenas, and AllocateTensors accepted them.
    assert result.arena_capacity_bytes == split.non_persistent_arena_bytes + split.persistent_arena_bytes


@needs_firmware_tools
@pytest.mark.parametrize(
    ("model", "runtime"),
    [(HELLO, "tflm"), (KWS, "tflm"), (KWS, "tflm-cmsis-nn"), (MWW, "tflm"), (AD, "tflm-cmsis-nn")],
)
def test_the_two_arenas_are_as_predicted_on_the_board(model, runtime):
    """The persistent arena in the PSRAM (a memory the linker script leaves unused), the other in .bss."""
    _check_split_on_board(model, runtime, ArenaRegions(persistent="psram"))


@needs_firmware_tools
def test_each_arena_in_a_memory_of_its_own():
    """The non-persistent arena in the PSRAM, the persistent one in the code SSRAM (the script's CODE region)."""
    _check_split_on_board(KWS, "tflm", ArenaRegions(arena="psram", persistent="ssram1"))


@needs_firmware_tools
def test_a_model_optimize_rewrote_declares_and_uses_both_arenas(tmp_path):
    out = tmp_path / "kws_opt.tflite"
    done = run_lowtide("optimize", str(KWS), "-o", str(out), "--rewrite", "auto", "--time-limit", "10", "--json")
    assert done.returncode == 0, done.stderr
    mcu32 = json.loads(done.stdout)["after"]["mcu32"]
    header = out.with_suffix(".h").read_text()
    assert f"#define KWS_OPT_NON_PERSISTENT_ARENA_SIZE {mcu32['non_persistent_arena_bytes']}\n" in header
    assert f"#define KWS_OPT_PERSISTENT_ARENA_SIZE {mcu32['persistent_arena_bytes']}\n" in header
    assert f"#define KWS_OPT_ARENA_SIZE {mcu32['arena_bytes']}\n" in header
    _check_split_on_board(out, "tflm", ArenaRegions(persistent="psram"))


@needs_firmware_tools
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--runtime", "tflm", "--persistent-region", "nowhere"], "qemu-m4 has no memory by that name"),
        (["--runtime", "tflm", "--arena-region", "blockram"], "TFLM's arenas in blockram"),
        (["--runtime", "compiled", "--arena-region", "psram"], "the compiled runtime has none"),
    ],
)
def test_bad_regions_are_one_line_and_write_nothing(tmp_path, args, message):
    project = tmp_path / "fw"
    done = run_lowtide("build", str(KWS), "--board", "qemu-m4", "--project-dir", str(project), *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not project.exists()


@needs_firmware_tools
def test_a_model_whose_arena_fits_no_bank_runs_across_two():
    """qemu-m4-banks has two 80 KiB banks: the model's one arena (94 KB) fits neither, and is refused before
    building; TFLM's two arenas, the persistent one in the second bank (the board file's default), fit and run,
    each as predicted."""
    spec = get_board_spec("qemu-m4-banks")
    arena = predict_arena32(load_model(ON_OFF), KernelSet.REFERENCE, read_settings())
    assert arena.split is not None
    assert arena.arena_bytes > max(m.size_bytes for m in spec.memories if m.name != "code")
    one = run_lowtide("build", str(ON_OFF), "--board", "qemu-m4-banks", "--arena-region", "sram1", "--json")
    assert one.returncode == 2 and one.stderr.count("\n") == 1 and "SRAM of qemu-m4-banks" in one.stderr, one.stderr
    two = run_lowtide("build", str(ON_OFF), "--board", "qemu-m4-banks", "--json")
    assert two.returncode == 0, two.stderr
    report = json.loads(two.stdout)
    assert report["persistent_arena_bytes"] == arena.split.persistent_arena_bytes
    assert report["persistent_region"] == spec.persistent_region == "sram2"
    # The image's persistent arena is where the board's map has sram2, the rest within sram1.
    sections = {s.name: s for s in elf_sections(Path(report["elf"]), read_settings())}
    placed = sections[".lt_arena.sram2"]
    assert (placed.address, placed.size) == (0x20200000, arena.split.persistent_arena_bytes)
    assert sections[".stack"].address + sections[".stack"].size <= 0x20000000 + 81920
    _check_split_on_board(ON_OFF, "tflm", ArenaRegions(persistent="sram2"), board="qemu-m4-banks")


@needs_firmware_tools
def test_inspect_board_shows_what_each_memory_holds_and_whether_it_fits():
    split = predict_arena32(load_model(ON_OFF), KernelSet.REFERENCE, read_settings()).split
    assert split is not None
    one = run_lowtide("inspect", str(ON_OFF), "--board", "qemu-m4-banks", "--arena-region", "sram1", "--json")
    two = run_lowtide("inspect", str(ON_OFF), "--board", "qemu-m4-banks", "--json")  # the board's split by default
    assert one.returncode == 0 and two.returncode == 0, one.stderr + two.stderr
    one_use = {m["memory"]: m for m in json.loads(one.stdout)["board_memories"]}
    two_use = {m["memory"]: m for m in json.loads(two.stdout)["board_memories"]}
    assert not one_use["sram1"]["fits"] and one_use["sram2"]["used_bytes"] == 0
    assert two_use["sram1"]["fits"] and two_use["sram2"]["fits"]
    assert {"what": "TFLM's persistent arena", "bytes": split.persistent_arena_bytes} in two_use["sram2"]["contents"]
    assert {"what": "TFLM's non-persistent arena", "bytes": split.non_persistent_arena_bytes} in two_use["sram1"][
        "contents"
    ]


def test_the_linker_fragment_places_each_arena_in_its_memory():
    """A memory the board's script leaves unused gets a region of its own; one holding a script region uses it."""
    arena = Arena32("reference", "cortex-m4f", 692, 32, 644, 1072, SplitArena32(32, 660, 560))
    layout = tflm_arena_layout(get_board_spec("qemu-m4"), arena, ArenaRegions(arena="ssram23", persistent="psram"))
    assert (layout.arena_bytes, layout.persistent_bytes) == (560, 672)
    assert layout.string_defines() == [
        ("LT_TFLM_ARENA_SECTION", ".lt_arena.ssram23"),
        ("LT_TFLM_PERSISTENT_ARENA_SECTION", ".lt_arena.psram"),
    ]
    fragment = layout.linker_fragment()
    assert fragment is not None
    assert "LT_PSRAM (rw) : ORIGIN = 0x21000000, LENGTH = 16777216" in fragment
    assert "KEEP(*(.lt_arena.psram)) } > LT_PSRAM AT > LT_PSRAM" in fragment
    assert "KEEP(*(.lt_arena.ssram23)) } > RAM AT > RAM" in fragment
    assert fragment.rstrip().endswith("INSERT AFTER .stack;")
    assert tflm_arena_layout(get_board_spec("qemu-m4"), arena, ArenaRegions()).linker_fragment() is None
