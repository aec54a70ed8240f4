"""The fit check before building, bank by bank (lowtide.pipeline.firmware.check_memories_fit): a memory that
overflows is refused though the board's SRAM in all would hold the firmware; a linker region over banks that follow
each other holds what fits the region."""

from __future__ import annotations

import pytest

from lowtide.device.spec import get_board_spec
from lowtide.errors import LowtideError
from lowtide.pipeline.firmware import check_memories_fit
from lowtide.runtimes import FootprintEstimate
from lowtide.tflm.regions import ArenaPlace, TflmArenaLayout

KIB = 1024


def test_one_arena_over_the_h743s_axi_sram_is_refused_and_two_arenas_across_banks_fit():
    h743 = get_board_spec("nucleo-h743zi")
    estimate = FootprintEstimate("m", arena_bytes=547_056, static_ram_bytes=56_200, image_bytes=1_800_000)
    assert estimate.arena_bytes + estimate.static_ram_bytes < h743.sram_bytes  # the sum check lets it through
    with pytest.raises(LowtideError) as refused:
        check_memories_fit(h743, estimate, TflmArenaLayout(547_056, None, None, None))
    assert str(refused.value) == (
        "m: static RAM 56,200 B + arena 547,056 B > axi_sram of nucleo-h743zi (524,288 B = 512 KiB)"
    )
    split = TflmArenaLayout(
        432_000, 115_072, ArenaPlace("axi_sram", "AXI", None), ArenaPlace("sram1", "LT_SRAM1", (0x30000000, 128 * KIB))
    )
    check_memories_fit(h743, estimate, split)


def test_the_f446res_ram_region_over_sram1_and_sram2_holds_more_than_sram1():
    f446 = get_board_spec("nucleo-f446re")
    assert [m.size_bytes for m in f446.memories] == [112 * KIB, 16 * KIB]
    check_memories_fit(f446, FootprintEstimate("m", 110 * KIB, 10 * KIB, 100_000), None)  # 120 KiB: in RAM
    with pytest.raises(LowtideError, match=r"> sram1 of nucleo-f446re \(131,072 B = 128 KiB\)"):
        check_memories_fit(f446, FootprintEstimate("m", 120 * KIB, 10 * KIB, 100_000), None)
