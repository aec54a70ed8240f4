"""The layer contract of host/lowtide (docs/architecture.md): data flows one way through the stages, so a module
imports only modules of its own layer and of the layers before it. Every import counts: at module level, inside
functions and under `if TYPE_CHECKING`, since each is a dependency of the design whenever it runs.

Leaves are modules every stage may use (errors, paths, the user cache, budgets); they import no stage. The device
layer is handed what the stages before it compute (built images, expected outputs, predicted figures) by
`lowtide.pipeline`, so it imports none of the stages that run the host TFLM, predict, plan, schedule, rewrite or
compile; of the firmware's layer it uses `lowtide.project` (a project's folder and env, the runtimes' names) only.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

from support.package_imports import Import, module_imports, package_imports, package_modules

ARCHITECTURE_DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"

# First to last: each entry is one layer, the packages and modules in it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("lowtide.model",),
    ("lowtide.memory",),
    ("lowtide.validation",),  # a model as lowtide takes it in: the model's checks, then the memory plan's
    ("lowtide.oracle",),  # the host TFLM interpreter, which refuses what validation refuses
    ("lowtide.schedule",),
    ("lowtide.rewrite",),
    ("lowtide.stale",),
    ("lowtide.export", "lowtide.compile", "lowtide.tflm"),
    (
        "lowtide.runtimes",
        "lowtide.project",
        "lowtide.library",
    ),  # what a model's firmware is, before any board is involved
    ("lowtide.device",),
    ("lowtide.pipeline",),  # optimize, build and measure composed: the device layer is handed what they compute
    ("lowtide.hil", "lowtide.mlperf"),
    ("lowtide.testing",),  # models built with the builder, for tests, benchmarks and the CLI's demo command
    ("lowtide.cli", "lowtide.__main__"),
)
LEAVES = frozenset(
    {
        "lowtide",
        "lowtide.errors",
        "lowtide.text",
        "lowtide.storage",
        "lowtide.resources",
        "lowtide.budget",
        "lowtide.platformio_archives",
        "lowtide.settings",
    }
)
# Layers a layer does not reach although they are before it: the stages whose results it is handed.
NOT_IMPORTED_BY = {
    "lowtide.device": (
        "lowtide.oracle",
        "lowtide.runtimes",
        "lowtide.memory",
        "lowtide.schedule",
        "lowtide.rewrite",
        "lowtide.stale",
        "lowtide.export",
        "lowtide.compile",
    ),
}


def _within(module: str, part: str) -> bool:
    return module == part or module.startswith(part + ".")


def layer_of(module: str) -> int | None:
    """The position of `module`'s layer in LAYERS; -1 for a leaf; None for a module the table does not place."""
    if module in LEAVES:
        return -1
    found = [n for n, parts in enumerate(LAYERS) for part in parts if _within(module, part)]
    return found[0] if len(found) == 1 else None


def _part_of(module: str) -> str:
    return next(part for parts in LAYERS for part in parts if _within(module, part))


def violations(imports: Iterable[Import]) -> list[str]:
    """Each import against the contract, as `a.b -> c.d (line N)`."""
    found = []
    for i in imports:
        source, target = layer_of(i.source), layer_of(i.target)
        if source is None or target is None:
            continue  # test_every_module_has_one_place names these
        if source == -1:
            allowed = target == -1
        else:
            skipped = NOT_IMPORTED_BY.get(_part_of(i.source), ())
            allowed = target <= source and not any(_within(i.target, part) for part in skipped)
        if not allowed:
            found.append(f"{i.source} -> {i.target} (line {i.line})")
    return found


def test_every_module_has_one_place():
    modules = package_modules()
    assert len(modules) > 50  # the walk found the package
    unplaced = sorted(m for m in modules if layer_of(m) is None)
    assert not unplaced, "modules in no layer (or in two) of LAYERS and not in LEAVES: " + ", ".join(unplaced)


def test_every_import_follows_the_layers():
    imports = package_imports()
    assert len(imports) > 400 and any(not i.at_load for i in imports)  # function-level imports are in the walk
    found = violations(imports)
    assert not found, f"{len(found)} imports against the layers (tests/test_layers.py):\n" + "\n".join(found)


def test_the_contract_refuses_what_it_should():
    modules = {"lowtide.model.validate", "lowtide.memory.lifetimes", "lowtide.device.spec", "lowtide.errors"}
    code = (
        "from typing import TYPE_CHECKING\nfrom lowtide.errors import LowtideError\n"
        "if TYPE_CHECKING:\n    from lowtide.device import spec\n"
        "def check():\n    from lowtide.memory import lifetimes\n"
    )
    imports = module_imports(ast.parse(code), "lowtide.model.validate", False, modules)
    assert violations(imports) == [
        "lowtide.model.validate -> lowtide.device.spec (line 4)",
        "lowtide.model.validate -> lowtide.memory.lifetimes (line 6)",
    ]
    planner = module_imports(
        ast.parse("from lowtide.memory import tflm_plan\nfrom lowtide.project import x\nfrom lowtide import oracle\n"),
        "lowtide.device.measure",
        False,
        {"lowtide.memory", "lowtide.project", "lowtide.oracle"},
    )
    assert violations(planner) == [
        "lowtide.device.measure -> lowtide.memory (line 1)",
        "lowtide.device.measure -> lowtide.oracle (line 3)",
    ]
    leaf = module_imports(
        ast.parse("from lowtide.model.ir import Graph\n"), "lowtide.storage", False, {"lowtide.model.ir"}
    )
    assert violations(leaf) == ["lowtide.storage -> lowtide.model.ir (line 1)"]


def test_the_architecture_doc_states_the_same_layers():
    """docs/architecture.md's layer line, `model` → `memory` → ..., is this table's order."""
    stated = re.search(r"^Layers, first to last: (.+)$", ARCHITECTURE_DOC.read_text(), re.M)
    assert stated, "docs/architecture.md has no 'Layers, first to last: ...' line"
    table = " → ".join(" / ".join(f"`{part.removeprefix('lowtide.')}`" for part in parts) for parts in LAYERS)
    assert stated.group(1).rstrip(".") == table
