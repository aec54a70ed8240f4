"""Stateful and shape operators in `lowtide compile`, against the host TFLM interpreter invoked several times.

SVDF keeps a variable tensor (its activation state), and the streaming wake-word models keep resource variables
(VAR_HANDLE / READ_VARIABLE / ASSIGN_VARIABLE, set up by a CALL_ONCE init subgraph) from one invocation to the
next: the generated code holds them in a static struct outside the arena, which the harness paints with junk before every invocation. Both sides are
invoked several times in a row and every operator output of every invocation is compared (the keyword models'
final outputs saturate, so only the exposed operator outputs show the state at work).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lowtide import oracle
from lowtide.compile import compile_model, verify_compiled
from lowtide.compile.hostcheck import (
    CFLAGS,
    RUNTIME_DIR,
    expose_operator_outputs,
    first_divergence,
)
from lowtide.validation import load_model
from support.compiled import assert_compiled_arena
from support.models import TinyModel, svdf_model

MODELS = Path(__file__).resolve().parents[1] / ".." / "shared" / "models"
KEYWORD_MODELS = ["tflm_keyword_scrambled", "tflm_keyword_scrambled_8bit"]
INVOCATIONS = 4


def _model(name: str) -> Path:
    path = MODELS / f"{name}.tflite"
    if not path.exists():
        pytest.skip(f"shared model {name} not present")
    return path


@pytest.mark.parametrize(
    "name, state_bytes", [("mww_v2_vad", 1122), ("mww_v2_okay_nabu", 3474), ("mww_v1_okay_nabu", 8026)]
)
def test_streaming_models_with_resource_variables_bit_exact(name, state_bytes):
    """CALL_ONCE assigns each resource variable its initial constant on the first invocation; READ_VARIABLE and
    ASSIGN_VARIABLE carry the streaming windows from one invocation to the next. State: the resource variables'
    bytes plus the CALL_ONCE and `ready` flags."""
    path = _model(name)
    compiled = compile_model(load_model(path))
    graph = load_model(path)
    resource_bytes = sum(
        graph.main.tensors[op.outputs[0]].nbytes for op in graph.main.operators if op.opcode == "READ_VARIABLE"
    )
    assert compiled.fixed_state_bytes == state_bytes == resource_bytes + 2
    result = verify_compiled(load_model(path), seed=0, sanitize=True, invocations=INVOCATIONS)
    assert result.passed, result.outputs
    assert_compiled_arena(path, result)
    assert first_divergence(load_model(path), seed=1, invocations=INVOCATIONS) is None
    # the state is at work: the same input gives another output after earlier invocations
    data = path.read_bytes()
    sets = [oracle.random_inputs(graph, n) for n in range(INVOCATIONS)]
    in_sequence = oracle.run_sequence(data, sets, str(path))
    fresh = [oracle.run_sequence(data, [s], str(path))[0] for s in sets]
    assert any(not np.array_equal(x[0], y[0]) for x, y in zip(in_sequence, fresh))


def test_anomaly_detection_shape_pack_bit_exact():
    """SHAPE -> STRIDED_SLICE -> PACK builds the shape of the final RESHAPE; float in and out."""
    path = _model("mltk_anomaly_detection")
    result = verify_compiled(load_model(path), seed=0, sanitize=True)
    assert result.passed, result.outputs
    assert result.arena_bytes == result.tflm_head_bytes == 3200
    assert first_divergence(load_model(path), seed=1) is None
    assert compile_model(load_model(path)).fixed_state_bytes == 0
    # the PACK output is the int32 shape TFLM computed: [1, 5, 128, 1]
    graph = load_model(path)
    traced, exposed = expose_operator_outputs(graph)
    pack = next(op for op in graph.main.operators if op.opcode == "PACK")
    outputs = oracle.run_sequence(traced.data, [oracle.random_inputs(graph, 0)], str(path))[0]
    assert outputs[exposed.index(pack.outputs[0])].tolist() == [1, 5, 128, 1]


@pytest.mark.parametrize("name", KEYWORD_MODELS)
def test_keyword_models_bit_exact_over_invocations(name):
    """QUANTIZE int16 -> int8, SVDF with int16 or int8 state, SOFTMAX int8 -> int16, QUANTIZE int16 -> int32."""
    path = _model(name)
    result = verify_compiled(load_model(path), seed=0, sanitize=True, invocations=INVOCATIONS)
    assert result.passed, result.outputs
    assert {o.invocation for o in result.outputs} == set(range(INVOCATIONS))
    assert result.hook_pairs == INVOCATIONS * result.operator_count
    assert result.arena_bytes == result.tflm_head_bytes == 672  # the SVDF scratch buffers included
    assert first_divergence(load_model(path), seed=1, invocations=INVOCATIONS) is None


@pytest.mark.parametrize(
    "name, state_bytes",
    [("tflm_keyword_scrambled", 2 * (4 * 512 + 3 * 1024) + 2), ("tflm_keyword_scrambled_8bit", 4 * 512 + 3 * 1024 + 1)],
)
def test_variable_tensors_are_static_state_outside_the_arena(name, state_bytes, tmp_path):
    """Seven SVDF states (+ the `ready` flag, rounded to the struct's alignment), measured in the object's .bss."""
    path = _model(name)
    compiled = compile_model(load_model(path))
    assert compiled.fixed_state_bytes == state_bytes
    assert f"#define MODEL_STATE_SIZE {state_bytes}u" in compiled.files["model.h"]
    result = verify_compiled(load_model(path), seed=2, workdir=tmp_path, invocations=2)
    assert result.passed and result.fixed_state_bytes == state_bytes
    assert result.ram_bytes == 672 + state_bytes


_RESET_MAIN = r"""
#include <stdio.h>
#include <string.h>
#include "model.h"

static uint8_t arena[MODEL_ARENA_SIZE + 16] __attribute__((aligned(16)));

/* Invokes on input set A, then B, then resets and invokes on B again; writes the three sets of outputs. */
int main(int argc, char **argv) {
    if (argc != 3) return 2;
    uint8_t sets[2][MODEL_INPUT0_BYTES];
    FILE *in = fopen(argv[1], "rb");
    FILE *out = fopen(argv[2], "wb");
    if (!in || !out || fread(sets, 1, sizeof sets, in) != sizeof sets) return 3;
    const int order[3] = {0, 1, 1};
    for (int n = 0; n < 3; ++n) {
        if (n == 2) model_reset();
        memset(arena, 0x5A, sizeof arena);
        memcpy(model_input(arena, 0), sets[order[n]], MODEL_INPUT0_BYTES);
        if (model_invoke(arena, NULL, NULL) != 0) return 4;
        for (int i = 0; i < MODEL_OUTPUT_COUNT; ++i) fwrite(model_output(arena, i), 1, model_outputs[i].bytes, out);
    }
    fclose(in);
    fclose(out);
    return 0;
}
"""


@pytest.mark.parametrize("source", ["tflm_keyword_scrambled", "svdf_int8", "mww_v2_vad"])
def test_reset_puts_the_state_back_like_tflm(tmp_path, source):
    """`model_reset` does what TFLM's Reset() does: SVDF states go back to their reset value (the next invocation
    equals a fresh interpreter's), resource variables to their zero point while CALL_ONCE stays done. Without a
    reset, the earlier invocation's state changes the outputs. The small int8-state model resets its states to a
    non-zero zero point (the keyword model with int8 state saturates too much for the state to show)."""
    if source == "svdf_int8":
        m = TinyModel()
        path = m.save(tmp_path / "svdf_int8.tflite", *svdf_model(m, "int8"))
    else:
        path = _model(source)
    traced, exposed = expose_operator_outputs(load_model(path))
    compiled = compile_model(traced)
    compiled.write(tmp_path)
    (tmp_path / "main.c").write_text(_RESET_MAIN)
    binary = tmp_path / "reset_check"
    sources = [tmp_path / "model.c", tmp_path / "main.c", *sorted(RUNTIME_DIR.glob("*.c"))]
    subprocess.run(
        ["gcc", *CFLAGS, "-I", str(RUNTIME_DIR), "-I", str(tmp_path), *map(str, sources), "-lm", "-o", str(binary)],
        check=True,
        capture_output=True,
    )
    graph = load_model(path)
    a, b = oracle.random_inputs(graph, 0), oracle.random_inputs(graph, 1)
    (tmp_path / "in.bin").write_bytes(a[0].tobytes() + b[0].tobytes())
    subprocess.run([str(binary), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")], check=True)
    raw = (tmp_path / "out.bin").read_bytes()
    tensors = [graph.main.tensors[t] for t in exposed]
    runs, position = [], 0
    for _ in range(3):
        outputs = []
        for t in tensors:
            outputs.append(np.frombuffer(raw[position : position + t.nbytes], dtype=t.dtype).reshape(t.shape))
            position += t.nbytes
        runs.append(outputs)
    reference = oracle.run_sequence(traced.data, [a, b, b], str(path), reset_before=frozenset({2}))
    for got, want in zip(runs, reference):
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    fresh_b = oracle.run_sequence(traced.data, [b], str(path))[0]
    assert any(not np.array_equal(x, y) for x, y in zip(reference[1], fresh_b))  # the state matters
    if source != "mww_v2_vad":
        assert all(np.array_equal(x, y) for x, y in zip(reference[2], fresh_b))


@pytest.mark.parametrize("state_type", ["int16", "int8"])
def test_small_svdf_model_with_batches_and_rank(tmp_path, state_type):
    m = TinyModel()
    inputs, outputs = svdf_model(m, state_type)
    path = m.save(tmp_path / f"svdf_{state_type}.tflite", inputs, outputs)
    result = verify_compiled(load_model(path), seed=0, sanitize=True, invocations=6)
    assert result.passed, result.outputs
    graph = load_model(path)
    sequence = oracle.run_sequence(path.read_bytes(), [oracle.random_inputs(graph, n) for n in range(6)], str(path))
    assert len({s[1].tobytes() for s in sequence}) == 6  # each invocation's output differs: not saturated


def test_cli_verifies_state_over_several_invocations(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "lowtide",
            "compile",
            str(MODELS / "tflm_keyword_scrambled.tflite"),
            "-o",
            str(tmp_path / "c"),
            "--verify",
            "--invocations",
            "3",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["verify"]["passed"] is True and report["verify"]["invocations"] == 3
    # The SVDF's int16 activation state lives outside the arena: 10,242 bytes next to TFLM's 672-byte head.
    assert (report["arena_bytes"], report["fixed_state_bytes"]) == (672, 10_242)
