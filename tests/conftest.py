"""Shared fixtures: the real models in ../shared/models and their measured TFLM figures."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_MODELS = REPO.parent / "shared" / "models"


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
