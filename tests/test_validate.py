"""Hostile models (issue 18): every class of problem a well-formed flatbuffer can carry is refused by every command
with one line naming the input file, exit 2, no signal, no traceback and no file left behind."""

from __future__ import annotations

import copy
import json
import math
import os
import signal
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from conftest import SHARED_MODELS, shared_model_names
from lowtide import oracle
from lowtide.errors import LowtideError, ModelError
from lowtide.memory import tflm_plan
from lowtide.model import model_bytes, read_model
from lowtide.model.builder import ModelBuilder
from lowtide.model.edit import with_offline_plan
from lowtide.model.offline_memory import OfflinePlan, PlanFormatError
from lowtide.model.reader import graph_from_tree, object_tree
from lowtide.model.schema import TYPE_CODES, fb
from lowtide.model.validate import MAX_TENSOR_BYTES_ENV
from lowtide.settings import read_settings
from lowtide.storage import write_files
from lowtide.text import escape
from lowtide.validation import load_model, model_problems
from support.hostile import COMMANDS, assert_kept_promise, run_in_process, run_subprocess


def _builder_model() -> bytes:
    """conv -> depthwise -> concat(conv, depthwise) -> avg pool -> reshape -> fully connected.
    Tensors: 0 input, 1-2 conv weights/bias, 3 conv, 4-5 dw weights/bias, 6 dw, 7 concat, 8 pool, 9 reshape,
    10-11 fc weights/bias, 12 output."""
    b = ModelBuilder(seed=1)
    x = b.input((1, 8, 8, 4))
    c = b.conv2d(x, 8)
    d = b.depthwise_conv2d(c)
    p = b.avg_pool(b.concat([c, d]))
    b.output(b.fully_connected(b.reshape(p, (1, 256)), 4))
    return b.build()


BUILDER = read_model(_builder_model())


def _planned(raw, graph=BUILDER) -> OfflinePlan:
    """The plan TFLM's greedy planner would make, as an OfflineMemoryAllocation, stored in `raw`."""
    plan = tflm_plan(graph)
    offline = OfflinePlan.from_offsets(
        graph.tensor_counts,
        {(b.subgraph, b.tensor): o for b, o in zip(plan.buffers, plan.offsets) if b.tensor is not None},
    )
    _store_plan(raw, offline)
    return offline


def _store_plan(raw, plan: OfflinePlan) -> None:
    """`plan` stored in the tree `raw` itself, which the cases go on changing by hand."""
    planned = object_tree(with_offline_plan(graph_from_tree(raw, "<test>"), plan))
    raw.buffers, raw.metadata = planned.buffers, planned.metadata


def _with_plan_offsets(change: Callable[[list[int]], list[int]], header: Callable[[tuple], tuple] = lambda h: h):
    def mutate(raw):
        plan = _planned(raw)
        version, subgraphs, _ = header(plan.words[:3])
        _store_plan(raw, OfflinePlan(version, subgraphs, tuple(change(list(plan.offsets)))))

    return mutate


def _set(path: str, value) -> Callable:
    """Set a dotted attribute path below the ModelT, e.g. 'subgraphs.0.operators.0.builtinOptions.strideW'."""

    def mutate(raw):
        *parents, last = path.split(".")
        target = raw
        for part in parents:
            target = target[int(part)] if part.isdigit() else getattr(target, part)
        if last.isdigit():
            target[int(last)] = value
        else:
            setattr(target, last, value)

    return mutate


def _options(kind: int, options) -> Callable:
    def mutate(raw):
        op = raw.subgraphs[0].operators[0]
        op.builtinOptionsType, op.builtinOptions = kind, options

    return mutate


def _empty_subgraph(raw):
    sg = fb.SubGraphT()
    sg.tensors, sg.operators, sg.inputs, sg.outputs = [], [], [], []
    raw.subgraphs.append(sg)


def _empty_plan_buffer(raw):
    _planned(raw)
    raw.buffers[raw.metadata[-1].buffer].data = np.zeros(0, dtype=np.uint8)


def _second_writer(raw):
    raw.subgraphs[0].operators[1].outputs = np.array([3], dtype=np.int32)  # the depthwise writes the conv's output


