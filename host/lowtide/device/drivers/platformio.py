"""The PlatformIO driver: builds a firmware project (lowtide.project) it is handed, sizes the ELF, and uploads it.

The driver only runs PlatformIO: which project to build, whether the model fits the board before and after
building, is decided above it (lowtide.pipeline.firmware). A project built in the user cache is stamped when its
build finished, so a second run for the same folder finds it built, and two at once build it once (a lock).
`read_firmware_image` sizes the ELF's sections; uploading is PlatformIO's `-t upload` of the board's env: whatever
uploader the env names (ST-LINK, esptool, bossac, or a `custom` upload_command).

An ST board uploads with ST-LINK through OpenOCD (the platform's `upload_protocol = stlink`), told which ST-LINK by
its USB serial number (`adapter serial`, through PlatformIO's upload_flags): the serial number of the port the
board is measured on, which is its ST-LINK's virtual COM port, else `--probe` or the board file's `probe_serial`.
So the board flashed is the board measured, whatever else is plugged in. Without the registry, OpenOCD is the
system's, behind lowtide's tool-openocd shim. A board whose env needs PlatformIO's registry (the Arduino envs)
is refused in one line when the registry cannot be reached, before PlatformIO spends a minute finding that out.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from lowtide.device.drivers.serialport import port_candidate, serial_port_candidates
from lowtide.device.spec import BoardSpec, banks_cover
from lowtide.errors import LowtideError, missing_tool
from lowtide.platformio_archives import ARCHIVES_SETTING, ST_PLATFORM, archives_dir
from lowtide.project import (
    BUILT_STAMP,
    LOCAL_PLATFORM_URI,
    FirmwareProject,
    check_platformio,
    ensure_st_uploaders,
    ensure_tool_scons,
    env_option,
    env_platform,
    platform_installed,
    platformio_core_dir,
    platformio_environment,
    write_project,
)
from lowtide.resources import DATA_DIR, LOCAL_PLATFORM_DIR
from lowtide.settings import Settings
from lowtide.storage import exclusive_lock

BUILD_TIMEOUT_S = 900.0  # a cold build of a large model's weights; the board's own timeout bounds everything after
UPLOAD_TIMEOUT_S = 300.0
EMULATOR_TOOLS = ("arm-none-eabi-gcc", "qemu-system-arm")  # Debian's, on PATH; real boards get theirs from PlatformIO
_REGISTRY_FAILURES = ("HTTPClientError", "InternetConnectionError", "Could not resolve")  # in PlatformIO's log
# PlatformIO's registry API (platformio.registry.client: https://api.<mirror>), tried before a build needs it.
REGISTRY_HOSTS = ("api.registry.platformio.org", "api.registry.nm1.platformio.org")
_REGISTRY_CONNECT_TIMEOUT_S = 5.0
# OpenOCD 0.12's words when no probe answers (ST-LINK, CMSIS-DAP, J-Link, FTDI), and when one is there but its USB
# device may not be opened (no udev rule).
_NO_PROBE = (
    "open failed",
    "unable to find a matching CMSIS-DAP device",
    "No J-Link device found",
    "unable to open ftdi device",
)
_PROBE_DENIED = "LIBUSB_ERROR_ACCESS"
# Sections of a GCC ELF that are neither loaded into flash nor RAM.
_UNLOADED_SECTIONS = (".comment", ".ARM.attributes", ".debug", ".stab", ".note", ".gnu")
# Sections placed in writable memory (.data loaded from flash, the others not loaded); the loaded rest is in flash.
RAM_SECTIONS = (".data", ".bss", ".stack", ".heap", ".noinit", ".lt_arena")  # .lt_arena: lowtide.tflm.regions


@dataclass(frozen=True)
class FirmwareImage:
    """A built firmware, sized from its ELF's sections (`arm-none-eabi-size -A`)."""

    elf: Path
    platformio_env: str
    flash_bytes: int  # code, constants (the weights) and the initial values of .data
    data_bytes: int
    bss_bytes: int  # zeroed RAM: the arena is here, with the staging buffer and the runtime's state
    stack_bytes: int  # the linker script's fixed stack region; 0 where the script reserves none
    project_dir: Path | None = None  # the PlatformIO project that built it (lowtide.project)

    @property
    def static_ram_bytes(self) -> int:
        return self.data_bytes + self.bss_bytes

    @property
    def ram_bytes(self) -> int:
        return self.static_ram_bytes + self.stack_bytes


