"""In-place execution planned for lowtide's compiled runtime (lowtide.memory.in_place, Executor.COMPILED): a
MobileNetV2-style block whose depthwise convolutions write over their input and whose PAD is fused into the fast
depthwise kernel, bit-exact with the host TFLM on the host (ASan/UBSan) and on qemu-m4 in a smaller arena; and
plans meant for TFLM (optimize's OfflineMemoryAllocation, the validator) never use the compiled-only cases. For TFLM:
CONCATENATION inputs planned inside their output, where that lowers the head, bit-identical on the host TFLM."""

from __future__ import annotations

import pytest

from conftest import needs_firmware_tools
from lowtide.compile import compile_model, verify_compiled
from lowtide.compile.codegen import arena_plan
from lowtide.memory import ALIGNMENT, Executor, buffers_to_plan, tflm_plan
from lowtide.memory.in_place import concatenation_inputs, in_place_outputs
from lowtide.memory.placement import offline_plan, place, placement_budget
from lowtide.model import read_model
from lowtide.model.builder import ModelBuilder
from lowtide.model.edit import with_offline_plan
from lowtide.model.operators import TflmInPlace, semantics
from lowtide.pipeline.measure import measure
from lowtide.pipeline.optimize import optimize_model
from lowtide.validation import load_model, model_problems


def _block() -> bytes:
    """Expand, 3x3 depthwise (stride 1), project, residual ADD; then expand, explicit PAD, 3x3 depthwise
    (stride 2, VALID), project, RELU: as converted MobileNetV2s are."""
    b = ModelBuilder(seed=7, name="mbv2_block")
    x = b.input((1, 24, 24, 8))
    d = b.depthwise_conv2d(b.conv2d(x, 32, kernel=1, activation="RELU6"), 3, activation="RELU6")
    s = b.add(x, b.conv2d(d, 8, kernel=1, activation="NONE"))
    e = b.conv2d(s, 32, kernel=1, activation="RELU6")
    d2 = b.depthwise_conv2d(b.pad(e, rows=(1, 1), cols=(1, 1)), 3, stride=2, padding="VALID", activation="RELU6")
    b.output(b.activation(b.conv2d(d2, 16, kernel=1, activation="NONE"), "RELU"))
    return b.build()


def _tflm_never_in_place(opcode: str) -> bool:
    return semantics(opcode).tflm_in_place is TflmInPlace.NEVER


@pytest.fixture(scope="module")
def block(tmp_path_factory):
    path = tmp_path_factory.mktemp("in_place") / "mbv2_block.tflite"
    path.write_bytes(_block())
    return path


def test_compiled_plan_runs_depthwise_in_place_and_is_bit_exact_under_sanitizers(block, tmp_path):
    graph = load_model(block)
    # the whole-tensor plan's in-place rules (row chains, the default, hold the expansions as rings instead:
    # tests/test_compile_rows.py)
    plan = arena_plan(graph, row_chains=False)
    ops = graph.main.operators
    assert plan.in_place and [(dw, f.pad_op) for dw, f in plan.fused_pads.items()] == [(6, 5)]
    # Both depthwise outputs and the ADD's sit on their input's bytes; the fused PAD's output has no place.
    assert plan.offsets[ops[1].outputs[0]] == plan.offsets[ops[1].inputs[0]]
    assert plan.offsets[ops[6].outputs[0]] == plan.offsets[ops[4].outputs[0]]
    assert ops[5].outputs[0] not in plan.offsets
    # The stride-1 depthwise step holds 2 x 18,432 B without in-place. The plan's peak is the projection's: the
    # residual input, the depthwise output it reads, its own output and its fast kernel's two int16 rows (2 x 32
    # values = 128 B), which the arena holds like every fast layer's scratch; no placement does better.
    assert plan.head_bytes == 4_608 + 18_432 + 4_608 + 128 < tflm_plan(graph).head_bytes == 41_472
    assert plan.fast_scratch_bytes[2] == 128 and plan.fast_scratch_bytes[1] == 26 * 26 * 2  # padded 24x24 plane
    compiled = compile_model(load_model(block), row_chains=False)
    assert compiled.arena_bytes == plan.head_bytes and "fused into operator 6" in compiled.files["model.c"]
    result = verify_compiled(load_model(block), seed=5, workdir=tmp_path, sanitize=True)
    assert result.passed, result.outputs


@needs_firmware_tools
def test_in_place_block_bit_exact_on_qemu_m4_in_its_planned_arena(block):
    result = measure(block, "qemu-m4", iterations=1, warmup=0, timeout=60, seed=4)
    assert result.outputs_match, result.mismatched_outputs
    # row chains: the 32-channel expansions as rings of rows, the depthwise rows in their input ring's slots (27,776 B
    # on whole tensors, in place; 8,032 B before rows wrote over the rows they had read)
    assert result.board_planned_bytes == compile_model(load_model(block)).arena_bytes == 7_072
    assert result.board_planned_bytes < result.arena_planned_bytes == tflm_plan(load_model(block)).head_bytes
    assert 0 < result.arena_high_water_bytes <= result.board_planned_bytes


