"""A firmware build as a self-contained PlatformIO project, the shape of microTVM's Project API.

lowtide compiles the model (or links TFLM for it; each runtime's object in lowtide.runtimes makes its part) and
writes a project folder that PlatformIO builds on its own:

    platformio.ini          one board's env (from the shipped envs, and the board file's own PlatformIO config)
    lowtide_project.json    what the model adds: its sources, defines, include folders, the TFLM library
    firmware/               lowtide's firmware sources: app, protocol core, board support, compiled runtime, TFLM glue
    model/                  the model's generated C (compiled runtime), or its .tflite bytes and TFLM resolver list

The project's one extra script (firmware/app/lowtide_project.py) only reads lowtide_project.json: PlatformIO never
imports lowtide. `lowtide build MODEL --board B --project-dir DIR` leaves such a project where the user wants it,
for their own `pio run`, `pio debug` or IDE; every other build lives in the user cache (lowtide.storage), one folder
per content key, so the same model for the same board and runtime is built once per machine.

The project points at things in the user cache, not copied into it: the PlatformIO core dir (with the offline
tool-scons shim registered, and for an ST board's upload from archives the tool-openocd shim and the other
uploaders' placeholders); for the emulated boards, lowtide's local dev-platform; for the ST boards built from
archives, PlatformIO's unpacked ST platform and framework and lowtide's toolchain shims
(lowtide.platformio_archives); for the TFLM runtimes, the TFLM library built for the board's core
(lowtide.tflm.build) and TFLM's headers.
"""

from __future__ import annotations

import configparser
import enum
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lowtide.errors import LowtideError, missing_tool
from lowtide.model.ir import Graph
from lowtide.platformio_archives import ST_PLATFORM, st_env_settings, st_uploader_placeholders
from lowtide.resources import (
    FIRMWARE_DIR,
    LOCAL_PLATFORM_DIR,
    PLATFORMIO_INI,
    TOOL_OPENOCD_DIR,
    TOOL_SCONS_DIR,
    package_digest,
    shipped_files,
    tree_digest,
)
from lowtide.settings import Settings
from lowtide.storage import cache_dir, cached_folder, exclusive_lock, write_atomically

if TYPE_CHECKING:  # lowtide.runtimes makes the model's part of a project from this module's ModelBuild
    from lowtide.runtimes import ArenaLayout, FirmwareRuntime

PROJECT_SPEC = "lowtide_project.json"
PROJECT_FORMAT = 2
# The firmware folders a project needs; the dev-platform, the shims and the firmware's own tests stay behind.
FIRMWARE_PARTS = ("app", "bsp", "protocol", "runtime", "tflm")
# How the shipped envs name lowtide's local dev-platform; a project names its copy in the user cache instead.
LOCAL_PLATFORM_URI = "symlink://${PROJECT_DIR}/firmware/platform"
BUILT_STAMP = ".lowtide-built"


class Runtime(enum.StrEnum):
    """What runs the model in the firmware, by the name `--runtime`, board files, `--lowtide-runtime` and JSON use;
    its object is lowtide.runtimes'."""

    COMPILED = "compiled"  # lowtide's compiled C on its kernel runtime (firmware/runtime)
    TFLM = "tflm"  # TFLM's interpreter with its reference kernels
    TFLM_CMSIS_NN = "tflm-cmsis-nn"  # TFLM's interpreter with CMSIS-NN's kernels

    @classmethod
    def named(cls, name: str) -> Runtime:
        """The runtime `name` names (`--runtime`, a board file's `runtime`, `--lowtide-runtime`)."""
        try:
            return cls(name)
        except ValueError:
            raise LowtideError(f"unknown runtime {name!r}; runtimes: {', '.join(cls)}") from None


@dataclass(frozen=True)
class SourceFolder:
    """A folder PlatformIO compiles besides src_dir, into $BUILD_DIR/<name>."""

    name: str
    directory: str  # relative to the project
    src_filter: str


