"""The baselines file: the figures each measurement had when someone last accepted them.

One JSON file, keys sorted and indented so that a change reads well in review:

    {"format": 1,
     "boards": {BOARD: {RUNTIME: {NAME: {"model", "model_sha256", "lowtide_version", "recorded", "figures"}}}}}

Figures are named as `figures_of` names them; where TFLM's two arenas are in two of the board's memories, also
`arena_used_bytes[MEMORY]` per memory (`memory_figures`): files without them still load, and compare on the rest.
BOARD is the name the board gives itself, RUNTIME its runtime string (a new TFLM is a new set of baselines), NAME
the test (and measurement) that produced the entry. Writes go to a temporary file in the same directory, fsynced,
then `os.replace`d over the old one, so a run killed mid-write leaves the old file or the new one, never half of
each. Updates are merged under a lock into the file as it is at that moment: two runs that update different
entries keep both.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import lowtide
from lowtide.device.locking import locked
from lowtide.errors import LowtideError
from lowtide.storage import write_atomically

if TYPE_CHECKING:
    from lowtide.device.measure import MeasureResult

FORMAT_VERSION = 1

Figure = int | bool | None


@dataclass(frozen=True, order=True)
class BaselineKey:
    board: str
    runtime: str
    name: str


@dataclass(frozen=True)
class Baseline:
    model: str  # the model's file name, for messages
    model_sha256: str
    lowtide_version: str
    recorded: str  # ISO 8601, UTC
    figures: Mapping[str, Figure] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "model": self.model,
            "model_sha256": self.model_sha256,
            "lowtide_version": self.lowtide_version,
            "recorded": self.recorded,
            "figures": dict(self.figures),
        }

    @classmethod
    def from_json(cls, data: dict) -> Baseline:
        return cls(
            model=str(data["model"]),
            model_sha256=str(data["model_sha256"]),
            lowtide_version=str(data["lowtide_version"]),
            recorded=str(data["recorded"]),
            figures=dict(data["figures"]),
        )


def figures_of(result: MeasureResult) -> dict[str, Figure]:
    """The figures of a measurement that a baseline keeps and a later run is compared against."""
    return {
        "arena_used_bytes": result.arena_used_bytes,
        "board_planned_bytes": result.board_planned_bytes,
        "arena_high_water_bytes": result.arena_high_water_bytes,
        "latency_median_us": result.latency.median if result.latency else None,
        "latency_median_cycles": result.latency_cycles.median if result.latency_cycles else None,
        # An emulated board's cycle model (lowtide.device.drivers.cycle_model): cycles where the counter above
        # counts instructions, so a change that trades single-cycle arithmetic for loads and branches shows.
        "modelled_cycles_median": result.modelled_cycles.median if result.modelled_cycles else None,
        "outputs_match": result.outputs_match,
    }


def memory_figure(memory: str) -> str:
    """The figure of the arena bytes used in one of the board's memories."""
    return f"arena_used_bytes[{memory}]"


MEMORY_FIGURE = re.compile(r"arena_used_bytes\[[^\]]+\]")


def memory_figures(result: MeasureResult, arena_memory: str | None, persistent_memory: str | None) -> dict[str, Figure]:
    """Per memory, the arena bytes TFLM reports using there, where its two arenas are in two of the board's memories
    (`--persistent-region`): the non-persistent arena's (the head it planned) and the persistent one's (the tail).
    Empty with one arena, or both in one memory (arena_used_bytes says it all)."""
    if arena_memory is None or persistent_memory is None or arena_memory == persistent_memory:
        return {}
    return {
        memory_figure(arena_memory): result.board_planned_bytes,
        memory_figure(persistent_memory): result.arena_tail_bytes,
    }


def baseline_of(result: MeasureResult, memories: Mapping[str, Figure] | None = None) -> Baseline:
    """`memories`: the figures per memory (memory_figures), kept beside the others."""
    return Baseline(
        model=Path(result.model).name,
        model_sha256=result.model_sha256,
        lowtide_version=lowtide.__version__,
        recorded=datetime.now(UTC).isoformat(timespec="seconds"),
        figures={**figures_of(result), **(memories or {})},
    )


def load_baselines(path: Path) -> dict[BaselineKey, Baseline]:
    """The entries in `path`; none if the file does not exist yet."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise LowtideError(f"cannot read the baselines file: {exc.strerror}", path) from None
    try:
        data = json.loads(text)
        if data.get("format") != FORMAT_VERSION:
            raise LowtideError(
                f"baselines file has format {data.get('format')!r}, this lowtide reads {FORMAT_VERSION}", path
            )
        return {
            BaselineKey(board, runtime, name): Baseline.from_json(entry)
            for board, runtimes in data["boards"].items()
            for runtime, names in runtimes.items()
            for name, entry in names.items()
        }
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise LowtideError(
            f"baselines file is damaged ({type(exc).__name__}: {exc}); restore it from version control or delete "
            "it and record new baselines with --lowtide-update-baselines",
            path,
        ) from None


def dump_baselines(entries: Mapping[BaselineKey, Baseline]) -> str:
    boards: dict = {}
    for key, entry in entries.items():
        boards.setdefault(key.board, {}).setdefault(key.runtime, {})[key.name] = entry.to_json()
    return json.dumps({"format": FORMAT_VERSION, "boards": boards}, indent=2, sort_keys=True) + "\n"


def merge_baselines(path: Path, updates: Mapping[BaselineKey, Baseline], lock_timeout: float, lock_dir: Path) -> int:
    """Write `updates` into the baselines file, keeping every other entry as the file has it now (under a lock in
    `lock_dir`, the settings'). Returns the number of entries in the file afterwards."""
    resource = f"baselines:{path.resolve()}"
    with locked(resource, lock_timeout, f"baselines file {path}", lock_dir=lock_dir):
        # Every writer holds this lock, so a temporary file left now is from a writer that was killed.
        for stale in path.parent.glob(f".{path.name}.*.tmp"):
            stale.unlink(missing_ok=True)
        entries = load_baselines(path)
        entries.update(updates)
        write_atomically(path, dump_baselines(entries))
    return len(entries)
