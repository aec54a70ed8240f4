"""`lowtide optimize`, run as a real process (and in-process where a plan must be sabotaged)."""

from __future__ import annotations

import dataclasses
import json
import os
import pty
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lowtide.cli.optimize_cmd  # noqa: F401  registers the command
import lowtide.pipeline.optimize
from lowtide import oracle
from lowtide.cli import main
from lowtide.export import OFFLINE_PLAN_NAME
from lowtide.model import read_model
from lowtide.model.reader import object_tree
from lowtide.model.writer import model_bytes
from lowtide.validation import load_model
from support.cli import LAUNCH, lowtide_cli

MODELS = Path(__file__).resolve().parents[1] / ".." / "shared" / "models"
VWW = MODELS / "mlperf_vww_96_int8.tflite"


def test_json_reports_measured_figures_before_and_after(tmp_path):
    out = tmp_path / "vww.tflite"
    done = lowtide_cli("optimize", str(VWW), "-o", str(out), "--verify", "--json")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no progress display in JSON mode
    report = json.loads(done.stdout)
    original, optimized = VWW.read_bytes(), out.read_bytes()
    inputs = oracle.random_inputs(load_model(VWW))
    assert report["before"]["tflm_head_bytes"] == oracle.allocate(original).head_bytes == 73_728
    assert report["before"]["tflm_total_bytes"] == oracle.run(original, inputs).total_bytes
    assert report["after"]["planned_head_bytes"] == 55_296
    assert report["after"]["tflm_head_bytes"] == oracle.run(optimized, inputs).head_bytes == 55_296
    assert report["after"]["tflm_total_bytes"] == oracle.run(optimized, inputs).total_bytes
    assert report["after"]["tflm_total_bytes"] == report["before"]["tflm_total_bytes"] - (73_728 - 55_296)
    assert report["lower_bound_bytes"] == 55_296
    assert report["optimal"] is True and report["outputs_identical"] is True
    assert report["schedule_seconds"] >= 0
    assert Path(report["header"]).exists() and Path(report["sidecar"]).exists()


def test_tables_on_stdout_and_progress_on_a_terminal_stderr(tmp_path):
    out = tmp_path / "nabu.tflite"
    controller, terminal = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-c", LAUNCH, "optimize", str(MODELS / "mww_v1_okay_nabu.tflite"), "-o", str(out)],
            stdout=subprocess.PIPE,
            stderr=terminal,
            text=True,
            timeout=120,
            env={**os.environ, "COLUMNS": "120"},
        )
        os.close(terminal)
        terminal = None
        progress = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal side is closed: everything has been read
                break
            if not chunk:
                break
            progress += chunk
    finally:
        if terminal is not None:
            os.close(terminal)
        os.close(controller)
    assert done.returncode == 0
    assert "21,216 B" in done.stdout and "14,208 B" in done.stdout and "proven optimal" in done.stdout
    assert b"searching operator orders" in progress