def _swap_first_two(raw):
    ops = raw.subgraphs[0].operators
    ops[0], ops[1] = ops[1], ops[0]


def _drop_one_scale(raw):
    q = raw.subgraphs[0].tensors[1].quantization
    q.scale, q.zeroPoint = q.scale[:-1], q.zeroPoint[:-1]


def _buffer_past_end(raw):
    buffer = raw.buffers[raw.subgraphs[0].tensors[1].buffer]
    buffer.data, buffer.offset, buffer.size = None, 1 << 20, 288


def _hostile_names(raw):
    raw.subgraphs[0].tensors[1].name = "w\n\x1b[31mred"
    raw.buffers[raw.subgraphs[0].tensors[1].buffer].data = np.zeros(5, dtype=np.uint8)


def _call_once_itself(raw):
    op = next(op for op in raw.subgraphs[0].operators if isinstance(op.builtinOptions, fb.CallOnceOptionsT))
    op.builtinOptions.initSubgraphIndex = 0


def _options_of(opcode_name: str, raw) -> list:
    code = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    return [
        op
        for op in raw.subgraphs[0].operators
        if code[
            max(raw.operatorCodes[op.opcodeIndex].builtinCode, raw.operatorCodes[op.opcodeIndex].deprecatedBuiltinCode)
        ]
        == opcode_name
    ]


def _softmax_beta_nan(raw):
    _options_of("SOFTMAX", raw)[0].builtinOptions.beta = math.nan


def _svdf_rank_zero(raw):
    _options_of("SVDF", raw)[0].builtinOptions.rank = 0


# name -> (source model: None for the builder's, mutation of the ModelT, words the error must contain)
CASES: dict[str, tuple[str | None, Callable, str]] = {
    # Killed by a signal in TFLM before.
    "empty_subgraph": (None, _empty_subgraph, "subgraph 1: subgraph has no operators"),
    "empty_plan_buffer": (None, _empty_plan_buffer, "has 0 bytes, fewer than the 12-byte header"),
    "negative_plan_offset": (None, _with_plan_offsets(lambda o: [-32 if x > 0 else x for x in o]), "at offset -32"),
    "softmax_beta_nan": ("tflm_micro_speech_quantized", _softmax_beta_nan, "SOFTMAX beta must be finite"),
    "svdf_rank_zero": ("tflm_keyword_scrambled_8bit", _svdf_rank_zero, "SVDF rank must be >= 1"),
    "call_once_itself": ("mww_v2_vad", _call_once_itself, "subgraph 0 -> subgraph 0"),
    "concat_axis": (None, _set("subgraphs.0.operators.2.builtinOptions.axis", 7), "axis 7 for rank 4"),
    "no_inputs": (None, _set("subgraphs.0.inputs", []), "it has no inputs"),
    "no_outputs": (None, _set("subgraphs.0.outputs", []), "it has no outputs"),
    # Tracebacks before.
    "constant_size": (None, _set("buffers.1.data", np.zeros(5, dtype=np.uint8)), "holds 5 bytes"),
    "scale_count": (None, _drop_one_scale, "7 scales for 8 channels"),
    "options_missing": (None, _options(fb.BuiltinOptions.NONE, None), "found none"),
    "options_wrong_type": (
        None,
        _options(fb.BuiltinOptions.Pool2DOptions, fb.Pool2DOptionsT()),
        "expected Conv2DOptions, found Pool2DOptions",
    ),
    "stride_zero": (None, _set("subgraphs.0.operators.0.builtinOptions.strideH", 0), "strideH = 0"),
    "filter_zero": (None, _set("subgraphs.0.operators.3.builtinOptions.filterWidth", 0), "filterWidth = 0"),
    "dilation_zero": (None, _set("subgraphs.0.operators.1.builtinOptions.dilationWFactor", 0), "dilationWFactor = 0"),
    "infinite_scale": (
        None,
        _set("subgraphs.0.tensors.3.quantization.scale", np.array([np.inf], np.float32)),
        "scales must be finite and positive",
    ),
    "missing_inputs": (
        None,
        _set("subgraphs.0.operators.0.inputs", np.array([0], dtype=np.int32)),
        "CONV_2D needs input 1",
    ),
    "string_input": (
        None,
        _set("subgraphs.0.tensors.0.type", TYPE_CODES["string"]),
        "input tensor 0 'input_0' is string",
    ),
    "resource_input": (
        None,
        _set("subgraphs.0.tensors.0.type", TYPE_CODES["resource"]),
        "input tensor 0 'input_0' is resource",
    ),
    "huge_tensor": (
        None,
        _set("subgraphs.0.tensors.0.shape", np.array([1, 1 << 15, 1 << 15, 1], np.int32)),
        "tensor larger than any microcontroller can hold",
    ),
    # Accepted with exit 0 before.
    "reads_own_output": (None, _set("subgraphs.0.operators.1.inputs.0", 6), "(its own output)"),
    "two_writers": (None, _second_writer, "is written by operator 0 and by operator 1"),
    "read_before_written": (None, _swap_first_two, "reads tensor 3 'conv_2d_0'"),
    "buffer_past_end": (None, _buffer_past_end, "a buffer lies past the end of the file"),
    "huge_plan_offset": (
        None,
        _with_plan_offsets(lambda o: [x + 2_000_000_000 if x > 0 else x for x in o]),
        "OfflineMemoryAllocation offset out of range",
    ),
    "plan_count": (None, _with_plan_offsets(lambda o: o[:-1]), "12 offsets, the model has 13 tensors"),
    "plan_version": (None, _with_plan_offsets(lambda o: o, lambda h: (7, h[1], h[2])), "version 7, expected 1"),
    "plan_overlap": (
        None,
        _with_plan_offsets(lambda o: [0 if x >= 0 else x for x in o]),
        "OfflineMemoryAllocation overlaps tensors live at the same time",
    ),
    # Model text printed raw before.
    "hostile_names": (None, _hostile_names, "'w\\n\\x1b[31mred'"),
}


