"""Declared shapes against the shapes operators compute (lowtide.model.shapes), for every operator the compiler
lowers: a small model holding the operator, which the host TFLM runs, declares its output one element longer along
the last axis, and every command refuses it in one line naming the operator and both shapes, writing nothing.
`compile` ended in an IndexError traceback on such a model (issue 23)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lowtide import oracle
from lowtide.compile.lowering import KERNELS
from lowtide.model import read_model
from lowtide.model.attributes import ConcatenationAttributes, Conv2DAttributes, Padding
from lowtide.model.schema import BUILTIN_CODES
from lowtide.validation import load_model, model_problems
from support.hostile import assert_kept_promise, run_in_process
from support.models import TinyModel
from support.operator_cases import CASES, SHAPE, float_tensor

# Operators whose output holds no data: nothing to declare wrongly.
NO_DATA_OUTPUT = {
    "ASSIGN_VARIABLE": "writes no tensor",
    "CALL_ONCE": "writes no tensor",
    "VAR_HANDLE": "its output is a handle, whose shape neither TFLM nor lowtide reads",
}
# What the table computes where it is not one exact shape (lowtide.model.shapes says why at each rule).
NOT_EXACT = {
    "FULLY_CONNECTED": "[any, 5] of 5 elements",
    "RESHAPE": "any shape of 48 elements",
    "SQUEEZE": "any shape of 48 elements",
    "READ_VARIABLE": "any shape of 48 elements",
    "SPACE_TO_BATCH_ND": "[4, any, any, 3]",
    "BATCH_TO_SPACE_ND": "[1, any, any, 3]",
}


def test_every_lowered_operator_has_a_case():
    assert sorted(CASES) == sorted(set(KERNELS) - set(NO_DATA_OUTPUT))


def _model(opcode: str, folder: Path, corrupt: bool) -> tuple[Path, int, list[int]]:
    """The case's model, its output 0 one element longer along the last axis if `corrupt`; the operator's index
    and the output's shape as the case declares it."""
    m = TinyModel()
    inputs, outputs = CASES[opcode](m)
    index = next(
        k
        for k, op in enumerate(m.operators)
        if m.editor.model.operatorCodes[op.opcodeIndex].builtinCode == BUILTIN_CODES[opcode]
    )
    output = m.tensors[m.operators[index].outputs[0]]
    shape = [int(d) for d in output.shape]
    if corrupt:
        output.shape = [*shape[:-1], shape[-1] + 1]
    folder.mkdir(parents=True, exist_ok=True)
    return m.save(folder / f"{opcode.lower()}.tflite", inputs, outputs), index, shape


@pytest.mark.parametrize("opcode", sorted(CASES))
def test_the_case_is_a_model_the_host_tflm_runs(opcode, tmp_path):
    path, _, _ = _model(opcode, tmp_path, corrupt=False)
    graph = load_model(path)
    assert model_problems(graph) == []
    run = oracle.run(path.read_bytes(), oracle.random_inputs(graph, 0))
    assert len(run.outputs) == len(graph.main.outputs)


@pytest.mark.parametrize("opcode", sorted(CASES))
def test_a_declared_output_shape_the_operator_does_not_compute_is_one_line(opcode, tmp_path):
    path, index, shape = _model(opcode, tmp_path / "in", corrupt=True)
    declared = [*shape[:-1], shape[-1] + 1]
    graph = read_model(path.read_bytes())
    problems = model_problems(graph)
    assert [p.message for p in problems] == [
        f"subgraph 0 operator {index} ({opcode}): declared output shape is not the one the operator computes: "
        f"output {graph.main.operators[index].outputs[0]} is declared {declared}, "
        f"computed {NOT_EXACT.get(opcode, str(shape))}"
    ]
    for command in ("validate", "inspect", "compile", "optimize"):
        out = tmp_path / command
        out.mkdir()
        assert_kept_promise(
            run_in_process(command, path, out),
            path,
            out,
            expect_error=f"operator {index} ({opcode}): declared output shape is not the one",
        )


def _int8_conv(m: TinyModel, bias_channels: int = 4, scale_axis: int = 0) -> tuple[list[int], list[int]]:
    """An int8 CONV_2D of 4 output channels over 3 input channels, per-channel weights quantized along
    `scale_axis` (0: the output channels), a bias of `bias_channels` values."""
    rng = np.random.default_rng(1)
    x, y = m.tensor(SHAPE, "int8", 0.05, 2), m.tensor((1, 4, 4, 4), "int8", 0.1, -3)
    scales = [0.01 + 0.001 * k for k in range((4, 3, 3, 3)[scale_axis])]
    w = m.tensor((4, 3, 3, 3), "int8", scales, 0, rng.integers(-127, 128, (4, 3, 3, 3)), axis=scale_axis)
    bias = m.tensor((bias_channels,), "int32", 0.0005, 0, rng.integers(-500, 500, bias_channels))
    m.op(
        "CONV_2D",
        [x, w, bias],
        [y],
        Conv2DAttributes(padding=Padding.SAME, stride=(1, 1), dilation=(1, 1)),
    )
    return [x], [y]


def _concatenation_of_two_heights(m: TinyModel) -> tuple[list[int], list[int]]:
    a, b, y = float_tensor(m), float_tensor(m, (1, 5, 4, 3)), float_tensor(m, (1, 4, 4, 6))
    m.op("CONCATENATION", [a, b], [y], ConcatenationAttributes(axis=3))
    return [a, b], [y]


@pytest.mark.parametrize(
    "name, build, reason",
    [
        # per_channel_multipliers reads one filter scale per output channel: 3 along the input channels was an
        # IndexError in compile
        (
            "scales_along_inputs",
            lambda m: _int8_conv(m, scale_axis=3),
            "operator 0 (CONV_2D): operand shapes do not fit the operator: filter quantized with 3 scales for 4 output "
            "channels",
        ),
        (
            "short_bias",
            lambda m: _int8_conv(m, bias_channels=3),
            "operator 0 (CONV_2D): operand shapes do not fit the operator: bias of shape [3] for 4 output channels",
        ),
        (
            "heights_differ",
            _concatenation_of_two_heights,
            "operator 0 (CONCATENATION): operand shapes do not fit the operator: inputs of shapes [1, 4, 4, 3], "
            "[1, 5, 4, 3] differ outside axis 3",
        ),
    ],
)
def test_operand_shapes_a_kernel_cannot_combine_are_one_line(name, build, reason, tmp_path):
    m = TinyModel()
    folder = tmp_path / "in"
    folder.mkdir()
    path = m.save(folder / f"{name}.tflite", *build(m))
    for command in ("validate", "compile", "optimize"):
        out = tmp_path / command
        out.mkdir()
        assert_kept_promise(run_in_process(command, path, out), path, out, expect_error=reason)


def test_the_int8_convolution_is_sound_with_its_operands_right(tmp_path):
    m = TinyModel()
    path = m.save(tmp_path / "conv.tflite", *_int8_conv(m))
    assert model_problems(load_model(path)) == []
