"""Board files as typed specs (whether a model fits a board is checked against them by lowtide.pipeline.firmware).

lowtide ships board files (the top-level boards/ of its source, installed with the package: lowtide.resources); a
user's own board file is given by its path (`--board my-board.toml`).

A board file holds only what lowtide reads:

    name = "nucleo-f746zg"            # --board NAME; for emulated boards HELLO's name differs (qemu-mps2-an386)
    description = "..."               # the --board help and board listings
    core = "cortex-m7"                # TFLM's arena is predicted for this core
    sram_bytes = 327680               # fit checks (lowtide.pipeline.firmware), before and after building
    flash_bytes = 1048576
    clock_hz = 216000000              # must equal the clock the board's HELLO reports
    platformio_env = "nucleo_f746zg"  # the firmware build (and upload) env
    runtime = "compiled"              # optional: what runs the model unless --runtime says (compiled)
    platformio_config = "x.ini"       # optional: PlatformIO envs of its own (over the shipped ones), relative to
                                      # the board file
    [serial]                          # real boards: how lowtide finds and opens the port
    baud = 115200
    usb_ids = ["0483:374B"]           # VID:PID, for pyserial's list_ports
    port = "/dev/serial/by-id/..."    # optional: a fixed port instead
    probe_serial = "066DFF..."        # optional: the USB serial number of the board's ST-LINK, where several
                                      # boards share its VID:PID (`--probe` on the command line)
    [emulator]                        # emulated boards: QEMU's command line, {port} and {elf} filled in
    command = [...]
    [labgrid]                         # a board in a labgrid farm: the place that holds it
    place = "nucleo"
    coordinator = "lab:20408"         # optional: else $LG_COORDINATOR

A key lowtide does not read is an error, so a board file never carries a field that nothing checks.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

from lowtide.errors import LowtideError
from lowtide.project import Runtime
from lowtide.resources import BOARDS_DIR

_KEYS = {
    "name",
    "description",
    "core",
    "sram_bytes",
    "flash_bytes",
    "clock_hz",
    "platformio_env",
    "runtime",
    "platformio_config",
    "serial",
    "emulator",
    "labgrid",
}
_TABLE_KEYS = {
    "serial": {"baud", "usb_ids", "port", "probe_serial"},
    "emulator": {"command"},
    "labgrid": {"place", "coordinator"},
}


@dataclass(frozen=True)
class SerialSettings:
    baud: int
    usb_ids: tuple[str, ...]  # "VID:PID", hex, for autodetection
    port: str | None  # a fixed port, used instead of autodetection
    probe_serial: str | None = None  # the USB serial number that picks the board's port and its probe


@dataclass(frozen=True)
class LabgridSettings:
    place: str
    coordinator: str | None  # HOST:PORT; None: $LG_COORDINATOR


@dataclass(frozen=True)
class BoardSpec:
    """One boards/*.toml file."""

    name: str
    description: str
    core: str
    sram_bytes: int
    flash_bytes: int
    clock_hz: int
    platformio_env: str
    runtime: Runtime  # the runtime the board's firmware uses unless --runtime names another (its object:
    # lowtide.runtimes.runtime_for)
    platformio_config: Path | None  # envs over the shipped ones (lowtide.project); None: the shipped envs alone
    serial: SerialSettings | None  # None for emulated boards
    emulator_command: tuple[str, ...] | None  # with {port} and {elf}; None for a real board
    labgrid: LabgridSettings | None
    path: Path

    @property
    def emulated(self) -> bool:
        return self.emulator_command is not None


def _check_keys(data: dict) -> None:
    unknown = [key for key in data if key not in _KEYS]
    unknown += [
        f"{table}.{key}" for table, keys in _TABLE_KEYS.items() for key in data.get(table, {}) if key not in keys
    ]
    if unknown:
        raise LowtideError(f"unknown keys {', '.join(unknown)} (lowtide reads only: {', '.join(sorted(_KEYS))})")


def load_board_spec(path: Path) -> BoardSpec:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
        _check_keys(data)
        serial, emulator, labgrid = data.get("serial"), data.get("emulator"), data.get("labgrid")
        if emulator is None and serial is None and labgrid is None:
            raise LowtideError("a real board needs [serial] (how to find its port) or [labgrid] (its place)")
        config = data.get("platformio_config")
        return BoardSpec(
            name=data["name"],
            description=data["description"],
            core=data["core"],
            sram_bytes=int(data["sram_bytes"]),
            flash_bytes=int(data["flash_bytes"]),
            clock_hz=int(data["clock_hz"]),
            platformio_env=data["platformio_env"],
            runtime=Runtime.named(data.get("runtime", "compiled")),
            platformio_config=(path.parent / config).resolve() if config else None,
            serial=SerialSettings(
                int(serial.get("baud", 115200)),
                tuple(serial.get("usb_ids", ())),
                serial.get("port"),
                serial.get("probe_serial"),
            )
            if serial is not None
            else None,
            emulator_command=tuple(emulator["command"]) if emulator else None,
            labgrid=LabgridSettings(labgrid["place"], labgrid.get("coordinator")) if labgrid else None,
            path=path,
        )
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise LowtideError(f"bad board file: {type(exc).__name__}: {exc}", path) from None
    except LowtideError as exc:
        raise LowtideError(f"bad board file: {exc.message}", path) from None


def with_probe(spec: BoardSpec, probe_serial: str | None) -> BoardSpec:
    """`spec` with `probe_serial` over its board file's (`--probe`); `spec` itself for None."""
    if probe_serial is None:
        return spec
    if spec.serial is None:
        raise LowtideError(
            f"--probe picks a board on this machine's USB: {spec.name} is "
            f"{'emulated' if spec.emulated else 'reached through labgrid'}"
        )
    return replace(spec, serial=replace(spec.serial, probe_serial=probe_serial))


def load_board_specs(directory: Path = BOARDS_DIR) -> dict[str, BoardSpec]:
    specs = [load_board_spec(path) for path in sorted(directory.glob("*.toml"))]
    return {spec.name: spec for spec in specs}


def get_board_spec(name: str, directory: Path = BOARDS_DIR) -> BoardSpec:
    """A board file by its name in `directory`, or by its path (anything ending in .toml)."""
    if name.endswith(".toml"):
        return load_board_spec(Path(name))
    specs = load_board_specs(directory)
    try:
        return specs[name]
    except KeyError:
        raise LowtideError(f"unknown board {name!r}; board files: {', '.join(sorted(specs))}") from None
