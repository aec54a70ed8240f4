"""The HIL pytest plugin (lowtide.hil.plugin), run through pytester on the host-tflm board: real measurements by the
real TFLM interpreter, baselines on disk, JUnit XML, board locks held by real concurrent pytest processes, and a
baselines writer killed with SIGKILL in the middle of its writes."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import SHARED_MODELS, needs_firmware_tools
from lowtide import oracle
from lowtide.compile import compile_model
from lowtide.device.locking import locked
from lowtide.hil.baselines import (
    Baseline,
    BaselineKey,
    dump_baselines,
    load_baselines,
    merge_baselines,
    write_atomically,
)
from lowtide.hil.compare import Tolerances, compare
from lowtide.pipeline.optimize import optimize_model
from lowtide.settings import CACHE_DIR_SETTING, read_settings
from lowtide.storage import cache_root
from lowtide.tflm.sizer import predict_arena32
from lowtide.tflm.tree import KernelSet
from lowtide.validation import load_model
from support.builder_models import BRANCH_BY_BRANCH, two_branch_builder

pytest_plugins = ["pytester"]

VWW = SHARED_MODELS / "mlperf_vww_96_int8.tflite"
HELLO = SHARED_MODELS / "tflm_hello_world_int8.tflite"
RUNTIME = f"tflite-micro {importlib.metadata.version('tflite-micro')} (host, reference kernels)"
# With the pytest11 entry point installed the plugin loads by itself, and `-p lowtide.hil.plugin` would register
# the same module a second time (pytest refuses that).
ENTRY_POINT_INSTALLED = bool(importlib.metadata.entry_points(group="pytest11", name="lowtide"))
# Hypothesis's plugin costs about two seconds a run and has nothing to do here.
PLUGIN = ["-p", "no:hypothesispytest", *([] if ENTRY_POINT_INSTALLED else ["-p", "lowtide.hil.plugin"])]
HOST = ["--lowtide-board", "host-tflm"]

ONE_MODEL_TEST = """
def test_model(lowtide_measure, assert_no_regression):
    result = lowtide_measure({model!r})
    assert_no_regression(result, latency_percent=None)  # wall-clock on a shared host is noise