def hostile_model(case: str, directory: Path) -> Path:
    source, mutate, _ = CASES[case]
    raw = copy.deepcopy(
        object_tree(BUILDER)
        if source is None
        else object_tree(read_model((SHARED_MODELS / f"{source}.tflite").read_bytes()))
    )
    mutate(raw)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{case}.tflite"
    path.write_bytes(model_bytes(raw))
    return path


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_command_refuses_the_hostile_model(case, tmp_path):
    model = hostile_model(case, tmp_path / "in")
    out = tmp_path / "out"
    out.mkdir()
    for command in COMMANDS:
        outcome = run_in_process(command, model, out)
        assert_kept_promise(outcome, model, out, expect_error=CASES[case][2])
        if command != "validate":
            assert "\x1b" not in outcome.stderr and outcome.stderr.count("\n") == 1


@pytest.mark.parametrize("case", ["call_once_itself", "no_outputs", "huge_tensor", "plan_overlap", "hostile_names"])
def test_as_a_subprocess(case, tmp_path):
    model = hostile_model(case, tmp_path / "in")
    out = tmp_path / "out"
    out.mkdir()
    assert_kept_promise(run_subprocess("optimize", model, out), model, out, expect_error=CASES[case][2])


def test_validate_lists_every_problem(tmp_path):
    path = tmp_path / "two.tflite"
    raw = copy.deepcopy(object_tree(BUILDER))
    _set("subgraphs.0.operators.0.builtinOptions.strideH", 0)(raw)
    _set("subgraphs.0.operators.2.builtinOptions.axis", 7)(raw)
    path.write_bytes(model_bytes(raw))
    outcome = run_in_process("validate", path, tmp_path)
    assert outcome.code == 2 and len(outcome.stderr.strip().splitlines()) == 2
    assert all(line.startswith(f"{path}: subgraph 0 operator ") for line in outcome.stderr.splitlines())
    report = json.loads(run_in_process("validate", path, tmp_path, "--json").stdout)
    assert report["valid"] is False and [p["where"] for p in report["problems"]] == [
        "subgraph 0 operator 0 (CONV_2D)",
        "subgraph 0 operator 2 (CONCATENATION)",
    ]


def test_a_valid_plan_passes_and_runs(tmp_path):
    raw = copy.deepcopy(object_tree(BUILDER))
    _planned(raw)
    path = tmp_path / "planned.tflite"
    path.write_bytes(model_bytes(raw))
    assert model_problems(load_model(path)) == []


