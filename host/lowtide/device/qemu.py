"""Emulated boards: build the firmware for a model with PlatformIO, boot it in QEMU, and hand back a link to it.

    lowtide measure MODEL --board qemu-m4        # or qemu-m7

Each board is a TOML file in boards/ (name, MCU, memory, PlatformIO env, serial defaults); an emulated one also has
`[emulator] command`, QEMU's command line with `{port}` and `{elf}` placeholders. The launcher picks a free port
on 127.0.0.1, starts QEMU with `-serial tcp:127.0.0.1:PORT,server=on,wait=on` (the guest waits until the host
connects, so nothing it sends is lost), connects with pyserial's `socket://`, and always ends QEMU afterwards:
every wait is bounded, and terminate is followed by kill.

The firmware is built once per model and env, in .pio/lowtide-build/<model sha256 prefix>/ (PlatformIO rebuilds
only what changed), with the checkout's own PlatformIO core dir (.pio-core) so that no other checkout's platform or
packages are used. Before building, the model's arena and constant data are checked against the board's SRAM and
flash (`estimate_footprint`); after building, the ELF's sections are (`read_firmware_image`), so a model that cannot
fit stops with its numbers rather than with a linker log.
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

from lowtide.device.boards import Board, register_board, stop_process
from lowtide.device.transport import Link, open_link
from lowtide.errors import LowtideError
from lowtide.memory import tflm_plan
from lowtide.model.ir import Graph, TensorKind, sha256_hex
from lowtide.model.reader import load_model
from lowtide.tflm.sizer import Arena32, predict_arena32
from lowtide.tflm.tree import KernelSet

PROJECT_DIR = Path(__file__).resolve().parents[3]
BOARDS_DIR = PROJECT_DIR / "boards"
TOOL_SCONS_DIR = PROJECT_DIR / "firmware" / "tools" / "tool-scons"
BUILD_TIMEOUT_S = 900.0  # a cold build of a large model's weights; the board's own timeout bounds everything after
_CONNECT_POLL_S = 0.02
_PORT_ATTEMPTS = 3  # another process may take the free port between our probe and QEMU's bind
EMULATOR_TOOLS = ("arm-none-eabi-gcc", "qemu-system-arm")  # Debian's, on PATH; real boards get theirs from PlatformIO
# What the firmware adds to the model, for the size check before building. Both are lower bounds taken from the
# qemu-m4 images of the compiled runtime, so the estimate never refuses a model that would fit; the ELF is checked
# exactly after the build.
ARENA_SLACK_BYTES = 1024  # painted beyond the plan (LT_ARENA_SLACK_BYTES in lt_model_compiled.c)
RUNTIME_STATIC_RAM_BYTES = 13_000  # protocol buffers and per-invocation samples: 13,360 B with any model
RUNTIME_CODE_BYTES = 8_000  # protocol core and the fewest kernels: 9,112 B of code for tflm_hello_world_int8
TFLM_CODE_BYTES = 60_000  # TFLM's framework with the fewest kernels: 64,752 B of code for tflm_hello_world_int8
# What runs the model in the firmware: lowtide's compiled C, or TFLM's interpreter with one of its kernel sets.
RUNTIME_KERNELS: dict[str, KernelSet | None] = {
    "compiled": None, "tflm": KernelSet.REFERENCE, "tflm-cmsis-nn": KernelSet.CMSIS_NN,
}
_REGISTRY_FAILURES = ("HTTPClientError", "InternetConnectionError", "Could not resolve")  # in PlatformIO's log
# Sections of a GCC ELF that are neither loaded into flash nor RAM.
_UNLOADED_SECTIONS = (".comment", ".ARM.attributes", ".debug", ".stab", ".note", ".gnu")


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
    runtime: str  # the runtime the board's firmware uses unless --runtime names another
    flash_how: str
    serial: SerialDefaults
    emulator_command: tuple[str, ...] | None  # with {port} and {elf}; None for a real board
    path: Path

    @property
    def emulated(self) -> bool:
        return self.emulator_command is not None


def check_runtime(runtime: str) -> str:
    if runtime not in RUNTIME_KERNELS:
        raise LowtideError(f"unknown runtime {runtime!r}; runtimes: {', '.join(RUNTIME_KERNELS)}")
    return runtime


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
            runtime=check_runtime(data.get("runtime", "compiled")),
            flash_how=data["flash"]["how"],
            serial=SerialDefaults(int(data["serial"]["baud"]), tuple(data["serial"]["usb_ids"])),
            emulator_command=tuple(emulator["command"]) if emulator else None,
            path=path,
        )
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError, LowtideError) as exc:
        raise LowtideError(f"bad board file: {exc}", path) from None


def load_board_specs(directory: Path = BOARDS_DIR) -> dict[str, BoardSpec]:
    specs = [load_board_spec(path) for path in sorted(directory.glob("*.toml"))]
    return {spec.name: spec for spec in specs}


def get_board_spec(name: str, directory: Path = BOARDS_DIR) -> BoardSpec:
    specs = load_board_specs(directory)
    try:
        return specs[name]
    except KeyError:
        raise LowtideError(f"unknown board {name!r}; board files: {', '.join(sorted(specs))}") from None


# --- will it fit? --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FootprintEstimate:
    """What a model's firmware needs, known before building it."""

    model: str  # the model's file name without .tflite, for messages
    arena_bytes: int  # the planned arena head plus the painted slack
    static_ram_bytes: int  # everything else in RAM: the input staging buffer and the runtime's own state
    image_bytes: int  # the model's constant data plus the runtime's code


