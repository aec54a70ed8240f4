"""`lowtide optimize --rewrite auto` as a user runs it, against the host TFLM."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from conftest import SHARED_MODELS


def _optimize(model: str, out, *extra: str) -> dict:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "lowtide",
            "optimize",
            str(SHARED_MODELS / f"{model}.tflite"),
            "-o",
            str(out),
            "--verify",
            "--json",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
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


def test_rewrite_writes_the_tiled_graph_where_the_declared_arena_shrinks(tmp_path):
    """magic_wand: TFLM's AllocateTensors needs more than a small planned head for its temporaries, so the arena
    to declare is checked after export. With the tiling the search found before it would grow (16,816 B against
    15,168 B) and the original was kept; it now tiles two regions, and the first alone, as 9x1 patches (fewer
    patches, a smaller tail), declares 10,672 B: that graph is written, verified bit-identical."""
    plain = _optimize("tflm_magic_wand", tmp_path / "plain.tflite")
    rewritten = _optimize("tflm_magic_wand", tmp_path / "rewritten.tflite", "--rewrite", "auto")
    assert rewritten["rewrite"]["used"] is True and len(rewritten["rewrite"]["search_tilings"]) == 2
    assert [t["grid"] for t in rewritten["rewrite"]["tilings"]] == [[9, 1]]
    assert rewritten["outputs_identical"] is True
    assert plain["after"]["arena_size_bytes_mcu32"] == 15_168
    assert rewritten["after"]["arena_size_bytes_mcu32"] == 10_672
    # The header and sidecar name the model the user gave, not the tiled graph written from it.
    source_sha256 = hashlib.sha256((SHARED_MODELS / "tflm_magic_wand.tflite").read_bytes()).hexdigest()
    sidecar = json.loads((tmp_path / "rewritten.json").read_text())
    assert sidecar["source_model"] == "tflm_magic_wand.tflite" and sidecar["source_sha256"] == source_sha256
    assert sidecar["sha256"] == hashlib.sha256((tmp_path / "rewritten.tflite").read_bytes()).hexdigest()
    assert f"from tflm_magic_wand.tflite (sha256 {source_sha256[:16]}...)" in (tmp_path / "rewritten.h").read_text()


def test_rewrite_says_why_it_cannot(tmp_path):
    report = _optimize("tflm_hello_world_int8", tmp_path / "h.tflite", "--rewrite", "auto")
    assert report["rewrite"]["used"] is False and report["rewrite"]["reason"]
    assert report["after"]["planned_head_bytes"] == 32


def _partition(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lowtide", "partition", *args], capture_output=True, text=True, timeout=300
    )


def test_partition_splits_the_bottleneck_at_mcunet_vww_peak_and_reports_the_difference(tmp_path):
    """mcunet_vww's peak is a 48-channel inverted bottleneck at 40x40 (PAD between expand and depthwise). Split in
    two, TFLM's head drops by a third; the summed projection moves by at most 2 LSB with partials at 1.5x the
    output's scale (at 1x, rare partials leave the output's range and clip)."""
    out = tmp_path / "p.tflite"
    result = _partition(str(SHARED_MODELS / "mcunet_vww.tflite"), "-o", str(out), "--headroom", "1.5", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["stock_tflm_head_bytes"] == 161_472
    assert report["tflm_head_bytes"] == 103_136
    assert 1 <= report["layer_max_difference"] <= 2
    assert out.stat().st_size > 0


def test_partition_refuses_an_operator_it_cannot_split(tmp_path):
    result = _partition(str(SHARED_MODELS / "mcunet_vww.tflite"), "-o", str(tmp_path / "p.tflite"), "--op", "0")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["lowtide: error: operator 0 is not an int8 CONV_2D with a bias"]
