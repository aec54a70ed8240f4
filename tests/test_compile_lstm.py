"""UNIDIRECTIONAL_SEQUENCE_LSTM in `lowtide compile`, against the host TFLM interpreter invoked several times.

The integer LSTM (int8 activations and weights, int16 cell state) keeps its hidden and cell state in variable
tensors, which the generated code holds in its static state struct: both sides are invoked several times in a row
and every operator output of every invocation is compared, under ASan and UBSan.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lowtide import oracle
from lowtide.compile import compile_model, verify_compiled
from lowtide.compile.hostcheck import expose_operator_outputs, first_divergence
from lowtide.errors import LowtideError
from lowtide.validation import load_model
from support.compiled import assert_compiled_arena
from support.models import ACT_SIGN_BIT, ACT_TANH, TinyModel, lstm

MODELS = Path(__file__).resolve().parents[1] / ".." / "shared" / "models"
INVOCATIONS = 3


def _model(name: str) -> Path:
    path = MODELS / f"{name}.tflite"
    if not path.exists():
        pytest.skip(f"shared model {name} not present")
    return path


def _state_changes_outputs(path: Path, tensor: int, invocations: int) -> bool:
    """True when `tensor` differs between invocations in a row and fresh interpreters given the same inputs."""
    graph = load_model(path)
    traced, exposed = expose_operator_outputs(graph)
    data = traced.data
    sets = [oracle.random_inputs(graph, n) for n in range(invocations)]
    in_sequence = oracle.run_sequence(data, sets, str(path))
    fresh = [oracle.run_sequence(data, [s], str(path))[0] for s in sets]
    k = exposed.index(tensor)
    return any(not np.array_equal(x[k], y[k]) for x, y in zip(in_sequence[1:], fresh[1:]))


# hidden (int8) + cell (int16) states of every LSTM, + the `ready` flag, rounded to the struct's 2-byte alignment
@pytest.mark.parametrize(
    "name, state_bytes",
    [
        ("tflm_mnist_lstm_int8", 20 + 2 * 20 + 2),
        ("tflm_micro_speech_lstm", 80 + 2 * 80 + 2),
        ("tflm_dtln_noise_suppression", 2 * (128 + 2 * 128) + 2),
    ],
)
def test_shared_lstm_models_bit_exact_over_invocations(name, state_bytes):
    path = _model(name)
    compiled = compile_model(load_model(path))
    assert compiled.fixed_state_bytes == state_bytes
    result = verify_compiled(load_model(path), seed=0, sanitize=True, invocations=INVOCATIONS)
    assert result.passed, result.outputs
    assert {o.invocation for o in result.outputs} == set(range(INVOCATIONS))
    assert result.hook_pairs == INVOCATIONS * result.operator_count
    assert_compiled_arena(path, result)  # the four gate scratch buffers included
    assert first_divergence(load_model(path), seed=1, invocations=INVOCATIONS) is None
    lstm = next(op for op in load_model(path).main.operators if op.opcode == "UNIDIRECTIONAL_SEQUENCE_LSTM")
    assert _state_changes_outputs(path, lstm.outputs[0], INVOCATIONS)


def test_lstm_state_is_static_outside_the_arena(tmp_path):
    """The hidden and cell states are the only writable static data, measured in the objects' .data + .bss; the
    fast FULLY_CONNECTED's int16 row is in the arena."""
    path = _model("tflm_mnist_lstm_int8")
    result = verify_compiled(load_model(path), seed=2, workdir=tmp_path, invocations=2)
    assert result.passed and result.fixed_state_bytes == 62
    assert_compiled_arena(path, result)
    assert result.ram_bytes == result.arena_bytes + 62


def _small_lstm_model(m: TinyModel) -> tuple[list[int], list[int]]:
    """A time-major LSTM over two batches with a cell scale of 2^-13 (the tanh's right-shift path) and no clip, feeding a batch-major LSTM over three batches (each with its own state rows) with a cell
    scale of 2^-10 clipped at 0.5: geometry and arithmetic the shared models do not reach."""
    rng = np.random.default_rng(5)
    x = m.tensor((4, 2, 5), "int8", 0.05, 3)
    first = lstm(m, rng, x, (4, 2, 5), 6, True, ACT_TANH, 2.0**-13, 0.0, 3)
    second = lstm(m, rng, first, (4, 2, 6), 7, False, ACT_TANH, 2.0**-10, 0.5, -5)
    return [x], [first, second]


def test_small_lstm_models_time_major_batch_major_clip(tmp_path):
    m = TinyModel()
    path = m.save(tmp_path / "lstm.tflite", *_small_lstm_model(m))
    result = verify_compiled(load_model(path), seed=0, sanitize=True, invocations=4)
    assert result.passed, result.outputs
    assert_compiled_arena(path, result)
    assert first_divergence(load_model(path), seed=1, invocations=4) is None
    graph = load_model(path)
    sequence = oracle.run_sequence(path.read_bytes(), [oracle.random_inputs(graph, n) for n in range(4)], str(path))
    assert all(len(np.unique(s[1])) > 20 for s in sequence)  # the outputs are not saturated
    assert _state_changes_outputs(path, graph.main.outputs[1], 4)


@pytest.mark.parametrize(
    "activation, input_gate, reason", [(ACT_TANH, False, "CIFG"), (ACT_SIGN_BIT, True, "cell gate activation 5")]
)
def test_lstm_variants_tflm_does_not_run_are_refused(tmp_path, activation, input_gate, reason):
    """TFLM's kernel needs all four gates and applies only TANH to the cell gate (anything else skips it)."""
    m = TinyModel()
    x = m.tensor((1, 3, 5), "int8", 0.05, 3)
    out = lstm(m, np.random.default_rng(0), x, (1, 3, 5), 4, False, activation, 2.0**-11, 0.0, 0, input_gate=input_gate)
    path = m.save(tmp_path / "variant.tflite", [x], [out])
    with pytest.raises(LowtideError, match=rf"operator 0 \(UNIDIRECTIONAL_SEQUENCE_LSTM [^)]* -> int8\): .*{reason}"):
        compile_model(load_model(path))