@dataclass
class ModelBuild:
    """What a model adds to the firmware, as the project's extra script applies it (lowtide_project.json)."""

    model: str
    runtime: str
    defines: list[tuple[str, str | None]] = field(default_factory=list)
    string_defines: list[tuple[str, str]] = field(default_factory=list)  # C string literals
    include_dirs: list[str] = field(default_factory=list)  # relative to the project, or absolute (TFLM's headers)
    ccflags: list[str] = field(default_factory=list)
    cxxflags: list[str] = field(default_factory=list)
    lib_dirs: list[str] = field(default_factory=list)
    libs: list[str] = field(default_factory=list)  # linked before the C library
    sources: list[SourceFolder] = field(default_factory=list)
    link_scripts: list[str] = field(
        default_factory=list
    )  # linker fragments beside the board's script (project-relative)

    def to_json(self) -> str:
        return (
            json.dumps(
                {
                    "format": PROJECT_FORMAT,
                    "model": self.model,
                    "runtime": self.runtime,
                    "defines": [list(d) for d in self.defines],
                    "string_defines": [list(d) for d in self.string_defines],
                    "include_dirs": self.include_dirs,
                    "ccflags": self.ccflags,
                    "cxxflags": self.cxxflags,
                    "lib_dirs": self.lib_dirs,
                    "libs": self.libs,
                    "sources": [{"name": s.name, "dir": s.directory, "filter": s.src_filter} for s in self.sources],
                    "link_scripts": self.link_scripts,
                },
                indent=2,
            )
            + "\n"
        )


@dataclass(frozen=True)
class ProtocolDefines:
    """Preprocessor defines that make the image answer another protocol than lowtide's own, added to the model's
    part of the project: MLPerf Tiny's grammar (LT_PROTOCOL_MLPERF, made by lowtide.mlperf.benchmarks)."""

    defines: tuple[tuple[str, str | None], ...]
    string_defines: tuple[tuple[str, str], ...]  # C string literals


@dataclass(frozen=True)
class FirmwareProject:
    """A written project folder and the env that builds it."""

    directory: Path
    platformio_env: str
    runtime: str
    model: str | None  # the model's name; None: a model-less image

    @property
    def build_dir(self) -> Path:
        return self.directory / ".pio" / "build"

    @property
    def elf(self) -> Path:
        return self.build_dir / self.platformio_env / "firmware.elf"


# --- the model's part -----------------------------------------------------------------------------------------------


def model_build(
    graph: Graph,
    runtime: FirmwareRuntime,
    core: str,
    arenas: ArenaLayout | None,
    files: dict[str, bytes],
    settings: Settings,
    protocol: ProtocolDefines | None = None,
) -> ModelBuild:
    """The part of a project of `graph`, validated for what `runtime` relies on (its files go into `files`): what
    `runtime` adds for it, and what every runtime's part has (the model's size and digest); serving another protocol
    than lowtide's own where `protocol` says so."""
    build = runtime.model_build(graph, core, arenas, files, settings)
    build.defines.append(("LT_MODEL_SIZE", f"{graph.size_bytes}u"))
    build.string_defines.append(("LT_MODEL_SHA256", graph.sha256))
    if protocol is not None:
        build.defines += protocol.defines
        build.string_defines += protocol.string_defines
    return build


# --- platformio.ini -------------------------------------------------------------------------------------------------


def _read_ini(text: str, source: Path) -> configparser.RawConfigParser:
    config = configparser.RawConfigParser(interpolation=None, strict=False)
    config.optionxform = str  # type: ignore[assignment, method-assign]  # PlatformIO's option names keep their case
    try:
        config.read_string(text, str(source))
    except configparser.Error as exc:
        raise LowtideError(f"bad PlatformIO config: {str(exc).splitlines()[0]}", source) from None
    return config