def _size_tool(settings: Settings) -> str:
    """arm-none-eabi-size: Debian's on PATH, else the toolchain PlatformIO installed for a real board."""
    found = shutil.which("arm-none-eabi-size") or next(
        iter(sorted((platformio_core_dir(settings) / "packages").glob("toolchain-*/bin/arm-none-eabi-size"))), None
    )
    if found is None:
        raise missing_tool("arm-none-eabi-size")
    return str(found)


@dataclass(frozen=True)
class ElfSection:
    """One section of an ELF, as `arm-none-eabi-size -A` lists it."""

    name: str
    size: int
    address: int  # 0 for the sections that are not loaded (.comment, .ARM.attributes, debug information)


def elf_sections(elf: Path, settings: Settings) -> list[ElfSection]:
    """`elf`'s sections, from `arm-none-eabi-size -A`."""
    try:
        done = subprocess.run(
            [_size_tool(settings), "-A", str(elf)], capture_output=True, text=True, timeout=60, check=False
        )
    except subprocess.TimeoutExpired:
        raise LowtideError("arm-none-eabi-size took longer than 60 s", elf) from None
    if done.returncode != 0:
        raise LowtideError(f"arm-none-eabi-size failed: {done.stderr.strip() or done.returncode}", elf)
    return [
        ElfSection(fields[0], int(fields[1]), int(fields[2]))
        for fields in map(str.split, done.stdout.splitlines())
        if len(fields) == 3 and fields[0].startswith(".") and fields[1].isdigit() and fields[2].isdigit()
    ]


def read_firmware_image(elf: Path, platformio_env: str, settings: Settings) -> FirmwareImage:
    """Sizes `elf` from its sections: .data and .bss are static RAM, .stack is the stack region, and every other
    loaded section is flash (.data's initial values are in flash too)."""
    sizes: dict[str, int] = {}
    for section in elf_sections(elf, settings):
        sizes[section.name] = sizes.get(section.name, 0) + section.size

    def total(*prefixes: str) -> int:
        return sum(size for name, size in sizes.items() if name.startswith(prefixes))

    data = total(".data")  # in RAM, and its initial values in flash
    return FirmwareImage(
        elf=elf,
        platformio_env=platformio_env,
        flash_bytes=sum(sizes.values()) - total(*_UNLOADED_SECTIONS) - (total(*RAM_SECTIONS) - data),
        data_bytes=data,
        bss_bytes=total(".bss"),
        stack_bytes=total(".stack"),
    )


# --- building ------------------------------------------------------------------------------------------------------


def _run_pio(
    project: Path,
    args: list[str],
    timeout: float,
    what: str,
    settings: Settings,
    log_path: Path | None = None,
    variables: dict[str, str] | None = None,
) -> None:
    """Runs `pio ARGS` on `project` from inside it (an uploader gets paths relative to it), with `variables`
    (PLATFORMIO_* variables) in its environment; a failure becomes one line: lowtide's own error (the project
    script's), a linker's memory overflow, no probe answering an upload, or the log's last error line, with the
    whole log kept in `log_path`."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "platformio", *args, "-d", str(project)],
            cwd=project,
            env=platformio_environment(settings, variables),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise LowtideError(f"{what} took longer than {timeout:g} s") from None
    if log_path:
        log_path.write_bytes(done.stdout)
    if done.returncode != 0:
        lines = [line.strip() for line in done.stdout.decode("utf-8", "replace").splitlines() if line.strip()]
        ours = [line[len("lowtide: error: ") :] for line in lines if line.startswith("lowtide: error: ")]
        overflows = [line.split("ld: ")[-1] for line in lines if "overflowed by" in line or "RAM overflow" in line]
        errors = [line for line in lines if "error" in line.lower()]
        no_probe = [line for line in lines if any(marker in line for marker in _NO_PROBE)]
        denied = [line for line in lines if _PROBE_DENIED in line]
        if ours:
            detail = ours[-1]
        elif denied:
            detail = (
                f"the probe's USB device cannot be opened ({_PROBE_DENIED}): install OpenOCD's udev rules "
                "(Debian's openocd ships /usr/lib/udev/rules.d/60-openocd.rules) or run as a user who may"
            )
        elif no_probe:
            detail = f"no debug probe found (openocd: {no_probe[-1]}): connect the board's ST-LINK USB port" + (
                f" (log: {log_path})" if log_path else ""
            )
        else:
            detail = (overflows or errors or lines or ["no output"])[-1]
            if any(marker in line for line in lines for marker in _REGISTRY_FAILURES):
                detail += (
                    " (PlatformIO could not reach its registry, where real boards' platforms come from; the ST "
                    f"boards build without it from the archives {ARCHIVES_SETTING} names)"
                )
            if log_path:
                detail += f" (log: {log_path})"
        raise LowtideError(f"{what} failed: {detail}")


_MEMORY_REGION = re.compile(
    r"^\s*(\w+)\s*\(([rwx!]+)\)\s*:\s*ORIGIN\s*=\s*(\w+)\s*,\s*LENGTH\s*=\s*(\d+)\s*([KM]?)", re.M
)


@dataclass(frozen=True)
class MemoryRegion:
    """One region of a linker script's MEMORY command."""

    name: str
    origin: int
    length: int
    writable: bool  # RAM; a region without "w" is flash

    def holds(self, section: ElfSection) -> bool:
        return self.origin <= section.address and section.address + section.size <= self.origin + self.length