@pytest.mark.parametrize("name", shared_model_names())
def test_no_shared_model_is_rejected(name):
    assert [p.message for p in model_problems(load_model(SHARED_MODELS / f"{name}.tflite"))] == []


def test_tensor_limit_can_be_raised(tmp_path, monkeypatch):
    model = hostile_model("huge_tensor", tmp_path)
    with pytest.raises(ModelError, match=MAX_TENSOR_BYTES_ENV):
        load_model(model)
    monkeypatch.setenv(MAX_TENSOR_BYTES_ENV, str(1 << 31))
    graph = read_model(model.read_bytes(), str(model))
    assert graph.main.tensors[0].nbytes == 1 << 30
    # The limit no longer applies; what is left is that the convolution reading the huge one-channel input has
    # the filter of the original four-channel one.
    assert [p.reason for p in model_problems(graph)] == [
        "operand shapes do not fit the operator: 1 input channels for a filter of 4: not a whole number of groups"
    ]


# ---- the host TFLM in a child process --------------------------------------------------------------------------


def test_a_tflm_crash_is_one_line_and_lowtide_keeps_running(tmp_path):
    """The unvalidated bytes of a model that kills TFLM: the child dies, the caller gets a LowtideError."""
    data = hostile_model("empty_subgraph", tmp_path).read_bytes()
    with pytest.raises(LowtideError, match=rf"TFLite Micro crashed \(signal {int(signal.SIGSEGV)}\) while loading"):
        oracle.allocate(data, path="m.tflite")
    assert oracle.allocate(_builder_model()).head_bytes == tflm_plan(BUILDER).head_bytes


def test_tflm_log_line_is_folded_into_the_error():
    with pytest.raises(LowtideError, match="TFLite Micro crashed .*: Failed to allocate tail memory"):
        oracle.allocate(_builder_model(), arena_size=64)


def test_oracle_outputs_cross_the_process_boundary():
    inputs = oracle.random_inputs(BUILDER, seed=3)
    first = oracle.run(_builder_model(), inputs)
    assert first.outputs[0].shape == (1, 4) and first.head_bytes == tflm_plan(BUILDER).head_bytes
    sequence = oracle.run_sequence(_builder_model(), [inputs, inputs])
    assert all(np.array_equal(outputs[0], first.outputs[0]) for outputs in sequence)


def test_a_hung_tflm_is_killed(monkeypatch):
    monkeypatch.setenv("LOWTIDE_TFLM_TIMEOUT", "0")
    with pytest.raises(LowtideError, match="did not finish within 0 s"):
        oracle.allocate(_builder_model())


# ---- outputs and text ------------------------------------------------------------------------------------------


def test_write_files_is_all_or_nothing(tmp_path):
    (tmp_path / "blocked").mkdir()  # a directory where a file should go: its rename fails
    with pytest.raises(LowtideError, match=f"{tmp_path / 'blocked'}: cannot write"):
        write_files({tmp_path / "a.tflite": b"a", tmp_path / "blocked": b"b"})
    assert [p.name for p in tmp_path.iterdir()] == ["blocked"]


def test_optimize_writes_nothing_when_an_output_cannot_be_written(tmp_path):
    model = tmp_path / "m.tflite"
    model.write_bytes(_builder_model())
    out = tmp_path / "out"
    out.mkdir()
    (out / "out.json").mkdir()  # the sidecar cannot be written
    outcome = run_in_process("optimize", model, out)
    assert outcome.code == 2 and outcome.stderr.startswith(f"lowtide: error: {out / 'out.json'}: cannot write")
    assert [p.name for p in out.iterdir()] == ["out.json"]


def test_escape():
    assert escape("plain name/with:punctuation") == "plain name/with:punctuation"
    assert escape("a\nb\x1b[2Jc\u202e\x7f") == "a\\nb\\x1b[2Jc\\u202e\\x7f"


