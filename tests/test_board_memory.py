"""Board files describe the part's RAM banks ([[memory]]): the shipped maps, their checks, and `lowtide boards --map`."""

from __future__ import annotations

import json
import os

import pytest

from conftest import SHARED_MODELS
from lowtide.device import spec as board_spec
from lowtide.device.drivers.platformio import check_memory_map
from lowtide.errors import LowtideError
from support.cli import lowtide_cli

KIB = 1024
HELLO_WORLD = SHARED_MODELS / "tflm_hello_world_int8.tflite"
# The RAM of each shipped ST part, from its reference manual (bank: address, KiB).
ST_MAPS = {
    "nucleo-f401re": {"sram": (0x20000000, 96)},
    "nucleo-f446re": {"sram1": (0x20000000, 112), "sram2": (0x2001C000, 16)},
    "nucleo-f746zg": {"itcm": (0, 16), "dtcm": (0x20000000, 64), "sram1": (0x20010000, 240), "sram2": (0x2004C000, 16)},
    "nucleo-h743zi": {
        "itcm": (0, 64),
        "dtcm": (0x20000000, 128),
        "axi_sram": (0x24000000, 512),
        "sram1": (0x30000000, 128),
        "sram2": (0x30020000, 128),
        "sram3": (0x30040000, 32),
        "sram4": (0x38000000, 64),
        "backup_sram": (0x38800000, 4),
    },
    "nucleo-l4r5zi": {"sram1": (0x20000000, 192), "sram2": (0x20030000, 64), "sram3": (0x20040000, 384)},
}


def _banks(spec: board_spec.BoardSpec) -> dict[str, tuple[int, int]]:
    return {m.name: (m.address, m.size_bytes // KIB) for m in spec.memories}


def test_the_st_boards_and_the_emulated_ones_carry_their_parts_maps_and_their_linker_scripts_lie_inside():
    specs = board_spec.load_board_specs()
    for name, banks in ST_MAPS.items():
        assert _banks(specs[name]) == banks, name
    # QEMU's mps2-an386 (`info mtree`): the code SSRAM, the block RAM, the data SSRAM and the 16 MiB PSRAM.
    assert _banks(specs["qemu-m4"]) == {
        "ssram1": (0, 4096),
        "blockram": (0x01000000, 16),
        "ssram23": (0x20000000, 4096),
        "psram": (0x21000000, 16384),
    }
    for name, spec in specs.items():
        if name.startswith(("nucleo-", "qemu-")):
            assert spec.memories, name
            check_memory_map(spec)  # every RAM region the firmware links lies in the banks
    h743 = specs["nucleo-h743zi"]
    assert sum(m.size_bytes for m in h743.memories) == 1060 * KIB  # 1 MB and the backup SRAM
    assert max(m.size_bytes for m in h743.memories) == 512 * KIB  # no contiguous block above 512 KiB
    assert [m.speed for m in h743.memories][:2] == [board_spec.MemorySpeed.TCM] * 2
    assert not next(m for m in h743.memories if m.name == "dtcm").dma  # DMA1/DMA2 do not reach the DTCM
    # A board file without banks (the Arduino ones) keeps its one figure.
    assert not specs["nano33ble"].memories and specs["nano33ble"].sram_bytes == 256 * KIB


def _board_file(tmp_path, banks: str, sram_bytes: str = "") -> str:
    text = (board_spec.BOARDS_DIR / "qemu-m4.toml").read_text().split("\n# The part's RAM banks")[0]
    if sram_bytes:
        text = text.replace("sram_bytes = 4194304", sram_bytes)
    path = tmp_path / "mine.toml"
    path.write_text(text + "\n" + banks)
    return str(path)


def _bank(name: str, address: int, size: int, speed: str = "sram") -> str:
    return f'[[memory]]\nname = "{name}"\naddress = 0x{address:08X}\nsize_bytes = {size}\nspeed = "{speed}"\n'


@pytest.mark.parametrize(
    ("banks", "message"),
    [
        (
            _bank("a", 0x20000000, 0x400000) + _bank("b", 0x203F0000, 0x10000),
            "memory 'b' (0x203F0000-0x203FFFFF) overlaps 'a' (0x20000000-0x203FFFFF)",
        ),
        (
            _bank("a", 0x20000000, 0x400000) + _bank("regs", 0x40000000, 0x1000),
            "memory 'regs' (0x40000000-0x40000FFF) lies outside where a cortex-m4f's address map has RAM",
        ),
        (_bank("a", 0x20000000, 0), "memory 'a' has size_bytes = 0"),
        (_bank("a", 0x20000000, 0x400000, speed="quick"), "memory 'a': speed 'quick' is none of tcm, sram, external"),
        (_bank("a", 0x20000000, 0x200000) + _bank("a", 0x21000000, 0x200000), "memory names repeat: a"),
        (_bank("a", 0x20000000, 0x200000), "sram_bytes = 4,194,304 is more than its [[memory]] banks hold"),
    ],
)
def test_a_bad_memory_map_is_refused_in_one_line(tmp_path, banks, message):
    board = _board_file(tmp_path, banks)
    result = lowtide_cli("build", str(HELLO_WORLD), "--board", board)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_a_linker_script_outside_the_banks_is_refused(tmp_path):
    """qemu-m4's firmware links its RAM at 0x20000000: a map without that bank would let fit checks pass models the
    part cannot hold."""
    board = _board_file(tmp_path, _bank("psram", 0x21000000, 0x1000000, "external"))
    with pytest.raises(LowtideError, match=r"places RAM at 0x20000000 \(4,194,304 B\), in none of the board's"):
        check_memory_map(board_spec.load_board_spec(board))


def test_sram_bytes_defaults_to_the_sum_of_the_banks(tmp_path):
    board = _board_file(
        tmp_path, _bank("low", 0x20000000, 0x300000) + _bank("high", 0x20300000, 0x100000), sram_bytes=""
    )
    text = open(board).read().replace("sram_bytes = 4194304", "")
    open(board, "w").write(text)
    spec = board_spec.load_board_spec(board)
    assert spec.sram_bytes == 0x400000
    check_memory_map(spec)  # two banks one after the other hold the linker script's one RAM region


def test_boards_lists_each_boards_banks():
    listing = json.loads(lowtide_cli("boards", "--json").stdout)
    h743 = next(b for b in listing["boards"] if b["name"] == "nucleo-h743zi")
    assert h743["memory"][2] == {
        "name": "axi_sram",
        "address": 0x24000000,
        "size_bytes": 512 * KIB,
        "speed": "sram",
        "dma": True,
        "cacheable": True,
    }
    shown = lowtide_cli("boards", "--map", env={**os.environ, "COLUMNS": "80"}).stdout
    assert "nucleo-h743zi: RAM banks" in shown and "0x24000000" in shown and "axi_sram" in shown
    assert "nano33ble: SRAM 262,144 B (its board file names no banks)" in shown
