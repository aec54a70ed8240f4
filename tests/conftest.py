"""Shared fixtures: the real models in ../shared/models and their measured TFLM figures."""

from __future__ import annotations

import csv
import importlib.util
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_MODELS = REPO.parent / "shared" / "models"


_MISSING_FIRMWARE_TOOLS = [tool for tool in ("arm-none-eabi-gcc", "qemu-system-arm") if shutil.which(tool) is None]
if importlib.util.find_spec("platformio") is None:
    _MISSING_FIRMWARE_TOOLS.append("platformio")
# Builds and boots of the emulated boards (CI installs the tools before the tests).
needs_firmware_tools = pytest.mark.skipif(
    bool(_MISSING_FIRMWARE_TOOLS),
    reason=f"{', '.join(_MISSING_FIRMWARE_TOOLS)} not installed: run scripts/install-firmware-deps.sh",
)


def shared_model_names() -> list[str]:
    return sorted(p.stem for p in SHARED_MODELS.glob("*.tflite"))


def reference_figures() -> dict[str, dict[str, str]]:
    """REFERENCE.tsv rows by model name (TFLM figures measured on this kind of machine)."""
    lines = [line for line in (SHARED_MODELS / "REFERENCE.tsv").read_text().splitlines() if not line.startswith("#")]
    return {row["file"].removesuffix(".tflite"): row for row in csv.DictReader(lines, delimiter="\t")}


@pytest.fixture(scope="session")
def shared_models() -> Path:
    if not SHARED_MODELS.is_dir():
        pytest.fail(f"shared models not found at {SHARED_MODELS}: lowtide's tests read them from ../shared")
    return SHARED_MODELS
