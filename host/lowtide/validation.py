"""A model as lowtide takes it in: read, and checked by every stage that can judge it, before anything runs it.

The model's own checks (`lowtide.model.validate`) judge what the graph alone says; whether its
OfflineMemoryAllocation puts tensors live at the same time on the same bytes is judged by TFLM's lifetimes and
in-place rules, the memory stage's (`lowtide.memory.plan_check`). A model a user gives goes through both
(`load_model`), and so does every model lowtide writes or runs on the host TFLM (`model_problems`). A file is read
and validated here once, where a command or the pytest plugin takes it in; every later stage is handed the graph.

Each command says what it relies on (`relies_on`, a set of `Reliance`s; every one by default): a problem of a
check only stages relying on something else guard (a declared output shape an operator does not compute, which
TFLM allocates and runs anyway) does not refuse the model, and comes back as a warning the command prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lowtide.memory.plan_check import plan_problems
from lowtide.model.ir import Graph
from lowtide.model.reader import load_bytes, read_model
from lowtide.model.validate import (
    EVERY_RELIANCE,
    Problem,
    Reliance,
    graph_problems,
    refuse_problems,
    reliances_passed,
)
from lowtide.settings import Settings, settings_or_read


@dataclass(frozen=True)
class LoadedModel:
    """A model a command takes in, and the problems it goes ahead with (each one line: `Problem.warning`)."""

    graph: Graph
    warnings: tuple[Problem, ...]

    @property
    def passed(self) -> frozenset[Reliance]:
        """What the model passes every check of: what a model derived from it must pass too."""
        return reliances_passed(self.warnings)


def model_problems(graph: Graph, settings: Settings | None = None) -> list[Problem]:
    """Every problem in `graph`: the model's checks', in their order, then, on a model whose structure passes
    them (only checks some stages rely on may find something), the offline plan's overlap. The tensor limit is
    the settings' (the environment's when none are given)."""
    limit = settings_or_read(settings).max_tensor_bytes
    problems = graph_problems(graph, limit)
    if any(p.relied_on is None for p in problems):
        return problems
    return problems + plan_problems(graph)


def refused_problems(
    graph: Graph, settings: Settings | None = None, relies_on: frozenset[Reliance] = EVERY_RELIANCE
) -> list[Problem]:
    """The problems in `graph` a stage relying on `relies_on` refuses it for."""
    return [p for p in model_problems(graph, settings) if p.refused_by(relies_on)]


def load_checked(
    path: str | Path, settings: Settings | None = None, relies_on: frozenset[Reliance] = EVERY_RELIANCE
) -> LoadedModel:
    """The validated graph of the model file at `path` for a command relying on `relies_on`, and the problems it
    does not rely on; ModelError names the file and its first refused problem (and how many more there are)."""
    graph = read_model(load_bytes(path), str(path))
    problems = model_problems(graph, settings)
    refuse_problems(str(path), [p for p in problems if p.refused_by(relies_on)])
    return LoadedModel(graph, tuple(p for p in problems if not p.refused_by(relies_on)))


def load_model(
    path: str | Path, settings: Settings | None = None, relies_on: frozenset[Reliance] = EVERY_RELIANCE
) -> Graph:
    """The validated graph of the model file at `path` (`load_checked`'s, without its warnings: for a command
    that relies on everything, or that took the model in with them already)."""
    return load_checked(path, settings, relies_on).graph
