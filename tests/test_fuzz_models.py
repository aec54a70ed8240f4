"""A structured fuzzer: change one field of a real model's flatbuffer object tree (the schema's object API), or
the declared shape of an operator's output (in those models and in a small model per operator the compiler lowers),
then run every command on it, in process and as a subprocess. Whatever the change, lowtide keeps its promise: no signal,
no traceback, exit 0, or exit 2 with one line naming the input file, and no file left behind.

CI runs a small fixed budget (derandomized, so a failure reproduces); `make fuzz` runs longer:
LOWTIDE_FUZZ_EXAMPLES sets the example count, LOWTIDE_FUZZ_MINUTES a deadline for the whole run, and
`--hypothesis-show-statistics` counts the outcomes.
"""

from __future__ import annotations

import copy
import math
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from conftest import SHARED_MODELS
from lowtide.model import read_model
from lowtide.model.reader import object_tree
from lowtide.model.schema import BUILTIN_NAMES, builtin_code
from lowtide.model.shapes import RULES
from lowtide.testing.zoo import demo_model
from support.hostile import COMMANDS, assert_kept_promise, run_in_process, run_subprocess, serialise_isolated
from support.models import TinyModel
from support.operator_cases import CASES

# Small models covering the shapes of graph lowtide meets: a plain chain, a CNN, SVDF with state, and two subgraphs
# with CALL_ONCE and resource variables; plus the builder's irregularly wired demo model.
SOURCES = ("tflm_hello_world_int8", "tflm_micro_speech_quantized", "tflm_keyword_scrambled_8bit", "mww_v2_vad")
EXAMPLES = int(os.environ.get("LOWTIDE_FUZZ_EXAMPLES", "20"))
SUBPROCESS_EXAMPLES = max(int(os.environ.get("LOWTIDE_FUZZ_SUBPROCESS_EXAMPLES", "2")), 1)
# The in-process test may use most of the time; the slower subprocess test gets the rest.
_MINUTES = float(os.environ.get("LOWTIDE_FUZZ_MINUTES", "1e9"))
_STARTED = time.monotonic()
DEADLINES = {"in_process": _STARTED + 60 * _MINUTES * 0.8, "subprocess": _STARTED + 60 * _MINUTES}
LONG_RUN = "LOWTIDE_FUZZ_EXAMPLES" in os.environ

_RAW = {name: object_tree(read_model((SHARED_MODELS / f"{name}.tflite").read_bytes())) for name in SOURCES}
_RAW["demo"] = object_tree(read_model(demo_model()))

# Values that break things: zero, negative, off by one, limits of the field widths, huge.
_INTS = (0, 1, -1, 2, 3, 4, 7, 16, 127, 128, 255, -128, 1 << 15, (1 << 31) - 1, -(1 << 31), 1 << 20, 1 << 30)
_FLOATS = (0.0, -1.0, math.nan, math.inf, -math.inf, 1e-45, 1e38)
_TEXTS = ("", "a\nb", "\x1b[31mred\x1b[0m", "[/]", "OfflineMemoryAllocation", "ü" * 300)


@dataclass(frozen=True)
class Field:
    """One leaf of the object tree: the attribute path from the ModelT and the value there."""

    path: tuple[str | int, ...]
    value: object


def _fields(obj, path=()) -> list[Field]:
    found = []
    for name, value in vars(obj).items():
        here = (*path, name)
        if isinstance(value, (bool, int, float, str, bytes, np.ndarray)):
            if not (isinstance(value, np.ndarray) and value.size > 4096):  # large weights: one field is enough
                found.append(Field(here, value))
        elif isinstance(value, list):
            found.append(Field(here, value))
            for i, item in enumerate(value):
                if hasattr(item, "__dict__"):
                    found.extend(_fields(item, (*here, i)))
        elif value is not None and hasattr(value, "__dict__"):
            found.extend(_fields(value, here))
    return found


_FIELDS = {name: [f for f in _fields(raw) if not f.path[-1].endswith("Type")] for name, raw in _RAW.items()}


def _case_raw(opcode: str):
    m = TinyModel()
    return object_tree(m.finished(*CASES[opcode](m)))


# Shape mutations also run on one small model per operator the compiler lowers (test_declared_shapes' cases).
_SHAPE_RAW = {**_RAW, **{f"case_{opcode.lower()}": _case_raw(opcode) for opcode in sorted(CASES)}}
# source -> (subgraph, tensor) of every output of an operator lowtide.model.shapes has a rule for
_COMPUTED_OUTPUTS = {
    name: [
        (k, int(t))
        for k, sg in enumerate(raw.subgraphs)
        for op in sg.operators or []
        if BUILTIN_NAMES.get(builtin_code(raw.operatorCodes[op.opcodeIndex])) in RULES
        for t in (op.outputs if op.outputs is not None else [])
        if t >= 0 and sg.tensors[t].shape is not None and len(sg.tensors[t].shape)
    ]
    for name, raw in _SHAPE_RAW.items()
}