"""


@pytest.fixture(autouse=True)
def own_lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    locks = tmp_path / "locks"
    monkeypatch.setenv("LOWTIDE_LOCK_DIR", str(locks))
    return locks


def arena_used(model: Path) -> int:
    """What host-tflm reports as the arena used: TFLM's recording allocator after a run on measure()'s inputs."""
    return oracle.run(model.read_bytes(), oracle.random_inputs(load_model(model), 0)).total_bytes


def entry(figures: dict, sha: str = "0" * 64, model: str = "m.tflite") -> Baseline:
    return Baseline(model, sha, "0.0.1", "2026-01-01T00:00:00+00:00", figures)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_worse_model_fails_against_a_fresh_baseline_with_figures_in_message_and_junit(pytester: pytest.Pytester):
    model = pytester.path / "mlperf_vww_96_int8.tflite"
    (pytester.path / "optimized").mkdir()
    optimized = optimize_model(VWW, pytester.path / "optimized" / "vww.tflite")
    shutil.copy(optimized.export.model_path, model)
    pytester.makepyfile(test_vww=ONE_MODEL_TEST.format(model=str(model)))
    baselines = pytester.path / "baselines.json"
    options = [*PLUGIN, *HOST, "--lowtide-baselines", str(baselines)]

    pytester.runpytest(*options, "--lowtide-update-baselines").assert_outcomes(passed=1)
    before = arena_used(model)
    ((key, recorded),) = load_baselines(baselines).items()
    assert key == BaselineKey("host-tflm", RUNTIME, "test_vww.py::test_model")
    assert recorded.model_sha256 == load_model(model).sha256 and recorded.model == model.name
    assert recorded.figures["arena_used_bytes"] == before
    assert recorded.figures["board_planned_bytes"] == optimized.planned_head_bytes
    written = baselines.read_text()
    assert written == json.dumps(json.loads(written), indent=2, sort_keys=True) + "\n"

    pytester.runpytest(*options).assert_outcomes(passed=1)  # the same model against its fresh baseline

    shutil.copy(VWW, model)  # the stock model: TFLM's own plan, a larger arena
    after = arena_used(model)
    head_before, head_after = optimized.planned_head_bytes, oracle.run(VWW.read_bytes()).head_bytes
    assert after > before and head_after > head_before
    run = pytester.runpytest(*options, "--junitxml=report.xml")
    run.assert_outcomes(failed=1)
    run.stdout.fnmatch_lines(
        [
            "*lowtide: mlperf_vww_96_int8.tflite regressed on host-tflm*",
            "*the model changed since its baseline*",
            (
                f"*arena_used_bytes*{before:,} B -> {after:,} B*+{after - before:,} B "
                f"(+{100 * (after - before) / before:.1f}%), allowed +0 B: REGRESSED"
            ),
            f"*board_planned_bytes*{head_before:,} B -> {head_after:,} B*REGRESSED",
            "*outputs*match -> match*ok",
        ]
    )
    assert baselines.read_text() == written  # comparing never writes

    testcase = ET.parse(pytester.path / "report.xml").find(".//testcase")
    properties = {p.get("name"): p.get("value") for p in testcase.iter("property")}
    assert properties["lowtide.mlperf_vww_96_int8.arena_used_bytes"] == str(after)
    assert properties["lowtide.mlperf_vww_96_int8.board_planned_bytes"] == str(head_after)
    assert properties["lowtide.mlperf_vww_96_int8.baseline.arena_used_bytes"] == str(before)
    assert properties["lowtide.mlperf_vww_96_int8.baseline"] == "regressed"
    assert properties["lowtide.mlperf_vww_96_int8.model_sha256"] == load_model(VWW).sha256
    assert int(properties["lowtide.mlperf_vww_96_int8.latency_median_us"]) >= 0


def test_update_rewrites_only_the_entries_that_ran(pytester: pytest.Pytester):
    pytester.makepyfile(
        test_two=f"""
        def test_a(lowtide_measure, assert_no_regression):
            assert_no_regression(lowtide_measure({str(HELLO)!r}))

        def test_b(lowtide_measure, assert_no_regression):
            assert_no_regression(lowtide_measure({str(HELLO)!r}))
        """
    )
    stale = entry({"arena_used_bytes": 1, "outputs_match": True})
    other_board = BaselineKey("nucleo-f746zg", "tflite-micro 1.0 (cmsis-nn)", "test_two.py::test_a")
    seeded = {
        BaselineKey("host-tflm", RUNTIME, "test_two.py::test_a"): stale,
        BaselineKey("host-tflm", RUNTIME, "test_two.py::test_b"): stale,
        other_board: stale,
    }
    baselines = pytester.path / "lowtide-baselines.json"  # the default place: the rootdir
    write_atomically(baselines, dump_baselines(seeded))

    run = pytester.runpytest(*PLUGIN, *HOST, "--lowtide-update-baselines", "-k", "test_a")
    run.assert_outcomes(passed=1, deselected=1)
    run.stdout.fnmatch_lines(["*baselines: wrote 1 entries to*lowtide-baselines.json (3 in all)"])
    after = load_baselines(baselines)
    assert after[BaselineKey("host-tflm", RUNTIME, "test_two.py::test_b")] == stale
    assert after[other_board] == stale
    updated = after[BaselineKey("host-tflm", RUNTIME, "test_two.py::test_a")]
    assert updated.figures["arena_used_bytes"] == arena_used(HELLO)
    assert updated.lowtide_version == __import__("lowtide").__version__ and updated.recorded != stale.recorded

    # Another run is writing the file for longer than this run will wait: its updates are reported, not lost silently.
    before = baselines.read_text()
    hold = locked(
        f"baselines:{baselines.resolve()}",
        1.0,
        "the test's hold on the baselines file",
        lock_dir=read_settings().lock_dir,
    )
    with hold:
        blocked = pytester.runpytest(*PLUGIN, *HOST, "--lowtide-update-baselines", "--lowtide-lock-timeout", "0.2")
    assert blocked.ret == pytest.ExitCode.TESTS_FAILED
    blocked.stdout.fnmatch_lines([f"*baselines NOT written: baselines file *in use by another run (pid {os.getpid()}*"])
    assert baselines.read_text() == before


def test_missing_baseline_is_reported_new_or_fails_when_required(pytester: pytest.Pytester):
    pytester.makepyfile(test_new=ONE_MODEL_TEST.format(model=str(HELLO)))
    other_runtime = BaselineKey("host-tflm", "tflite-micro 0.0.1 (host)", "test_new.py::test_model")
    write_atomically(pytester.path / "lowtide-baselines.json", dump_baselines({other_runtime: entry({})}))

    run = pytester.runpytest(*PLUGIN, *HOST, "-v")
    assert run.ret == 0
    assert run.parseoutcomes() == {"new": 1, "warnings": 1}
    run.stdout.fnmatch_lines(
        [
            "*test_model*host-tflm* NEW*",
            (
                "*NewBaselineWarning: lowtide: no baseline for test_new.py::test_model on host-tflm*"
                "another runtime (tflite-micro 0.0.1 (host))*arena_used_bytes 1504*--lowtide-update-baselines*"
            ),
            "*no baseline in*record with --lowtide-update-baselines*",
        ]
    )
    required = pytester.runpytest(*PLUGIN, *HOST, "--lowtide-require-baselines")
    required.assert_outcomes(failed=1)
    required.stdout.fnmatch_lines(["*lowtide: no baseline for test_new.py::test_model on host-tflm*"])


def test_damaged_baselines_file_fails_clearly_and_is_not_overwritten(pytester: pytest.Pytester):
    pytester.makepyfile(test_damaged=ONE_MODEL_TEST.format(model=str(HELLO)))
    damaged = pytester.path / "lowtide-baselines.json"
    damaged.write_text('{"format": 1, "boards": {"host-tflm": ')  # cut short, as by a careless hand edit

    compared = pytester.runpytest(*PLUGIN, *HOST)
    compared.assert_outcomes(failed=1)
    compared.stdout.fnmatch_lines(["*lowtide-baselines.json: baselines file is damaged (JSONDecodeError*"])
    updated = pytester.runpytest(*PLUGIN, *HOST, "--lowtide-update-baselines")
    updated.assert_outcomes(failed=1)
    updated.stdout.fnmatch_lines(["*baselines file is damaged*restore it from version control or delete it*"])
    assert damaged.read_text() == '{"format": 1, "boards": {"host-tflm": '


def test_tolerances_per_call_and_from_ini(pytester: pytest.Pytester):
    used = arena_used(HELLO)
    pytester.makepyfile(
        test_tol=f"""
        def test_exact(lowtide_measure, assert_no_regression):
            assert_no_regression(lowtide_measure({str(HELLO)!r}), latency_percent=None)

        def test_bytes(lowtide_measure, assert_no_regression):
            assert_no_regression(lowtide_measure({str(HELLO)!r}), arena_bytes=16, latency_percent=None)
        """
    )
    # Baselines 16 bytes below what the board will report: by construction a 16-byte arena regression.
    smaller = entry({"arena_used_bytes": used - 16, "latency_median_us": 1, "outputs_match": True})
    keys = [BaselineKey("host-tflm", RUNTIME, f"test_tol.py::{test}") for test in ("test_exact", "test_bytes")]
    write_atomically(pytester.path / "lowtide-baselines.json", dump_baselines(dict.fromkeys(keys, smaller)))
    run = pytester.runpytest(*PLUGIN, *HOST)
    run.assert_outcomes(passed=1, failed=1)
    run.stdout.fnmatch_lines([f"*arena_used_bytes*{used - 16:,} B -> {used:,} B*+16 B*allowed +0 B: REGRESSED"])
    assert "test_bytes" not in "".join(line for line in run.outlines if line.startswith("FAILED"))

    pytester.makeini("[pytest]\nlowtide_arena_percent = 1.1\n")  # 1.1% of 1,488 B = 16 B (1% would be 14 B)
    pytester.runpytest(*PLUGIN, *HOST, "-k", "test_exact").assert_outcomes(passed=1, deselected=1)
    pytester.makeini("[pytest]\nlowtide_arena_percent = lots\n")
    pytester.runpytest(*PLUGIN, *HOST).stderr.fnmatch_lines(["*lowtide_arena_percent = 'lots': expected a number*"])


def test_compare_applies_each_tolerance_to_its_figure():
    key = BaselineKey("b", "r", "n")
    base = entry(
        {
            "arena_used_bytes": 1000,
            "latency_median_us": 100,
            "latency_median_cycles": 10_000,
            "arena_high_water_bytes": None,
            "outputs_match": True,
        }
    )

    def check(tolerances: Tolerances, **figures):
        return compare(key, base, entry({**base.figures, **figures}), tolerances)

    assert not check(Tolerances()).regressed
    assert check(Tolerances(), arena_used_bytes=1001).regressed
    assert not check(Tolerances(arena_bytes=1), arena_used_bytes=1001).regressed
    assert not check(Tolerances(arena_percent=5), arena_used_bytes=1050).regressed
    assert check(Tolerances(arena_percent=5), arena_used_bytes=1051).regressed
    assert check(Tolerances(latency_percent=20), latency_median_us=121).regressed
    assert not check(Tolerances(latency_percent=None), latency_median_us=500).regressed
    assert check(Tolerances(cycles_percent=0), latency_median_cycles=10_001).regressed
    emulated = compare(
        key, base, entry({**base.figures, "latency_median_cycles": 10_001}), Tolerances(), counter_unit="instructions"
    )  # an emulator counts instructions, not cycles
    assert "10,000 instructions -> 10,001 instructions" in emulated.message()
    assert check(Tolerances(), outputs_match=False).outputs_regressed
    assert not check(Tolerances(outputs=False), outputs_match=False).regressed
    shrunk = check(Tolerances(latency_percent=20), arena_used_bytes=990, latency_median_us=90)
    assert [c.figure for c in shrunk.improvements] == ["arena_used_bytes"]  # 10% faster is within the noise band
    assert "arena_high_water_bytes" not in [c.figure for c in shrunk.changes]  # no board could paint: not shown
    message = check(Tolerances(), arena_used_bytes=1250).message()
    assert "arena_used_bytes" in message and "1,000 B -> 1,250 B" in message and "+250 B (+25.0%)" in message
    with pytest.raises(ValueError, match="arena_percent"):
        Tolerances(arena_percent=-1)


def test_without_lowtide_options_a_run_is_unchanged(pytester: pytest.Pytester, own_lock_dir: Path):
    pytester.makepyfile(
        test_plain="""
        import pytest

        def test_pass():
            pass

        def test_fail():
            assert 1 == 2

        @pytest.mark.skip(reason="because")
        def test_skip():
            pass

        @pytest.mark.parametrize("x", [1, 2])
        def test_param(x):
            assert x

        def test_hil(lowtide_measure):
            lowtide_measure("any.tflite")
        """
    )

    def visible(run: pytest.RunResult) -> list[str]:
        """The output less the lines that name the plugins loaded and the run's duration."""
        return [line for line in run.outlines if not line.startswith(("plugins:", "=")) and " in " not in line]

    plain = ["--deselect", "test_plain.py::test_hil", "-rA"]
    without = pytester.runpytest("-p", "no:hypothesispytest", "-p", "no:lowtide", *plain)
    with_plugin = pytester.runpytest(*PLUGIN, *plain)
    assert with_plugin.ret == without.ret == 1
    assert (
        with_plugin.parseoutcomes()
        == without.parseoutcomes()
        == {"passed": 3, "failed": 1, "skipped": 1, "deselected": 1}
    )
    assert visible(with_plugin) == visible(without)
    named = [line for line in with_plugin.outlines if "lowtide" in line]
    assert all(line.startswith(("rootdir:", "plugins:")) for line in named)  # the test's directory; the distribution
    assert not own_lock_dir.exists() and not (pytester.path / "lowtide-baselines.json").exists()

    no_board = pytester.runpytest(*PLUGIN, "-k", "test_hil", "-rs")
    no_board.assert_outcomes(skipped=1, deselected=5)
    no_board.stdout.fnmatch_lines(["*no board to measure on: run pytest with --lowtide-board NAME*"])
    unknown = pytester.runpytest(*PLUGIN, "-k", "test_hil", "-rs", "--lowtide-board", "qemu-m9")
    unknown.stdout.fnmatch_lines(["*unknown board 'qemu-m9'; known boards: *host-tflm*"])
    assert pytester.runpytest(*PLUGIN, "--lowtide-port", "/dev/ttyACM0").ret == pytest.ExitCode.USAGE_ERROR
    serial = ["--lowtide-board", "serial", "--lowtide-port", "/dev/ttyACM0"]
    emulated = pytester.runpytest(*PLUGIN, *serial, "--lowtide-flash", "qemu-m4")
    emulated.stderr.fnmatch_lines(["*--lowtide-flash: qemu-m4 is emulated; measure it with --lowtide-board qemu-m4"])
    unknown_file = pytester.runpytest(*PLUGIN, *serial, "--lowtide-flash", "nucleo-nope")
    unknown_file.stderr.fnmatch_lines(["*--lowtide-flash: unknown board 'nucleo-nope'; board files: *nucleo-f746zg*"])