def platformio_ini(
    platformio_env: str,
    board_config: Path | None,
    platform_uri: str,
    core_dir: Path,
    description: str,
    env_settings: dict[str, str] | None = None,
) -> str:
    """One env's project file: the shipped envs with the board file's own PlatformIO config over them, lowtide's
    [platformio] section, the local dev-platform named by its copy in the cache, and `env_settings` over the env's
    own (an ST env's packages from archives: lowtide.platformio_archives)."""
    config = _read_ini(PLATFORMIO_INI.read_text(), PLATFORMIO_INI)
    if board_config is not None:
        try:
            text = board_config.read_text()
        except OSError as exc:
            raise LowtideError(f"cannot read the board's PlatformIO config: {exc.strerror}", board_config) from None
        for section in (own := _read_ini(text, board_config)).sections():
            if section != "platformio":
                config.remove_section(section)
                config.add_section(section)
                for key, value in own.items(section):
                    config.set(section, key, value)
    if not config.has_section(f"env:{platformio_env}"):
        raise LowtideError(
            f"no PlatformIO env {platformio_env!r}: the shipped envs are "
            f"{', '.join(s[4:] for s in config.sections() if s.startswith('env:'))}"
            + (f", and {board_config} defines none by that name" if board_config else "")
        )
    config.remove_section("platformio")
    for section in config.sections():
        for key, value in config.items(section):
            config.set(section, key, value.replace(LOCAL_PLATFORM_URI, platform_uri))
    for key, value in (env_settings or {}).items():
        config.set(f"env:{platformio_env}", key, value)
    out = io.StringIO()
    out.write(
        f"; {description}\n; Generated by lowtide: `pio run` builds it, `pio run -t upload` flashes a real board."
        f"\n\n[platformio]\ndefault_envs = {platformio_env}\nsrc_dir = firmware/app\ncore_dir = {core_dir}\n\n"
    )
    config.write(out)
    return out.getvalue()


# --- the user cache's PlatformIO --------------------------------------------------------------------------------------


def platformio_core_dir(settings: Settings) -> Path:
    """The PlatformIO core dir every lowtide build uses (the user's own ~/.platformio is left alone)."""
    return cache_dir(settings, "platformio", "core")


def _content_copy(source: Path, name: str, settings: Settings) -> Path:
    """A copy of `source` in the cache named by its content, so the path stays valid whichever lowtide installed
    it, and a changed lowtide makes a new one."""

    def fill(staging: Path) -> None:
        for path in shipped_files(source):
            (staging / path.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, staging / path.relative_to(source))

    return cached_folder(cache_dir(settings, "platformio") / f"{name}-{tree_digest(source)[:12]}", fill)


def local_platform_uri(settings: Settings) -> str:
    return f"symlink://{_content_copy(LOCAL_PLATFORM_DIR, 'platform-lowtide-qemu', settings)}"


