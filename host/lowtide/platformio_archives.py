"""PlatformIO's ST platform and STM32Cube frameworks from archives, for machines that cannot reach its registry.

With `LOWTIDE_PLATFORMIO_ARCHIVES` naming a folder of PlatformIO's own packages as archives (`platform-ststm32.tar.gz`,
`framework-stm32cubef4.tar.gz`, ... f7, l4, h7), the generated project of an env on `platform = ststm32` names them
instead of the registry: each archive is unpacked once into the user cache (the platform's stm32cube builder writes
into its framework folder, so never in place) and handed to PlatformIO as `platform = symlink://DIR` and
`platform_packages = platformio/NAME@symlink://DIR`. Two shims, written into the cache by lowtide, complete them:

- `toolchain-gccarmnoneeabi`: a package whose bin/ links to Debian's arm-none-eabi tools on PATH. Handed in per env
  it overrides the platform's version range; registered globally it would be refused, and PlatformIO would go to
  the registry.
- `tool-ldscripts-ststm32`: empty. The platform requires it for stm32cube; lowtide's envs bring their own linker
  scripts (firmware/bsp/stm32/ld).

An upload (`pio run -t upload`) requires every uploader package the platform lists, whatever `upload_protocol`
says: lowtide registers its tool-openocd shim (firmware/tools/tool-openocd, over the system's OpenOCD) and, for the
others, empty placeholders (`st_uploader_placeholders`) in its core dir (lowtide.project).

Without the setting an ST env's project names `ststm32` and PlatformIO installs the same packages from its registry.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tarfile
from functools import cache
from pathlib import Path

from lowtide.errors import LowtideError, missing_tool
from lowtide.settings import ARCHIVES_SETTING, Settings
from lowtide.storage import cache_dir, cached_folder

ST_PLATFORM = "ststm32"
_PLATFORM_PACKAGE = "platform-ststm32"
_OWNER = "platformio"  # how the registry names these packages' owner; PlatformIO matches on it
# tool-openocd is lowtide's shim (firmware/tools/tool-openocd); the platform drops tool-jlink unless J-Link is used.
_UPLOADERS_NOT_PLACEHELD = ("tool-openocd", "tool-jlink")


def archives_dir(settings: Settings) -> Path | None:
    """The folder `LOWTIDE_PLATFORMIO_ARCHIVES` names, or None if it is not set."""
    configured = settings.platformio_archives
    if not configured:
        return None
    folder = Path(configured).expanduser()
    if not folder.is_dir():
        raise LowtideError(f"{ARCHIVES_SETTING} names {folder}, which is not a folder")
    return folder


def _archive(folder: Path, package: str) -> Path:
    path = folder / f"{package}.tar.gz"
    if not path.is_file():
        raise LowtideError(
            f"no {path.name} in {folder} ({ARCHIVES_SETTING}): PlatformIO's {package} is needed "
            f"and the registry it comes from is not used"
        )
    return path


def _unpacked(archive: Path, package: str, settings: Settings) -> Path:
    """The archive's `package/` folder, unpacked once into the cache, named by the archive's content."""
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()[:12]

    def fill(staging: Path) -> None:
        try:
            with tarfile.open(archive) as tar:
                tar.extractall(
                    staging, members=[m for m in tar.getmembers() if m.name.startswith(f"{package}/")], filter="data"
                )
        except (tarfile.TarError, EOFError) as exc:
            raise LowtideError(f"cannot unpack {archive.name}: {exc}", archive) from None
        if not (staging / package).is_dir():
            raise LowtideError(f"{archive.name} holds no {package}/ folder", archive)

    return cached_folder(cache_dir(settings, "platformio", "archives") / f"{package}-{digest}", fill) / package


def _manifest(name: str, version: str) -> dict[str, str]:
    piopm = {
        "type": "tool",
        "name": name,
        "version": version,
        "spec": {"owner": _OWNER, "id": None, "name": name, "requirements": None, "uri": None},
    }
    package = {
        "name": name,
        "version": version,
        "system": "*",
        "description": "lowtide's offline stand-in for PlatformIO's registry package",
    }
    return {".piopm": json.dumps(piopm), "package.json": json.dumps(package, indent=2) + "\n"}


def _shim(name: str, version: str, links: dict[str, str], settings: Settings) -> Path:
    """A package folder in the cache: the manifests PlatformIO reads, and `links` (path in the package: target)."""
    files = _manifest(name, version)
    digest = hashlib.sha256(json.dumps([files, sorted(links.items())]).encode()).hexdigest()[:12]

    def fill(staging: Path) -> None:
        for path, text in files.items():
            (staging / path).write_text(text)
        for path, target in links.items():
            (staging / path).parent.mkdir(parents=True, exist_ok=True)
            (staging / path).symlink_to(target)

    return cached_folder(cache_dir(settings, "platformio", "shims") / f"{name}-{digest}", fill)


@cache
def _debian_toolchain() -> tuple[str, dict[str, str]]:
    """The PATH toolchain's version as PlatformIO spells it (GCC 12.2.1: 1.120201.0) and its tools' bin/ links."""
    gcc = shutil.which("arm-none-eabi-gcc")
    if gcc is None:
        raise missing_tool("arm-none-eabi-gcc")
    done = subprocess.run([gcc, "-dumpversion"], capture_output=True, text=True, check=False)
    major, minor, patch = ([*map(int, done.stdout.strip().split(".")), 0, 0])[:3]
    tools = sorted(p for p in Path(gcc).resolve().parent.glob("arm-none-eabi-*") if p.is_file())
    return f"1.{major:02d}{minor:02d}{patch:02d}.0", {f"bin/{p.name}": str(p) for p in tools}


def _framework_package(platform_dir: Path, board: str) -> str:
    """The STM32Cube framework package of a board: the platform's board JSON names the MCU (stm32f446ret6: f4)."""
    board_json = platform_dir / "boards" / f"{board}.json"
    try:
        mcu = json.loads(board_json.read_text())["build"]["mcu"]
    except FileNotFoundError:
        raise LowtideError(f"PlatformIO's {ST_PLATFORM} platform has no board {board!r}") from None
    except (OSError, ValueError, KeyError) as exc:
        raise LowtideError(f"cannot read the board's MCU: {exc}", board_json) from None
    return f"framework-stm32cube{mcu[5:7].lower()}"