def test_plugin_loads_through_its_pytest11_entry_point(pytester: pytest.Pytester):
    site = pytester.path / "site"
    dist_info = site / "lowtide_hil_entry-0.0.0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: lowtide-hil-entry\nVersion: 0.0.0\n")
    (dist_info / "entry_points.txt").write_text("[pytest11]\nlowtide = lowtide.hil.plugin\n")
    pytester.makepyfile(test_ep=ONE_MODEL_TEST.format(model=str(HELLO)))
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_DISABLE_PLUGIN_AUTOLOAD"}
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", *HOST, "test_ep.py"],
        cwd=pytester.path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 warning, 1 new" in run.stdout and "lowtide: boards host-tflm" in run.stdout


def test_second_run_on_a_board_waits_for_the_first_or_fails_after_the_lock_timeout(pytester: pytest.Pytester):
    pytester.makepyfile(
        test_hold=f"""
        import os, time
        from pathlib import Path

        def test_hold(lowtide_measure):
            lowtide_measure({str(HELLO)!r})
            mark = Path(os.environ["MARK"])
            mark.write_text(repr(time.time()))  # measured, and holding the board until this run ends
            deadline = time.monotonic() + 60
            while not Path("release").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            Path(f"{{mark}}.end").write_text(repr(time.time()))
        """
    )
    port = ["--lowtide-port", f"tcp:{free_port()}"]  # host-tflm on a fixed port: one run at a time

    def start(mark: str, lock_timeout: float) -> tuple[subprocess.Popen, list[str]]:
        """A pytest run whose output lines arrive in the returned list as it prints them."""
        env = {**os.environ, "MARK": str(pytester.path / mark), "PYTHONUNBUFFERED": "1"}
        run = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                *PLUGIN,
                *HOST,
                *port,
                "--lowtide-lock-timeout",
                str(lock_timeout),
                "test_hold.py",
            ],
            cwd=pytester.path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        lines: list[str] = []
        threading.Thread(target=lambda: lines.extend(run.stdout) or lines.append("<end>"), daemon=True).start()
        return run, lines

    def wait_for(condition, what: str) -> None:
        deadline = time.monotonic() + 60
        while not condition():
            assert time.monotonic() < deadline, f"gave up waiting for {what}"
            time.sleep(0.02)

    first, first_lines = start("first", lock_timeout=60)
    wait_for(lambda: (pytester.path / "first").exists() or first.poll() is not None, "the first run to measure")
    impatient, impatient_lines = start("impatient", lock_timeout=1)
    patient, patient_lines = start("patient", lock_timeout=60)

    assert impatient.wait(timeout=60) == 1, "".join(impatient_lines)
    assert first.poll() is None  # it gave up while the first run still held the board
    wait_for(lambda: impatient_lines[-1:] == ["<end>"], "the impatient run's output")
    impatient_out = "".join(impatient_lines)
    assert f"board host-tflm on {port[1]} is in use by another run (pid {first.pid}" in impatient_out
    assert "gave up after waiting 1 s" in impatient_out

    wait_for(lambda: any("waiting up to 60 s" in line for line in patient_lines), "the patient run to wait")
    assert f"is in use by pid {first.pid}" in "".join(patient_lines)
    assert not (pytester.path / "patient").exists()
    (pytester.path / "release").touch()
    assert first.wait(timeout=60) == 0, "".join(first_lines)
    assert patient.wait(timeout=60) == 0, "".join(patient_lines)
    first_done = float((pytester.path / "first.end").read_text())
    assert float((pytester.path / "patient").read_text()) > first_done  # it measured only after the first ended