def linker_regions(script: Path) -> list[MemoryRegion]:
    """The regions of a linker script's MEMORY command."""
    try:
        text = script.read_text()
    except OSError as exc:
        raise LowtideError(f"cannot read the env's linker script: {exc.strerror}", script) from None
    regions = []
    for name, attributes, origin, length, unit in _MEMORY_REGION.findall(text):
        try:
            start = int(origin, 0)
        except ValueError:
            raise LowtideError(
                f"the linker script's region {name} has ORIGIN = {origin}, not a number", script
            ) from None
        regions.append(
            MemoryRegion(name, start, int(length) * {"": 1, "K": 1024, "M": 1024 * 1024}[unit], "w" in attributes)
        )
    return regions


def shipped_linker_script(spec: BoardSpec) -> str | None:
    """The linker script `spec`'s env links with, as a path in lowtide's data (firmware/...); None where it is the
    platform's own or one of the user's project: not lowtide's to read."""
    script = env_option(spec.platformio_env, spec.platformio_config, "board_build.ldscript")
    if not script and env_platform(spec.platformio_env, spec.platformio_config) == LOCAL_PLATFORM_URI:
        board = env_option(spec.platformio_env, spec.platformio_config, "board")
        manifest = json.loads((LOCAL_PLATFORM_DIR / "boards" / f"{board}.json").read_text())
        script = f"firmware/platform/ldscripts/{manifest['build']['ldscript']}"  # the emulated boards' own
    return script if script.startswith("firmware/") else None


def shipped_linker_regions(spec: BoardSpec) -> list[MemoryRegion] | None:
    """The MEMORY regions of `spec`'s linker script; None where lowtide does not ship it."""
    script = shipped_linker_script(spec)
    return linker_regions(DATA_DIR / script) if script else None


def check_memory_map(spec: BoardSpec) -> None:
    """Refuses a board file that states more SRAM or flash than the memory map its env links with (a shipped
    linker script, board_build.ldscript) has: the fit checks would pass models the part cannot hold; and one whose
    memory banks do not hold each RAM region of that script."""
    script = shipped_linker_script(spec)
    if script is None:
        return
    regions = linker_regions(DATA_DIR / script)
    ram = sum(r.length for r in regions if r.writable)
    flash = sum(r.length for r in regions if not r.writable)
    for what, stated, mapped in (("sram_bytes", spec.sram_bytes, ram), ("flash_bytes", spec.flash_bytes, flash)):
        if stated > mapped:
            raise LowtideError(
                f"bad board file: {what} = {stated:,} does not fit the part: {spec.platformio_env}'s "
                f"memory map ({script}) has {mapped:,} B",
                spec.path,
            )
    if spec.memories:
        for region in regions:
            if region.writable and not banks_cover(spec, region.origin, region.length):
                raise LowtideError(
                    f"bad board file: {spec.platformio_env}'s linker script ({script}) places {region.name} at "
                    f"0x{region.origin:08X} ({region.length:,} B), in none of the board's [[memory]] banks",
                    spec.path,
                )


