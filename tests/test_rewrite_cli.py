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
    """person_detect: the search weighs TFLM's persistent tail beside the head, and optimize writes the graph of
    the smallest declared 32-bit arena among those it weighed, below plain optimization's."""
    plain = _optimize("tflm_person_detect", tmp_path / "plain.tflite")
    rewritten = _optimize("tflm_person_detect", tmp_path / "rewritten.tflite", "--rewrite", "auto")
    assert rewritten["outputs_identical"] is True
    assert rewritten["after"]["tflm_head_bytes"] == rewritten["after"]["planned_head_bytes"]
    rewrite = rewritten["rewrite"]
    assert rewrite["used"] is True
    assert rewrite["search_declared_bytes"] == rewrite["search_head_bytes"] + rewrite["search_tail_bytes"]
    assert rewrite["search_declared_bytes"] < rewrite["original_declared_bytes"]
    weighed = rewrite["candidates"]
    assert [c["declared_bytes"] for c in weighed] == sorted(c["declared_bytes"] for c in weighed)
    assert [c["written"] for c in weighed].count(True) == 1
    written = next(c for c in weighed if c["written"])
    assert written["tail_bytes"] == rewritten["after"]["mcu32"]["tail_bytes"]
    assert rewritten["after"]["arena_size_bytes_mcu32"] < plain["after"]["arena_size_bytes_mcu32"]
    assert rewritten["after"]["tflm_total_bytes"] < plain["after"]["tflm_total_bytes"]


def test_rewrite_writes_the_tiled_graph_where_the_declared_arena_shrinks(tmp_path):
    """magic_wand: TFLM's AllocateTensors needs more than a small planned head for its temporaries, so the arena
    to declare is checked after export. Weighing head + tail, the search tiles one region as 4x1 patches from
    row strips of the input (5,024 + 4,096 B); slicing the input whole instead leaves TFLM a smaller tail
    (4,960 + 3,584 B), and that graph is written, declaring 8,544 B against plain optimize's 15,168 B, verified
    bit-identical."""
    plain = _optimize("tflm_magic_wand", tmp_path / "plain.tflite")
    rewritten = _optimize("tflm_magic_wand", tmp_path / "rewritten.tflite", "--rewrite", "auto")
    rewrite = rewritten["rewrite"]
    assert rewrite["used"] is True
    assert [(t["grid"], t["split_source"]) for t in rewrite["search_tilings"]] == [([4, 1], True)]
    assert [(t["grid"], t["split_source"]) for t in rewrite["tilings"]] == [([4, 1], False)]
    assert rewritten["outputs_identical"] is True
    assert plain["after"]["arena_size_bytes_mcu32"] == 15_168
    assert rewritten["after"]["arena_size_bytes_mcu32"] == 8_544
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