WRITER = """
import itertools, sys
from pathlib import Path
from lowtide.hil.baselines import write_atomically
path, texts = Path(sys.argv[1]), [Path(p).read_text() for p in sys.argv[2:]]
print("writing", flush=True)
for i in itertools.count():
    write_atomically(path, texts[i % 2])
    print("wrote", flush=True)
"""


def test_baselines_survive_a_writer_killed_mid_write(tmp_path: Path):
    def content(seed: int) -> str:
        rng = random.Random(seed)
        return dump_baselines(
            {
                BaselineKey("host-tflm", RUNTIME, f"test_{i}"): entry({"arena_used_bytes": rng.randrange(1 << 20)})
                for i in range(3000)
            }
        )  # about 1 MB: each write takes long enough to be caught in the middle

    old, new = content(1), content(2)
    (tmp_path / "old.json").write_text(old)
    (tmp_path / "new.json").write_text(new)
    baselines = tmp_path / "baselines.json"
    for attempt in range(6):
        write_atomically(baselines, old)
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(baselines), str(tmp_path / "new.json"), str(tmp_path / "old.json")],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writer.stdout.readline() == "writing\n"
        # The first replacement has finished, whatever the machine's load: the kill lands among real writes.
        assert writer.stdout.readline() == "wrote\n"
        time.sleep(random.Random(attempt).uniform(0.05, 0.4))
        writer.send_signal(signal.SIGKILL)
        assert writer.wait(timeout=10) == -signal.SIGKILL
        assert baselines.read_text() in (old, new)
        assert len(load_baselines(baselines)) == 3000
    # A killed writer may leave its temporary file; the next merge, under the lock, removes it.
    merge_baselines(baselines, {}, lock_timeout=5, lock_dir=read_settings().lock_dir)
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []
    assert baselines.read_text() in (old, new)


