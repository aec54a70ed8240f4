"""A built firmware's static RAM (.data + .bss) split by who needs it: the model's arena, the runtime's own writable
globals, and the measuring harness, from the symbol tables of the ELF and of the objects it was linked from.

The harness is what only `lowtide measure` needs: the protocol's frame buffers and samples, the input staging
buffer (a copy of every input, filled over the serial line before a run), the HELLO record, the board's tick
counters and the painted slack after a compiled arena. A product firmware keeps the arena and the runtime's
globals: the compiled runtime's state struct, or TFLM's interpreter, op resolver and allocator objects and the
library's own statics. The C library's few globals and the linker's alignment padding are counted with the
runtime, which makes the three parts add up to the sections' total.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from lowtide.errors import LowtideError, missing_tool

# Objects of the measuring harness, by their folder in the PlatformIO build directory: the application (src/: the
# server, main, arena painting and the model glue), the protocol framing and the board support.
_HARNESS_FOLDERS = ("src", "protocol", "bsp")
# The TFLM glue (firmware/app/lt_model_tflm.cc) keeps TFLM's own objects in static storage of its own: the runtime's.
_RUNTIME_IN_GLUE = frozenset({"resolver_storage", "interpreter_storage", "tflm"})
_ARENAS = frozenset({"arena", "persistent_arena"})  # the model glues' arena arrays (TFLM's two, where it has two)
_STATIC_RAM_SECTIONS = (".data", ".bss")  # and in objects, their per-symbol sections (.bss.<name>)


@dataclass(frozen=True)
class StaticRamSplit:
    arena_bytes: int  # the model's arena in static RAM: the compiled plan, or TFLM's arenas there (not in a memory
    # of their own: lowtide.tflm.regions)
    runtime_bytes: int  # the runtime's writable globals, with the C library's and alignment padding
    harness_bytes: int  # only the measuring firmware needs these (module docstring)
    stack_bytes: int  # the stack region the linker script reserves (the measured depth is in RESULT)

    @property
    def model_ram_bytes(self) -> int:
        """What a product firmware running this model needs besides its stack: the arena and the runtime's globals."""
        return self.arena_bytes + self.runtime_bytes


def _nm(path: Path) -> list[tuple[str, int]]:
    """(demangled name without its namespaces, size) of every symbol `path` defines in .data or .bss (an arena
    placed in a memory of its own, lowtide.tflm.regions, is in neither: it is not static RAM of the image's)."""
    tool = shutil.which("arm-none-eabi-nm")
    if tool is None:
        raise missing_tool("arm-none-eabi-nm")
    try:
        done = subprocess.run(
            [tool, "-S", "-C", "--defined-only", "--format=sysv", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise LowtideError("arm-none-eabi-nm took longer than 60 s", path) from None
    if done.returncode != 0:
        raise LowtideError(f"arm-none-eabi-nm failed: {done.stderr.strip() or done.returncode}", path)
    symbols = []
    for line in done.stdout.splitlines():
        fields = [f.strip() for f in line.split("|")]  # name, value, class, type, size, line, section
        if len(fields) == 7 and fields[4] and fields[6].startswith(_STATIC_RAM_SECTIONS):
            symbols.append((fields[0].rsplit("::", 1)[-1], int(fields[4], 16)))
    return symbols


def static_ram_split(elf: Path, static_ram_bytes: int, stack_bytes: int, arena_slack_bytes: int) -> StaticRamSplit:
    """Split `elf`'s `static_ram_bytes`: its arena array (less `arena_slack_bytes`, painted beyond a compiled plan,
    which is the harness's), the symbols defined by the harness's objects in the build directory next to `elf`,
    and the runtime's (the rest)."""
    linked = _nm(elf)
    harness_objects = [o for folder in _HARNESS_FOLDERS for o in sorted((elf.parent / folder).rglob("*.o"))]
    harness_symbols = {symbol for o in harness_objects for symbol in _nm(o)}
    arena = sum(size for name, size in linked if name in _ARENAS)
    harness = sum(
        size
        for name, size in linked
        if (name, size) in harness_symbols and name not in _ARENAS and name not in _RUNTIME_IN_GLUE
    )
    if arena:  # the compiled arena's slack is in static RAM with it, not where it went to a memory of its own
        harness += arena_slack_bytes
        arena -= arena_slack_bytes
    return StaticRamSplit(
        arena_bytes=arena,
        runtime_bytes=static_ram_bytes - arena - harness,
        harness_bytes=harness,
        stack_bytes=stack_bytes,
    )
