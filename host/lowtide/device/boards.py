"""Boards `lowtide measure` can talk to, composed from the drivers (`lowtide.device.drivers`).

A board says what a run must lock to use it (`lock_resource`) and yields a link that speaks the lowtide protocol
(`connect`), cleaning up whatever it started. It is handed the image it runs (`Connection.image`): building it, and
predicting what it will report, is lowtide.pipeline's; the build column says who builds it there.

| board | from | build | connect | locks |
| --- | --- | --- | --- | --- |
| `host-tflm` | built in | its program's command line (lowtide.pipeline.firmware) | start the program | its port, when fixed |
| `serial` | built in | none (flashed beforehand) | `--port` | the port |
| emulated (`qemu-m4`) | board file with `[emulator]` | PlatformIO | QEMU | nothing: each run boots its own |
| real (`nucleo-f746zg`) | board file with `[serial]` | PlatformIO | upload, find the port, open it | the port |
| farm (`labgrid:PLACE`) | `--board labgrid:PLACE`, or a board file with `[labgrid]` | PlatformIO (board file) | acquire the place, upload (board file) | the place |

The registry is built on first use (`known_boards`): the two built-in boards and one per shipped board file;
`register_board` adds others. `get_board` also takes `labgrid:PLACE` and the path of a board file.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from lowtide.device.drivers import labgrid
from lowtide.device.drivers.cycle_model import CycleModel
from lowtide.device.drivers.platformio import FirmwareImage, upload_image, upload_settings
from lowtide.device.drivers.process import HostProgram, board_process
from lowtide.device.drivers.qemu import run_emulator
from lowtide.device.drivers.serialport import detect_serial_port, open_port
from lowtide.device.locking import port_resource
from lowtide.device.spec import BoardSpec, get_board_spec, load_board_specs
from lowtide.device.transport import Link, open_link
from lowtide.errors import LowtideError
from lowtide.settings import Settings

LABGRID_PREFIX = "labgrid:"
DEFAULT_WAIT_S = 300.0  # how long a board's own wait (a farm place another client holds) lasts by default


@dataclass(frozen=True)
class Connection:
    """How a run reaches a board running a model."""

    model_path: Path  # the model the board runs, built into its image or loaded by its program
    port: str | None  # --port; None: the board's own (its board file's, autodetected, or one it starts)
    timeout: float  # seconds, for anything the board starts
    settings: Settings  # the command's: the cache, the lock folder, labgrid's coordinator
    # What the board runs (lowtide.pipeline.firmware): the firmware built for a board file's board, the program
    # that is the host-tflm board; None for a board flashed beforehand.
    image: FirmwareImage | HostProgram | None = None
    wait: float = DEFAULT_WAIT_S  # seconds, for a board someone else holds
    on_wait: Callable[[str], None] | None = None  # told who holds the board, once
    cycle_model: CycleModel | None = None  # an emulated board's timing model, loaded into QEMU when given


class Board(ABC):
    name: str
    description: str
    spec: BoardSpec | None = None  # the board file, for boards that have one

    @property
    def builds_firmware(self) -> bool:
        """lowtide builds this board's firmware, so --runtime applies."""
        return self.spec is not None

    @abstractmethod
    def lock_resource(self, port: str | None, settings: Settings) -> str | None:
        """What a run must hold (lowtide.device.locking) while it uses this board on `port`; None when two runs
        can use it at once."""

    @abstractmethod
    def connect(self, connection: Connection) -> contextlib.AbstractContextManager[Link]:
        """A link to the board running `connection.model_path` (as `connection.image`, for a board handed one)."""


class HostTflmBoard(Board):
    name = "host-tflm"
    description = "this machine's TFLM interpreter in a subprocess (--port tcp:0 (default), tcp:PORT or pty)"

    def lock_resource(self, port: str | None, settings: Settings) -> str | None:
        return f"port:{port}" if port and port.startswith("tcp:") and port != "tcp:0" else None

    @contextlib.contextmanager
    def connect(self, connection: Connection) -> Iterator[Link]:
        # The board's image is the program that is the board: the host TFLM behind the protocol, with the model.
        assert isinstance(connection.image, HostProgram)
        with (
            board_process(connection.image, "host-tflm board", connection.timeout) as url,
            contextlib.closing(open_link(url)) as link,
        ):
            yield link


