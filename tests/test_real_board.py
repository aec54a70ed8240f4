"""A real board's whole path in one command (`lowtide measure MODEL --board BOARD_FILE`, and the pytest plugin's
--lowtide-board): build, flash with PlatformIO's upload, open the board's port, measure.

The board is what this machine has: the qemu-m4 firmware in QEMU with its UART on a pty, behind a fixed port path
(a symlink, as /dev/serial/by-id/... is), stands in for a board on USB. The board file is a real one, with a
PlatformIO env of its own whose upload is `upload_protocol = custom`: tests/usb_stand_in.py, which records each
call and boots what it was given. Nothing of lowtide is replaced.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import serial.tools.list_ports

from conftest import SHARED_MODELS, needs_firmware_tools
from lowtide.errors import LowtideError
from lowtide.pipeline.measure import measure

REPO = Path(__file__).resolve().parents[1]
HELLO_WORLD = SHARED_MODELS / "tflm_hello_world_int8.tflite"

pytestmark = needs_firmware_tools

STAND_IN_INI = """\
; The qemu-m4 firmware, uploaded as a real board's would be: PlatformIO runs upload_command with the ELF and
; the --upload-port lowtide gives it.
[env:usb-stand-in]
extends = env:qemu-m4
upload_protocol = custom
upload_command = {python} {repo}/tests/usb_stand_in.py $SOURCE $UPLOAD_PORT
"""

STAND_IN_BOARD = """\
name = "usb-stand-in"
description = "qemu-m4's firmware behind a pty, standing in for a board on USB"
core = "cortex-m4f"
sram_bytes = 4194304
flash_bytes = 4194304
clock_hz = 25000000
platformio_env = "usb-stand-in"
platformio_config = "stand-in.ini"

[serial]
baud = 115200
usb_ids = ["1209:0001"]
port = "{port}"
"""


@pytest.fixture
def stand_in(tmp_path):
    """The board file, and its port: attached, running no firmware of ours yet (a silent pty)."""
    (tmp_path / "stand-in.ini").write_text(STAND_IN_INI.format(repo=REPO, python=sys.executable))
    port = tmp_path / "ttyACM-stand-in"
    board = tmp_path / "stand-in.toml"
    board.write_text(STAND_IN_BOARD.format(port=port))
    master, slave = os.openpty()
    port.symlink_to(os.ttyname(slave))
    try:
        yield board, port
    finally:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, ValueError):
            os.kill(int(Path(f"{port}.pid").read_text()), signal.SIGKILL)
        os.close(master)
        os.close(slave)


def uploads(port: Path) -> list[dict]:
    log = Path(f"{port}.uploads")
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_one_command_builds_flashes_finds_the_port_and_measures(stand_in):
    board, port = stand_in
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "lowtide",
            "measure",
            str(HELLO_WORLD),
            "--board",
            str(board),
            "--iterations",
            "3",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    # Measured on the board the upload booted, through the configured port, against the host TFLM's outputs.
    assert report["outputs_match"] is True and report["port"] == str(port)
    assert report["board"] == "qemu-mps2-an386" and report["clock_hz"] == 25_000_000
    assert report["latency_cycles"]["unit"] == "instructions" and report["latency_cycles"]["min"] > 0
    assert 0 < report["stack_high_water_bytes"] < report["stack_size_bytes"]
    # PlatformIO's upload ran once, with the firmware it built for the env and the port lowtide found.
    (upload,) = uploads(port)
    assert upload["port"] == str(port)
    assert upload["elf"].endswith("/usb-stand-in/firmware.elf") and Path(upload["elf"]).is_file()


def test_the_pytest_plugin_takes_the_same_path(stand_in, tmp_path):
    board, port = stand_in
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(REPO / "tests" / "hil"),
            "-k",
            "tflm_hello_world_int8",
            "--lowtide-board",
            str(board),
            "--lowtide-baselines",
            str(tmp_path / "baselines.json"),
            "--lowtide-update-baselines",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout
    (upload,) = uploads(port)  # flashed once, before its one measurement
    assert upload["port"] == str(port)
    recorded = json.loads((tmp_path / "baselines.json").read_text())["boards"]["qemu-mps2-an386"]
    (figures,) = [entry["figures"] for runtime in recorded.values() for entry in runtime.values()]
    assert figures["outputs_match"] is True and figures["latency_median_cycles"] > 0


def test_the_probe_serial_number_chooses_between_two_boards_with_one_vid_pid(stand_in, monkeypatch):
    # Two boards with the stand-in's VID:PID on this machine's USB, told apart only by their USB serial numbers: the
    # stand-in's port, and another board's. The board file fixes no port, so lowtide must choose.
    board, port = stand_in
    board.write_text("\n".join(line for line in board.read_text().splitlines() if not line.startswith("port =")))
    attached = [
        SimpleNamespace(device=str(port), vid=0x1209, pid=0x0001, description="stand-in", serial_number="STANDIN1"),
        SimpleNamespace(
            device="/dev/ttyACM-other", vid=0x1209, pid=0x0001, description="another board", serial_number="OTHER2"
        ),
    ]
    monkeypatch.setattr(serial.tools.list_ports, "comports", lambda *args, **kwargs: list(attached))
    with pytest.raises(LowtideError) as failure:  # which one? never a guess
        measure(HELLO_WORLD, str(board), iterations=3)
    assert str(failure.value) == (
        f"several serial ports match usb-stand-in (USB 1209:0001): {port} (1209:0001 serial STANDIN1: stand-in); "
        "/dev/ttyACM-other (1209:0001 serial OTHER2: another board); choose one with --probe SERIAL or --port"
    )
    assert uploads(port) == []
    report = measure(HELLO_WORLD, str(board), iterations=3, probe="standin1")  # serial numbers match in any case
    assert report.outputs_match and report.port == str(port)
    assert [upload["port"] for upload in uploads(port)] == [str(port)]
    # A port and a probe that are two different boards: nothing is flashed.
    with pytest.raises(LowtideError, match=f"{port} is the port of the probe with serial STANDIN1, not OTHER2"):
        measure(HELLO_WORLD, str(board), str(port), iterations=3, probe="OTHER2")
    assert len(uploads(port)) == 1
