"""The same model and options write the same bytes on any machine under any load: every search stops at a budget
of work units it counts itself (`lowtide.budget`), never at a time. Each case runs `lowtide optimize` twice, the
second time beside two CPU-bound processes and with another hash seed, and compares every file written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import SHARED_MODELS
from lowtide.testing.zoo import RandWireSpec, randwire_model
from support.cli import LAUNCH

# The second run's load: as many busy processes as the machine the budgets were tuned on has cores.
BUSY_PROCESSES = 2


@contextmanager
def cpu_load(processes: int) -> Iterator[None]:
    """`processes` busy loops for the length of the block (ended, by their own ids, when it ends)."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for process in busy:
            process.kill()
            process.wait()


def optimize_outputs(model: Path, out: Path, options: tuple[str, ...], hash_seed: str) -> tuple[dict[str, bytes], dict]:
    """Every file `lowtide optimize` wrote (by suffix) and its --json report."""
    out.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-c", LAUNCH, "optimize", str(model), "-o", str(out), "--json", *options],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONHASHSEED": hash_seed},
    )
    assert done.returncode == 0, done.stderr
    return {path.suffix: path.read_bytes() for path in out.parent.iterdir()}, json.loads(done.stdout)


def randwire_file(tmp_path: Path) -> Path:
    """A graph the exact search cannot finish, so every anytime phase runs to its budget."""
    path = tmp_path / "randwire.tflite"
    path.write_bytes(randwire_model(RandWireSpec("ws", 48, 2, "add", seed=2)))
    return path


CASES = {
    # patch tiling: rewrite candidates, the scheduler on tiled graphs, CP-SAT placements
    "magic_wand_rewrite": (lambda tmp: SHARED_MODELS / "tflm_magic_wand.tflite", ("--rewrite", "auto")),
    "kws_on_off_reordered": (lambda tmp: SHARED_MODELS / "mltk_kws_on_off_v3.tflite", ()),
    "randwire_unfinished": (randwire_file, ("--effort", "0.3")),
}


@pytest.mark.parametrize("case", CASES)
def test_optimize_writes_the_same_bytes_beside_cpu_load(tmp_path, case):
    model_of, options = CASES[case]
    model = model_of(tmp_path)
    quiet, quiet_report = optimize_outputs(model, tmp_path / "quiet" / "out.tflite", options, "1")
    with cpu_load(BUSY_PROCESSES):
        loaded, loaded_report = optimize_outputs(model, tmp_path / "loaded" / "out.tflite", options, "2")
    assert sorted(quiet) == [".h", ".json", ".tflite"]
    for suffix in quiet:
        assert quiet[suffix] == loaded[suffix], f"{suffix} differs between a quiet and a loaded run"
    for report in (quiet_report, loaded_report):
        assert report["wall_clock_cut"] is False and report["wall_clock_cut_at"] == []
    if case == "randwire_unfinished":
        assert quiet_report["schedule_unfinished"] and not quiet_report["optimal"]


def test_a_time_limit_that_cuts_a_search_is_reported(tmp_path):
    """The wall clock stays a safety net: when it does cut, the report says where."""
    model = randwire_file(tmp_path)
    _, report = optimize_outputs(model, tmp_path / "cut" / "out.tflite", ("--time-limit", "1", "--effort", "100"), "1")
    assert report["wall_clock_cut"] is True
    assert "schedule" in report["wall_clock_cut_at"]
