"""The compiled runtime's Helium (MVE) kernels on the Cortex-M55 (`qemu-m55`, QEMU mps3-an547;
firmware/runtime/lt_mve_conv.h, lt_mve_elementwise.c): one MLPerf Tiny model per kernel kind, outputs bit-identical
to the host's TFLM, in no more instructions than TFLM with CMSIS-NN's own Helium kernels needs on the same board
(docs/benchmarks.md, "Cortex-M55": `python benchmarks/mlperf_cycles_bench.py --boards qemu-m55`).
"""

from __future__ import annotations

import pytest

from conftest import SHARED_MODELS, needs_firmware_tools
from lowtide.compile.codegen import compile_model
from lowtide.validation import load_checked
from support.cli import lowtide_json

# model -> (the Helium kernels it runs, TFLM + CMSIS-NN's instructions per inference on qemu-m55)
MODELS = {
    # FULLY_CONNECTED of one row (lt_mve_vector_s8)
    "mlperf_ad01_int8": ("vector", 286_500),
    # im2col and pointwise CONV_2D in row chains (lt_mve_conv_s8 from lt_conv_ring_s8_fast), int8 ADD
    "mlperf_ic_resnet8_int8": ("matrix, add", 4_913_562),
    # whole-tensor depthwise on a transposed plane (lt_mve_depthwise_s8), pointwise CONV_2D
    "mlperf_kws_dscnn_int8": ("depthwise, matrix", 1_814_062),
    # depthwise and pointwise layers in row chains (lt_mve_depthwise_row_s8 from lt_depthwise_ring_s8_fast)
    "mlperf_vww_96_int8": ("depthwise rows, matrix", 6_561_875),
}

pytestmark = needs_firmware_tools


@pytest.mark.parametrize("model", MODELS)
def test_the_helium_kernels_are_bit_exact_and_ahead_of_cmsis_nn(model):
    _, cmsis_nn_instructions = MODELS[model]
    path = SHARED_MODELS / f"{model}.tflite"
    result = lowtide_json("measure", str(path), "--board", "qemu-m55", "--runtime", "compiled", "--iterations", "1")
    assert result["outputs_match"], result["mismatched_outputs"]
    instructions = result["latency_cycles"]["median"]
    assert result["latency_cycles"]["unit"] == "instructions"
    assert 0 < instructions <= cmsis_nn_instructions


def test_filters_stay_int8_for_helium():
    graph = load_checked(SHARED_MODELS / "mlperf_kws_dscnn_int8.tflite").graph
    widened = compile_model(graph).files["model.c"]
    helium = compile_model(graph, wide_weights=False).files["model.c"]
    assert "LT_WIDE_WEIGHTS)" in widened
    assert "LT_WIDE_WEIGHTS" not in helium