@cache
def registry_unreachable() -> str | None:
    """Why PlatformIO's registry cannot be reached from here (each host's connect error), None if it can; asked
    once per process."""
    failures = []
    for host in REGISTRY_HOSTS:
        try:
            socket.create_connection((host, 443), timeout=_REGISTRY_CONNECT_TIMEOUT_S).close()
            return None
        except OSError as exc:
            failures.append(f"{host}: {exc.strerror or exc}")
    return "; ".join(failures)


def registry_needed(spec: BoardSpec, settings: Settings) -> str | None:
    """Why `spec` cannot be built here: its platform only PlatformIO's registry has (not installed in lowtide's core
    dir, not lowtide's local platform, not ST from archives) and no registry host answers; None if it can be (as
    far as the registry goes). Behind a proxy PlatformIO is left to try."""
    platform = env_platform(spec.platformio_env, spec.platformio_config)
    if platform == LOCAL_PLATFORM_URI or platform_installed(platform, settings) or settings.behind_proxy:
        return None
    if platform == ST_PLATFORM and settings.platformio_archives:
        return None
    if registry_unreachable() is None:
        return None
    framework = env_option(spec.platformio_env, spec.platformio_config, "framework")
    return (
        f"not built here: its platform {platform}"
        + (f" (framework {framework})" if framework else "")
        + " comes from PlatformIO's registry, which this machine cannot reach"
        + (f"; set {ARCHIVES_SETTING} to build it from PlatformIO's archives" if platform == ST_PLATFORM else "")
    )


def check_registry_reachable(spec: BoardSpec, settings: Settings) -> None:
    """Refuses, in one line, a board `registry_needed` says cannot be built here: PlatformIO itself would take a
    minute to find that out."""
    why = registry_needed(spec, settings)
    if why is not None:
        raise LowtideError(f"{spec.name} is {why} ({registry_unreachable()})")


def _check_tools(tools: tuple[str, ...]) -> None:
    check_platformio()
    for tool in tools:
        if shutil.which(tool) is None:
            raise missing_tool(tool)


def check_buildable(spec: BoardSpec, settings: Settings) -> None:
    """Refuses, before any project is written, a board whose env cannot be built here: a tool missing, a board
    file stating more memory than its env's memory map, or a platform only PlatformIO's unreachable registry has."""
    _check_tools(EMULATOR_TOOLS if spec.emulated else ())
    check_memory_map(spec)
    check_registry_reachable(spec, settings)


def build_project(
    project: FirmwareProject, files: dict[str, bytes], reuse_built: bool, what: str, settings: Settings
) -> None:
    """Writes `files` into `project`'s folder and builds its env with PlatformIO; with `reuse_built`, a folder a
    finished build left (its stamp and ELF there) is taken as it is. Runs for the same folder wait for one build."""
    directory = project.directory
    with exclusive_lock(directory.with_name(directory.name + ".lock")):
        stamp = directory / BUILT_STAMP
        if reuse_built and stamp.is_file() and project.elf.is_file():
            return
        stamp.unlink(missing_ok=True)
        write_project(directory, files)
        ensure_tool_scons(settings)
        _run_pio(
            directory,
            ["run", "-e", project.platformio_env],
            BUILD_TIMEOUT_S,
            what,
            settings,
            directory / f"pio-{project.platformio_env}.log",
        )
        if not project.elf.is_file():
            raise LowtideError(f"the {project.platformio_env} build produced no firmware.elf", directory)
        stamp.write_text(f"{project.elf}\n")  # published last: a folder without it was never fully built


def uploads_with_openocd(spec: BoardSpec) -> bool:
    """The env uploads through OpenOCD with an ST-LINK: an ST env with the platform's own upload protocol."""
    return env_platform(spec.platformio_env, spec.platformio_config) == ST_PLATFORM and env_option(
        spec.platformio_env, spec.platformio_config, "upload_protocol"
    ) in ("", "stlink")