def _platform_dir(folder: Path, settings: Settings) -> Path:
    return _unpacked(_archive(folder, _PLATFORM_PACKAGE), _PLATFORM_PACKAGE, settings)


def st_uploader_placeholders(settings: Settings) -> list[Path]:
    """Empty packages named as the ST platform's uploaders other than OpenOCD (stm32flash, dfu-util, ...): PlatformIO
    requires each of them for an upload, and lowtide's ST envs upload with ST-LINK through OpenOCD, so none of them
    ever runs. None without `LOWTIDE_PLATFORMIO_ARCHIVES` (the registry provides the real ones)."""
    folder = archives_dir(settings)
    if folder is None:
        return []
    manifest = _platform_dir(folder, settings) / "platform.json"
    try:
        packages = json.loads(manifest.read_text())["packages"]
    except (OSError, ValueError, KeyError) as exc:
        raise LowtideError(f"cannot read the platform's packages: {exc}", manifest) from None
    return [
        _shim(name, package["version"].lstrip("~^"), {}, settings)
        for name, package in sorted(packages.items())
        if package.get("type") == "uploader" and name not in _UPLOADERS_NOT_PLACEHELD
    ]


def st_env_settings(board: str, settings: Settings) -> dict[str, str] | None:
    """What an ST env's project sets to build `board` from the archives (platform, platform_packages); None when
    `LOWTIDE_PLATFORMIO_ARCHIVES` is not set (PlatformIO's registry provides them)."""
    folder = archives_dir(settings)
    if folder is None:
        return None
    platform_dir = _platform_dir(folder, settings)
    framework = _framework_package(platform_dir, board)
    framework_dir = _unpacked(_archive(folder, framework), framework, settings)
    toolchain = _shim("toolchain-gccarmnoneeabi", *_debian_toolchain(), settings)
    ldscripts = _shim("tool-ldscripts-ststm32", "0.2.0", {}, settings)
    packages = [
        f"{_OWNER}/{framework}@symlink://{framework_dir}",
        f"{_OWNER}/toolchain-gccarmnoneeabi@symlink://{toolchain}",
        f"{_OWNER}/tool-ldscripts-ststm32@symlink://{ldscripts}",
    ]
    return {"platform": f"symlink://{platform_dir}", "platform_packages": "\n" + "\n".join(packages)}


def st_archives_missing(board: str, settings: Settings) -> str | None:
    """Why an ST board cannot be built here from the archives (None: it can)."""
    try:
        return (
            None
            if st_env_settings(board, settings)
            else f"needs PlatformIO's registry (platform {ST_PLATFORM}) or {ARCHIVES_SETTING}"
        )
    except LowtideError as exc:
        return exc.message
