"""The model builder against the real host TFLM interpreter: every op runs, TFLM's head matches the prediction,
operator order is the one asked for, and the int8 arithmetic is TFLM's."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest

from lowtide.errors import LowtideError
from lowtide.memory import tflm_plan
from lowtide.model import read_model
from lowtide.model.builder import ModelBuilder
from lowtide.model.ir import Graph
from lowtide.model.reader import object_tree
from lowtide.model.schema import fb
from lowtide.oracle import random_inputs, run
from lowtide.testing.zoo import demo_builder, demo_model, main
from support.builder_models import BRANCH_BY_BRANCH, BREADTH_FIRST, two_branch_builder


def every_op_builder(seed: int = 0) -> tuple[ModelBuilder, list]:
    """One graph using each operator kind and option; returns the builder and its tensors in call order."""
    b = ModelBuilder(seed=seed)
    x = b.input((1, 20, 20, 3))
    c_same = b.conv2d(x, filters=8, kernel=3, stride=1, padding="SAME", activation="RELU")
    c_valid = b.conv2d(c_same, filters=12, kernel=3, stride=2, padding="VALID", activation="RELU6")  # 9x9
    d_same = b.depthwise_conv2d(c_valid, kernel=3, stride=1, padding="SAME", activation="NONE")
    d_valid = b.depthwise_conv2d(
        d_same, kernel=3, stride=2, padding="VALID", activation="RELU6", depth_multiplier=2
    )  # 4x4x24
    summed = b.add(c_valid, d_same, activation="RELU")
    merged = b.concat([c_valid, summed])  # 9x9x24
    maxed = b.max_pool(merged, size=3, stride=2, padding="VALID")  # 4x4x24
    averaged = b.avg_pool(d_valid, size=2, stride=1, padding="SAME")  # 4x4x24
    joined = b.add(maxed, averaged)
    flat = b.reshape(joined, (1, 4 * 4 * 24))
    logits = b.fully_connected(flat, units=10)
    hidden = b.fully_connected(joined, units=16, activation="RELU")  # 4-D input: TFLM flattens it
    b.output(logits, hidden)
    return b, [c_same, c_valid, d_same, d_valid, summed, merged, maxed, averaged, joined, flat, logits, hidden]


EVERY_OP_EXPECTED = [
    ("CONV_2D", (1, 20, 20, 8)),
    ("CONV_2D", (1, 9, 9, 12)),
    ("DEPTHWISE_CONV_2D", (1, 9, 9, 12)),
    ("DEPTHWISE_CONV_2D", (1, 4, 4, 24)),
    ("ADD", (1, 9, 9, 12)),
    ("CONCATENATION", (1, 9, 9, 24)),
    ("MAX_POOL_2D", (1, 4, 4, 24)),
    ("AVERAGE_POOL_2D", (1, 4, 4, 24)),
    ("ADD", (1, 4, 4, 24)),
    ("RESHAPE", (1, 384)),
    ("FULLY_CONNECTED", (1, 10)),
    ("FULLY_CONNECTED", (1, 16)),
]


WIDE, NARROW = 16 * 16 * 64, 16 * 16 * 4


def topological_orders(graph: Graph) -> list[list[int]]:
    sg = graph.main
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(sg.operators)))
    producers = sg.producers()
    dag.add_edges_from((producers[t], op.index) for op in sg.operators for t in op.inputs if t in producers)
    return [list(order) for order in nx.all_topological_sorts(dag)]


def oracle(data: bytes, seed: int = 0):
    return run(data, random_inputs(read_model(data), seed))


# ---- structure --------------------------------------------------------------------------------------------


def test_every_op_kind_builds_runs_and_reads_back():
    b, refs = every_op_builder()
    data = b.build()
    graph = read_model(data)
    sg = graph.main
    assert [(op.opcode, sg.tensors[op.outputs[0]].shape) for op in sg.operators] == EVERY_OP_EXPECTED
    assert [op.outputs[0] for op in sg.operators] == [r.index for r in refs]
    assert [r.op for r in refs] == list(range(len(refs)))
    assert sg.tensors[sg.inputs[0]].shape == (1, 20, 20, 3)
    assert all(t.dtype == "int8" for t in sg.tensors if t.planned)
    result = oracle(data)
    assert [o.shape for o in result.outputs] == [(1, 10), (1, 16)]
    assert all(o.dtype == np.int8 for o in result.outputs)


def test_buffer_zero_is_the_empty_sentinel_and_constant_buffers_are_16_byte_aligned():
    data = demo_model()
    raw = object_tree(read_model(data))
    assert raw.buffers[0].data is None or len(raw.buffers[0].data) == 0
    # The flatbuffer runtime reads buffer data as a view into `data`: its offset is where the bytes sit.
    model = fb.Model.GetRootAs(data, 0)
    offsets = [
        model.Buffers(i).DataAsNumpy().ctypes.data - np.frombuffer(data, np.uint8).ctypes.data
        for i in range(1, model.BuffersLength())
    ]
    assert offsets and all(o % 16 == 0 for o in offsets)


def test_quantization_parameters_follow_the_int8_spec():
    graph = read_model(every_op_builder()[0].build())
    raw, sg = object_tree(graph), object_tree(graph).subgraphs[0]
    opcodes = [op.opcode for op in graph.main.operators]
    for op, opcode in zip(sg.operators, opcodes):
        if opcode not in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
            continue
        x, w, bias = (sg.tensors[i] for i in op.inputs)
        channels = w.shape[0] if opcode != "DEPTHWISE_CONV_2D" else w.shape[3]
        expected_dim = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 0}[opcode]
        scales = np.asarray(w.quantization.scale)
        assert len(scales) == (1 if opcode == "FULLY_CONNECTED" else channels)
        assert w.quantization.quantizedDimension == expected_dim
        assert list(w.quantization.zeroPoint) == [0] * len(scales)
        weights = np.frombuffer(bytes(raw.buffers[w.buffer].data), np.int8)
        assert weights.min() >= -127 and np.abs(weights).max() == 127  # symmetric, full range used
        assert list(bias.shape) == [channels] and bias.type == fb.TensorType.INT32
        np.testing.assert_allclose(bias.quantization.scale, x.quantization.scale[0] * scales, rtol=1e-6)
        assert list(bias.quantization.zeroPoint) == [0] * len(scales)
    # CONCATENATION and pooling copy int8 bytes: inputs and output must share scale and zero point.
    for op, opcode in zip(sg.operators, opcodes):
        if opcode in ("CONCATENATION", "MAX_POOL_2D", "AVERAGE_POOL_2D", "RESHAPE"):
            params = {
                (tuple(sg.tensors[i].quantization.scale), tuple(sg.tensors[i].quantization.zeroPoint))
                for i in [*op.inputs, *op.outputs]
            }
            assert len(params) == 1, opcode


# ---- memory: TFLM's head is the predicted one ---------------------------------------------------------------


def _every_op_model() -> bytes:
    return every_op_builder()[0].build()


def _two_branch(order):
    return lambda: two_branch_builder().build(order)


@pytest.mark.parametrize(
    "make",
    [_every_op_model, _two_branch(BREADTH_FIRST), _two_branch(BRANCH_BY_BRANCH), demo_model],
    ids=["every-op", "two-branch-bad", "two-branch-good", "demo"],
)
def test_predicted_head_equals_tflm_head(make):
    data = make()
    assert tflm_plan(read_model(data)).head_bytes == oracle(data).head_bytes


def test_operators_are_stored_in_the_chosen_order():
    bad, good = two_branch_builder().build(BREADTH_FIRST), two_branch_builder().build(BRANCH_BY_BRANCH)
    assert bad == two_branch_builder().build()  # call order is the default
    bad_graph, good_graph = read_model(bad), read_model(good)
    # Known by construction: breadth first holds both wide tensors and a narrow one; branch by branch, one wide
    # tensor and two narrow ones (the input and the first branch's result).
    assert tflm_plan(bad_graph).live_peak_bytes == 2 * WIDE + NARROW
    assert tflm_plan(good_graph).live_peak_bytes == WIDE + 2 * NARROW
    bad_run, good_run = oracle(bad), oracle(good)
    assert good_run.head_bytes < bad_run.head_bytes
    assert good_run.head_bytes == tflm_plan(good_graph).head_bytes
    np.testing.assert_array_equal(bad_run.outputs[0], good_run.outputs[0])  # same graph, same arithmetic
    # Reordering moves operators only: the tensor and opcode tables are identical.
    assert [t.name for t in bad_graph.main.tensors] == [t.name for t in good_graph.main.tensors]
    assert [c.builtinCode for c in object_tree(bad_graph).operatorCodes] == [
        c.builtinCode for c in object_tree(good_graph).operatorCodes
    ]


@pytest.mark.parametrize("order", [[0, 1, 2, 3], [0, 1, 2, 3, 3], [2, 0, 1, 3, 4], [0, 1, 4, 2, 3]])
def test_orders_that_are_not_topological_permutations_are_refused(order):
    with pytest.raises(LowtideError):
        two_branch_builder().build(order)


@pytest.mark.parametrize(
    "misuse",
    [
        lambda b, x: b.add(x, b.conv2d(x, filters=4, stride=2)),
        lambda b, x: b.concat([x]),
        lambda b, x: b.conv2d(x, filters=4, kernel=9, padding="VALID"),
        lambda b, x: b.conv2d(x, filters=4, activation="TANH"),
        lambda b, x: b.conv2d(x, filters=4, stride=0),
        lambda b, x: b.add(x, x, activation="SIGMOID"),
        lambda b, x: b.max_pool(x, padding="FULL"),
        lambda b, x: b.reshape(x, (1, 7)),
        lambda b, x: b.avg_pool(b.fully_connected(x, 4)),
        lambda b, x: b.add(x, ModelBuilder().input((1, 8, 8, 4))),
    ],
)
def test_misuse_raises_a_lowtide_error(misuse):
    b = ModelBuilder()
    with pytest.raises(LowtideError):
        misuse(b, b.input((1, 8, 8, 4)))


# ---- determinism and value spread --------------------------------------------------------------------------


def test_same_description_and_seed_give_the_same_bytes():
    assert every_op_builder(seed=5)[0].build() == every_op_builder(seed=5)[0].build()
    assert demo_model() == demo_model()
    assert every_op_builder(seed=5)[0].build() != every_op_builder(seed=6)[0].build()


def test_activations_use_the_int8_range_without_clipping_much():
    """Every intermediate tensor made a model output: values spread over many levels and few are clipped.
    After RELU/RELU6, -128 is the real zero the rectifier produces, so only the top counts as clipping there."""
    b, refs = every_op_builder()
    b.output(*refs[:-2])
    outputs = oracle(b.build(), seed=1).outputs
    c_same, c_valid, d_same, d_valid, summed, merged, maxed, averaged, joined, flat, logits, hidden = refs
    signed = {d_same.index, logits.index}  # activation NONE on signed inputs
    for ref, values in zip([logits, hidden, *refs[:-2]], outputs):
        assert values.shape == ref.shape
        at_top, at_bottom = np.mean(values == 127), np.mean(values == -128)
        if values.size <= 16:  # the FULLY_CONNECTED layers: a few values, check they differ and are not clipped
            assert len(np.unique(values)) >= 8 and at_top == 0, ref
        else:
            assert np.std(values) > 12 and len(np.unique(values)) > 64 and at_top < 0.05, ref
        if ref.index in signed:
            assert at_bottom < 0.05, ref


def test_demo_outputs_differ_between_inputs():
    data = demo_model()
    first, second = oracle(data, seed=0).outputs[0], oracle(data, seed=1).outputs[0]
    assert not np.array_equal(first, second)
    assert len(np.unique(first)) >= 8 and np.mean(np.abs(first.astype(int)) >= 127) < 0.3


# ---- the demo's memory story -------------------------------------------------------------------------------


def test_demo_stored_order_is_clearly_not_the_best():
    builder = demo_builder()
    graph = read_model(builder.build())
    assert 10 <= len(graph.main.operators) <= 25
    stored = tflm_plan(graph)
    orders = topological_orders(graph)
    live = [tflm_plan(graph, {0: order}).live_peak_bytes for order in orders]
    best_order = orders[int(np.argmin(live))]
    assert (stored.live_peak_bytes, stored.head_bytes, min(live), len(orders)) == (82944, 92160, 59904, 560)
    assert min(live) <= 0.85 * stored.live_peak_bytes
    assert stored.head_bytes > stored.live_peak_bytes  # TFLM's greedy placement wastes memory here
    best = builder.build(best_order)
    best_run = oracle(best)
    assert best_run.head_bytes == tflm_plan(read_model(best)).head_bytes == 59904
    np.testing.assert_array_equal(best_run.outputs[0], oracle(builder.build()).outputs[0])


def test_demo_entry_point_writes_the_demo(tmp_path, capsys):
    out = tmp_path / "demo.tflite"
    assert main(["demo", str(out)]) == 0
    assert out.read_bytes() == demo_model()
    assert "demo.tflite" in capsys.readouterr().out


# ---- int8 arithmetic: a conv computed here the way TFLM's reference kernel does ---------------------------


def _quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLM's QuantizeMultiplier: real = q * 2^(shift - 31), q a Q31 fixed-point number."""
    if real == 0:
        return 0, 0
    fraction, shift = math.frexp(real)
    q = round(fraction * (1 << 31))
    if q == 1 << 31:
        q, shift = q // 2, shift + 1
    return q, shift


