"""What one rewrite search minimises (`Objective`) and the budgets it runs to (`Limits`): each schedule and
placement inside it gets a fixed number of work units (`lowtide.budget`) times the effort, never the time left, so
the tiling found is the same on any machine; the wall clock is only the safety net."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from lowtide.budget import WallClock, WorkBudget
from lowtide.memory.tail import persistent_tail
from lowtide.model.ir import Graph
from lowtide.model.validate import Reliance
from lowtide.rewrite.cost import tail_floor
from lowtide.rewrite.regions import TilingPlan
from lowtide.settings import Settings

# Work units (`lowtide.budget`) of each search inside the rewrite search, at effort 1: a schedule of the graph
# (about 5 s of one quiet core, the former limit), a placement of each built candidate and of the model returned
# (1/8 and 1 deterministic second of CP-SAT: the former 1 s and 4 s, and enough to prove the tiled mobilenet_v2's
# placement, which needs 0.48). Fixed per call, so a round searches as much whatever the rounds before it took.
RESCHEDULE_UNITS = 1_250_000
PLACE_UNITS = 250_000
FINAL_PLACE_UNITS = 2_000_000


class Objective(enum.StrEnum):
    """What the rewrite search minimises."""

    # The arena a TFLM user declares: the head and TFLM's persistent tail, which every patch's operators and
    # tensors grow (`lowtide.memory.tail`): what `lowtide optimize` writes for.
    ARENA = "arena"
    # The head alone: the RAM of a runtime without TFLM's per-operator state (the compiled runtime).
    HEAD = "head"


@dataclass(frozen=True)
class Limits:
    """The budgets of one rewrite search: `effort` times the fixed ones above, and the safety net; and what it
    minimises."""

    effort: float
    clock: WallClock
    settings: Settings  # the command's: the host TFLM's timeout for each candidate's run
    relies_on: frozenset[Reliance]  # what the original passes every check of, so every candidate must too
    objective: Objective
    streams: bool = True  # stream strips are weighed beside patch grids (`lowtide.rewrite.regions.plan_streaming`)

    def tail(self, graph: Graph) -> int:
        """The tail the search weighs beside the head: TFLM's, or none (`Objective.HEAD`)."""
        return persistent_tail(graph).tail_bytes if self.objective is Objective.ARENA else 0

    def tail_floor(self, graph: Graph, plan: TilingPlan, tail_bytes: int) -> int:
        return tail_floor(graph, plan, tail_bytes) if self.objective is Objective.ARENA else 0

    def schedule(self) -> WorkBudget:
        return WorkBudget.of(self.effort * RESCHEDULE_UNITS, "rewrite: schedule", self.clock)

    def placement(self, units: float = PLACE_UNITS) -> WorkBudget:
        return WorkBudget.of(self.effort * units, "rewrite: placement", self.clock)

    def cut(self) -> bool:
        """Whether the safety net ends the search over regions and candidates here."""
        return self.clock.passed("rewrite: candidates")
