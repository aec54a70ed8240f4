"""The user cache (lowtide.storage) and what lives in it, as a user meets them: TFLM's sources got into a fresh
cache, a cache folder that cannot be written or fills up, two runs building the same firmware at once, and the
missing pieces a fresh machine may lack. Each failure is one line and exit status 2, and leaves nothing
half-written behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

from conftest import SHARED_MODELS, needs_firmware_tools
from lowtide.resources import BOARDS_DIR
from support.cli import run_lowtide

TFLM_ARCHIVES = SHARED_MODELS.parent / "tflm"
HELLO = SHARED_MODELS / "tflm_hello_world_int8.tflite"


lowtide = partial(run_lowtide, timeout=600)


def one_line_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lowtide: error: ") and "Traceback" not in done.stderr, lines
    return lines[0]


def _mount_prefix(options: str, folder: Path) -> tuple[str, ...]:
    """Runs a command with a tmpfs mounted on `folder` (its own mount namespace: root or user namespaces)."""
    script = f'mount -t tmpfs -o {options} lowtide-test "$0" && exec "$@"'
    for unshare in (("unshare", "--mount", "--propagation", "private"), ("unshare", "-r", "--mount")):
        if (
            shutil.which("unshare")
            and subprocess.run([*unshare, "sh", "-c", script, str(folder), "true"], capture_output=True).returncode == 0
        ):
            return (*unshare, "sh", "-c", script, str(folder))
    pytest.skip("cannot mount a tmpfs here: unshare --mount needs root or user namespaces")


def test_tflm_get_fills_a_fresh_cache_and_a_tree_is_then_found_without_any_setting(tmp_path):
    env = {"LOWTIDE_CACHE_DIR": str(tmp_path / "cache"), "LOWTIDE_TFLM_DIR": ""}
    missing = one_line_error(lowtide("inspect", str(HELLO), "--arena32", "exact", env=env))
    assert "no TFLM sources" in missing and "lowtide tflm-get --archive DIR" in missing
    done = lowtide("tflm-get", "--archive", str(TFLM_ARCHIVES), "--json", env=env)
    assert done.returncode == 0, done.stderr
    trees = [Path(t) for t in json.loads(done.stdout)["trees"]]
    assert {t.name for t in trees} == {"tflm-ref", "tflm-cmsis-nn"}
    assert all((t / "tensorflow" / "lite" / "micro").is_dir() and t.is_relative_to(tmp_path) for t in trees)
    listing = json.loads(lowtide("cache", "--json", env=env).stdout)
    assert listing["cache_dir"] == str(tmp_path / "cache") and listing["total_bytes"] > 10_000_000
    assert json.loads(lowtide("cache", "--clear", "--json", env=env).stdout)["cleared"]
    assert not any((tmp_path / "cache").iterdir())


def test_an_archive_that_is_not_the_pinned_tflm_is_refused_in_one_line(tmp_path):
    fake = tmp_path / "fake" / "tflm-ref" / "tensorflow"
    fake.mkdir(parents=True)
    (fake / "x.cc").write_text("// not TFLM\n")
    archive = tmp_path / "tflm-ref-0000000.tar.gz"
    shutil.make_archive(str(archive).removesuffix(".tar.gz"), "gztar", tmp_path / "fake")
    error = one_line_error(
        lowtide("tflm-get", "--archive", str(archive), env={"LOWTIDE_CACHE_DIR": str(tmp_path / "c")})
    )
    assert "not the export of commit 90b983c" in error
    assert not (tmp_path / "c" / "tflm" / "sources" / "tflm-ref").exists()


def test_a_read_only_cache_folder_is_one_line(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    error = one_line_error(
        lowtide(
            "tflm-get",
            "--archive",
            str(TFLM_ARCHIVES),
            env={"LOWTIDE_CACHE_DIR": str(cache)},
            prefix=_mount_prefix("ro", cache),
        )
    )
    assert "the cache folder is not writable" in error and "LOWTIDE_CACHE_DIR" in error
    # inspect still answers, with the estimate, and says why it is one
    done = lowtide(
        "inspect", str(HELLO), "--json", env={"LOWTIDE_CACHE_DIR": str(cache)}, prefix=_mount_prefix("ro", cache)
    )
    assert done.returncode == 0, done.stderr
    mcu32 = json.loads(done.stdout)["mcu32"]
    assert not mcu32["exact"] and "cache folder is not writable" in mcu32["method"]


def test_a_full_cache_disk_is_one_line_and_leaves_no_half_unpacked_tree(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    done = subprocess.run(
        [
            *_mount_prefix("size=2m", cache),
            "sh",
            "-c",
            f'{sys.executable} -c "from lowtide.cli import main; main()" tflm-get --archive '
            f'{TFLM_ARCHIVES}; '
            f'echo "left: $(ls -A {cache}/tflm/sources/unpacked 2>/dev/null | grep -v lock)"',
        ],
        env={**os.environ, "LOWTIDE_CACHE_DIR": str(cache)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "the disk holding the cache is full" in lines[0], done.stderr
    assert done.stdout.strip() == "left:"  # the staging folder went with the failure


@needs_firmware_tools
def test_two_runs_building_the_same_firmware_at_once_both_succeed_with_one_build(tmp_path):
    env = {**os.environ, "LOWTIDE_CACHE_DIR": str(tmp_path / "cache")}
    argv = [
        sys.executable,
        "-c",
        "from lowtide.cli import main; main()",
        "build",
        str(HELLO),
        "--board",
        "qemu-m4",
        "--json",
    ]
    runs = [
        subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    reports = []
    for run in runs:
        out, err = run.communicate(timeout=600)
        assert run.returncode == 0, err
        reports.append(json.loads(out))
    assert reports[0] == reports[1]
    projects = [p for p in (tmp_path / "cache" / "firmware").iterdir() if p.is_dir()]
    assert projects == [Path(reports[0]["project_dir"])]
    assert len(list(projects[0].glob("pio-*.log"))) == 1 and (projects[0] / ".lowtide-built").is_file()


@needs_firmware_tools
def test_a_machine_without_the_arm_toolchain_gets_one_line_saying_how_to_install_it(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    env = {"PATH": str(bin_dir), "LOWTIDE_CACHE_DIR": str(tmp_path / "cache")}
    error = one_line_error(lowtide("build", str(HELLO), "--board", "qemu-m4", env=env))
    assert "arm-none-eabi-gcc not found: install the Arm GNU toolchain" in error


def test_a_board_file_naming_an_unknown_env_or_runtime_is_one_line(tmp_path):
    text = (BOARDS_DIR / "qemu-m4.toml").read_text()
    unknown_runtime = tmp_path / "r.toml"
    unknown_runtime.write_text(text.replace('runtime = "compiled"', 'runtime = "tvm"'))
    assert "unknown runtime 'tvm'" in one_line_error(lowtide("build", str(HELLO), "--board", str(unknown_runtime)))
    unknown_env = tmp_path / "e.toml"
    unknown_env.write_text(text.replace('platformio_env = "qemu-m4"', 'platformio_env = "qemu-m9"'))
    assert "no PlatformIO env 'qemu-m9'" in one_line_error(lowtide("build", str(HELLO), "--board", str(unknown_env)))
    assert "unknown board 'qemu-m9'" in one_line_error(lowtide("build", str(HELLO), "--board", "qemu-m9"))


def test_boards_lists_every_shipped_board_with_what_it_runs_and_whether_it_builds_here():
    done = lowtide("boards", "--json", env={"LOWTIDE_PLATFORMIO_ARCHIVES": ""})  # the registry, unreachable here
    assert done.returncode == 0, done.stderr
    boards = {b["name"]: b for b in json.loads(done.stdout)["boards"]}
    assert {"qemu-m4", "qemu-m7", "nucleo-f746zg", "nucleo-h743zi", "nano33ble", "esp32-s3-devkitc-1", "pico"} <= set(
        boards
    )
    assert boards["qemu-m4"]["emulated"] and boards["qemu-m4"]["runtimes"] == ["compiled", "tflm", "tflm-cmsis-nn"]
    assert boards["esp32-s3-devkitc-1"]["runtimes"] == ["compiled", "tflm"]  # CMSIS-NN is for Arm cores
    assert not boards["nucleo-f746zg"]["buildable_here"]
    assert boards["nucleo-f746zg"]["why_not"] == (
        "not built here: its platform ststm32 (framework stm32cube) comes from PlatformIO's registry, which this "
        "machine cannot reach; set LOWTIDE_PLATFORMIO_ARCHIVES to build it from PlatformIO's archives"
    )
    assert boards["nano33ble"]["why_not"] == (
        "not built here: its platform nordicnrf52 (framework arduino) comes from "
        "PlatformIO's registry, which this machine cannot reach"
    )