@dataclass(frozen=True)
class FirmwareImage:
    """A built firmware, sized from its ELF's sections (`arm-none-eabi-size -A`)."""

    elf: Path
    platformio_env: str
    flash_bytes: int  # code, constants (the weights) and the initial values of .data
    data_bytes: int
    bss_bytes: int  # zeroed RAM: the arena is here, with the staging buffer and the runtime's state
    stack_bytes: int  # the linker script's fixed stack region; 0 where the script reserves none

    @property
    def static_ram_bytes(self) -> int:
        return self.data_bytes + self.bss_bytes

    @property
    def ram_bytes(self) -> int:
        return self.static_ram_bytes + self.stack_bytes


def estimate_footprint(graph: Graph, tflm_arena: Arena32 | None = None,
                       tflm_head_only: bool = False) -> FootprintEstimate:
    """The compiled runtime's footprint, or with `tflm_arena` TFLM's: its predicted arena, the whole .tflite in
    flash, and TFLM's own code. `tflm_head_only`: TFLM's footprint with the arena's head alone, a lower bound known
    before TFLM is built."""
    constant_buffers = {t.buffer: t.nbytes for sg in graph.subgraphs for t in sg.tensors
                        if t.kind is TensorKind.CONSTANT}
    staging = sum(graph.main.tensors[i].nbytes for i in graph.main.inputs)
    if tflm_arena is not None or tflm_head_only:
        arena_bytes = tflm_arena.arena_bytes if tflm_arena else tflm_plan(graph).head_bytes
        image_bytes = Path(graph.path).stat().st_size + RUNTIME_CODE_BYTES + TFLM_CODE_BYTES
    else:
        arena_bytes = tflm_plan(graph).head_bytes + ARENA_SLACK_BYTES
        image_bytes = sum(constant_buffers.values()) + RUNTIME_CODE_BYTES
    return FootprintEstimate(
        model=Path(graph.path).stem,
        arena_bytes=arena_bytes,
        static_ram_bytes=staging + RUNTIME_STATIC_RAM_BYTES,
        image_bytes=image_bytes,
    )


def _capacity(spec: BoardSpec, what: str, nbytes: int) -> str:
    return f"{what} of {spec.name} ({nbytes:,} B = {nbytes / 1024:,.0f} KiB)"


