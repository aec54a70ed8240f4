"""Emulated boards: build the firmware for a model with PlatformIO, boot it in QEMU, and hand back a link to it.

    lowtide measure MODEL --board qemu-m4        # or qemu-m7

Each board is a TOML file in boards/ (name, MCU, memory, PlatformIO env, serial defaults); an emulated one also has
`[emulator] command`, QEMU's command line with `{port}` and `{elf}` placeholders. The launcher picks a free port
on 127.0.0.1, starts QEMU with `-serial tcp:127.0.0.1:PORT,server=on,wait=on` (the guest waits until the host
connects, so nothing it sends is lost), connects with pyserial's `socket://`, and always ends QEMU afterwards:
every wait is bounded, and terminate is followed by kill.

The firmware is built once per model and env, in .pio/lowtide-build/<model sha256 prefix>/ (PlatformIO rebuilds
only what changed), with the checkout's own PlatformIO core dir (.pio-core) so that no other checkout's platform or
packages are used.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lowtide.device.boards import Board, register_board
from lowtide.device.transport import Link, open_link
from lowtide.errors import LowtideError
from lowtide.model.ir import sha256_hex

PROJECT_DIR = Path(__file__).resolve().parents[3]
BOARDS_DIR = PROJECT_DIR / "boards"
TOOL_SCONS_DIR = PROJECT_DIR / "firmware" / "tools" / "tool-scons"
BUILD_TIMEOUT_S = 900.0  # a cold build of a large model's weights; the board's own timeout bounds everything after
_STOP_GRACE_S = 3.0
_CONNECT_POLL_S = 0.02
_PORT_ATTEMPTS = 3  # another process may take the free port between our probe and QEMU's bind


@dataclass(frozen=True)
class SerialDefaults:
    baud: int
    usb_ids: tuple[str, ...]  # "VID:PID", hex, for autodetection


@dataclass(frozen=True)
class BoardSpec:
    """One boards/*.toml file."""

    name: str
    description: str
    mcu: str
    core: str
    sram_bytes: int
    flash_bytes: int
    clock_hz: int
    platformio_env: str
    flash_how: str
    serial: SerialDefaults
    emulator_command: tuple[str, ...] | None  # with {port} and {elf}; None for a real board
    path: Path

    @property
    def emulated(self) -> bool:
        return self.emulator_command is not None


def load_board_spec(path: Path) -> BoardSpec:
    try:
        data = tomllib.loads(path.read_text())
        emulator = data.get("emulator")
        return BoardSpec(
            name=data["name"],
            description=data["description"],
            mcu=data["mcu"],
            core=data["core"],
            sram_bytes=int(data["sram_bytes"]),
            flash_bytes=int(data["flash_bytes"]),
            clock_hz=int(data["clock_hz"]),
            platformio_env=data["platformio_env"],
            flash_how=data["flash"]["how"],
            serial=SerialDefaults(int(data["serial"]["baud"]), tuple(data["serial"]["usb_ids"])),
            emulator_command=tuple(emulator["command"]) if emulator else None,
            path=path,
        )
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
        raise LowtideError(f"bad board file: {exc!r}", path) from None


def load_board_specs(directory: Path = BOARDS_DIR) -> dict[str, BoardSpec]:
    specs = [load_board_spec(path) for path in sorted(directory.glob("*.toml"))]
    return {spec.name: spec for spec in specs}


# --- building ------------------------------------------------------------------------------------------------------


def pio_environment(extra: dict[str, str]) -> dict[str, str]:
    """Environment for a `pio` run in this checkout: its own core dir, and no telemetry or update checks, which
    would reach for the network."""
    env = dict(os.environ)
    env.update(PLATFORMIO_CORE_DIR=str(PROJECT_DIR / ".pio-core"), PLATFORMIO_SETTING_ENABLE_TELEMETRY="No",
               PLATFORMIO_SETTING_CHECK_PLATFORMIO_INTERVAL="3650", PLATFORMIO_NO_ANSI="true")
    env.update(extra)
    return env


def _run_pio(args: list[str], env: dict[str, str], timeout: float, what: str) -> None:
    try:
        done = subprocess.run([sys.executable, "-m", "platformio", *args], cwd=PROJECT_DIR, env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise LowtideError(f"{what} took longer than {timeout:g} s") from None
    if done.returncode != 0:
        lines = done.stdout.decode("utf-8", "replace").strip().splitlines()
        ours = [line for line in lines if line.startswith("lowtide: error: ")]
        detail = ours[-1][len("lowtide: error: "):] if ours else "\n".join(lines[-15:])
        raise LowtideError(f"{what} failed: {detail}")


def _check_tools() -> None:
    if not (PROJECT_DIR / "platformio.ini").is_file():
        raise LowtideError(f"emulated boards build the firmware from a lowtide checkout (pip install -e), and "
                           f"{PROJECT_DIR} has no platformio.ini")
    try:
        import platformio  # noqa: F401
    except ImportError:
        raise LowtideError("PlatformIO is not installed: run scripts/install-firmware-deps.sh") from None
    for tool in ("arm-none-eabi-gcc", "qemu-system-arm"):
        if shutil.which(tool) is None:
            raise LowtideError(f"{tool} not found: run scripts/install-firmware-deps.sh")


def ensure_tool_scons() -> None:
    """Registers the offline tool-scons shim in this checkout's core dir, as install-firmware-deps.sh does, so that
    PlatformIO never goes to the registry for it."""
    link = PROJECT_DIR / ".pio-core" / "packages" / "tool-scons.pio-link"
    if not link.is_file():
        _run_pio(["pkg", "install", "-g", "-t", f"symlink://{TOOL_SCONS_DIR}"], pio_environment({}), 120.0,
                 "registering the tool-scons shim")


def build_firmware(platformio_env: str, model_path: Path | None) -> Path:
    """Builds the firmware for `platformio_env` with the model compiled in (none: a model-less image) and returns the
    ELF. Builds of one model are serialised by a lock file; different models build in different folders."""
    _check_tools()
    model_path = model_path.resolve() if model_path else None
    model_key = sha256_hex(model_path.read_bytes())[:16] if model_path else "no-model"
    build_dir = PROJECT_DIR / ".pio" / "lowtide-build" / model_key
    build_dir.mkdir(parents=True, exist_ok=True)
    env = pio_environment({"PLATFORMIO_BUILD_DIR": str(build_dir)})
    env.pop("LOWTIDE_MODEL", None)
    if model_path:
        env["LOWTIDE_MODEL"] = str(model_path)
    with open(build_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ensure_tool_scons()
        _run_pio(["run", "-e", platformio_env], env, BUILD_TIMEOUT_S,
                 f"building the {platformio_env} firmware" + (f" for {model_path.name}" if model_path else ""))
    elf = build_dir / platformio_env / "firmware.elf"
    if not elf.is_file():
        raise LowtideError(f"the {platformio_env} build produced no firmware.elf", build_dir)
    return elf


# --- running -------------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _stop(process: subprocess.Popen) -> None:
    for ask in (process.terminate, process.kill):
        if process.poll() is not None:
            return
        ask()
        try:
            process.wait(timeout=_STOP_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue
    process.wait()  # after SIGKILL: only a process stuck in the kernel takes longer


def _last_line(stream) -> str:
    stream.seek(0)
    lines = stream.read().decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else "no message"


@contextlib.contextmanager
def run_emulator(command: tuple[str, ...], elf: Path, timeout: float) -> Iterator[Link]:
    """Boots `elf` with `command` ({port}, {elf} filled in) and yields a link to its UART. QEMU is ended on exit,
    whatever happened; connecting waits at most `timeout` seconds."""
    for attempt in range(_PORT_ATTEMPTS):
        port = _free_port()
        argv = [part.format(port=port, elf=elf) for part in command]
        with tempfile.TemporaryFile() as stderr_file:
            try:
                process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                           stderr=stderr_file)
            except OSError as exc:
                raise LowtideError(f"cannot start {argv[0]}: {exc.strerror or exc}") from None
            try:
                link = _connect(process, port, timeout)
                if link is None:  # QEMU exited before listening: maybe the port was taken meanwhile
                    message = _last_line(stderr_file)
                    if "Address already in use" in message and attempt + 1 < _PORT_ATTEMPTS:
                        continue
                    raise LowtideError(f"{argv[0]} exited with status {process.returncode}: {message}")
                try:
                    yield link
                finally:
                    link.close()
                return
            finally:
                _stop(process)


def _connect(process: subprocess.Popen, port: int, timeout: float) -> Link | None:
    """The host's connection to QEMU's serial port, retried until QEMU listens (a refused connect on 127.0.0.1
    fails at once). No probe connection: QEMU would take it as the host's and start the guest talking to it."""
    deadline = time.monotonic() + timeout
    url = f"socket://127.0.0.1:{port}"
    while True:
        if process.poll() is not None:
            return None
        try:
            return open_link(url)
        except LowtideError:
            if time.monotonic() >= deadline:
                raise LowtideError(f"QEMU did not open its serial port within {timeout:g} s", url) from None
        time.sleep(_CONNECT_POLL_S)


class QemuBoard(Board):
    """A board from boards/*.toml that QEMU emulates."""

    def __init__(self, spec: BoardSpec):
        if spec.emulator_command is None:
            raise LowtideError("not an emulated board (no [emulator] command)", spec.path)
        self.spec = spec
        self.name = spec.name
        self.description = spec.description

    @contextlib.contextmanager
    def connect(self, model_path: Path, port: str | None, timeout: float) -> Iterator[Link]:
        if port:
            raise LowtideError(f"--board {self.name} starts its own emulator: leave out --port")
        elf = build_firmware(self.spec.platformio_env, Path(model_path))
        assert self.spec.emulator_command is not None
        with run_emulator(self.spec.emulator_command, elf, timeout) as link:
            yield link


def register_emulated_boards(directory: Path = BOARDS_DIR) -> None:
    for spec in load_board_specs(directory).values():
        if spec.emulated:
            register_board(QemuBoard(spec))


# Importing this module makes the emulated boards known to `lowtide measure --board` (lowtide.device.boards imports
# it at its end).
register_emulated_boards()
