"""A measurement against its baseline: which figures grew past their tolerance, and a message that says so.

Every figure is "lower is better": growth past the tolerance is a regression, a drop never is (it is listed as an
improvement, a hint to record new baselines). Outputs must match the host TFLM interpreter bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from lowtide.hil.baselines import MEMORY_FIGURE, Baseline, BaselineKey, Figure


@dataclass(frozen=True)
class Tolerances:
    """How much each figure may grow over its baseline. For the arena figures the larger of `arena_bytes` and
    `arena_percent` applies (both 0: exact). None for latency or cycles: not compared."""

    arena_bytes: int = 0
    arena_percent: float = 0.0
    latency_percent: float | None = 20.0  # wall-clock median, microseconds
    cycles_percent: float | None = 1.0  # cycle-counter median (deterministic on emulated boards)
    outputs: bool = True  # outputs must equal the host TFLM interpreter's on the same inputs

    def __post_init__(self) -> None:
        for name in ("arena_bytes", "arena_percent", "latency_percent", "cycles_percent"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"tolerance {name} must be >= 0, got {value}")

    def limit(self, figure: str, before: int) -> tuple[int | None, str]:
        """The largest value `figure` may reach from `before`, and how the limit reads; (None, ...) if the figure
        is not compared."""
        kind = figure_kind(figure)
        if kind == "arena":
            allowed = max(self.arena_bytes, int(before * self.arena_percent / 100))
            return before + allowed, f"+{allowed:,} B"
        percent = self.latency_percent if kind == "latency" else self.cycles_percent
        if percent is None:
            return None, "not compared"
        return before + int(before * percent / 100), f"+{percent:g}%"


class ToleranceOverrides(TypedDict, total=False):
    """Fields of `Tolerances` that one check sets otherwise (`assert_no_regression(result, **overrides)`)."""

    arena_bytes: int
    arena_percent: float
    latency_percent: float | None
    cycles_percent: float | None
    outputs: bool


# figure -> kind (which tolerance applies) and unit; outputs_match is checked on its own.
FIGURE_KINDS = {
    "arena_used_bytes": "arena",
    "board_planned_bytes": "arena",
    "arena_high_water_bytes": "arena",
    "latency_median_us": "latency",
    "latency_median_cycles": "cycles",
    "modelled_cycles_median": "modelled",  # the cycle model's: held to the cycle tolerance, in cycles
}


def figure_kind(figure: str) -> str:
    """Which tolerance applies to `figure`: a memory's share of the arena (`arena_used_bytes[sram2]`) is an arena
    figure."""
    return "arena" if MEMORY_FIGURE.fullmatch(figure) else FIGURE_KINDS[figure]


UNITS = {
    "arena": "B",
    "latency": "us",
    "modelled": "cycles",
}  # the counter's unit is the board's (lowtide.device.measure.Latency.unit)


@dataclass(frozen=True)
class FigureChange:
    figure: str
    unit: str
    before: int | None
    after: int | None
    limit: int | None  # largest allowed value; None when not compared
    allowed: str  # the tolerance as the message shows it

    @property
    def before_after(self) -> tuple[int, int] | None:
        """(before, after) when both are known."""
        if self.before is None or self.after is None:
            return None
        return self.before, self.after

    @property
    def comparable(self) -> bool:
        return self.before_after is not None

    @property
    def regressed(self) -> bool:
        values = self.before_after
        return values is not None and self.limit is not None and values[1] > self.limit

    @property
    def improved(self) -> bool:
        """Dropped by more than the tolerance band (any drop for an exact figure): not noise."""
        values = self.before_after
        if values is None or self.limit is None:
            return False
        before, after = values
        return before - after > self.limit - before

    @property
    def percent(self) -> float | None:
        values = self.before_after
        if values is None or not values[0]:
            return None
        before, after = values
        return 100.0 * (after - before) / before

    def line(self) -> str:
        values = self.before_after
        if values is None:
            return f"{self.figure:<24} {_amount(self.before, self.unit)} -> {_amount(self.after, self.unit)}"
        delta = values[1] - values[0]
        percent = f" ({self.percent:+.1f}%)" if self.percent is not None else ""
        if self.limit is None:
            verdict = self.allowed  # "not compared", or why not
        else:
            state = "REGRESSED" if self.regressed else "improved" if self.improved else "ok"
            verdict = f"allowed {self.allowed}: {state}"
        return (
            f"{self.figure:<24} {_amount(self.before, self.unit):>14} -> {_amount(self.after, self.unit):<14} "
            f"{delta:+,} {self.unit}{percent}, {verdict}"
        )


@dataclass(frozen=True)
class Comparison:
    key: BaselineKey
    baseline: Baseline
    measured: Baseline
    changes: tuple[FigureChange, ...]
    outputs_required: bool

    @property
    def model_changed(self) -> bool:
        return self.baseline.model_sha256 != self.measured.model_sha256

    @property
    def outputs_regressed(self) -> bool:
        return self.outputs_required and self.measured.figures.get("outputs_match") is not True

    @property
    def regressions(self) -> tuple[FigureChange, ...]:
        return tuple(c for c in self.changes if c.regressed)

    @property
    def improvements(self) -> tuple[FigureChange, ...]:
        return tuple(c for c in self.changes if c.improved)

    @property
    def regressed(self) -> bool:
        return bool(self.regressions) or self.outputs_regressed

    def message(self, baselines_path: Path | None = None) -> str:
        head = "regressed" if self.regressed else "within tolerance"
        lines = [
            f"lowtide: {self.measured.model} {head} on {self.key.board} ({self.key.runtime})",
            f"  measurement {self.key.name}",
            f"  baseline recorded {self.baseline.recorded} by lowtide {self.baseline.lowtide_version}"
            + (f" in {baselines_path}" if baselines_path else ""),
        ]
        if self.model_changed:
            lines.append(
                f"  the model changed since its baseline: {self.baseline.model} sha256 "
                f"{self.baseline.model_sha256[:12]}... -> {self.measured.model} {self.measured.model_sha256[:12]}..."
            )
        lines += [f"  {change.line()}" for change in self.changes]
        before_outputs = _outputs(self.baseline.figures.get("outputs_match"))
        after_outputs = _outputs(self.measured.figures.get("outputs_match"))
        verdict = "REGRESSED" if self.outputs_regressed else "ok"
        lines.append(f"  {'outputs':<24} {before_outputs:>14} -> {after_outputs:<14} {verdict}")
        if self.regressed:
            lines.append("  if the new figures are intended, record them with --lowtide-update-baselines")
        return "\n".join(lines)


def compare(
    key: BaselineKey, baseline: Baseline, measured: Baseline, tolerances: Tolerances, counter_unit: str = "cycles"
) -> Comparison:
    """`counter_unit`: what the board's counter counts ("cycles", or an emulator's "instructions"). Where an
    emulator's instructions sit beside the cycle model's cycles in both, the cycles are what is held to the
    tolerance: code that runs more instructions in fewer cycles (single loads that pipeline in place of LDM) is
    faster, not a regression; the instructions are listed as they are."""
    units = {**UNITS, "cycles": counter_unit}
    modelled = all(b.figures.get("modelled_cycles_median") is not None for b in (baseline, measured))
    changes = []
    per_memory = sorted({f for f in (*baseline.figures, *measured.figures) if MEMORY_FIGURE.fullmatch(f)})
    for figure in (*FIGURE_KINDS, *per_memory):
        kind = figure_kind(figure)
        before, after = baseline.figures.get(figure), measured.figures.get(figure)
        if before is None and after is None:
            continue  # a figure this board does not have (no cycle counter, cannot paint its arena)
        limit, allowed = tolerances.limit(figure, before) if before is not None else (None, "no baseline figure")
        if kind == "cycles" and counter_unit == "instructions" and modelled:
            limit, allowed = None, "listed (modelled cycles compared)"
        changes.append(FigureChange(figure, units[kind], _int(before), _int(after), limit, allowed))
    return Comparison(key, baseline, measured, tuple(changes), tolerances.outputs)


def _int(value: Figure) -> int | None:
    return None if value is None else int(value)


def _amount(value: int | None, unit: str) -> str:
    return "n/a" if value is None else f"{value:,} {unit}"


def _outputs(match: Figure) -> str:
    words: dict[Figure, str] = {True: "match", False: "MISMATCH"}
    return words.get(match, "n/a")
