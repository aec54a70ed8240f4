"""The runtimes as objects (lowtide.runtimes): one object per runtime name, each asked for what differs between
runtimes, and no stage after it comparing runtime names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import lowtide
from conftest import SHARED_MODELS
from lowtide.errors import LowtideError
from lowtide.runtimes import ARENA_SLACK_BYTES, RUNTIMES, Runtime, runtime_named
from lowtide.settings import read_settings
from lowtide.tflm.tree import KernelSet
from lowtide.validation import load_model

PACKAGE = Path(lowtide.__file__).parent
KWS = SHARED_MODELS / "mlperf_kws_dscnn_int8.tflite"


def test_every_runtime_name_is_one_object():
    assert list(RUNTIMES) == list(Runtime) == ["compiled", "tflm", "tflm-cmsis-nn"]
    for name, runtime in RUNTIMES.items():
        assert runtime_named(name) is runtime and runtime.name is name and str(runtime) == name
    assert [r.kernels for r in RUNTIMES.values()] == [None, KernelSet.REFERENCE, KernelSet.CMSIS_NN]
    assert [r.arena_slack_bytes for r in RUNTIMES.values()] == [ARENA_SLACK_BYTES, 0, 0]


def test_an_unknown_runtime_is_refused_naming_the_runtimes():
    with pytest.raises(LowtideError) as refused:
        runtime_named("tvm")
    assert refused.value.message == "unknown runtime 'tvm'; runtimes: compiled, tflm, tflm-cmsis-nn"


def test_cmsis_nn_runs_on_arm_cores_only():
    assert [name for name, r in RUNTIMES.items() if r.runs_on("cortex-m4f")] == list(Runtime)
    assert [name for name, r in RUNTIMES.items() if r.runs_on("xtensa-lx7")] == ["compiled", "tflm"]
    assert [name for name, r in RUNTIMES.items() if r.runs_on("no-such-core")] == ["compiled"]  # plain C99


def test_each_runtime_estimates_its_own_footprint():
    graph = load_model(KWS)
    compiled, reference, cmsis = RUNTIMES.values()
    # The compiled plan (in place) with its painted slack, the weights, the runtime's code: before any build.
    assert (
        compiled.predict_arena(graph, "cortex-m4f", read_settings()) is None
        and compiled.estimate_before_sizing(graph) is None
    )
    estimate = compiled.estimate_footprint(graph)
    assert (estimate.arena_bytes, estimate.static_ram_bytes, estimate.image_bytes) == (9_408, 13_490, 51_320)
    # TFLM before its arena is sized: the head of lowtide's replica of TFLM's planner, the whole .tflite and
    # TFLM's code, for either kernel set.
    for tflm in (reference, cmsis):
        early = tflm.estimate_before_sizing(graph)
        assert early == tflm.estimate_footprint(graph)
        assert early is not None and (early.arena_bytes, early.image_bytes) == (16_000, 121_936)


def _runtime_name_comparisons(tree: ast.AST) -> list[int]:
    """Lines comparing something with a runtime's name (`runtime == "compiled"`, `x in ("tflm", ...)`)."""
    names = set(Runtime)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            operands += [e for o in operands if isinstance(o, (ast.Tuple, ast.List, ast.Set)) for e in o.elts]
            if any(isinstance(o, ast.Constant) and o.value in names for o in operands):
                found.append(node.lineno)
    return found


def test_no_module_compares_runtime_names():
    assert _runtime_name_comparisons(ast.parse('if runtime == "tflm-cmsis-nn" or x in ("compiled",):\n    pass\n'))
    found = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "data" not in path.relative_to(PACKAGE).parts
        for line in _runtime_name_comparisons(ast.parse(path.read_text()))
    ]
    assert not found, "runtime names compared (ask the lowtide.runtimes object instead): " + ", ".join(found)