@needs_firmware_tools
def test_worse_model_fails_on_qemu_m4_with_painted_and_instruction_figures(pytester: pytest.Pytester):
    """The same regression on the emulated Cortex-M4: the compiled firmware paints the arena and counts
    instructions, so the message shows the high-water mark growing from the two-branch graph to its version with
    branches twice as wide. (Its two operator orders no longer differ there: the compiled runtime runs the whole
    graph row by row in either.)"""
    model = pytester.path / "two_branch.tflite"
    good, bad = (two_branch_builder(wide).build(BRANCH_BY_BRANCH) for wide in (64, 128))
    arenas = []
    for data in (bad, good):
        model.write_bytes(data)
        arenas.append(compile_model(load_model(model)).arena_bytes)
    bad_arena, good_arena = arenas
    assert good_arena < bad_arena
    pytester.makepyfile(test_two_branch=ONE_MODEL_TEST.format(model=str(model)))
    options = [*PLUGIN, "--lowtide-board", "qemu-m4", "--lowtide-baselines", str(pytester.path / "baselines.json")]

    pytester.runpytest(*options, "--lowtide-update-baselines").assert_outcomes(passed=1)
    ((key, recorded),) = load_baselines(pytester.path / "baselines.json").items()
    assert key.board == "qemu-mps2-an386" and key.runtime == "lowtide-compiled"
    assert recorded.figures["arena_high_water_bytes"] == good_arena
    pytester.runpytest(*options).assert_outcomes(passed=1)

    model.write_bytes(bad)
    run = pytester.runpytest(*options, "--junitxml=report.xml")
    run.assert_outcomes(failed=1)
    growth = bad_arena - good_arena
    run.stdout.fnmatch_lines(
        [
            "*lowtide: two_branch.tflite regressed on qemu-mps2-an386*",
            "*the model changed since its baseline*",
            f"*arena_high_water_bytes*{good_arena:,} B -> {bad_arena:,} B*+{growth:,} B*REGRESSED",
        ]
    )
    testcase = ET.parse(pytester.path / "report.xml").find(".//testcase")
    properties = {p.get("name"): p.get("value") for p in testcase.iter("property")}
    assert properties["lowtide.two_branch.arena_high_water_bytes"] == str(bad_arena)
    assert int(properties["lowtide.two_branch.latency_median_cycles"]) > 0


