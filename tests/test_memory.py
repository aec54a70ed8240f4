"""The TFLM memory model against the real host interpreter, byte for byte."""

from __future__ import annotations

import pytest

from conftest import SHARED_MODELS, reference_figures, shared_model_names
from lowtide import oracle
from lowtide.errors import LowtideError
from lowtide.memory import align_up, buffer_lifetimes, buffers_to_plan, tflm_plan
from lowtide.memory.in_place import InPlace, in_place_outputs
from lowtide.memory.placement import check_no_overlap, offline_plan, place
from lowtide.memory.plan_check import plan_problems
from lowtide.model import read_model
from lowtide.model.builder import ModelBuilder
from lowtide.model.edit import with_offline_plan
from lowtide.pipeline.optimize import optimize_model
from lowtide.validation import load_model

REFERENCE = reference_figures()


def test_all_shared_models_are_covered(shared_models):
    assert len(shared_model_names()) == 32


@pytest.mark.parametrize("name", shared_model_names())
def test_predicted_head_equals_measured_head(name):
    graph = load_model(SHARED_MODELS / f"{name}.tflite")
    measured = oracle.allocate((SHARED_MODELS / f"{name}.tflite").read_bytes())
    assert tflm_plan(graph).head_bytes == measured.head_bytes
    assert measured.head_bytes == int(REFERENCE[name]["tflm_head"])


@pytest.mark.parametrize("name", shared_model_names())
def test_live_peak_matches_reference_up_to_alignment(name):
    """REFERENCE.tsv's live peak is raw bytes without scratch; ours is 16-aligned with scratch, so it lies between
    the raw figure and the raw figure plus 15 bytes per live tensor plus scratch."""
    plan = tflm_plan(load_model(SHARED_MODELS / f"{name}.tflite"))
    raw = int(REFERENCE[name]["live_peak_stored"])
    assert plan.live_peak_bytes >= raw
    peak = plan.steps[plan.peak_step]
    scratch = sum(plan.buffers[i].size for i in peak.buffers if plan.buffers[i].tensor is None)
    assert plan.live_peak_bytes <= align_up(raw) + 15 * len(peak.buffers) + scratch
    assert plan.live_peak_bytes <= plan.head_bytes


def test_lstm_scratch_buffers_are_live_with_their_operator():
    plan = tflm_plan(load_model(SHARED_MODELS / "tflm_dtln_noise_suppression.tflite"))
    scratch = [b for b in plan.buffers if b.tensor is None]
    # Two LSTMs, four gate buffers each of 128 int16 cells.
    assert [(b.op, b.size) for b in scratch] == [(0, 256)] * 4 + [(1, 256)] * 4
    assert all(b.first == b.last for b in scratch)


def test_control_flow_subgraph_is_nested_in_its_caller_scope():
    graph = load_model(SHARED_MODELS / "mww_v1_okay_nabu.tflite")
    plan = tflm_plan(graph)
    call_once = next(s for s in plan.steps if s.opcode == "CALL_ONCE")
    inner = [s for s in plan.steps if s.subgraph == 1]
    assert len(inner) == len(graph.subgraphs[1].operators)
    assert all(s.scope > call_once.scope for s in inner)
    after = [s for s in plan.steps if s.subgraph == 0 and s.op == call_once.op + 1]
    assert after[0].scope > max(s.scope for s in inner)


def test_offline_plan_is_honoured_by_replica_and_tflm(tmp_path):
    """Give every planned tensor of a model the offsets TFLM itself chose: the replica must place them there and
    TFLM must measure the same head."""
    from lowtide.model.offline_memory import OfflinePlan

    graph = load_model(SHARED_MODELS / "mlperf_ic_resnet8_int8.tflite")
    plan = tflm_plan(graph)
    # Shift everything up by 64 bytes so the plan differs from what the greedy planner would do online.
    shifted = {(0, buffer.tensor): offset + 64 for buffer, offset in zip(plan.buffers, plan.offsets)}
    planned_graph = with_offline_plan(graph, OfflinePlan.from_offsets(graph.tensor_counts, shifted))
    data = planned_graph.data
    planned = tflm_plan(planned_graph)
    assert planned.head_bytes == plan.head_bytes + 64
    assert oracle.allocate(data).head_bytes == planned.head_bytes


def _split_model(axis: int, sizes: list[int], reread: bool = False) -> bytes:
    """conv -> SPLIT_V along `axis` -> a conv per piece -> concatenation; with `reread`, the split's input is
    also added to the result, so it outlives the split."""
    b = ModelBuilder(seed=4)
    x = b.conv2d(b.input((1, 8, 5, 4)), filters=8, kernel=1)
    pieces = [b.conv2d(p, filters=8, kernel=1) for p in b.split(x, sizes, axis)]
    y = b.concat(pieces, axis=axis)
    b.output(b.add(y, x) if reread else y)
    return b.build()