class SerialBoard(Board):
    name = "serial"
    description = "a board already flashed with the model, on --port (device path, socket://, rfc2217://)"

    def lock_resource(self, port: str | None, settings: Settings) -> str | None:
        return f"port:{port_resource(port)}" if port else f"board:{self.name}"

    @contextlib.contextmanager
    def connect(self, connection: Connection) -> Iterator[Link]:
        if not connection.port:
            raise LowtideError("--board serial needs --port (e.g. /dev/ttyACM0 or socket://127.0.0.1:4321)")
        with contextlib.closing(open_link(connection.port)) as link:
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

    def lock_resource(self, port: str | None, settings: Settings) -> str | None:
        return None

    @contextlib.contextmanager
    def connect(self, connection: Connection) -> Iterator[Link]:
        if connection.port:
            raise LowtideError(f"--board {self.name} starts its own emulator: leave out --port")
        assert isinstance(connection.image, FirmwareImage)  # a board file's board is handed the firmware built for it
        plugin = connection.cycle_model.qemu_arguments() if connection.cycle_model else ()
        with run_emulator(self.emulator_command + plugin, connection.image.elf, connection.timeout) as link:
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

    def lock_resource(self, port: str | None, settings: Settings) -> str | None:
        if fixed := port or self.serial.port:
            return f"port:{port_resource(fixed)}"
        return f"probe:{self.serial.probe_serial}" if self.serial.probe_serial else f"board:{self.name}"

    @contextlib.contextmanager
    def connect(self, connection: Connection) -> Iterator[Link]:
        port = self.port(connection.port)
        _upload(self.spec, connection, port)
        with contextlib.closing(open_port(port, connection.timeout, self.serial.baud)) as link:
            yield link


class LabgridBoard(Board):
    """A board in a labgrid farm: `labgrid:PLACE` (flashed beforehand), or a board file with `[labgrid]`, whose
    firmware lowtide builds and uploads through the place's serial port (PlatformIO's `--upload-port` takes the
    rfc2217:// or socket:// URL: serial bootloaders such as esptool's, or the env's own upload_command)."""

    def __init__(self, place: str, coordinator: str | None = None, spec: BoardSpec | None = None):
        self.place, self.coordinator, self.spec = place, coordinator, spec
        self.name = spec.name if spec else f"{LABGRID_PREFIX}{place}"
        self.description = spec.description if spec else f"the board in labgrid place {place}"

    def lock_resource(self, port: str | None, settings: Settings) -> str | None:
        return labgrid.lock_resource(self.place, self.coordinator, settings)

    @contextlib.contextmanager
    def connect(self, connection: Connection) -> Iterator[Link]:
        if connection.port:
            raise LowtideError(f"--board {self.name} uses its labgrid place's serial port: leave out --port")
        with labgrid.acquired_place(
            self.place, self.coordinator, connection.wait, connection.settings, connection.on_wait
        ) as serial:
            if self.spec is not None:
                _upload(self.spec, connection, serial.url)
            with contextlib.closing(open_port(serial.url, connection.timeout, serial.speed)) as link:
                yield link


def _upload(spec: BoardSpec, connection: Connection, port: str) -> None:
    """Flashes the image built for `spec` (`connection.image`) to the board on `port`."""
    assert isinstance(connection.image, FirmwareImage)  # a board file's board is handed the firmware built for it
    variables = upload_settings(spec, port, connection.settings)
    upload_image(spec, connection.image, port, variables, connection.model_path.name, connection.settings)


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
        return LabgridBoard(name[len(LABGRID_PREFIX) :])
    if name.endswith(".toml"):
        return board_for_spec(get_board_spec(name))
    boards = known_boards()
    try:
        return boards[name]
    except KeyError:
        raise LowtideError(
            f"unknown board {name!r}; known boards: {', '.join(sorted(boards))}, "
            f"{LABGRID_PREFIX}PLACE or a board file's path"
        ) from None