def _multiply_by_quantized_multiplier(acc: np.ndarray, q: int, shift: int) -> np.ndarray:
    """gemmlowp's SaturatingRoundingDoublingHighMul then RoundingDivideByPOT, as TFLM's reference kernels do."""
    x = acc.astype(np.int64) * (1 << max(shift, 0))
    product = x * q
    nudge = np.where(product >= 0, 1 << 30, 1 - (1 << 30))
    total = product + nudge
    high = np.sign(total) * (np.abs(total) >> 31)  # C division truncates toward zero
    exponent = max(-shift, 0)
    mask = (1 << exponent) - 1
    threshold = (mask >> 1) + (high < 0)
    return (high >> exponent) + ((high & mask) > threshold)


def test_conv_matches_a_numpy_reference_of_tflm_int8_arithmetic():
    b = ModelBuilder(seed=11)
    x = b.input((1, 6, 6, 3))
    b.output(b.conv2d(x, filters=5, kernel=3, padding="SAME", activation="RELU"))
    data = b.build()
    raw = object_tree(read_model(data))
    sg = raw.subgraphs[0]
    tin, tw, tb = (sg.tensors[i] for i in sg.operators[0].inputs)
    tout = sg.tensors[sg.operators[0].outputs[0]]
    weights = np.frombuffer(bytes(raw.buffers[tw.buffer].data), np.int8).reshape(tw.shape).astype(np.int64)
    bias = np.frombuffer(bytes(raw.buffers[tb.buffer].data), "<i4").astype(np.int64)
    in_scale, in_zp = np.float32(tin.quantization.scale[0]), tin.quantization.zeroPoint[0]
    out_scale, out_zp = np.float32(tout.quantization.scale[0]), tout.quantization.zeroPoint[0]

    image = random_inputs(read_model(data), seed=2)[0]
    centred = np.pad(image.astype(np.int64) - in_zp, ((0, 0), (1, 1), (1, 1), (0, 0)))  # SAME: zero real padding
    acc = np.zeros((6, 6, 5), np.int64)
    for dy in range(3):
        for dx in range(3):
            acc += np.einsum("hwc,oc->hwo", centred[0, dy : dy + 6, dx : dx + 6, :], weights[:, dy, dx, :])
    acc += bias
    expected = np.empty_like(acc)
    for channel in range(5):
        real = float(in_scale) * float(np.float32(tw.quantization.scale[channel])) / float(out_scale)
        expected[..., channel] = _multiply_by_quantized_multiplier(acc[..., channel], *_quantize_multiplier(real))
    # RELU: clamp at the quantized zero; int8 range otherwise.
    expected = np.clip(expected + out_zp, max(-128, out_zp), 127).astype(np.int8)

    got = run(data, [image]).outputs[0][0]
    np.testing.assert_array_equal(got, expected)
    assert len(np.unique(expected)) > 20  # a test that compares constants would prove nothing