def platformio_environment(settings: Settings, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a `pio` run: lowtide's core dir, and no telemetry or update checks, which would reach for
    the network."""
    env = dict(os.environ)
    env.update(
        PLATFORMIO_CORE_DIR=str(platformio_core_dir(settings)),
        PLATFORMIO_SETTING_ENABLE_TELEMETRY="No",
        PLATFORMIO_SETTING_CHECK_PLATFORMIO_INTERVAL="3650",
        PLATFORMIO_NO_ANSI="true",
    )
    env.update(extra or {})
    return env


def check_platformio() -> None:
    try:
        import platformio  # noqa: F401
    except ImportError:
        raise missing_tool("platformio") from None


def _registered_package_uris(core: Path) -> set[str]:
    """The `symlink://` folders registered in `core` (each a packages/*.pio-link)."""
    uris = set()
    for link in (core / "packages").glob("*.pio-link"):
        try:
            uris.add(json.loads(link.read_text())["spec"]["uri"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return uris


def _register_package(package: Path, what: str, settings: Settings) -> None:
    """Registers the package folder `package` in lowtide's core dir (once) with `pio pkg install -g`: PlatformIO then
    takes it for the registry package its package.json names, and never goes to the registry for that one."""
    check_platformio()
    core = platformio_core_dir(settings)
    uri = f"symlink://{package}"
    with exclusive_lock(core / ".packages.lock"):
        if uri in _registered_package_uris(core):
            return
        done = subprocess.run(
            [sys.executable, "-m", "platformio", "pkg", "install", "-g", "-t", uri],
            env=platformio_environment(settings),
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        if done.returncode != 0:
            lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()] or ["no output"]
            raise LowtideError(f"registering the {what} with PlatformIO failed: {lines[-1]}", core)


def ensure_tool_scons(settings: Settings) -> None:
    """Registers the offline tool-scons shim in lowtide's core dir, so that PlatformIO never goes to the registry
    for it."""
    _register_package(_content_copy(TOOL_SCONS_DIR, "tool-scons", settings), "tool-scons shim", settings)


def ensure_st_uploaders(settings: Settings) -> None:
    """Registers what `pio run -t upload` of an ST env needs besides the archives: the tool-openocd shim, which
    runs the system's OpenOCD (firmware/tools/tool-openocd), and the platform's other uploaders as empty
    packages (lowtide.platformio_archives)."""
    _register_package(_content_copy(TOOL_OPENOCD_DIR, "tool-openocd", settings), "tool-openocd shim", settings)
    for package in st_uploader_placeholders(settings):
        _register_package(package, f"{package.name} placeholder", settings)


# --- writing a project ------------------------------------------------------------------------------------------------


def project_files(
    platformio_env: str,
    board_config: Path | None,
    description: str,
    model: Graph | None,
    runtime: FirmwareRuntime,
    core: str,
    arenas: ArenaLayout | None,
    settings: Settings,
    protocol: ProtocolDefines | None = None,
) -> dict[str, bytes]:
    """Every file of the project, by its path in the project."""
    files: dict[str, bytes] = {}
    for part in FIRMWARE_PARTS:
        for path in shipped_files(FIRMWARE_DIR / part):
            files[f"firmware/{path.relative_to(FIRMWARE_DIR).as_posix()}"] = path.read_bytes()
    if model is not None:
        build = model_build(model, runtime, core, arenas, files, settings, protocol)
        files[PROJECT_SPEC] = build.to_json().encode()
    env_settings = None
    if env_platform(platformio_env, board_config) == ST_PLATFORM:
        env_settings = st_env_settings(env_option(platformio_env, board_config, "board"), settings)
    files["platformio.ini"] = platformio_ini(
        platformio_env,
        board_config,
        local_platform_uri(settings),
        platformio_core_dir(settings),
        description,
        env_settings,
    ).encode()
    return files


def _content_key(files: dict[str, bytes]) -> str:
    digest = hashlib.sha256(package_digest().encode())
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return digest.hexdigest()[:16]


def write_project(directory: Path, files: dict[str, bytes]) -> None:
    """Writes `files` into `directory` (created), each replaced whole; files of an earlier lowtide project there
    that this one no longer has are removed, the build folder is kept."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            target = directory / name
            if not target.is_file() or target.read_bytes() != content:
                write_atomically(target, content)
        for stale in (directory / "model", directory / "firmware"):
            for path in stale.rglob("*") if stale.is_dir() else ():
                if path.is_file() and path.relative_to(directory).as_posix() not in files:
                    path.unlink()
        if PROJECT_SPEC not in files:
            (directory / PROJECT_SPEC).unlink(missing_ok=True)
    except OSError as exc:
        raise LowtideError(f"cannot write the firmware project: {exc.strerror or exc}", directory) from None


def cached_project_dir(
    platformio_env: str, runtime: str, model: Graph | None, files: dict[str, bytes], settings: Settings
) -> Path:
    """The cache folder of a project with these files: the same files, the same folder, on any checkout."""
    stem = Path(model.name).stem[:40] if model else "no-model"
    return cache_dir(settings, "firmware") / f"{platformio_env}-{runtime}-{stem}-{_content_key(files)}"


def env_option(platformio_env: str, board_config: Path | None, option: str) -> str:
    """An option of an env (following `extends`), as the project file says it; "" if none sets it."""
    config = _read_ini(platformio_ini(platformio_env, board_config, LOCAL_PLATFORM_URI, Path("."), ""), PLATFORMIO_INI)
    section, seen = f"env:{platformio_env}", set()
    while section and section not in seen and config.has_section(section):
        seen.add(section)
        if config.has_option(section, option):
            return config.get(section, option)
        parents = config.get(section, "extends", fallback="").split(",")
        section = parents[0].strip()
        if section and not config.has_section(section) and config.has_section(f"env:{section}"):
            section = f"env:{section}"
    return ""


def env_platform(platformio_env: str, board_config: Path | None) -> str:
    """The `platform` an env builds with, as the project file says it."""
    return env_option(platformio_env, board_config, "platform")


def platform_installed(platform: str, settings: Settings) -> bool:
    """A registry platform PlatformIO already has in lowtide's core dir (so it builds without the registry)."""
    name = platform.split("@")[0].split("/")[-1]
    return (platformio_core_dir(settings) / "platforms" / name).is_dir()
