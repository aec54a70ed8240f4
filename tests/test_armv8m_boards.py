"""The Armv8-M emulated boards: Cortex-M33 (`qemu-m33`, QEMU mps2-an505) and Cortex-M55 with Helium (`qemu-m55`,
QEMU mps3-an547), on lowtide's local dev-platform. An MLPerf Tiny model measured with each runtime: TFLM's arena as
lowtide predicts it for the core (`inspect --core`, the sizer on the same machine), outputs bit-identical to the
host's TFLM.
"""

from __future__ import annotations

import subprocess

import pytest

from conftest import SHARED_MODELS, needs_firmware_tools
from support.cli import lowtide_json

KWS = SHARED_MODELS / "mlperf_kws_dscnn_int8.tflite"
BOARDS = {
    "qemu-m33": ("cortex-m33", "qemu-mps2-an505", 20_000_000),
    "qemu-m55": ("cortex-m55", "qemu-mps3-an547", 32_000_000),
}

pytestmark = needs_firmware_tools


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("runtime", ["compiled", "tflm", "tflm-cmsis-nn"])
def test_an_mlperf_model_measures_on_the_armv8m_boards(board, runtime):
    core, hello_name, clock_hz = BOARDS[board]
    result = lowtide_json("measure", str(KWS), "--board", board, "--runtime", runtime)
    assert result["board"] == hello_name and result["clock_hz"] == clock_hz
    assert result["outputs_match"], result["mismatched_outputs"]
    cycles = result["latency_cycles"]
    assert cycles["unit"] == "instructions" and cycles["min"] == cycles["median"] == cycles["max"] > 0
    assert 0 < result["stack_high_water_bytes"] < result["stack_size_bytes"]
    if runtime == "compiled":
        return
    assert result["arena_used_bytes"] == result["arena_predicted_used_bytes"]
    kernels = "cmsis-nn" if runtime == "tflm-cmsis-nn" else "reference"
    predicted = lowtide_json("inspect", str(KWS), "--core", core, "--kernels", kernels, "--arena32", "exact")["mcu32"]
    assert predicted["exact"] and predicted["core"] == core
    assert predicted["used_bytes"] == result["arena_used_bytes"]


def test_the_m55_build_of_cmsis_nn_uses_helium():
    image = lowtide_json("build", str(KWS), "--board", "qemu-m55", "--runtime", "tflm-cmsis-nn")
    attributes = subprocess.run(
        ["arm-none-eabi-readelf", "-A", image["elf"]], capture_output=True, text=True, check=True
    ).stdout
    assert "Tag_MVE_arch: MVE Integer and FP" in attributes
    # Helium's tail-predicated loops (CMSIS-NN's MVE kernels); binutils 2.40 shows the MVE loads and dot products
    # themselves as coprocessor instructions, so they are not what is looked for.
    disassembly = subprocess.run(
        ["arm-none-eabi-objdump", "-d", image["elf"]], capture_output=True, text=True, check=True
    ).stdout
    assert "\tletp\t" in disassembly
