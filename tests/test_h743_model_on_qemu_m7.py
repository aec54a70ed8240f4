"""The model nucleo-h743zi builds over 512 KiB (tests/test_st_boards.py: MobileNetV2 0.75 at 120x120, TFLM's arena
547 KB, its two arenas in the AXI SRAM and SRAM1) has no H743 emulator to run on; QEMU's Cortex-M7 (qemu-m7) runs the
same TFLM objects with the same two arenas, the persistent one in another memory (its PSRAM): outputs identical to
the host TFLM, and each arena's use as the H743 image declares it, to the byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import needs_firmware_tools
from lowtide.device.spec import get_board_spec
from lowtide.pipeline.firmware import ArenaRegions
from lowtide.pipeline.measure import measure
from lowtide.settings import read_settings
from lowtide.tflm.sizer import predict_arena32
from lowtide.tflm.tree import KernelSet
from lowtide.validation import load_model
from support.builder_models import mobilenet_v2

_KERNELS = {"tflm": KernelSet.REFERENCE, "tflm-cmsis-nn": KernelSet.CMSIS_NN}


@needs_firmware_tools
# CMSIS-NN only: the reference kernels run this model in 4.2 G instructions on QEMU (minutes); both kernel sets'
# split arenas are predicted = measured on qemu-m4 over the shared models (benchmarks/arenas_bench.py), and the
# reference run on qemu-m7 is in docs/firmware.md.
@pytest.mark.parametrize("runtime", ["tflm-cmsis-nn"])
def test_the_h743s_model_over_512_kib_runs_with_two_arenas_on_the_emulated_cortex_m7(tmp_path: Path, runtime: str):
    model = tmp_path / "mobilenet_v2_0.75_120.tflite"
    model.write_bytes(mobilenet_v2(resolution=120, width=0.75))
    assert get_board_spec("qemu-m7").core == get_board_spec("nucleo-h743zi").core == "cortex-m7"
    arena = predict_arena32(load_model(model), _KERNELS[runtime], read_settings(), "cortex-m7")
    split = arena.split
    assert split is not None and arena.arena_bytes > 512 * 1024
    result = measure(
        model, "qemu-m7", runtime=runtime, iterations=1, timeout=600.0, regions=ArenaRegions(persistent="psram")
    )
    assert result.outputs_match, f"outputs {result.mismatched_outputs} differ from the host TFLM"
    assert result.board_planned_bytes == split.non_persistent_used_bytes == 432_000
    assert result.arena_tail_bytes == split.persistent_used_bytes
    assert result.arena_used_bytes == result.arena_predicted_used_bytes
    assert result.arena_capacity_bytes == split.non_persistent_arena_bytes + split.persistent_arena_bytes
