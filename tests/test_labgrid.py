"""lowtide on a labgrid board farm, for real: a labgrid coordinator and exporter on localhost, the exporter
publishing a QEMU board's TCP serial port as a NetworkSerialPort in the place `qemu-lab`, and `lowtide measure
--board labgrid:qemu-lab` acquiring the place, measuring through it and releasing it (docs/hil.md, "Boards on other
machines: labgrid", gives exactly the commands run here: LAB_COMMANDS and EXPORTER_YAML).

The board runs the qemu-m4 firmware of tflm_hello_world_int8. Every process the lab starts is ended afterwards.
labgrid is lowtide's `labgrid` extra, which `make install` (and so CI) installs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import SHARED_MODELS, needs_firmware_tools
from lowtide.device.drivers.qemu import free_port
from lowtide.device.spec import load_board_specs
from lowtide.pipeline.firmware import build_board_firmware

REPO = Path(__file__).resolve().parents[1]
HELLO_WORLD = SHARED_MODELS / "tflm_hello_world_int8.tflite"
PLACE = "qemu-lab"
# The lab, as docs/hil.md gives it: $BOARD_PORT is the board's TCP serial port, $FIRMWARE its image,
# $LG_COORDINATOR the coordinator's address.
BOARD_COMMAND = (
    "qemu-system-arm -machine mps2-an386 -display none -monitor none "
    "-serial tcp:127.0.0.1:$BOARD_PORT,server=on,wait=off -icount shift=0 -kernel $FIRMWARE"
)
COORDINATOR_COMMAND = "labgrid-coordinator --listen $LG_COORDINATOR"
EXPORTER_COMMAND = "labgrid-exporter --coordinator $LG_COORDINATOR --name lowtide-lab exporter.yaml"
PLACE_COMMANDS = [
    "labgrid-client --place qemu-lab create",
    "labgrid-client --place qemu-lab add-match 'lowtide-lab/qemu-m4/*'",
]
MEASURE_COMMAND = "lowtide measure $MODEL --board labgrid:qemu-lab --json"
LAB_COMMANDS = [BOARD_COMMAND, COORDINATOR_COMMAND, EXPORTER_COMMAND, *PLACE_COMMANDS, MEASURE_COMMAND]
EXPORTER_YAML = """\
qemu-m4:
  NetworkSerialPort:
    host: 127.0.0.1
    port: {{ env['BOARD_PORT'] }}
    speed: 115200
    protocol: raw
