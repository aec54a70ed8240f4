"""The PlatformIO driver: builds a board's firmware with a model in it, sizes the ELF, and uploads it.

The firmware is built once per model and runtime, in .pio/lowtide-build/<model sha256 prefix>-<runtime>/ (PlatformIO
rebuilds only what changed), with the checkout's own PlatformIO core dir (.pio-core) so that no other checkout's
platform or packages are used. Before building, the model's arena and constant data are checked against the board's
SRAM and flash (`lowtide.device.spec`); after building, the ELF's sections are (`read_firmware_image`), so a model
that cannot fit stops with its numbers rather than with a linker log. Uploading is PlatformIO's `-t upload` of the
board's env: whatever uploader the env names (ST-LINK, esptool, bossac, or a `custom` upload_command).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from lowtide.device.spec import (
    PROJECT_DIR,
    RUNTIME_KERNELS,
    BoardSpec,
    capacity,
    check_estimate_fits,
    check_runtime,
    estimate_footprint,
    predict_board_arena,
)
from lowtide.errors import LowtideError
from lowtide.model.ir import sha256_hex
from lowtide.model.reader import load_model
from lowtide.tflm.sizer import Arena32

TOOL_SCONS_DIR = PROJECT_DIR / "firmware" / "tools" / "tool-scons"
BUILD_TIMEOUT_S = 900.0  # a cold build of a large model's weights; the board's own timeout bounds everything after
UPLOAD_TIMEOUT_S = 300.0
EMULATOR_TOOLS = ("arm-none-eabi-gcc", "qemu-system-arm")  # Debian's, on PATH; real boards get theirs from PlatformIO
_REGISTRY_FAILURES = ("HTTPClientError", "InternetConnectionError", "Could not resolve")  # in PlatformIO's log
# Sections of a GCC ELF that are neither loaded into flash nor RAM.
_UNLOADED_SECTIONS = (".comment", ".ARM.attributes", ".debug", ".stab", ".note", ".gnu")


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


def check_image_fits(spec: BoardSpec, image: FirmwareImage, model: str) -> None:
    problems = []
    if image.ram_bytes > spec.sram_bytes:
        problems.append(f"static RAM {image.static_ram_bytes:,} B + stack {image.stack_bytes:,} B > "
                        + capacity(spec, "SRAM", spec.sram_bytes))
    if image.flash_bytes > spec.flash_bytes:
        problems.append(f"image {image.flash_bytes:,} B > " + capacity(spec, "flash", spec.flash_bytes))
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
                   what: str, runtime: str, tflm_arena: Arena32 | None = None, config: Path | None = None,
                   timeout: float = BUILD_TIMEOUT_S) -> Path:
    """`pio run -e ENV EXTRA_ARGS` with the model and runtime, in their own build folder, which it returns. Runs
    for one model are serialised by a lock file; different models build in different folders. `config`: a
    PlatformIO project file other than the checkout's platformio.ini."""
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
        _run_pio(["run", "-e", platformio_env, *(["-c", str(config)] if config else []), *extra_args], env, timeout,
                 f"{what} the {platformio_env} firmware" + (f" for {model_path.name}" if model_path else ""),
                 build_dir / f"pio-{platformio_env}.log")
    return build_dir


def build_firmware(platformio_env: str, model_path: Path | None, tools: tuple[str, ...] = EMULATOR_TOOLS,
                   runtime: str = "compiled", tflm_arena: Arena32 | None = None, config: Path | None = None) -> Path:
    """Builds the firmware for `platformio_env` with the model in it (none: a model-less image) run by `runtime`,
    and returns the ELF. `tools` are the programs the build needs on PATH; `tflm_arena` sizes a TFLM arena."""
    build_dir = _pio_for_model(platformio_env, model_path, tools, [], "building", runtime, tflm_arena, config)
    elf = build_dir / platformio_env / "firmware.elf"
    if not elf.is_file():
        raise LowtideError(f"the {platformio_env} build produced no firmware.elf", build_dir)
    return elf


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
                         tflm_arena, spec.platformio_config)
    image = read_firmware_image(elf, spec.platformio_env)
    check_image_fits(spec, image, model_path.stem)
    return image


def upload_firmware(spec: BoardSpec, model_path: Path, port: str, runtime: str | None = None) -> None:
    """PlatformIO's upload of the (built) firmware for `spec` to the board on `port`: the env's own uploader."""
    if spec.emulated:
        raise LowtideError(f"{spec.name} is emulated: there is nothing to flash", spec.path)
    runtime = check_runtime(runtime or spec.runtime)
    _pio_for_model(spec.platformio_env, model_path, (), ["-t", "upload", "--upload-port", port], "uploading",
                   runtime, predict_board_arena(spec, model_path, runtime), spec.platformio_config,
                   UPLOAD_TIMEOUT_S)