def test_plan_round_trip_and_format_errors():
    plan = OfflinePlan.from_offsets([2, 1], {(0, 1): 32, (1, 0): 0})
    assert plan.words == (1, 2, 3, -1, 32, 0)
    assert OfflinePlan.decode(plan.encode()) == plan
    assert plan.offset([2, 1], 1, 0) == 0 and plan.offset([2, 1], 0, 0) is None
    for bad, reason in ((b"", "fewer than"), (plan.encode()[:-2], "whole number"), (plan.encode()[:-4], "declares")):
        with pytest.raises(PlanFormatError, match=reason):
            OfflinePlan.decode(bad)


def test_an_options_tag_without_its_table_is_refused_before_anything_writes_the_model(tmp_path):
    """TFLM's aligner, which every model lowtide writes goes through, crashes on such an operator."""
    import flatbuffers

    raw = copy.deepcopy(object_tree(BUILDER))
    raw.subgraphs[0].operators[0].builtinOptions = None  # the tag still says Conv2DOptions
    builder = flatbuffers.Builder(1024)
    builder.Finish(raw.Pack(builder), file_identifier=b"TFL3")
    model = tmp_path / "in" / "tag.tflite"
    model.parent.mkdir()
    model.write_bytes(bytes(builder.Output()))
    out = tmp_path / "out"
    out.mkdir()
    for command in ("validate", "optimize"):
        assert_kept_promise(
            run_in_process(command, model, out),
            model,
            out,
            expect_error="builtinOptions type 1 (Conv2DOptions) without its table",
        )


