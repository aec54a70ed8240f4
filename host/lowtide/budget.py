"""Search budgets in units of work that the searches count themselves, and the wall clock as a safety net only.

The same model and options must give the same output bytes on any machine under any load, so no search may stop
because time ran out. Each one charges a `WorkBudget` for what it does (`lowtide.schedule`: a state popped, a beam
step, a minimum cut; `lowtide.memory.placement`: CP-SAT's deterministic time) and stops once the budget is spent.
Phases split a budget as they once split time: a share of what is left (`share`) or at most so many units
(`limit`), on one counter, so what one phase leaves goes to the next.

A `WallClock` still ends a search that runs far longer than its budget should (a pathological model, a machine
many times slower), and records where it did: a result cut by it can differ between runs, and every report
built on one says so (`wall_clock_cuts`).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

# Default safety net of a whole `lowtide optimize` run, or of one search called on its own: far above what any
# budget takes on the shared models beside two CPU-bound jobs, so that it never decides a result there.
DEFAULT_WALL_SECONDS = 600.0


class WallClock:
    """A deadline no search runs past, and the searches it cut, in the order they were cut."""

    def __init__(self, seconds: float = DEFAULT_WALL_SECONDS):
        self.deadline = time.monotonic() + seconds
        self.cuts: list[str] = []

    def seconds_left(self) -> float:
        return max(self.deadline - time.monotonic(), 0.0)

    def passed(self, where: str) -> bool:
        """Whether the deadline has passed; if so, `where` is recorded as cut (once)."""
        if time.monotonic() <= self.deadline:
            return False
        if where not in self.cuts:
            self.cuts.append(where)
        return True


class _Counter:
    """Units charged so far, shared by every budget split from one root."""

    def __init__(self) -> None:
        self.done = 0.0


@dataclass(frozen=True)
class WorkBudget:
    """The units a search may still do: spent once the shared counter reaches `until`, or the wall clock's
    deadline passes (which records `where`)."""

    until: float
    where: str
    clock: WallClock
    counter: _Counter

    @classmethod
    def of(cls, units: float, where: str, clock: WallClock | None = None) -> WorkBudget:
        """A budget of its own counter: `units` (math.inf: only the wall clock ends the search)."""
        return cls(units, where, clock or WallClock(), _Counter())

    @property
    def done(self) -> float:
        """Units charged so far on the shared counter (differences of it: what a phase took)."""
        return self.counter.done

    @property
    def left(self) -> float:
        return max(self.until - self.counter.done, 0)

    def charge(self, units: float) -> None:
        self.counter.done += units

    def spent(self) -> bool:
        return self.counter.done >= self.until or self.clock.passed(self.where)

    def share(self, fraction: float, where: str | None = None) -> WorkBudget:
        """A phase that may use `fraction` of what is left (named `where` in a wall-clock cut, if given)."""
        units = fraction * self.left if fraction > 0 else 0.0  # 0 x an unlimited budget is none, not NaN
        return dataclasses.replace(self, until=self.counter.done + units, where=where or self.where)

    def limit(self, units: float) -> WorkBudget:
        """A phase that may use at most `units` of what is left."""
        return dataclasses.replace(self, until=min(self.until, self.counter.done + units))