def test_tflm_plans_never_use_compiled_only_in_place_rules(block):
    """TFLM's depthwise and element-wise kernels read while they write: neither optimize's plan nor the
    validator may put their outputs on their inputs, which the compiled runtime's plan does."""
    graph = load_model(block)
    compiled_only = {op.outputs[0] for op in graph.main.operators if _tflm_never_in_place(op.opcode)}
    assert not set(in_place_outputs(graph, 16)) & compiled_only
    assert not any(b.shares for b in buffers_to_plan(graph) if b.tensor in compiled_only)
    assert set(in_place_outputs(graph, 16, Executor.COMPILED)) == compiled_only  # both depthwise, ADD, RELU

    # What optimize writes into a model (export.offline_plan: buffers_to_plan for TFLM, placed): valid for TFLM,
    # and no compiled-only operator's output on its input.
    buffers = buffers_to_plan(graph)
    placed = dict(zip(((b.subgraph, b.tensor) for b in buffers), place(buffers, 0).offsets))
    for op in graph.main.operators:
        if _tflm_never_in_place(op.opcode):
            (out, source), sizes = (op.outputs[0], op.inputs[0]), graph.main.tensors
            a, b = placed[(0, out)], placed[(0, source)]
            assert a + sizes[out].nbytes <= b or b + sizes[source].nbytes <= a, op
    planned = with_offline_plan(graph, offline_plan(graph, buffers, place(buffers, 0).offsets))
    assert model_problems(read_model(planned.data, "tflm_plan.tflite")) == []

    # The compiled runtime's plan written into the model as its OfflineMemoryAllocation: refused for TFLM.
    buffers = buffers_to_plan(graph, executor=Executor.COMPILED)
    planned = with_offline_plan(graph, offline_plan(graph, buffers, place(buffers, 0).offsets))
    problems = model_problems(read_model(planned.data, "compiled_plan.tflite"))
    assert any("overlaps tensors live at the same time" in p.message for p in problems), problems


def _row_halves(axis: int) -> bytes:
    """The input's two row halves each expanded and projected on their own, their results concatenated along
    `axis` (1: the rows, as a tiled region's patches are) and projected."""
    b = ModelBuilder(seed=11, name="row_halves")
    halves = [
        b.conv2d(b.conv2d(half, 32, kernel=1, activation="RELU6"), 32, kernel=1, activation="RELU6")
        for half in b.split_equal(b.input((1, 16, 16, 8)), 2, axis=1)
    ]
    b.output(b.conv2d(b.concat(halves, axis=axis), 8, kernel=1, activation="NONE"))
    return b.build()


def test_concatenation_inputs_planned_inside_their_output_lower_the_head_bit_identically(tmp_path):
    """Each half's result (8x16x32 int8, 4,096 B) sits at its block of the concatenation's output from its
    producer on: the concatenation holds those bytes once. optimize's plan puts them there, TFLM measures the
    planned head, lower than the best plan without, and the outputs are bit-identical."""
    model = tmp_path / "row_halves.tflite"
    model.write_bytes(_row_halves(axis=1))
    graph = load_model(model)
    concat = next(op for op in graph.main.operators if op.opcode == "CONCATENATION")
    inside = concatenation_inputs(graph, ALIGNMENT)
    assert [(inside[t].output, inside[t].offset) for t in concat.inputs] == [
        (concat.outputs[0], 0),
        (concat.outputs[0], 4096),
    ]

    result = optimize_model(model, tmp_path / "out.tflite", verify=True)
    assert result.verification is not None and result.verification.outputs_identical
    assert result.verification.measured_head_bytes == result.planned_head_bytes
    written = read_model((tmp_path / "out.tflite").read_bytes())
    assert model_problems(written) == []
    plan = written.offline_plan
    assert plan is not None
    names = {t.name: t.index for t in written.main.tensors}
    names_of = {t.index: t.name for t in graph.main.tensors}
    offset = {t: plan.offset(written.tensor_counts, 0, names[names_of[t]]) for t in (*concat.inputs, *concat.outputs)}
    assert [offset[t] - offset[concat.outputs[0]] for t in concat.inputs] == [0, 4096]
    without = place(buffers_to_plan(graph, result.order), placement_budget()).head_bytes
    assert result.planned_head_bytes < without
    # Below what the schedule's bound allows a plan without blocks in place: the bound reported is the weaker one
    # of each operator's own bytes, the final projection's 8,192 + 2,048 B.
    assert result.planned_head_bytes < result.schedule.lower_bound_bytes
    assert result.lower_bound_bytes == 10_240 <= result.planned_head_bytes
    assert not result.optimal and result.gap_bytes == result.planned_head_bytes - 10_240

    # Along the channels the halves interleave in the output: nothing may sit inside it.
    channels = tmp_path / "channel_halves.tflite"
    channels.write_bytes(_row_halves(axis=3))
    assert concatenation_inputs(load_model(channels), ALIGNMENT) == {}
