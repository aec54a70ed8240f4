"""What lowtide ships besides its Python code, read from the installed package: the firmware sources, the board
files, the local PlatformIO dev-platform and shims, and the PlatformIO envs (`platformio.ini`).

In a source checkout `host/lowtide/data/` links to the top-level `firmware/`, `boards/` and `platformio.ini`; a
wheel or sdist holds copies. Either way lowtide finds them through its own package, never through a checkout, so
an editable install and a wheel behave the same.
"""

from __future__ import annotations

import hashlib
import importlib.resources
from functools import cache
from pathlib import Path

DATA_DIR = Path(str(importlib.resources.files("lowtide") / "data"))
FIRMWARE_DIR = DATA_DIR / "firmware"
BOARDS_DIR = DATA_DIR / "boards"
PLATFORMIO_INI = DATA_DIR / "platformio.ini"
RUNTIME_DIR = FIRMWARE_DIR / "runtime"  # the compiled runtime's kernels
TFLM_GLUE_DIR = FIRMWARE_DIR / "tflm"  # DebugLog and the clock TFLM leaves to the platform, and the arena sizer
BSP_DIR = FIRMWARE_DIR / "bsp"
PROTOCOL_DIR = FIRMWARE_DIR / "protocol"
LOCAL_PLATFORM_DIR = FIRMWARE_DIR / "platform"  # the emulated boards' PlatformIO dev-platform
TOOL_SCONS_DIR = FIRMWARE_DIR / "tools" / "tool-scons"
TOOL_OPENOCD_DIR = FIRMWARE_DIR / "tools" / "tool-openocd"  # an ST board's upload without the registry
MPS_LINKER_SCRIPTS = LOCAL_PLATFORM_DIR / "ldscripts"  # a memory map per MPS machine, and the sections they share
# Not part of any firmware: build outputs a developer may have left in the checkout's firmware/.
_NOT_SHIPPED = ("__pycache__", "build", ".pio")


def shipped_files(directory: Path) -> list[Path]:
    """The files under `directory` that lowtide ships, sorted."""
    return sorted(
        p
        for p in directory.rglob("*")
        if p.is_file() and not any(part in _NOT_SHIPPED for part in p.relative_to(directory).parts)
    )


def tree_digest(directory: Path) -> str:
    """sha256 of the shipped files under `directory` (relative names and contents): a cache key for what is built
    from them."""
    digest = hashlib.sha256()
    for path in shipped_files(directory):
        digest.update(path.relative_to(directory).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@cache
def package_digest() -> str:
    """sha256 of this lowtide: its code and its data. What lowtide generates (firmware projects) depends on both."""
    package = Path(str(importlib.resources.files("lowtide")))
    digest = hashlib.sha256()
    for path in shipped_files(package):
        if path.suffix != ".pyc":
            digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
