"""`lowtide inspect` as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import SHARED_MODELS, reference_figures

REFERENCE = reference_figures()


def _lowtide(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lowtide", *args], capture_output=True, text=True, timeout=120)


def test_json_report_has_predicted_head_and_live_peak():
    result = _lowtide("inspect", str(SHARED_MODELS / "mlperf_vww_96_int8.tflite"), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["tflm_head_bytes"] == int(REFERENCE["mlperf_vww_96_int8"]["tflm_head"]) == 73728
    assert report["live_peak_bytes"] == 55296
    assert len(report["ops"]) == 31 and max(op["live_bytes"] for op in report["ops"]) == 55296
    assert {t["kind"] for t in report["tensors"]} == {"activation", "constant"}
    # The 32-bit estimate sits below the 64-bit host total and above the head.
    assert (
        report["tflm_head_bytes"] < report["mcu32"]["used_bytes"] < int(REFERENCE["mlperf_vww_96_int8"]["tflm_total"])
    )


def test_verify_and_plot(tmp_path):
    plot = tmp_path / "live.png"
    result = _lowtide("inspect", str(SHARED_MODELS / "mww_v2_vad.tflite"), "--verify", "--plot", str(plot), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["measured"]["tflm_head_bytes"] == report["tflm_head_bytes"] == 1536
    assert report["measured"]["head_matches"] is True
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_table_marks_the_peak_operator():
    result = _lowtide("inspect", str(SHARED_MODELS / "tflm_micro_speech_quantized.tflite"))
    assert result.returncode == 0, result.stderr
    assert "← peak" in result.stdout and "5,968 B" in result.stdout
