"""The emulated boards' cycle model: lowtide's QEMU plugin (firmware/timing/lt_cycles_plugin.c), built once per
machine into the user cache with the host C compiler against QEMU's published plugin header, and the windows it
reports.

QEMU counts instructions; the plugin charges each one the cycles the core's Technical Reference Manual gives it and
writes the cycles between the firmware's timing marks (firmware/bsp/lt_timing.h: one window per timed invocation)
to a file, a line `<cycles> <instructions>` per window as it closes. The QEMU driver loads it with `-plugin` when it
is handed a `CycleModel`; the device layer reads the windows after the run.

The header is not part of Debian's QEMU packages: `LOWTIDE_QEMU_PLUGIN_HEADER` names the folder holding
`qemu-plugin.h` (QEMU's `include/qemu/`, from QEMU's source of the installed version). Without it the emulated
boards report instructions only, and say so in one warning line.
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

from lowtide.device.spec import BoardSpec
from lowtide.errors import LowtideError
from lowtide.resources import FIRMWARE_DIR
from lowtide.settings import QEMU_PLUGIN_HEADER_SETTING, Settings
from lowtide.storage import cache_dir, cached_folder

PLUGIN_SOURCE = FIRMWARE_DIR / "timing" / "lt_cycles_plugin.c"
PLUGIN_HEADER = "qemu-plugin.h"
_PLUGIN_NAME = "lt_cycles.so"

# The board file's core -> the plugin's timing (`core=`); a core not listed has no model (its board counts
# instructions only).
_CORE_TIMINGS = {
    "cortex-m4": "m4",
    "cortex-m4f": "m4",
    "cortex-m33": "m33",
    "cortex-m55": "m55",
    "cortex-m7": "m7",
    "cortex-m7-sp": "m7",
}
# What every figure the model gives assumes, as the output says it.
ASSUMPTIONS = "zero-wait-state memory, no caches"


@dataclass(frozen=True)
class CycleModelInfo:
    """What modelled cycles are, as the output reports them: whose timing, and what it assumes."""

    core: str  # the board file's core, e.g. "cortex-m4f", whose TRM timing the model applies
    assumes: str = ASSUMPTIONS


@dataclass(frozen=True)
class CycleModel:
    """The plugin built for a run, the core whose timing it applies, and the file it writes the windows to."""

    plugin: Path
    core: str  # the board file's core, e.g. "cortex-m4f"
    windows: Path

    @property
    def info(self) -> CycleModelInfo:
        return CycleModelInfo(self.core)

    def qemu_arguments(self) -> tuple[str, ...]:
        return ("-plugin", f"{self.plugin},core={_CORE_TIMINGS[self.core]},out={self.windows}")

    def read_windows(self) -> list[CycleWindow]:
        """The windows closed so far, in order (an absent file: none)."""
        try:
            text = self.windows.read_text()
        except FileNotFoundError:
            return []
        windows = []
        for line in text.splitlines():
            cycles, instructions = line.split()
            windows.append(CycleWindow(int(cycles), int(instructions)))
        return windows


@dataclass(frozen=True)
class CycleWindow:
    """One window between the firmware's timing marks: one timed invocation."""

    cycles: int
    instructions: int


def has_timing(core: str) -> bool:
    """Whether the plugin models `core` (a board file's core)."""
    return core in _CORE_TIMINGS


def header_missing_warning() -> str:
    return (
        f"no cycle model: QEMU's {PLUGIN_HEADER} not found; set {QEMU_PLUGIN_HEADER_SETTING} to the folder "
        "holding it (include/qemu/ of QEMU's source for the installed version): latency is in instructions only"
    )


def plugin_header_dir(settings: Settings) -> Path | None:
    """The folder holding QEMU's plugin header, as the settings name it; None when unset or not there."""
    if not settings.qemu_plugin_header:
        return None
    folder = Path(settings.qemu_plugin_header).expanduser()
    return folder if (folder / PLUGIN_HEADER).is_file() else None


def build_plugin(header_dir: Path, settings: Settings) -> Path:
    """The plugin compiled from the shipped source against `header_dir`'s header, once per machine: the cache entry
    is named by both files' contents (cycle-model/<sha256>/lt_cycles.so)."""
    source = PLUGIN_SOURCE.read_bytes()
    header = (header_dir / PLUGIN_HEADER).read_bytes()
    key = hashlib.sha256(source + b"\0" + header).hexdigest()[:32]
    target = cache_dir(settings, "cycle-model") / key

    def fill(staging: Path) -> None:
        (staging / PLUGIN_HEADER).write_bytes(header)  # the header it was built against, beside it
        command = [
            settings.compiler,
            "-O2",
            "-shared",
            "-fPIC",
            "-std=gnu11",
            f"-I{staging}",
            "-o",
            str(staging / _PLUGIN_NAME),
            str(PLUGIN_SOURCE),
        ]
        try:
            result = subprocess.run(command, capture_output=True, text=True)
        except OSError as exc:
            raise LowtideError(
                f"cannot run the host C compiler '{settings.compiler}' (set CC): {exc.strerror}"
            ) from None
        if result.returncode != 0:
            detail = (result.stderr.strip().splitlines() or ["no message"])[0]
            raise LowtideError(f"building the cycle-model plugin failed: {detail}", PLUGIN_SOURCE)

    return cached_folder(target, fill) / _PLUGIN_NAME


def for_board(spec: BoardSpec | None, windows: Path, settings: Settings) -> tuple[CycleModel | None, str | None]:
    """The cycle model for a run on the board `spec` describes, writing its windows to `windows`, built once per
    machine: None for a board that is not emulated or whose core it does not model; None and a warning (one line
    saying how to get one) without QEMU's plugin header."""
    if spec is None or not spec.emulated or not has_timing(spec.core):
        return None, None
    header_dir = plugin_header_dir(settings)
    if header_dir is None:
        return None, header_missing_warning()
    return CycleModel(build_plugin(header_dir, settings), spec.core, windows), None