ON_OFF = SHARED_MODELS / "mltk_kws_on_off_v3.tflite"  # one arena (94 KB) fits neither of qemu-m4-banks' 80 KiB
# The user cache (TFLM's trees and objects, the firmware builds) as it is before pytester points HOME elsewhere.
USER_CACHE = cache_root(read_settings())
TWO_BANKS_TEST = """
def test_on_off(lowtide_measure, assert_no_regression):
    result = lowtide_measure({model!r}, persistent_region="sram2", iterations=2, timeout=60.0)
    assert_no_regression(result)
"""


@needs_firmware_tools
def test_baselines_record_and_compare_the_arena_bytes_in_each_memory(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
):
    """TFLM's two arenas in qemu-m4-banks' two banks (the non-persistent one with .bss in sram1, the persistent one
    in sram2): the baseline keeps each bank's arena bytes as TFLM reported them, to the byte as lowtide predicts
    them, and a bank whose share grew is named in the regression message."""
    monkeypatch.setenv(CACHE_DIR_SETTING, str(USER_CACHE))
    model = pytester.path / "on_off.tflite"
    shutil.copy(ON_OFF, model)
    split = predict_arena32(load_model(model), KernelSet.REFERENCE, read_settings()).split
    assert split is not None
    head, tail = split.non_persistent_used_bytes, split.persistent_used_bytes
    pytester.makepyfile(test_banks=TWO_BANKS_TEST.format(model=str(model)))
    baselines = pytester.path / "baselines.json"
    options = [*PLUGIN, "--lowtide-board", "qemu-m4-banks", "--lowtide-baselines", str(baselines)]

    pytester.runpytest(*options, "--lowtide-update-baselines").assert_outcomes(passed=1)
    ((key, recorded),) = load_baselines(baselines).items()
    figures = recorded.figures
    assert (figures["arena_used_bytes[sram1]"], figures["arena_used_bytes[sram2]"]) == (head, tail)
    assert figures["arena_used_bytes"] == head + tail and figures["outputs_match"] is True
    pytester.runpytest(*options).assert_outcomes(passed=1)

    # A baseline from when the persistent arena was 64 B smaller: sram2's figure regressed, sram1's did not.
    smaller = {**figures, "arena_used_bytes[sram2]": tail - 64, "arena_used_bytes": head + tail - 64}
    baselines.write_text(dump_baselines({key: dataclasses.replace(recorded, figures=smaller)}))
    run = pytester.runpytest(*options, "--junitxml=report.xml")
    run.assert_outcomes(failed=1)
    run.stdout.fnmatch_lines(
        [
            "*lowtide: on_off.tflite regressed on qemu-mps2-an386 (tflm)*",
            f"*arena_used_bytes *{head + tail - 64:,} B -> {head + tail:,} B*+64 B*REGRESSED",
            f"*arena_used_bytes[[]sram1]*{head:,} B -> {head:,} B*+0 B*ok",
            f"*arena_used_bytes[[]sram2]*{tail - 64:,} B -> {tail:,} B*+64 B*REGRESSED",
        ]
    )
    testcase = ET.parse(pytester.path / "report.xml").find(".//testcase")
    properties = {p.get("name"): p.get("value") for p in testcase.iter("property")}
    assert properties["lowtide.on_off.arena_used_bytes[sram2]"] == str(tail)
    assert properties["lowtide.on_off.baseline.arena_used_bytes[sram2]"] == str(tail - 64)


def test_a_baselines_file_without_memory_figures_still_loads_and_compares():
    """tests/hil/baselines.json predates the figures per memory: each of its entries loads, and a measurement that
    has them compares on the figures both have, the new ones shown with no baseline figure."""
    entries = load_baselines(Path(__file__).parent / "hil" / "baselines.json")
    assert entries
    for key, entry in entries.items():
        assert not any(figure.startswith("arena_used_bytes[") for figure in entry.figures)
        measured = dataclasses.replace(entry, figures={**entry.figures, "arena_used_bytes[sram2]": 1000})
        comparison = compare(key, entry, measured, Tolerances())
        assert not comparison.regressed
        (change,) = [c for c in comparison.changes if c.figure == "arena_used_bytes[sram2]"]
        assert (change.before, change.after, change.allowed) == (None, 1000, "no baseline figure")
