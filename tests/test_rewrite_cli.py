"""`lowtide optimize --rewrite auto` as a user runs it, against the host TFLM."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import SHARED_MODELS


def _optimize(model: str, out, *extra: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "lowtide", "optimize", str(SHARED_MODELS / f"{model}.tflite"), "-o", str(out),
         "--verify", "--json", *extra],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.slow
def test_mobilenet_v2_tiled_head_is_4x_below_stock(tmp_path):
    report = _optimize("tflm_mobilenet_v2_quantized_224", tmp_path / "m.tflite", "--rewrite", "auto")
    assert report["rewrite"]["used"] is True
    assert report["outputs_identical"] is True
    assert report["after"]["tflm_head_bytes"] == report["after"]["planned_head_bytes"]
    assert report["after"]["tflm_head_bytes"] * 4 <= report["before"]["tflm_head_bytes"] == 2_451_840
    assert 0 < report["rewrite"]["mac_overhead"] <= 0.20
    assert report["rewrite"]["pareto"] and all(p["macs"] > 0 for p in report["rewrite"]["pareto"])
    # The tiled graph's extra operators grow TFLM's tail, but the whole arena still shrinks.
    assert report["after"]["tflm_total_bytes"] < report["before"]["tflm_total_bytes"]


def test_rewrite_never_ends_above_plain_optimize(tmp_path):
    """person_detect: the search's finest grid (lowest head) costs more in TFLM's persistent tail than it saves, so
    a coarser grid of the same region is written, and the whole 32-bit arena ends below plain optimization."""
    plain = _optimize("tflm_person_detect", tmp_path / "plain.tflite")
    rewritten = _optimize("tflm_person_detect", tmp_path / "rewritten.tflite", "--rewrite", "auto")
    assert rewritten["outputs_identical"] is True
    assert rewritten["after"]["tflm_head_bytes"] == rewritten["after"]["planned_head_bytes"]
    assert rewritten["rewrite"]["used"] is True
    def patches(tilings: list[dict]) -> int:
        return sum(t["grid"][0] * t["grid"][1] for t in tilings)

    assert 0 < patches(rewritten["rewrite"]["tilings"]) < patches(rewritten["rewrite"]["search_tilings"])
    assert rewritten["after"]["arena_size_bytes_mcu32"] < plain["after"]["arena_size_bytes_mcu32"]
    assert rewritten["after"]["tflm_total_bytes"] < plain["after"]["tflm_total_bytes"]


def test_rewrite_says_why_it_cannot(tmp_path):
    report = _optimize("tflm_hello_world_int8", tmp_path / "h.tflite", "--rewrite", "auto")
    assert report["rewrite"]["used"] is False and report["rewrite"]["reason"]
    assert report["after"]["planned_head_bytes"] == 32