"""
STARTUP_TIMEOUT_S = 30.0

pytestmark = needs_firmware_tools


@dataclass
class Lab:
    env: dict[str, str]
    directory: Path

    def shell(self, command: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-c", command], env=self.env, cwd=self.directory, capture_output=True, text=True, timeout=120
        )

    def start(self, command: str, log: str) -> subprocess.Popen:
        with open(self.directory / log, "wb") as output:
            return subprocess.Popen(
                ["bash", "-c", f"exec {command}"],
                env=self.env,
                cwd=self.directory,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
            )

    def measure(self, *extra: str, board: str = f"labgrid:{PLACE}") -> subprocess.Popen:
        command = MEASURE_COMMAND.replace(f"labgrid:{PLACE}", board)
        return subprocess.Popen(
            ["bash", "-c", f"exec {command} {' '.join(extra)}"],
            env=self.env,
            cwd=self.directory,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def holder(self) -> str | None:
        shown = self.shell(f"labgrid-client --place {PLACE} show")
        assert shown.returncode == 0, shown.stderr
        found = re.search(r"^\s*acquired: (.*)$", shown.stdout, re.MULTILINE)
        return None if found is None or found[1] == "None" else found[1]

    def wait_for_holder(self, process: subprocess.Popen | None = None) -> str:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while (holder := self.holder()) is None:
            assert process is None or process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the place was never acquired"
            time.sleep(0.1)
        return holder


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    directory = tmp_path_factory.mktemp("lab")
    image = build_board_firmware(load_board_specs()["qemu-m4"], HELLO_WORLD)
    env = {
        **os.environ,
        "BOARD_PORT": str(free_port()),
        "FIRMWARE": str(image.elf),
        "MODEL": str(HELLO_WORLD),
        "LG_COORDINATOR": f"127.0.0.1:{free_port()}",
        "LOWTIDE_LOCK_DIR": str(directory / "locks"),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    env.pop("LG_USERNAME", None)
    (directory / "exporter.yaml").write_text(EXPORTER_YAML)
    lab = Lab(env, directory)
    processes = [lab.start(BOARD_COMMAND, "board.log"), lab.start(COORDINATOR_COMMAND, "coordinator.log")]
    try:
        _wait_until(lambda: lab.shell("labgrid-client places").returncode == 0, "the coordinator")
        processes.append(lab.start(EXPORTER_COMMAND, "exporter.log"))
        _wait_until(
            lambda: "lowtide-lab/qemu-m4/NetworkSerialPort" in lab.shell("labgrid-client resources").stdout,
            "the exporter's NetworkSerialPort",
        )
        for command in PLACE_COMMANDS:
            done = lab.shell(command)
            assert done.returncode == 0, done.stderr
        yield lab
    finally:
        for process in reversed(processes):
            stop(process)


def _wait_until(ready, what: str) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not ready():
        assert time.monotonic() < deadline, f"{what} did not come up within {STARTUP_TIMEOUT_S:g} s"
        time.sleep(0.2)


def finished(process: subprocess.Popen) -> tuple[int, dict | None, str]:
    stdout, stderr = process.communicate(timeout=180)
    return process.returncode, json.loads(stdout) if process.returncode == 0 else None, stderr


def test_labgrid_place_measures_a_model_and_is_released(lab):
    code, report, stderr = finished(lab.measure())
    assert code == 0, stderr
    assert report["outputs_match"] is True and report["board"] == "qemu-mps2-an386"
    assert report["port"] == f"socket://127.0.0.1:{lab.env['BOARD_PORT']}"  # the place's NetworkSerialPort
    assert report["latency_cycles"]["unit"] == "instructions" and report["latency_cycles"]["min"] > 0
    assert lab.holder() is None


def test_labgrid_runs_wanting_the_same_place_queue_and_both_pass(lab):
    # Two runs on this machine: the second waits for the first (the place's local lock), then measures.
    first = lab.measure("--warmup", "20000")  # about 6 s on the board: the second run starts meanwhile
    lab.wait_for_holder(first)
    second = lab.measure()
    (code1, report1, stderr1), (code2, report2, stderr2) = finished(first), finished(second)
    assert code1 == 0 and code2 == 0, stderr1 + stderr2
    assert report1["outputs_match"] and report2["outputs_match"]
    assert "in use by another run on this machine" in stderr2
    # Another labgrid client (another user) holds the place: lowtide waits until it is released.
    assert lab.shell(f"LG_USERNAME=colleague labgrid-client --place {PLACE} acquire").returncode == 0
    waiting = lab.measure()
    time.sleep(3)
    assert waiting.poll() is None and lab.holder().endswith("/colleague")
    assert lab.shell(f"LG_USERNAME=colleague labgrid-client --place {PLACE} release").returncode == 0
    code, report, stderr = finished(waiting)
    assert code == 0 and report["outputs_match"], stderr
    assert "in use by another labgrid client" in stderr and "/colleague" in stderr
    assert lab.holder() is None


def test_labgrid_place_is_released_when_a_run_is_terminated(lab):
    terminated = lab.measure("--warmup", "20000", "--timeout", "30")
    lab.wait_for_holder(terminated)
    terminated.send_signal(signal.SIGTERM)
    assert terminated.wait(timeout=60) == 128 + signal.SIGTERM
    assert lab.holder() is None


def test_labgrid_place_of_a_killed_run_is_released_by_the_next_run(lab):
    killed = lab.measure("--warmup", "20000", "--timeout", "30")
    holder = lab.wait_for_holder(killed)
    killed.send_signal(signal.SIGKILL)  # no cleanup code runs
    killed.communicate(timeout=30)
    assert lab.holder() == holder  # the killed run's acquisition outlives it
    # The next run finds the place acquired by this user here, with nobody holding its local lock: it releases the
    # killed run's acquisition, measures (the board first finishes the killed run's RUN), and releases the place.
    code, report, stderr = finished(lab.measure("--timeout", "30"))
    assert code == 0 and report["outputs_match"], stderr
    assert lab.holder() is None


LAB_BOARD_INI = """\
[env:lab-qemu-m4]
extends = env:qemu-m4
upload_protocol = custom
upload_command = {python} {directory}/record_upload.py $SOURCE $UPLOAD_PORT
"""
RECORD_UPLOAD = """\
import json, pathlib, sys
with open(pathlib.Path(__file__).with_name("uploads.jsonl"), "a") as log:
    log.write(json.dumps({"elf": str(pathlib.Path(sys.argv[1]).resolve()), "port": sys.argv[2]}) + "\\n")
"""
LAB_BOARD = """\
name = "qemu-lab-board"
description = "the qemu-m4 board in labgrid place qemu-lab"
core = "cortex-m4f"
sram_bytes = 4194304
flash_bytes = 4194304
clock_hz = 25000000
platformio_env = "lab-qemu-m4"
platformio_config = "lab.ini"

[labgrid]
place = "qemu-lab"
"""


def test_labgrid_board_file_naming_a_place_builds_uploads_through_it_and_measures(lab, tmp_path):
    """A board file with [labgrid]: the firmware is built, PlatformIO's upload (here a recording upload_command; the
    lab's board already runs this firmware) gets the place's serial URL, then the board is measured through it."""
    (tmp_path / "lab.ini").write_text(LAB_BOARD_INI.format(repo=REPO, python=sys.executable, directory=tmp_path))
    (tmp_path / "record_upload.py").write_text(RECORD_UPLOAD)
    (tmp_path / "lab.toml").write_text(LAB_BOARD)
    code, report, stderr = finished(lab.measure(board=str(tmp_path / "lab.toml")))
    assert code == 0 and report["outputs_match"], stderr
    url = f"socket://127.0.0.1:{lab.env['BOARD_PORT']}"
    assert report["port"] == url and report["clock_hz"] == 25_000_000
    (upload,) = [json.loads(line) for line in (tmp_path / "uploads.jsonl").read_text().splitlines()]
    assert upload["port"] == url and upload["elf"].endswith("/lab-qemu-m4/firmware.elf")
    assert lab.holder() is None


def test_labgrid_unknown_place_is_one_clear_error(lab):
    done = lab.shell("lowtide measure $MODEL --board labgrid:no-such-place")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        f"lowtide: error: labgrid place 'no-such-place' does not exist on the "
        f"coordinator at {lab.env['LG_COORDINATOR']} (places: {PLACE})"
    )


def test_labgrid_docs_give_the_commands_this_test_runs():
    docs = (REPO / "docs" / "hil.md").read_text()
    section = docs[docs.index("## Boards on other machines: labgrid") :]
    for command in LAB_COMMANDS:
        assert command in section, command
    assert EXPORTER_YAML in section