def _unaligned(raw) -> bytes:
    """The object tree packed by the flatbuffers library alone: TFLM's aligner, which lowtide's writer runs, is
    what crashes on a union tag without its table."""
    import flatbuffers

    builder = flatbuffers.Builder(1024)
    builder.Finish(raw.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _tensor_with_quantization(raw):
    return next(t for t in raw.subgraphs[0].tensors if t.quantization is not None and t.quantization.scale is not None)


# Union tags that name a table the bytes do not hold (one flipped byte in a real model's file).
UNION_FLIPS = {
    "details_custom": (
        lambda raw: setattr(_tensor_with_quantization(raw).quantization, "detailsType", 1),
        "details type 1 (CustomQuantization) without its table",
    ),
    "details_blockwise": (
        lambda raw: setattr(_tensor_with_quantization(raw).quantization, "detailsType", 2),
        "details type 2 (BlockwiseQuantization) without its table",
    ),
    "details_unknown": (
        lambda raw: setattr(_tensor_with_quantization(raw).quantization, "detailsType", 9),
        "details type 9 is no QuantizationDetails member",
    ),
    "builtin_options2": (
        lambda raw: setattr(raw.subgraphs[0].operators[0], "builtinOptions2Type", 3),
        "builtinOptions2 type 3 (StablehloSliceOptions) without its table",
    ),
    "builtin_options_unknown": (
        lambda raw: setattr(raw.subgraphs[0].operators[0], "builtinOptionsType", 250),
        "builtinOptions type 250 is no BuiltinOptions member",
    ),
}


@pytest.mark.parametrize("case", sorted(UNION_FLIPS))
def test_a_union_whose_type_and_table_disagree_is_a_validation_error(case, tmp_path):
    """Before, `optimize` serialised such a model (its offline plan) and died of a segmentation fault."""
    flip, message = UNION_FLIPS[case]
    raw = object_tree(read_model((SHARED_MODELS / "tflm_hello_world_int8.tflite").read_bytes()))
    flip(raw)
    model = tmp_path / "in" / f"{case}.tflite"
    model.parent.mkdir()
    model.write_bytes(_unaligned(raw))
    for command, runner in (("validate", run_in_process), ("optimize", run_subprocess), ("compile", run_subprocess)):
        out = tmp_path / command
        out.mkdir()
        outcome = runner(command, model, out)
        assert_kept_promise(outcome, model, out, expect_error=message)
        assert outcome.stderr.count("\n") == 1


def test_the_host_tflm_board_survives_a_crash_in_a_run(monkeypatch):
    """The board runs each RUN's invocations in a TFLM child: a crash there is an INVOKE_FAILED reply."""
    from lowtide.device.protocol import Error, ErrorCode, Result, Run
    from lowtide.pipeline.host_tflm import TflmBoard

    board = TflmBoard(_builder_model(), "m.tflite", read_settings())
    sent = []
    assert isinstance(board._run(Run(0, 2), 1, sent.append), Result)
    monkeypatch.setattr(TflmBoard, "_invocations", lambda *args: os.kill(os.getpid(), signal.SIGSEGV))
    reply = board._run(Run(0, 2), 2, sent.append)
    assert isinstance(reply, Error) and reply.code == ErrorCode.INVOKE_FAILED
    assert reply.text.startswith(f"TFLite Micro crashed (signal {int(signal.SIGSEGV)}) while")


def _declared_shape_case(opcode: str) -> tuple[bytes, int]:
    """A builder model whose operator `opcode` declares an output with one channel more than it computes (TFLM's
    host interpreter runs it, writing only the channels it computes); the operator's index."""
    b = ModelBuilder(seed=2)
    x = b.input((1, 8, 8, 4))
    y = {
        "CONV_2D": lambda: b.conv2d(x, 8, 3),
        "DEPTHWISE_CONV_2D": lambda: b.depthwise_conv2d(x, 3),
        "MAX_POOL_2D": lambda: b.max_pool(x, 2),
        "AVERAGE_POOL_2D": lambda: b.avg_pool(x, 2),
        "FULLY_CONNECTED": lambda: b.fully_connected(x, 6),
        "ADD": lambda: b.add(x, b.conv2d(x, 4, 1)),
        "RELU": lambda: b.activation(x, "RELU"),
        "LOGISTIC": lambda: b.activation(x, "LOGISTIC"),
    }[opcode]()
    b.output(y)
    raw = object_tree(read_model(b.build()))
    op = next(
        i
        for i, o in enumerate(raw.subgraphs[0].operators)
        if raw.operatorCodes[o.opcodeIndex].builtinCode == fb.BuiltinOperator.__dict__[opcode]
    )
    out = raw.subgraphs[0].tensors[raw.subgraphs[0].operators[op].outputs[0]]
    out.shape = [*out.shape[:-1], out.shape[-1] + 1]
    return model_bytes(raw), op


@pytest.mark.parametrize(
    "opcode",
    ["ADD", "AVERAGE_POOL_2D", "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "LOGISTIC", "MAX_POOL_2D", "RELU"],
)
def test_a_declared_output_shape_the_operator_does_not_compute_is_one_line(opcode, tmp_path):
    """compile sized per-channel quantization from the declared shape and ended in an IndexError traceback."""
    data, op = _declared_shape_case(opcode)
    model = tmp_path / "in" / f"{opcode.lower()}.tflite"
    model.parent.mkdir()
    model.write_bytes(data)
    problems = model_problems(read_model(data))
    assert [p.where for p in problems] == [f"subgraph 0 operator {op} ({opcode})"]
    assert "declared output shape is not the one the operator computes" in problems[0].reason
    for command in ("validate", "compile", "optimize"):
        out = tmp_path / command
        out.mkdir()
        assert_kept_promise(
            run_in_process(command, model, out),
            model,
            out,
            expect_error=f"operator {op} ({opcode}): declared output shape",
        )


@pytest.mark.parametrize("name", ["tflm_micro_speech_quantized", "mww_v2_vad", "tflm_keyword_scrambled_8bit"])
def test_every_operator_with_a_mismatched_declared_output_keeps_the_promise(name, tmp_path):
    """Each operator of a real model in turn declares one more element along its output's last axis: validate and
    compile give exit 0 or one line, never a traceback, and write nothing on an error."""
    raw = object_tree(read_model((SHARED_MODELS / f"{name}.tflite").read_bytes()))
    for index, op in enumerate(raw.subgraphs[0].operators):
        if op.outputs is None or not len(op.outputs):
            continue  # ASSIGN_VARIABLE writes no tensor
        mutated = copy.deepcopy(raw)
        output = mutated.subgraphs[0].tensors[op.outputs[0]]
        if output.shape is None or not len(output.shape):
            continue
        output.shape = [*output.shape[:-1], output.shape[-1] + 1]
        model = tmp_path / f"op{index}" / "model.tflite"
        model.parent.mkdir()
        model.write_bytes(model_bytes(mutated))
        for command in ("validate", "compile"):
            out = tmp_path / f"op{index}" / command
            out.mkdir()
            assert_kept_promise(run_in_process(command, model, out), model, out)
