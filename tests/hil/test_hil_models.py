"""Every shared model measured on a board through the lowtide pytest plugin and compared with the committed
baselines (docs/hil.md):

    pytest tests/hil --lowtide-board host-tflm --lowtide-baselines tests/hil/baselines.json
    pytest tests/hil --lowtide-board qemu-m4 --lowtide-baselines tests/hil/baselines.json

Without --lowtide-board every test here is skipped. A few small models run by default; the rest are marked slow.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from lowtide.compile import compile_model
from lowtide.device.boards import get_board
from lowtide.errors import LowtideError
from lowtide.hil.compare import Tolerances
from lowtide.runtimes import Runtime
from lowtide.validation import load_model

SHARED_MODELS = Path(__file__).resolve().parents[2] / ".." / "shared" / "models"
MODELS = sorted(path.stem for path in SHARED_MODELS.glob("*.tflite"))
QUICK = {"tflm_hello_world_int8", "tflm_micro_speech_quantized", "mlperf_ad01_int8", "mww_v2_vad", "mww_v2_okay_nabu"}

pytestmark = pytest.mark.skipif(
    "not (config.pluginmanager.has_plugin('lowtide') or config.pluginmanager.has_plugin('lowtide.hil.plugin'))",
    reason="the lowtide pytest plugin is not loaded: install lowtide (pytest11 entry point) or pass "
    "-p lowtide.hil.plugin",
)


@pytest.fixture
def lowtide_tolerances(lowtide_tolerances: Tolerances, lowtide_board: str) -> Tolerances:
    # host-tflm's latency is wall-clock time on a machine shared with everything else: not a regression signal.
    # Emulated and real boards keep the ini defaults (their cycle counts are deterministic).
    if lowtide_board == "host-tflm":
        return dataclasses.replace(lowtide_tolerances, latency_percent=None)
    return lowtide_tolerances


@pytest.mark.parametrize(
    "model", [pytest.param(name, marks=() if name in QUICK else pytest.mark.slow) for name in MODELS]
)
def test_model_has_not_regressed(model: str, lowtide_board: str, lowtide_measure, assert_no_regression) -> None:
    board = get_board(lowtide_board)
    if board.spec is not None and board.spec.runtime is Runtime.COMPILED:
        # Boards lowtide builds for run its compiled runtime by default, which has kernels for common operators only.
        try:
            compile_model(load_model(SHARED_MODELS / f"{model}.tflite"))
        except LowtideError as exc:
            pytest.skip(f"{lowtide_board} runs the lowtide runtime, which cannot run this model: {exc}")
    # Three timed runs are enough for the arena figures; the big image models take seconds per run on the host.
    result = lowtide_measure(SHARED_MODELS / f"{model}.tflite", iterations=3, timeout=120.0)
    assert result.outputs_match, f"outputs {result.mismatched_outputs} differ from the host TFLM interpreter"
    assert_no_regression(result)
