"""Boards `lowtide measure` can talk to, composed from the drivers (`lowtide.device.drivers`).

A board builds its firmware if it has any (`build`), says what a run must lock to use it (`lock_resource`), and
yields a link that speaks the lowtide protocol (`connect`), cleaning up whatever it started:

| board | from | build | connect | locks |
| --- | --- | --- | --- | --- |
| `host-tflm` | built in | none | a host_tflm process | its port, when fixed |
| `serial` | built in | none (flashed beforehand) | `--port` | the port |
| emulated (`qemu-m4`) | board file with `[emulator]` | PlatformIO | QEMU | nothing: each run boots its own |
| real (`nucleo-f746zg`) | board file with `[serial]` | PlatformIO | upload, find the port, open it | the port |
| farm (`labgrid:PLACE`) | `--board labgrid:PLACE`, or a board file with `[labgrid]` | PlatformIO (board file) | acquire the place, upload (board file) | the place |

The registry is built on first use (`known_boards`): the two built-in boards and one per shipped board file;
`register_board` adds others. `get_board` also takes `labgrid:PLACE` and the path of a board file.
"""

from __future__ import annotations

import contextlib
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from pathlib import Path

from lowtide.device.drivers import labgrid
from lowtide.device.drivers.platformio import FirmwareImage, build_board_firmware, upload_firmware
from lowtide.device.drivers.process import board_process
from lowtide.device.drivers.qemu import run_emulator
from lowtide.device.drivers.serialport import detect_serial_port, open_port
from lowtide.device.locking import port_resource
from lowtide.device.spec import BoardSpec, get_board_spec, load_board_specs
from lowtide.device.transport import Link, open_link
from lowtide.errors import LowtideError
from lowtide.model.ir import Graph
from lowtide.runtimes import FirmwareRuntime
from lowtide.tflm.sizer import Arena32

LABGRID_PREFIX = "labgrid:"
DEFAULT_WAIT_S = 300.0  # how long a board's own wait (a farm place another client holds) lasts by default


class Board(ABC):
    name: str
    description: str
    spec: BoardSpec | None = None  # the board file, for boards that have one

    @property
    def builds_firmware(self) -> bool:
        """lowtide builds this board's firmware, so --runtime applies."""
        return self.spec is not None

    def build(self, model_path: Path, runtime: FirmwareRuntime | None = None) -> FirmwareImage | None:
        """The firmware this board runs for `model_path` with `runtime` (None: the board file's), built and checked
        against the board's memory; None for a board that runs what it is given or was flashed beforehand."""
        if self.spec is None:
            if runtime is not None:
                raise LowtideError(f"--board {self.name} runs whatever it runs: --runtime applies to boards lowtide "
                                   f"builds firmware for")
            return None
        return build_board_firmware(self.spec, Path(model_path), runtime)

    def predicted_arena(self, graph: Graph, runtime: FirmwareRuntime | None = None) -> Arena32 | None:
        """lowtide's prediction of the TFLM arena this board's firmware will report for `graph`; None where it runs
        no TFLM built by lowtide."""
        if self.spec is None:
            return None
        return (runtime or self.spec.runtime).predict_arena(graph, self.spec.core)

    @abstractmethod
    def lock_resource(self, port: str | None) -> str | None:
        """What a run must hold (lowtide.device.locking) while it uses this board on `port`; None when two runs
        can use it at once."""

    @abstractmethod
    def connect(self, model_path: Path, port: str | None, timeout: float, image: FirmwareImage | None = None,
                runtime: FirmwareRuntime | None = None, wait: float = DEFAULT_WAIT_S,
                on_wait: Callable[[str], None] | None = None) -> contextlib.AbstractContextManager[Link]:
        """A link to the board running `model_path` (as `image`, when `build` made one, run by `runtime`). Waits
        at most `timeout` seconds for anything it starts, and `wait` seconds for a board someone else holds
        (`on_wait` is told who, once)."""


class HostTflmBoard(Board):
    name = "host-tflm"
    description = "this machine's TFLM interpreter in a subprocess (--port tcp:0 (default), tcp:PORT or pty)"

    def lock_resource(self, port: str | None) -> str | None:
        return f"port:{port}" if port and port.startswith("tcp:") and port != "tcp:0" else None

    @contextlib.contextmanager
    def connect(self, model_path, port, timeout, image=None, runtime=None, wait=DEFAULT_WAIT_S,
                on_wait=None) -> Iterator[Link]:
        argv = [sys.executable, "-m", "lowtide.device.host_tflm", "--model", str(model_path), "--port",
                port or "tcp:0"]
        with board_process(argv, "host-tflm board", timeout) as url, contextlib.closing(open_link(url)) as link:
            yield link


class SerialBoard(Board):
    name = "serial"
    description = "a board already flashed with the model, on --port (device path, socket://, rfc2217://)"

    def lock_resource(self, port: str | None) -> str | None:
        return f"port:{port_resource(port)}" if port else f"board:{self.name}"

    @contextlib.contextmanager
    def connect(self, model_path, port, timeout, image=None, runtime=None, wait=DEFAULT_WAIT_S,
                on_wait=None) -> Iterator[Link]:
        if not port:
            raise LowtideError("--board serial needs --port (e.g. /dev/ttyACM0 or socket://127.0.0.1:4321)")
        with contextlib.closing(open_link(port)) as link:
            yield link


