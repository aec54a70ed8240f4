"""A model as lowtide takes it in: read, and checked by every stage that can judge it, before anything runs it.

The model's own checks (`lowtide.model.validate`) judge what the graph alone says; whether its
OfflineMemoryAllocation puts tensors live at the same time on the same bytes is judged by TFLM's lifetimes and
in-place rules, the memory stage's (`lowtide.memory.plan_check`). A model a user gives goes through both
(`load_model`), and so does every model lowtide writes or runs on the host TFLM (`model_problems`).
"""

from __future__ import annotations

from pathlib import Path

from lowtide.memory.plan_check import plan_problems
from lowtide.model.ir import Graph
from lowtide.model.reader import load_bytes, read_model
from lowtide.model.validate import Problem, graph_problems, refuse_problems
from lowtide.settings import Settings, settings_or_read


def model_problems(graph: Graph, settings: Settings | None = None) -> list[Problem]:
    """Every problem in `graph`: the model's checks', in their order, then, on a model that passes them, the
    offline plan's overlap. The tensor limit is the settings' (the environment's when none are given)."""
    limit = settings_or_read(settings).max_tensor_bytes
    return graph_problems(graph, limit) or plan_problems(graph)


def load_model(path: str | Path, settings: Settings | None = None) -> Graph:
    """The validated graph of the model file at `path`; ModelError names the file and its first problem (and how
    many more there are)."""
    graph = read_model(load_bytes(path), str(path))
    return refuse_problems(graph, model_problems(graph, settings))
