"""lowtide as a user installs it: the wheel, built from this checkout, installed into a fresh virtualenv outside it,
and run in a folder of the user's with the checkout hidden (an empty tmpfs mounted over it, in a mount namespace of
the run's own), through a user's whole flow. Its figures equal those of the editable install the other tests use.

Needs root or user namespaces for the hiding (CI runs as root); PyPI (or pip's cache) for the virtualenv's
dependencies; the firmware tools for the qemu-m4 steps; the TFLM sources in the user cache (`make tflm-lib`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import REPO, SHARED_MODELS, needs_firmware_tools

pytestmark = needs_firmware_tools

KWS = SHARED_MODELS / "mlperf_kws_dscnn_int8.tflite"
VWW = SHARED_MODELS / "mlperf_vww_96_int8.tflite"
USER_TEST = """
def test_vww(lowtide_measure, assert_no_regression):
    result = lowtide_measure("vww.tflite")
    assert_no_regression(result, latency_percent=None)  # wall-clock on a shared host is noise
"""
# Stands in for lowtide on PYTHONPATH: anything that imports lowtide while PlatformIO builds fails loudly.
POISON = "raise ImportError('a PlatformIO build imported lowtide')\n"


def _hiding_prefix() -> list[str]:
    """Runs a command with the checkout replaced by an empty folder (root, or an unprivileged user namespace)."""
    script = 'mount -t tmpfs lowtide-checkout-hidden "$0" && exec "$@"'
    for unshare in (["unshare", "--mount", "--propagation", "private"], ["unshare", "-r", "--mount"]):
        probe = subprocess.run([*unshare, "sh", "-c", script, str(REPO), "true"], capture_output=True)
        if shutil.which("unshare") and probe.returncode == 0:
            return [*unshare, "sh", "-c", script, str(REPO)]
    pytest.skip("cannot hide the checkout here: unshare --mount needs root or user namespaces")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The virtualenv's bin folder, with the wheel and its firmware extra installed."""
    root = tmp_path_factory.mktemp("installed")
    wheels = root / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(wheels), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (wheel,) = wheels.glob("lowtide-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    done = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", f"{wheel}[firmware]", "pytest"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return venv / "bin"


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory) -> Path:
    """The user's own folder: their models, nothing of lowtide's."""
    folder = tmp_path_factory.mktemp("user-project")
    shutil.copy(KWS, folder / "kws.tflite")
    shutil.copy(VWW, folder / "vww.tflite")
    return folder