def check_estimate_fits(spec: BoardSpec, estimate: FootprintEstimate) -> None:
    """Refuses, with the numbers, a model whose firmware cannot fit `spec`'s SRAM or flash."""
    problems = []
    if estimate.arena_bytes + estimate.static_ram_bytes > spec.sram_bytes:
        problems.append(f"arena {estimate.arena_bytes:,} B + static RAM {estimate.static_ram_bytes:,} B > "
                        + _capacity(spec, "SRAM", spec.sram_bytes))
    if estimate.image_bytes > spec.flash_bytes:
        problems.append(f"constant data and code {estimate.image_bytes:,} B > "
                        + _capacity(spec, "flash", spec.flash_bytes))
    if problems:
        raise LowtideError(f"{estimate.model}: {'; '.join(problems)}")


def check_image_fits(spec: BoardSpec, image: FirmwareImage, model: str) -> None:
    problems = []
    if image.ram_bytes > spec.sram_bytes:
        problems.append(f"static RAM {image.static_ram_bytes:,} B + stack {image.stack_bytes:,} B > "
                        + _capacity(spec, "SRAM", spec.sram_bytes))
    if image.flash_bytes > spec.flash_bytes:
        problems.append(f"image {image.flash_bytes:,} B > " + _capacity(spec, "flash", spec.flash_bytes))
    if problems:
        raise LowtideError(f"{model}: the built firmware does not fit: {'; '.join(problems)}", image.elf)


def _size_tool() -> str:
    """arm-none-eabi-size: Debian's on PATH, else the toolchain PlatformIO installed for a real board."""
    found = shutil.which("arm-none-eabi-size") or next(
        iter(sorted((PROJECT_DIR / ".pio-core" / "packages").glob("toolchain-*/bin/arm-none-eabi-size"))), None)
    if found is None:
        raise LowtideError("arm-none-eabi-size not found: run scripts/install-firmware-deps.sh")
    return str(found)


