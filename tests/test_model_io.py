"""Reading and writing .tflite files."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import SHARED_MODELS, reference_figures, shared_model_names
from lowtide import oracle
from lowtide.model import Graph, TensorKind, model_bytes, read_model
from lowtide.model.edit import GraphEditor
from lowtide.model.reader import object_tree
from lowtide.model.writer import misaligned_buffers
from lowtide.validation import load_model

REFERENCE = reference_figures()


@pytest.mark.parametrize("name", shared_model_names())
def test_round_trip_keeps_outputs_bit_identical_and_aligns_buffers(name):
    original = (SHARED_MODELS / f"{name}.tflite").read_bytes()
    graph = read_model(original, name)
    rewritten = model_bytes(object_tree(graph))
    assert misaligned_buffers(rewritten) == []
    again = read_model(rewritten)
    assert [len(sg.operators) for sg in again.subgraphs] == [len(sg.operators) for sg in graph.subgraphs]
    inputs = oracle.random_inputs(graph, seed=7)
    before, after = oracle.run(original, inputs), oracle.run(rewritten, inputs)
    assert len(before.outputs) == len(graph.main.outputs) > 0
    for a, b in zip(before.outputs, after.outputs):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert after.head_bytes == before.head_bytes


@pytest.mark.parametrize("name", ["tflm_micro_speech_lstm", "tflm_mnist_lstm_int8", "tflm_dtln_noise_suppression"])
def test_an_edit_keeping_every_operator_keeps_their_intermediates(name):
    """The editor keeps an operator's intermediate tensors (the LSTMs', read from the file as an array) through
    `finish`, which drops the tensors nothing uses and renumbers the rest."""
    graph = read_model((SHARED_MODELS / f"{name}.tflite").read_bytes(), name)
    editor = GraphEditor(graph)
    edited = editor.finish([editor.original(op.index) for op in graph.main.operators])

    def named(g: Graph) -> list[tuple[str, list[str]]]:
        return [(op.opcode, [g.main.tensors[t].name for t in op.intermediates]) for op in g.main.operators]

    assert named(edited) == named(graph)
    assert any(intermediates for _, intermediates in named(graph))


@pytest.mark.parametrize("name", shared_model_names())
def test_operator_counts_and_types_match_manifest(name):
    graph = load_model(SHARED_MODELS / f"{name}.tflite")
    row = REFERENCE[name]
    assert len(graph.main.operators) == int(row["ops"])
    expected = dict(part.rsplit("x", 1) for part in row["op_types"].split(";"))
    counts: dict[str, int] = {}
    for op in graph.main.operators:
        counts[op.opcode] = counts.get(op.opcode, 0) + 1
    assert counts == {k: int(v) for k, v in expected.items()}


def test_tensor_kinds_and_side_effects():
    graph = load_model(SHARED_MODELS / "mww_v1_okay_nabu.tflite")
    sg = graph.main
    call_once = next(op for op in sg.operators if op.opcode == "CALL_ONCE")
    assert call_once.called_subgraphs == (1,) and call_once.has_side_effects
    assert {op.opcode for op in sg.operators if op.has_side_effects} == {
        "CALL_ONCE",
        "VAR_HANDLE",
        "READ_VARIABLE",
        "ASSIGN_VARIABLE",
    }
    kinds = {t.kind for t in sg.tensors}
    assert kinds == {TensorKind.ACTIVATION, TensorKind.CONSTANT}
    conv = next(op for op in sg.operators if op.opcode == "CONV_2D")
    assert sg.tensors[conv.inputs[1]].kind is TensorKind.CONSTANT
    assert sg.tensors[conv.inputs[0]].kind is TensorKind.ACTIVATION


def test_variable_tensors_are_recognised():
    sg = load_model(SHARED_MODELS / "tflm_keyword_scrambled.tflite").main
    svdf = next(op for op in sg.operators if op.opcode == "SVDF")
    state = sg.tensors[svdf.inputs[4]]
    assert state.kind is TensorKind.VARIABLE and not state.planned and state.nbytes == 512 * 2
