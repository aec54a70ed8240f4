"""Boards `lowtide measure` can talk to. A board is anything that yields a `Link` speaking the lowtide protocol:
a device on a serial port, or a process this machine starts (host-tflm now; QEMU machines later, launched with
`-serial tcp:127.0.0.1:PORT,server=on,wait=on` and reached through `socket://127.0.0.1:PORT`).

To add one: subclass `Board`, implement `connect` as a context manager that cleans up everything it started, and
`register_board(...)` it. A board that runs firmware lowtide builds (the emulated ones) also implements `build`.

`detect_serial_port` finds a real board's port from the USB VID:PID its board file lists.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import serial.tools.list_ports

from lowtide.device.host_tflm import READY_PREFIX
from lowtide.device.transport import Link, open_link
from lowtide.errors import LowtideError

if TYPE_CHECKING:
    from lowtide.device.qemu import FirmwareImage
    from lowtide.tflm.sizer import Arena32

_STOP_GRACE_S = 5.0


class Board(ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    builds_firmware: ClassVar[bool] = False  # lowtide builds its firmware, so --runtime applies

    def build(self, model_path: Path, runtime: str | None = None) -> FirmwareImage | None:
        """The firmware this board runs for `model_path` with `runtime` (None: the board's own), built if need be;
        None for a board that runs the model it is given (host-tflm) or was flashed beforehand (serial), which
        cannot change its runtime."""
        if runtime is not None:
            raise LowtideError(f"--board {self.name} runs whatever it runs: --runtime applies to boards lowtide "
                               f"builds firmware for")
        return None

    def predicted_arena(self, model_path: Path, runtime: str | None = None) -> Arena32 | None:
        """lowtide's prediction of the TFLM arena this board's firmware will report; None where it runs no TFLM
        built by lowtide."""
        return None

    @abstractmethod
    def connect(self, model_path: Path, port: str | None, timeout: float,
                image: FirmwareImage | None = None) -> contextlib.AbstractContextManager[Link]:
        """A link to the board running `model_path` (as `image`, when `build` made one). Waits at most `timeout`
        seconds for anything it starts."""


class SerialBoard(Board):
    name = "serial"
    description = "a board already flashed with the model, on --port (device path, socket://, rfc2217://)"

    @contextlib.contextmanager
    def connect(self, model_path: Path, port: str | None, timeout: float,
                image: FirmwareImage | None = None) -> Iterator[Link]:
        if not port:
            raise LowtideError("--board serial needs --port (e.g. /dev/ttyACM0 or socket://127.0.0.1:4321)")
        link = open_link(port)
        try:
            yield link
        finally:
            link.close()


class HostTflmBoard(Board):
    name = "host-tflm"
    description = "this machine's TFLM interpreter in a subprocess (--port tcp:0 (default), tcp:PORT or pty)"

    @contextlib.contextmanager
    def connect(self, model_path: Path, port: str | None, timeout: float,
                image: FirmwareImage | None = None) -> Iterator[Link]:
        with tempfile.TemporaryFile() as stderr_file:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "lowtide.device.host_tflm",
                    "--model",
                    str(model_path),
                    "--port",
                    port or "tcp:0",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr_file,
            )
            try:
                url = _read_ready_line(process, stderr_file, timeout)
                link = open_link(url)
                try:
                    yield link
                finally:
                    link.close()
            finally:
                stop_process(process)


def _board_stderr(stderr_file) -> str:
    stderr_file.seek(0)
    lines = stderr_file.read().decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else "no message"


def _read_ready_line(process: subprocess.Popen, stderr_file, timeout: float) -> str:
    """The URL the board process announces, within `timeout` seconds."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    line = b""
    deadline = time.monotonic() + timeout
    while not line.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LowtideError(f"host-tflm board did not start within {timeout:g} s")
        readable, _, _ = select.select([fd], [], [], remaining)
        if readable:
            chunk = os.read(fd, 1024)
            if not chunk:
                process.wait(timeout=_STOP_GRACE_S)
                raise LowtideError(
                    f"host-tflm board exited with status {process.returncode}: {_board_stderr(stderr_file)}"
                )
            line += chunk
    text = line.decode("utf-8", "replace").strip()
    if not text.startswith(READY_PREFIX):
        raise LowtideError(f"host-tflm board printed {text!r}, expected '{READY_PREFIX}<url>'")
    return text[len(READY_PREFIX) :]


def stop_process(process: subprocess.Popen) -> None:
    """End a board process (host-tflm, an emulator): closing its stdin asks it to exit; terminate, then kill, if
    it does not."""
    for stream in (process.stdin, process.stdout):
        if stream:
            stream.close()
    for ask in (None, process.terminate, process.kill):
        if ask:
            ask()
        try:
            process.wait(timeout=_STOP_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


@dataclass(frozen=True)
class SerialPortCandidate:
    device: str  # /dev/ttyACM0, COM3
    usb_id: str | None  # "VID:PID" in upper-case hex; None for a port that is not USB
    description: str

    def describe(self) -> str:
        return f"{self.device} ({self.usb_id or 'not USB'}{': ' + self.description if self.description else ''})"


def serial_port_candidates() -> list[SerialPortCandidate]:
    """The machine's serial ports, as pyserial lists them."""
    return [
        SerialPortCandidate(
            device=port.device,
            usb_id=f"{port.vid:04X}:{port.pid:04X}" if port.vid is not None and port.pid is not None else None,
            description=port.description if port.description and port.description != "n/a" else "",
        )
        for port in serial.tools.list_ports.comports()
    ]


def detect_serial_port(board: str, usb_ids: tuple[str, ...]) -> str:
    """The one serial port whose USB VID:PID is one of `usb_ids` (from the board file); an error listing the
    candidates when there are several, or saying what was looked for when there is none."""
    wanted = {usb_id.upper() for usb_id in usb_ids}
    ports = serial_port_candidates()
    matching = [port for port in ports if port.usb_id in wanted]
    if len(matching) == 1:
        return matching[0].device
    if matching:
        raise LowtideError(f"several serial ports match {board} (USB {', '.join(sorted(wanted))}): "
                           f"{'; '.join(port.describe() for port in matching)}; choose one with --port")
    others = f"ports found: {'; '.join(port.describe() for port in ports)}" if ports else "no serial ports at all"
    raise LowtideError(f"no serial port matches {board} (USB {', '.join(sorted(wanted)) or 'IDs not listed'}); "
                       f"{others}; connect the board or give --port")


BOARDS: dict[str, Board] = {}


def register_board(board: Board) -> None:
    BOARDS[board.name] = board


def get_board(name: str) -> Board:
    try:
        return BOARDS[name]
    except KeyError:
        raise LowtideError(f"unknown board {name!r}; known boards: {', '.join(sorted(BOARDS))}") from None


register_board(HostTflmBoard())
register_board(SerialBoard())
from lowtide.device import qemu  # noqa: E402,F401  (registers the emulated boards; qemu imports Board from here)
