"""Shared fixtures: the real models in ../shared/models and their measured TFLM figures."""

from __future__ import annotations

import csv
import importlib.util
import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_MODELS = REPO.parent / "shared" / "models"
# QEMU's plugin header for the emulated boards' cycle model, as `make test` sets it, for a bare pytest run too.
if (REPO.parent / "shared" / "qemu-plugin" / "qemu-plugin.h").is_file():
    os.environ.setdefault("LOWTIDE_QEMU_PLUGIN_HEADER", str(REPO.parent / "shared" / "qemu-plugin"))


_MISSING_FIRMWARE_TOOLS = [tool for tool in ("arm-none-eabi-gcc", "qemu-system-arm") if shutil.which(tool) is None]
if importlib.util.find_spec("platformio") is None:
    _MISSING_FIRMWARE_TOOLS.append("platformio")
# Builds and boots of the emulated boards (CI installs the tools before the tests).
needs_firmware_tools = pytest.mark.skipif(
    bool(_MISSING_FIRMWARE_TOOLS),
    reason=f"{', '.join(_MISSING_FIRMWARE_TOOLS)} not installed: run scripts/install-firmware-deps.sh",
)


# The files that take minutes, longest first (`pytest --durations`, warm cache, 2026-12-02): `make test` runs two
# workers a file at a time (`--dist loadfile`) in collection order, so a long file collected last leaves one
# worker busy while the other idles. The rest keep their order.
LONG_FILES_FIRST = (
    "test_installed.py",
    "test_hil_models.py",
    "test_mlperf.py",
    "test_rewrite.py",
    "test_compile.py",
    "test_st_boards.py",
    "test_export.py",
    "test_export_library.py",
    "test_firmware.py",
    "test_tflm.py",
    "test_rewrite_cli.py",
    "test_armv8m_boards.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: position for position, name in enumerate(LONG_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


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
