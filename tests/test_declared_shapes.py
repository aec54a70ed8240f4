"""Declared shapes against the shapes operators compute (lowtide.model.shapes), for every operator the compiler
lowers: a small model holding the operator, which the host TFLM runs, declares its output one element longer along
the last axis, and every command refuses it in one line naming the operator and both shapes, writing nothing.
`compile` ended in an IndexError traceback on such a model (issue 23). Only where TFLM's kernel runs the declared
shape (SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND) and the mismatch stays inside it, as in a dilated convolution that
TensorFlow's converter writes for an unknown batch size, do the commands relying on no computed shape (`inspect`,
`measure` with TFLM, `optimize`) take the model, with that line as a warning (issue 41)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from lowtide import oracle
from lowtide.compile.lowering import KERNELS
from lowtide.memory import tflm_plan
from lowtide.model import read_model
from lowtide.model.attributes import ConcatenationAttributes, Conv2DAttributes, Padding
from lowtide.model.schema import BUILTIN_CODES
from lowtide.rewrite import tile
from lowtide.rewrite.errors import NotApplicable
from lowtide.stale import check_stale
from lowtide.validation import load_checked, load_model, model_problems
from support.builder_models import converted_dilated_model
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


# TensorFlow's converter, for a model of unknown batch size, stores 1 where the batch cannot be computed: the
# dilated convolution's SPACE_TO_BATCH_ND and BATCH_TO_SPACE_ND (support.builder_models.converted_dilated_model).
CONVERTED_WARNINGS = [
    "subgraph 0 operator 1 (SPACE_TO_BATCH_ND): declared output shape is not the one the operator computes: output 6 "
    "is declared [1, 10, 10, 8], computed [4, any, any, 8]",
    "subgraph 0 operator 3 (BATCH_TO_SPACE_ND): declared output shape is not the one the operator computes: output 12 "
    "is declared [1, 16, 16, 8], computed none (a batch of 1 is not a whole number of 4-element blocks)",
]


@pytest.fixture
def converted(tmp_path) -> Path:
    path = tmp_path / "in" / "converted.tflite"
    path.parent.mkdir()
    path.write_bytes(converted_dilated_model())
    return path


def _warned(outcome, model: Path) -> dict:
    """The JSON a command printed, after checking it answered with exactly the converted model's warnings, one
    line each on stderr (with the consequence under TFLM) and as its `warnings` list."""
    assert outcome.code == 0, outcome.stderr
    lines = outcome.stderr.strip().splitlines()
    assert [line.split("; TFLM allocates")[0] for line in lines] == [
        f"lowtide: warning: {model}: {w}" for w in CONVERTED_WARNINGS
    ]
    assert all("left unwritten, stale memory (`lowtide inspect --check-stale`" in line for line in lines)
    report = json.loads(outcome.stdout)
    assert [f"lowtide: warning: {model}: {w}" for w in report["warnings"]] == lines
    return report


def test_a_converted_dilated_convolution_is_refused_only_by_what_relies_on_its_computed_shapes(converted, tmp_path):
    assert [p.message for p in model_problems(read_model(converted.read_bytes()))] == CONVERTED_WARNINGS
    assert [w.message for w in load_checked(converted, relies_on=frozenset()).warnings] == CONVERTED_WARNINGS
    listed = run_in_process("validate", converted, tmp_path, "--json")
    relied_on = [p["relied_on"] for p in json.loads(listed.stdout)["problems"]]
    assert listed.code == 2 and relied_on == ["computed_shapes", "computed_shapes"]
    out = tmp_path / "compile"
    out.mkdir()
    assert_kept_promise(
        run_in_process("compile", converted, out),
        converted,
        out,
        expect_error=f"{CONVERTED_WARNINGS[0]} (and 1 more problems: lowtide validate lists them)",
    )
    # Tiling computes patches from the shapes the operators compute: no region runs through either operator.
    graph = load_checked(converted, relies_on=frozenset()).graph
    for source, target, operator in ((3, 9, 1), (9, 12, 3), (3, 15, 1)):
        with pytest.raises(NotApplicable, match=re.escape(CONVERTED_WARNINGS[operator // 2].split("): ", 1)[1])):
            tile(graph, source, target, (2, 2))
    tile(graph, 6, 9, (2, 2))  # the CONV_2D between them computes what it declares


def test_inspect_answers_with_the_warnings_and_the_host_tflms_head(converted, tmp_path):
    report = _warned(run_in_process("inspect", converted, tmp_path, "--verify", "--arena32", "estimate"), converted)
    assert report["measured"]["head_matches"]
    assert report["measured"]["tflm_head_bytes"] == tflm_plan(read_model(converted.read_bytes())).head_bytes


def test_measure_answers_on_the_host_tflm_board_and_refuses_the_compiled_runtime(converted, tmp_path):
    report = _warned(run_in_process("measure", converted, tmp_path), converted)
    assert report["outputs_match"]
    assert report["board_planned_bytes"] == report["arena_planned_bytes"]
    # The compiled runtime is lowered from the computed shapes: refused before anything is built.
    out = tmp_path / "compiled"
    out.mkdir()
    compiled = run_in_process("measure", converted, out, "--board", "qemu-m4", "--runtime", "compiled")
    assert_kept_promise(compiled, converted, out, expect_error=CONVERTED_WARNINGS[0])


def test_optimize_writes_a_model_the_host_tflm_runs_with_the_same_outputs(converted, tmp_path):
    out = tmp_path / "optimize"
    out.mkdir()
    report = _warned(run_in_process("optimize", converted, out, "--verify", "--arena32", "estimate"), converted)
    # BATCH_TO_SPACE_ND leaves 3/4 of its output unwritten, so plans differ there: the bytes proven independent of
    # stale memory are the same.
    assert report["determined_outputs_identical"] and not report["stale"]["clean"]
    written = load_checked(out / "out.tflite", relies_on=frozenset())
    assert [w.message for w in written.warnings] == CONVERTED_WARNINGS
    inputs = oracle.random_inputs(written.graph, 3)
    stale = check_stale(read_model(converted.read_bytes()), inputs)
    (before,), (after,) = (oracle.run(p.read_bytes(), inputs).outputs for p in (converted, out / "out.tflite"))
    (determined,) = stale.output_determined
    independent = determined.reshape(-1)
    assert independent.sum() == 256  # the 64 written pixels' 4 output bytes
    assert np.array_equal(before.view(np.uint8).reshape(-1)[independent], after.view(np.uint8).reshape(-1)[independent])