class BoardFromFile(Board, ABC):
    """A board described by a board file, known by its name there."""

    spec: BoardSpec

    def __init__(self, spec: BoardSpec):
        self.spec = spec
        self.name = spec.name
        self.description = spec.description


class EmulatedBoard(BoardFromFile):
    """A board file with `[emulator]`: the firmware built with PlatformIO, booted in QEMU for each measurement."""

    def __init__(self, spec: BoardSpec):
        if spec.emulator_command is None:
            raise LowtideError("not an emulated board (no [emulator] command)", spec.path)
        super().__init__(spec)
        self.emulator_command = spec.emulator_command

    def lock_resource(self, port: str | None) -> str | None:
        return None

    @contextlib.contextmanager
    def connect(self, model_path, port, timeout, image=None, runtime=None, wait=DEFAULT_WAIT_S,
                on_wait=None) -> Iterator[Link]:
        if port:
            raise LowtideError(f"--board {self.name} starts its own emulator: leave out --port")
        image = image or self.build(model_path, runtime)
        assert image is not None  # a board file's board builds its firmware
        with run_emulator(self.emulator_command, image.elf, timeout) as link:
            yield link


class UsbBoard(BoardFromFile):
    """A real board on this machine (a board file with `[serial]`): built and uploaded with PlatformIO, then
    measured on its serial port: --port, else the board file's `port`, else the one port with its USB VID:PID (and
    the USB serial number `--probe` or the board file's `probe_serial` gives)."""

    def __init__(self, spec: BoardSpec):
        if spec.serial is None:
            raise LowtideError("not a board on a serial port (no [serial])", spec.path)
        super().__init__(spec)
        self.serial = spec.serial

    def port(self, port: str | None) -> str:
        return port or self.serial.port or detect_serial_port(self.name, self.serial.usb_ids, self.serial.probe_serial)

    def lock_resource(self, port: str | None) -> str | None:
        if fixed := port or self.serial.port:
            return f"port:{port_resource(fixed)}"
        return f"probe:{self.serial.probe_serial}" if self.serial.probe_serial else f"board:{self.name}"

    @contextlib.contextmanager
    def connect(self, model_path, port, timeout, image=None, runtime=None, wait=DEFAULT_WAIT_S,
                on_wait=None) -> Iterator[Link]:
        port = self.port(port)
        upload_firmware(self.spec, Path(model_path), port, runtime)
        with contextlib.closing(open_port(port, timeout, self.serial.baud)) as link:
            yield link


class LabgridBoard(Board):
    """A board in a labgrid farm: `labgrid:PLACE` (flashed beforehand), or a board file with `[labgrid]`, whose
    firmware lowtide builds and uploads through the place's serial port (PlatformIO's `--upload-port` takes the
    rfc2217:// or socket:// URL: serial bootloaders such as esptool's, or the env's own upload_command)."""

    def __init__(self, place: str, coordinator: str | None = None, spec: BoardSpec | None = None):
        self.place, self.coordinator, self.spec = place, coordinator, spec
        self.name = spec.name if spec else f"{LABGRID_PREFIX}{place}"
        self.description = spec.description if spec else f"the board in labgrid place {place}"

    def lock_resource(self, port: str | None) -> str | None:
        return labgrid.lock_resource(self.place, self.coordinator)

    @contextlib.contextmanager
    def connect(self, model_path, port, timeout, image=None, runtime=None, wait=DEFAULT_WAIT_S,
                on_wait=None) -> Iterator[Link]:
        if port:
            raise LowtideError(f"--board {self.name} uses its labgrid place's serial port: leave out --port")
        with labgrid.acquired_place(self.place, self.coordinator, wait, on_wait) as serial:
            if self.spec is not None:
                upload_firmware(self.spec, Path(model_path), serial.url, runtime)
            with contextlib.closing(open_port(serial.url, timeout, serial.speed)) as link:
                yield link


def board_for_spec(spec: BoardSpec) -> Board:
    if spec.emulated:
        return EmulatedBoard(spec)
    if spec.labgrid is not None:
        return LabgridBoard(spec.labgrid.place, spec.labgrid.coordinator, spec)
    return UsbBoard(spec)


BOARDS: dict[str, Board] = {}
_SHIPPED_LOADED = False


def register_board(board: Board) -> None:
    BOARDS[board.name] = board


def known_boards() -> dict[str, Board]:
    """Every board `--board NAME` names: the built-in ones, the shipped board files' and any registered."""
    global _SHIPPED_LOADED
    if not _SHIPPED_LOADED:
        for board in (HostTflmBoard(), SerialBoard(), *map(board_for_spec, load_board_specs().values())):
            BOARDS.setdefault(board.name, board)
        _SHIPPED_LOADED = True
    return BOARDS


def get_board(name: str) -> Board:
    """A registered board, `labgrid:PLACE`, or the board in a board file given by its path (*.toml)."""
    if name.startswith(LABGRID_PREFIX) and len(name) > len(LABGRID_PREFIX):
        return LabgridBoard(name[len(LABGRID_PREFIX):])
    if name.endswith(".toml"):
        return board_for_spec(get_board_spec(name))
    boards = known_boards()
    try:
        return boards[name]
    except KeyError:
        raise LowtideError(f"unknown board {name!r}; known boards: {', '.join(sorted(boards))}, "
                           f"{LABGRID_PREFIX}PLACE or a board file's path") from None