@pytest.mark.parametrize(
    "args, message",
    [
        (["/nonexistent/model.tflite", "-o", "x.tflite"], "no such file"),
        ([str(VWW), "-o", str(VWW)], "would overwrite the input model"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(args, message, tmp_path):
    done = lowtide_cli("optimize", *args, "--json", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("lowtide: error: ") and message in done.stderr
    assert done.stderr.count("\n") == 1


def sabotage_plan(change):
    """Wrap the exporter so that, after it has checked its plan, the plan in the model it will write is changed
    behind its back: what `--verify` must catch on the real interpreter."""
    real_export = lowtide.pipeline.optimize.export_optimized

    def export(graph, order, offsets, out_path, *args, **kwargs):
        result = real_export(graph, order, offsets, out_path, *args, **kwargs)
        raw = object_tree(read_model(result.model_data))
        entry = next(m for m in raw.metadata if m.name == OFFLINE_PLAN_NAME.encode())
        words = list(struct.unpack(f"<{len(raw.buffers[entry.buffer].data) // 4}i", raw.buffers[entry.buffer].data))
        words[3:] = change(words[3:])
        raw.buffers[entry.buffer].data = np.frombuffer(struct.pack(f"<{len(words)}i", *words), dtype=np.uint8)
        return dataclasses.replace(result, model_data=model_bytes(raw))

    return export


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda offsets: [o + 16 if o >= 0 else o for o in offsets],
            "TFLM measured a head of 55,312 B, planned 55,296 B",
        ),
        (lambda offsets: [0 if o >= 0 else o for o in offsets], "outputs differ"),
    ],
)
def test_verify_fails_with_exit_2_and_removes_the_output(change, message, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(lowtide.pipeline.optimize, "export_optimized", sabotage_plan(change))
    out = tmp_path / "vww.tflite"
    monkeypatch.setattr(sys, "argv", ["lowtide", "optimize", str(VWW), "-o", str(out), "--verify", "--json"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "verification failed" in error and message in error
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("verify", [False, True])
def test_a_failure_writing_one_file_writes_none(verify, tmp_path, monkeypatch, capsys):
    """OUT.h cannot be written (a directory is in the way): neither OUT.tflite nor OUT.json is left either."""
    out = tmp_path / "vww.tflite"
    (tmp_path / "vww.h").mkdir()
    monkeypatch.setattr(
        sys, "argv", ["lowtide", "optimize", str(VWW), "-o", str(out), "--json", *(["--verify"] if verify else [])]
    )
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith(f"lowtide: error: {tmp_path / 'vww.h'}: cannot write") and error.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vww.h"] and not any((tmp_path / "vww.h").iterdir())


def test_tflm_failing_on_the_optimized_model_in_verify_writes_nothing(tmp_path, monkeypatch, capsys):
    """The plan moved 1 GiB up behind the exporter's back: TFLM cannot place the tensors in its arena and refuses
    the model while --verify runs it. Before, the three files had been written by then and stayed."""
    monkeypatch.setattr(
        lowtide.pipeline.optimize,
        "export_optimized",
        sabotage_plan(lambda offsets: [o + (1 << 30) if o >= 0 else o for o in offsets]),
    )
    out = tmp_path / "vww.tflite"
    monkeypatch.setattr(sys, "argv", ["lowtide", "optimize", str(VWW), "-o", str(out), "--verify", "--json"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith(f"lowtide: error: {out}: TFLite Micro") and error.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


ON_OFF = MODELS / "mltk_kws_on_off_v3.tflite"  # one TFLM arena (94 KB) fits neither of qemu-m4-banks' 80 KiB


def test_optimize_with_a_board_says_what_each_memory_holds_and_refuses_a_bad_region_before_writing(tmp_path):
    out = tmp_path / "on_off.tflite"
    done = lowtide_cli("optimize", str(ON_OFF), "-o", str(out), "--board", "qemu-m4-banks", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    split = report["after"]["mcu32"]
    memories = {m["memory"]: m for m in report["board_memories"]}
    holds = {m: {c["what"]: c["bytes"] for c in use["contents"]} for m, use in memories.items()}
    # the board file's default: TFLM's persistent arena in sram2, the non-persistent one beside .bss in sram1
    assert holds["sram2"] == {"TFLM's persistent arena": split["persistent_arena_bytes"]}
    assert holds["sram1"]["TFLM's non-persistent arena"] == split["non_persistent_arena_bytes"]
    assert all(use["fits"] for use in memories.values())

    bad = tmp_path / "bad.tflite"
    refused = lowtide_cli(
        "optimize", str(ON_OFF), "-o", str(bad), "--board", "qemu-m4-banks", "--persistent-region", "sram9"
    )
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "lowtide: error: --persistent-region sram9: qemu-m4-banks has no memory by that name "
        "(its memories: code, sram1, sram2)"
    ]
    assert not list(tmp_path.glob("bad.*"))