def upload_probe(spec: BoardSpec, port: str) -> str | None:
    """The USB serial number of the probe that flashes the board on `port`: the port's own (an ST-LINK's virtual
    COM port is the ST-LINK), else `--probe` / the board file's `probe_serial`. A port whose USB serial number is
    another than the one asked for is refused: one board would be flashed and another measured."""
    wanted = spec.serial.probe_serial if spec.serial else None
    found = port_candidate(port)
    serial = found.serial_number if found else None
    if wanted and serial and serial.lower() != wanted.lower():
        raise LowtideError(
            f"{port} is the port of the probe with serial {serial}, not {wanted} (--probe or the "
            f"board file's probe_serial): not flashing one board to measure another"
        )
    return serial or wanted


def check_one_probe(spec: BoardSpec, port: str) -> None:
    """Refuses an OpenOCD upload that no serial number points at while several boards with the board file's USB
    IDs are attached: OpenOCD would flash whichever ST-LINK it finds first."""
    usb_ids = {usb_id.upper() for usb_id in spec.serial.usb_ids} if spec.serial else set()
    attached = [candidate for candidate in serial_port_candidates() if candidate.usb_id in usb_ids]
    if len(attached) > 1:
        raise LowtideError(
            f"{port} has no USB serial number and {len(attached)} boards with {spec.name}'s USB IDs "
            f"are attached ({'; '.join(candidate.describe() for candidate in attached)}): OpenOCD "
            f"would flash any one of them; choose it with --probe SERIAL"
        )


_PROBE_SERIAL = re.compile(r"[0-9A-Za-z._-]+")


def openocd_upload_flags(probe_serial: str | None) -> dict[str, str]:
    """PlatformIO's upload_flags (its environment variable: one argument a line) that make OpenOCD open the ST-LINK
    `probe_serial`: PlatformIO puts them before the platform's own arguments, and `adapter serial` holds until
    OpenOCD's `init`."""
    if probe_serial is None:
        return {}
    if not _PROBE_SERIAL.fullmatch(probe_serial):
        raise LowtideError(f"bad probe serial number {probe_serial!r}: letters, digits, '.', '_' and '-' only")
    return {"PLATFORMIO_UPLOAD_FLAGS": f"-c\nadapter serial {probe_serial}"}


def upload_settings(spec: BoardSpec, port: str, settings: Settings) -> dict[str, str]:
    """What PlatformIO's upload to the board on `port` needs in its environment, checked before anything is built:
    for an ST board, OpenOCD told which ST-LINK (`upload_probe`); refuses an upload that would flash another board
    than the one measured, or that has no uploader."""
    if spec.emulated:
        raise LowtideError(f"{spec.name} is emulated: there is nothing to flash", spec.path)
    probe = upload_probe(spec, port)
    variables: dict[str, str] = {}
    if uploads_with_openocd(spec):
        if probe is None and "://" not in port:  # a farm's port: its probe is not on this machine's USB
            check_one_probe(spec, port)
        variables = openocd_upload_flags(probe)
        if archives_dir(settings) is not None and shutil.which("openocd") is None:
            raise LowtideError(
                "openocd not found: install OpenOCD (Debian: apt-get install --no-install-recommends "
                "openocd), which flashes the ST boards without PlatformIO's registry"
            )
    return variables


def upload_image(
    spec: BoardSpec, image: FirmwareImage, port: str, variables: dict[str, str], model: str, settings: Settings
) -> None:
    """PlatformIO's upload of `image` (built in its project, `image.project_dir`) to the board on `port`: the env's
    own uploader, with `variables` (`upload_settings`). `model` names the model in messages."""
    assert image.project_dir is not None  # every image lowtide uploads was built in a project
    project = image.project_dir
    if env_platform(spec.platformio_env, spec.platformio_config) == ST_PLATFORM and archives_dir(settings) is not None:
        ensure_st_uploaders(settings)
    with exclusive_lock(project.with_name(project.name + ".lock")):
        _run_pio(
            project,
            ["run", "-v", "-e", spec.platformio_env, "-t", "upload", "--upload-port", port],
            UPLOAD_TIMEOUT_S,
            f"uploading the {spec.platformio_env} firmware for {model}",
            settings,
            project / f"pio-{spec.platformio_env}-upload.log",
            variables,
        )