def run_installed(
    bin_dir: Path, cwd: Path, *argv: str, env: dict[str, str] | None = None, timeout: float = 1200
) -> subprocess.CompletedProcess:
    """`argv` with the virtualenv first on PATH, in `cwd`, the checkout hidden."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "VIRTUAL_ENV"))}
    environment.update(
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", VIRTUAL_ENV=str(bin_dir.parent), **(env or {})
    )
    return subprocess.run(
        [*_hiding_prefix(), *argv], cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout
    )


def lowtide_json(bin_dir: Path, cwd: Path, *args: str) -> dict:
    done = run_installed(bin_dir, cwd, "lowtide", *args, "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def editable_json(cwd: Path, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", "from lowtide.cli import main; main()", *args, "--json"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_the_installed_package_reads_nothing_of_the_checkout(installed, user_dir):
    done = run_installed(
        installed,
        user_dir,
        "python",
        "-c",
        "import lowtide, lowtide.resources as r; print(lowtide.__file__); "
        "print(r.FIRMWARE_DIR); print(sorted(p.name for p in r.BOARDS_DIR.glob('*.toml')))",
    )
    assert done.returncode == 0, done.stderr
    package, firmware, boards = done.stdout.splitlines()
    assert Path(package).is_relative_to(installed.parent) and Path(firmware).is_relative_to(installed.parent)
    assert "qemu-m4.toml" in boards and "nucleo-f746zg.toml" in boards
    assert not (REPO / "host").is_relative_to(installed.parent)


def test_a_users_flow_from_the_wheel_gives_the_editable_installs_figures(installed, user_dir):
    demo = run_installed(installed, user_dir, "lowtide", "demo-model", "demo.tflite")
    assert demo.returncode == 0 and (user_dir / "demo.tflite").is_file(), demo.stderr

    inspected = lowtide_json(installed, user_dir, "inspect", "kws.tflite", "--arena32", "exact")
    assert (
        inspected["mcu32"]["exact"]
        and inspected["mcu32"] == editable_json(user_dir, "inspect", "kws.tflite", "--arena32", "exact")["mcu32"]
    )

    optimized = lowtide_json(installed, user_dir, "optimize", "kws.tflite", "-o", "kws_opt.tflite", "--verify")
    assert optimized["outputs_identical"] and (user_dir / "kws_opt.h").is_file()
    assert optimized["after"]["mcu32"]["exact"]

    compiled = lowtide_json(installed, user_dir, "compile", "kws.tflite", "-o", "kws_c", "--verify")
    assert compiled["verify"]["passed"] and (user_dir / "kws_c" / "model.c").is_file()
    assert compiled["arena_bytes"] == editable_json(user_dir, "compile", "kws.tflite", "-o", "kws_c2")["arena_bytes"]

    host = lowtide_json(installed, user_dir, "measure", "kws.tflite", "--board", "host-tflm")
    assert host["outputs_match"]
    for runtime in ("compiled", "tflm"):
        board = lowtide_json(installed, user_dir, "measure", "kws.tflite", "--board", "qemu-m4", "--runtime", runtime)
        assert board["outputs_match"], runtime
        mine = editable_json(user_dir, "measure", "kws.tflite", "--board", "qemu-m4", "--runtime", runtime)
        figures = ("arena_used_bytes", "arena_high_water_bytes", "board_planned_bytes", "latency_cycles")
        assert {k: board[k] for k in figures} == {k: mine[k] for k in figures}, runtime
    assert board["arena_used_bytes"] == inspected["mcu32"]["used_bytes"]  # TFLM's arena on the board, as predicted

    savings = lowtide_json(installed, user_dir, "savings", "kws.tflite", "--board", "qemu-m4", "--time-limit", "5")
    mine = editable_json(user_dir, "savings", "kws.tflite", "--board", "qemu-m4", "--time-limit", "5")
    for variant in (*savings["variants"], *mine["variants"]):
        variant["model"] = Path(variant["model"]).name  # a temporary folder each run
    assert savings == mine and all(v["outputs_identical"] for v in savings["variants"])


def test_a_users_pytest_file_records_baselines_then_fails_a_regression_with_junit(installed, user_dir, tmp_path):
    project = tmp_path / "my-firmware"
    project.mkdir()
    (project / "test_vww.py").write_text(USER_TEST)
    optimized = lowtide_json(installed, user_dir, "optimize", "vww.tflite", "-o", str(project / "vww.tflite"))
    options = [
        "python",
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--lowtide-board",
        "host-tflm",
        "--lowtide-baselines",
        "baselines.json",
    ]
    env = {"LOWTIDE_LOCK_DIR": str(tmp_path / "locks")}
    recorded = run_installed(installed, project, *options, "--lowtide-update-baselines", env=env)
    assert recorded.returncode == 0, recorded.stdout[-3000:]
    baseline = json.loads((project / "baselines.json").read_text())
    (entry,) = baseline["boards"]["host-tflm"].values()
    before = entry["test_vww.py::test_vww"]["figures"]["board_planned_bytes"]
    assert before == optimized["after"]["planned_head_bytes"] < optimized["before"]["tflm_head_bytes"]

    shutil.copy(VWW, project / "vww.tflite")  # the stock model: TFLM's own plan, a larger arena
    failed = run_installed(installed, project, *options, "--junitxml=report.xml", env=env)
    assert failed.returncode == 1, failed.stdout[-3000:]
    after = optimized["before"]["tflm_head_bytes"]
    assert f"board_planned_bytes            {before:,} B -> {after:,} B" in failed.stdout, failed.stdout[-3000:]
    assert "REGRESSED" in failed.stdout
    testcase = ET.parse(project / "report.xml").find(".//testcase")
    properties = {p.get("name"): p.get("value") for p in testcase.iter("property")}
    assert properties["lowtide.vww.board_planned_bytes"] == str(after)
    assert properties["lowtide.vww.baseline"] == "regressed"


def test_a_project_left_for_the_user_builds_with_platformio_alone(installed, user_dir, tmp_path):
    built = lowtide_json(
        installed, user_dir, "build", "kws.tflite", "--board", "qemu-m4", "--runtime", "tflm", "--project-dir", "kws-fw"
    )
    project = user_dir / "kws-fw"
    assert Path(built["project_dir"]) == project and (project / "platformio.ini").is_file()
    spec = json.loads((project / "lowtide_project.json").read_text())
    assert spec["runtime"] == "tflm" and "tflm" in spec["libs"]
    # The user's own `pio run`, from scratch, with anything named lowtide on the path failing at import.
    poison = tmp_path / "poison" / "lowtide"
    poison.mkdir(parents=True)
    (poison / "__init__.py").write_text(POISON)
    shutil.rmtree(project / ".pio")
    pio = run_installed(
        installed,
        project,
        "python",
        "-m",
        "platformio",
        "run",
        env={"PYTHONPATH": str(poison.parent), "PLATFORMIO_SETTING_ENABLE_TELEMETRY": "No"},
    )
    assert pio.returncode == 0, pio.stdout[-3000:]
    assert (project / ".pio" / "build" / "qemu-m4" / "firmware.elf").read_bytes()[:4] == b"\x7fELF"
