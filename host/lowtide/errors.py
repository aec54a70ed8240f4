"""Errors a user can act on. The CLI prints them as one line and exits with status 2."""

from __future__ import annotations

from pathlib import Path


class LowtideError(Exception):
    """A problem with the user's input or environment, phrased for the user."""

    def __init__(self, message: str, path: str | Path | None = None):
        self.path = str(path) if path is not None else None
        self.message = message  # without the path, for a reply that names the file elsewhere
        super().__init__(f"{self.path}: {message}" if self.path else message)


class ModelError(LowtideError):
    """The .tflite file cannot be read or is not a model lowtide understands."""


# How a user gets each outside program lowtide runs (Debian's package names; any distribution's equivalents do).
_TOOL_SOURCES = {
    "arm": "the Arm GNU toolchain (Debian: apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi "
    "libstdc++-arm-none-eabi-dev)",
    "qemu-system-arm": "QEMU's Arm system emulator (Debian: apt-get install qemu-system-arm)",
    "platformio": "PlatformIO (pip install platformio==6.2.0 scons)",
}


def missing_tool(tool: str) -> LowtideError:
    """One line for a program lowtide needs and cannot find, saying how to install it."""
    source = _TOOL_SOURCES["arm" if tool.startswith("arm-none-eabi-") else tool]
    return LowtideError(f"{tool} not found: install {source}")