@st.composite
def shape_mutations(draw):
    """(source model, path, new shape): an operator's output declared with one dimension off by one, doubled,
    or one, or with a dimension more or fewer."""
    source = draw(st.sampled_from(sorted(s for s in _SHAPE_RAW if _COMPUTED_OUTPUTS[s])))
    subgraph, tensor = draw(st.sampled_from(_COMPUTED_OUTPUTS[source]))
    shape = [int(d) for d in _SHAPE_RAW[source].subgraphs[subgraph].tensors[tensor].shape]
    axis = draw(st.integers(0, len(shape) - 1))
    how = draw(st.sampled_from(("less", "more", "double", "one", "append", "drop")))
    if how == "append":
        new = shape + [1]
    elif how == "drop":
        new = shape[:axis] + shape[axis + 1 :]
    else:
        new = list(shape)
        new[axis] = {"less": shape[axis] - 1, "more": shape[axis] + 1, "double": 2 * shape[axis], "one": 1}[how]
    return source, ("subgraphs", subgraph, "tensors", tensor, "shape"), np.array(new, dtype=np.int32)


@st.composite
def field_mutations(draw):
    """(source model, path, new value). Union type tags (`...Type`) are left alone: changing one without its
    table only tests the flatbuffers library."""
    source = draw(st.sampled_from(sorted(_RAW)))
    field = draw(st.sampled_from(_FIELDS[source]))
    value = field.value
    if isinstance(value, bool):
        new = not value
    elif isinstance(value, int):
        new = draw(st.sampled_from(_INTS) | st.integers(value - 3, value + 3))
    elif isinstance(value, float):
        new = draw(st.sampled_from(_FLOATS) | st.just(value * 2))
    elif isinstance(value, (str, bytes)):
        new = draw(st.sampled_from(_TEXTS))
    elif isinstance(value, np.ndarray):
        array = value.copy()
        how = draw(st.sampled_from(("element", "truncate", "extend", "empty")))
        if how == "element" and array.size:
            index = draw(st.integers(0, array.size - 1))
            choices = (
                _FLOATS
                if array.dtype.kind == "f"
                else tuple(
                    v
                    for v in _INTS
                    if np.can_cast(np.min_scalar_type(v), array.dtype)
                    or np.iinfo(array.dtype).min <= v <= np.iinfo(array.dtype).max
                )
            )
            array.reshape(-1)[index] = draw(st.sampled_from(choices))
        elif how == "truncate":
            array = array[: max(array.size - 1, 0)]
        elif how == "extend":
            flat = array.reshape(-1)
            array = np.concatenate([flat, flat[:1] if flat.size else np.zeros(1, array.dtype)])
        else:
            array = array[:0]
        new = array
    else:  # a list of tables: drop, duplicate or swap entries
        items = list(value)
        how = draw(st.sampled_from(("drop", "duplicate", "swap", "empty")))
        if how == "drop" and items:
            items.pop(draw(st.integers(0, len(items) - 1)))
        elif how == "duplicate" and items:
            items.append(copy.deepcopy(items[draw(st.integers(0, len(items) - 1))]))
        elif how == "swap" and len(items) > 1:
            i, j = draw(st.integers(0, len(items) - 1)), draw(st.integers(0, len(items) - 1))
            items[i], items[j] = items[j], items[i]
        else:
            items = []
        new = items
    return source, field.path, new


mutations = st.one_of(field_mutations(), shape_mutations())


def _mutated(source: str, path: tuple, value) -> bytes | None:
    raw = copy.deepcopy(_SHAPE_RAW[source])
    target = raw
    for part in path[:-1]:
        target = target[part] if isinstance(part, int) else getattr(target, part)
    setattr(target, path[-1], value)
    return serialise_isolated(raw)  # None: the schema cannot store this value (a field's width, say)


def _check_every_command(mutation, runner, deadline: float) -> None:
    if time.monotonic() > deadline:
        return  # the time is up: the remaining examples pass without running
    data = _mutated(*mutation)
    event("the schema cannot store the value" if data is None else "model written")
    if mutation[1][-1] == "shape":
        event("a declared shape changed")
    if data is None:
        return
    with tempfile.TemporaryDirectory(prefix="lowtide-fuzz-") as tmp:
        model = Path(tmp) / "in" / "model.tflite"
        model.parent.mkdir()
        model.write_bytes(data)
        for command in COMMANDS:
            out = Path(tmp) / command
            out.mkdir()
            outcome = runner(command, model, out)
            assert_kept_promise(outcome, model, out)
            event(f"{command}: exit {outcome.code}")


_SETTINGS = dict(deadline=None, derandomize=not LONG_RUN, database=None, suppress_health_check=list(HealthCheck))


# A long run is bounded by its own deadline, not pytest-timeout's per-test limit.
_TIMEOUT = pytest.mark.timeout(0 if LONG_RUN else 600)


@_TIMEOUT
@settings(max_examples=EXAMPLES, **_SETTINGS)
@given(mutations)
def test_every_command_on_a_mutated_model_in_process(mutation):
    _check_every_command(mutation, run_in_process, DEADLINES["in_process"])


@_TIMEOUT
@settings(max_examples=SUBPROCESS_EXAMPLES, **_SETTINGS)
@given(mutations)
def test_every_command_on_a_mutated_model_as_a_subprocess(mutation):
    _check_every_command(mutation, run_subprocess, DEADLINES["subprocess"])