def test_in_place_outputs_follow_the_kernels_rules():
    rows = read_model(_split_model(axis=1, sizes=[2, 6]))
    split = next(op for op in rows.main.operators if op.opcode == "SPLIT_V")
    row_bytes = 5 * 8
    assert in_place_outputs(rows, 16) == {
        split.outputs[0]: InPlace(split.index, split.inputs[0], split.outputs[0], 0),
        split.outputs[1]: InPlace(split.index, split.inputs[0], split.outputs[1], 2 * row_bytes),
    }
    assert in_place_outputs(read_model(_split_model(axis=1, sizes=[3, 5])), 16) == {}  # 120 B: not 16-aligned
    assert in_place_outputs(read_model(_split_model(axis=3, sizes=[4, 4])), 16) == {}  # channels interleave
    assert in_place_outputs(read_model(_split_model(axis=1, sizes=[2, 6], reread=True)), 16) == {}  # read again
    # mcunet_vww quantizes its float32 input into int8: element i lands on bytes the loop has already read.
    mcunet = load_model(SHARED_MODELS / "mcunet_vww.tflite")
    quantize = mcunet.main.operators[0]
    assert in_place_outputs(mcunet, 16) == {quantize.outputs[0]: InPlace(0, quantize.inputs[0], quantize.outputs[0], 0)}


def _with_plan(graph, buffers, offsets):
    return with_offline_plan(graph, offline_plan(graph, buffers, offsets))


def test_a_models_own_plan_and_lowtides_are_judged_by_one_overlap_check():
    """The split's strips inside their source (in place, by memory.in_place's rules), as lowtide places them: a
    plan lowtide makes and the same plan as the model's own pass alike; two tensors live together put on the same
    bytes are refused by both, naming the same two."""
    graph = read_model(_split_model(axis=1, sizes=[2, 6]))
    buffers = buffers_to_plan(graph)
    offsets = list(place(buffers, 0).offsets)
    assert any(b.shares for b in buffers)
    check_no_overlap(buffers, offsets)
    assert plan_problems(_with_plan(graph, buffers, offsets)) == []

    in_place = {b.tensor for b in buffers if b.shares} | {b.shares[0] for b in buffers if b.shares}
    a, b = next(
        (i, j)
        for i, x in enumerate(buffers)
        for j, y in enumerate(buffers)
        if i < j
        and x.tensor is not None
        and y.tensor is not None
        and not {x.tensor, y.tensor} & in_place
        and max(x.first, y.first) < min(x.last, y.last)
    )  # live together beyond one operator
    offsets[b] = offsets[a]
    with pytest.raises(LowtideError, match="memory plan overlaps") as refused:
        check_no_overlap(buffers, offsets)
    [problem] = plan_problems(_with_plan(read_model(_split_model(axis=1, sizes=[2, 6])), buffers, offsets))
    assert str(refused.value).split(": ", 1)[1] == problem.reason.split(": ", 1)[1]


def test_in_place_quantize_frees_the_float_input_on_the_host_tflm(tmp_path):
    """mcunet_vww's QUANTIZE step holds 76,800 float bytes and 19,200 int8 bytes; planned in place, the int8
    output sits in the float input's first bytes and TFLM runs the model bit-identically."""
    graph = load_model(SHARED_MODELS / "mcunet_vww.tflite")
    assert tflm_plan(graph).steps[0].live_bytes == 96_000
    assert buffer_lifetimes(graph, in_place=True)[1][0].live_bytes == 76_800
    result = optimize_model(SHARED_MODELS / "mcunet_vww.tflite", tmp_path / "out.tflite", verify=True)
    assert result.verification.outputs_identical
    words = load_model(tmp_path / "out.tflite").offline_plan.offsets
    quantize = graph.main.operators[0]
    assert words[quantize.outputs[0]] == words[quantize.inputs[0]]


def _mirror_pad(b: ModelBuilder) -> None:
    b.output(b.pad(b.input((1, 8, 8, 4)), (1, 1), (1, 1), mode="REFLECT"))


def _global_mean(b: ModelBuilder) -> None:
    b.output(b.mean(b.input((1, 8, 8, 4))))


def _row_mean(b: ModelBuilder) -> None:
    b.output(b.mean(b.input((1, 4, 4, 8)), axes=(1,)))


@pytest.mark.parametrize("make", [_mirror_pad, _global_mean, _row_mean], ids=lambda f: f.__name__.strip("_"))
def test_kernel_scratch_buffers_are_in_the_predicted_head(make):
    """MIRROR_PAD (dimension strides) and int8 MEAN (an int32 accumulator per output, iterator and axis indices)
    ask TFLM for scratch buffers at the peak; without them the predicted head is 32 to 160 bytes short."""
    b = ModelBuilder(seed=1)
    make(b)
    data = b.build()
    assert tflm_plan(read_model(data)).head_bytes == oracle.allocate(data).head_bytes