def read_firmware_image(elf: Path, platformio_env: str) -> FirmwareImage:
    """Sizes `elf` from `arm-none-eabi-size -A`: .data and .bss are static RAM, .stack is the stack region, and
    every other loaded section is flash (.data's initial values are in flash too)."""
    try:
        done = subprocess.run([_size_tool(), "-A", str(elf)], capture_output=True, text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        raise LowtideError("arm-none-eabi-size took longer than 60 s", elf) from None
    if done.returncode != 0:
        raise LowtideError(f"arm-none-eabi-size failed: {done.stderr.strip() or done.returncode}", elf)
    sizes: dict[str, int] = {}
    for line in done.stdout.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[0].startswith(".") and fields[1].isdigit():
            sizes[fields[0]] = sizes.get(fields[0], 0) + int(fields[1])

    def total(*prefixes: str) -> int:
        return sum(size for name, size in sizes.items() if name.startswith(prefixes))

    ram_only = total(".bss", ".stack", ".heap", ".noinit")
    return FirmwareImage(
        elf=elf,
        platformio_env=platformio_env,
        flash_bytes=sum(sizes.values()) - total(*_UNLOADED_SECTIONS) - ram_only,
        data_bytes=total(".data"),
        bss_bytes=total(".bss"),
        stack_bytes=total(".stack"),
    )


# --- building ------------------------------------------------------------------------------------------------------


def pio_environment(extra: dict[str, str]) -> dict[str, str]:
    """Environment for a `pio` run in this checkout: its own core dir, and no telemetry or update checks, which
    would reach for the network."""
    env = dict(os.environ)
    env.update(PLATFORMIO_CORE_DIR=str(PROJECT_DIR / ".pio-core"), PLATFORMIO_SETTING_ENABLE_TELEMETRY="No",
               PLATFORMIO_SETTING_CHECK_PLATFORMIO_INTERVAL="3650", PLATFORMIO_NO_ANSI="true")
    env.update(extra)
    return env


def _run_pio(args: list[str], env: dict[str, str], timeout: float, what: str, log_path: Path | None = None) -> None:
    """Runs `pio ARGS`; a failure becomes one line: lowtide's own error (the model pre-script's), a linker's memory
    overflow, or the log's last error line, with the whole log kept in `log_path`."""
    try:
        done = subprocess.run([sys.executable, "-m", "platformio", *args], cwd=PROJECT_DIR, env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise LowtideError(f"{what} took longer than {timeout:g} s") from None
    if log_path:
        log_path.write_bytes(done.stdout)
    if done.returncode != 0:
        lines = [line.strip() for line in done.stdout.decode("utf-8", "replace").splitlines() if line.strip()]
        ours = [line[len("lowtide: error: "):] for line in lines if line.startswith("lowtide: error: ")]
        overflows = [line.split("ld: ")[-1] for line in lines if "overflowed by" in line or "RAM overflow" in line]
        errors = [line for line in lines if "error" in line.lower()]
        if ours:
            detail = ours[-1]
        else:
            detail = (overflows or errors or lines or ["no output"])[-1]
            if any(marker in line for line in lines for marker in _REGISTRY_FAILURES):
                detail += " (PlatformIO could not reach its registry, where real boards' platforms come from)"
            if log_path:
                detail += f" (log: {log_path})"
        raise LowtideError(f"{what} failed: {detail}")


def _check_tools(tools: tuple[str, ...]) -> None:
    if not (PROJECT_DIR / "platformio.ini").is_file():
        raise LowtideError(f"lowtide builds the firmware from a lowtide checkout (pip install -e), and "
                           f"{PROJECT_DIR} has no platformio.ini")
    try:
        import platformio  # noqa: F401
    except ImportError:
        raise LowtideError("PlatformIO is not installed: run scripts/install-firmware-deps.sh") from None
    for tool in tools:
        if shutil.which(tool) is None:
            raise LowtideError(f"{tool} not found: run scripts/install-firmware-deps.sh")


def ensure_tool_scons() -> None:
    """Registers the offline tool-scons shim in this checkout's core dir, as install-firmware-deps.sh does, so that
    PlatformIO never goes to the registry for it."""
    link = PROJECT_DIR / ".pio-core" / "packages" / "tool-scons.pio-link"
    if not link.is_file():
        _run_pio(["pkg", "install", "-g", "-t", f"symlink://{TOOL_SCONS_DIR}"], pio_environment({}), 120.0,
                 "registering the tool-scons shim")


def _pio_for_model(platformio_env: str, model_path: Path | None, tools: tuple[str, ...], extra_args: list[str],
                   what: str, runtime: str, tflm_arena: Arena32 | None = None) -> Path:
    """`pio run -e ENV EXTRA_ARGS` with the model and runtime, in their own build folder, which it returns. Runs
    for one model are serialised by a lock file; different models build in different folders."""
    _check_tools(tools)
    model_path = model_path.resolve() if model_path else None
    model_key = sha256_hex(model_path.read_bytes())[:16] if model_path else "no-model"
    build_dir = PROJECT_DIR / ".pio" / "lowtide-build" / f"{model_key}-{runtime}"
    build_dir.mkdir(parents=True, exist_ok=True)
    env = pio_environment({"PLATFORMIO_BUILD_DIR": str(build_dir), "LOWTIDE_RUNTIME": runtime})
    for name in ("LOWTIDE_MODEL", "LOWTIDE_TFLM_ARENA_BYTES"):
        env.pop(name, None)
    if model_path:
        env["LOWTIDE_MODEL"] = str(model_path)
    if tflm_arena is not None:
        env["LOWTIDE_TFLM_ARENA_BYTES"] = str(tflm_arena.arena_bytes)
    with open(build_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ensure_tool_scons()
        _run_pio(["run", "-e", platformio_env, *extra_args], env, BUILD_TIMEOUT_S,
                 f"{what} the {platformio_env} firmware" + (f" for {model_path.name}" if model_path else ""),
                 build_dir / f"pio-{platformio_env}.log")
    return build_dir


def build_firmware(platformio_env: str, model_path: Path | None, tools: tuple[str, ...] = EMULATOR_TOOLS,
                   runtime: str = "compiled", tflm_arena: Arena32 | None = None) -> Path:
    """Builds the firmware for `platformio_env` with the model in it (none: a model-less image) run by `runtime`,
    and returns the ELF. `tools` are the programs the build needs on PATH; `tflm_arena` sizes a TFLM arena."""
    build_dir = _pio_for_model(platformio_env, model_path, tools, [], "building", runtime, tflm_arena)
    elf = build_dir / platformio_env / "firmware.elf"
    if not elf.is_file():
        raise LowtideError(f"the {platformio_env} build produced no firmware.elf", build_dir)
    return elf


def predict_board_arena(spec: BoardSpec, model_path: Path, runtime: str, graph: Graph | None = None) -> Arena32 | None:
    """TFLM's arena for the model on `spec`'s core with `runtime`'s kernels (None for the compiled runtime)."""
    kernels = RUNTIME_KERNELS[check_runtime(runtime)]
    if kernels is None:
        return None
    graph = graph or load_model(model_path)
    return predict_arena32(Path(model_path).read_bytes(), graph, kernels, spec.core)


def build_board_firmware(spec: BoardSpec, model_path: Path, runtime: str | None = None) -> FirmwareImage:
    """The firmware for `spec` with the model in it, run by `runtime` (default: the board's): refused before
    building if the model cannot fit the board, built (or found built), and checked against the board's memory
    from its ELF."""
    runtime = check_runtime(runtime or spec.runtime)
    graph = load_model(model_path)
    if RUNTIME_KERNELS[runtime] is not None:
        # Before TFLM is built to size the arena: the head alone and the model file must fit.
        check_estimate_fits(spec, estimate_footprint(graph, tflm_head_only=True))
    tflm_arena = predict_board_arena(spec, model_path, runtime, graph)
    check_estimate_fits(spec, estimate_footprint(graph, tflm_arena))
    elf = build_firmware(spec.platformio_env, model_path, EMULATOR_TOOLS if spec.emulated else (), runtime,
                         tflm_arena)
    image = read_firmware_image(elf, spec.platformio_env)
    check_image_fits(spec, image, model_path.stem)
    return image


def upload_firmware(spec: BoardSpec, model_path: Path, port: str, runtime: str | None = None) -> None:
    """PlatformIO's upload of the (built) firmware for `spec` to the board on `port`."""
    if spec.emulated:
        raise LowtideError(f"{spec.name} is emulated: there is nothing to flash", spec.path)
    runtime = check_runtime(runtime or spec.runtime)
    _pio_for_model(spec.platformio_env, model_path, (), ["-t", "upload", "--upload-port", port], "uploading",
                   runtime, predict_board_arena(spec, model_path, runtime))


# --- running -------------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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
                stop_process(process)


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

    builds_firmware = True

    def __init__(self, spec: BoardSpec):
        if spec.emulator_command is None:
            raise LowtideError("not an emulated board (no [emulator] command)", spec.path)
        self.spec = spec
        self.name = spec.name
        self.description = spec.description

    def build(self, model_path: Path, runtime: str | None = None) -> FirmwareImage:
        return build_board_firmware(self.spec, Path(model_path), runtime)

    def predicted_arena(self, model_path: Path, runtime: str | None = None) -> Arena32 | None:
        return predict_board_arena(self.spec, Path(model_path), runtime or self.spec.runtime)

    @contextlib.contextmanager
    def connect(self, model_path: Path, port: str | None, timeout: float,
                image: FirmwareImage | None = None) -> Iterator[Link]:
        if port:
            raise LowtideError(f"--board {self.name} starts its own emulator: leave out --port")
        image = image or self.build(model_path, None)
        assert self.spec.emulator_command is not None
        with run_emulator(self.spec.emulator_command, image.elf, timeout) as link:
            yield link


def register_emulated_boards(directory: Path = BOARDS_DIR) -> None:
    for spec in load_board_specs(directory).values():
        if spec.emulated:
            register_board(QemuBoard(spec))


# Importing this module makes the emulated boards known to `lowtide measure --board` (lowtide.device.boards imports
# it at its end).
register_emulated_boards()
