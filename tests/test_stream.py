"""Stream strips (`lowtide.rewrite.regions.plan_streaming`): full-width row strips that carry each layer's halo
rows to the next strip instead of recomputing them. Against the host TFLM (bit-identical outputs, the head it
measures) and TFLM on qemu-m4 (the arena lowtide predicts is the one it uses)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import needs_firmware_tools
from lowtide import oracle
from lowtide.memory import tflm_plan
from lowtide.model import Graph, read_model
from lowtide.model.builder import ModelBuilder
from lowtide.model.operators import graph_macs, op_macs
from lowtide.pipeline.measure import measure
from lowtide.rewrite import NotApplicable, planned_model, rewrite_auto, tile
from lowtide.rewrite.regions import plan_streaming, plan_tiling, region_between


def _stem() -> bytes:
    """conv 3x3 s1 -> depthwise 3x3 s2 -> 1x1 conv -> depthwise 3x3, then a 1x1 head: SAME padding everywhere,
    the input's zero point far from 0 so a wrong padding value shows; 40x40 rows of 4 int8 channels."""
    b = ModelBuilder(seed=7)
    x = b.input((1, 40, 40, 4), value_range=(-0.3, 1.7))
    y = b.conv2d(x, filters=12, kernel=3)
    y = b.depthwise_conv2d(y, kernel=3, stride=2)
    y = b.conv2d(y, filters=16, kernel=1)
    y = b.depthwise_conv2d(y, kernel=3)
    b.output(b.conv2d(y, filters=2, kernel=1))
    return b.build()


@pytest.fixture(scope="module")
def stem() -> bytes:
    return _stem()


def _same_outputs(original: bytes, rewritten: Graph) -> oracle.OracleRun:
    inputs = oracle.random_inputs(read_model(original))
    expected = oracle.run(original, inputs)
    got = oracle.run(rewritten.data, inputs)
    for a, b in zip(expected.outputs, got.outputs, strict=True):
        np.testing.assert_array_equal(a, b)
    return got


@pytest.mark.parametrize("strips", [3, 4, 7, 10])
@pytest.mark.parametrize("split_source", [False, True])
def test_stream_strips_are_bit_identical_without_extra_macs_below_the_untiled_head(stem, strips, split_source):
    graph = read_model(stem)
    sg = graph.main
    target = sg.operators[-1].inputs[0]
    region = region_between(graph, sg.inputs[0], target)
    plan = plan_streaming(graph, region, strips, split_source)
    region_macs = sum(op_macs(sg, sg.operators[rop.op]) for rop in region.ops)
    # every row of every tensor computed once; the patches of the same strips recompute their halos
    assert plan.macs == region_macs < plan_tiling(graph, region, (strips, 1), split_source).macs
    tiled = tile(graph, sg.inputs[0], target, (strips, 1), split_source=split_source, stream=True)
    assert graph_macs(tiled) == graph_macs(graph)
    ops = [op.opcode for op in tiled.main.operators]
    # the carried rows: a concatenation per strip after the first for each 3x3 layer but the first, which slices
    # its rows of the source; and the strips of the target
    assert ops.count("CONCATENATION") >= 2 * (strips - 1) + 1
    _same_outputs(stem, tiled)
    head, planned = planned_model(tiled)
    assert _same_outputs(stem, planned).head_bytes == head < tflm_plan(graph).head_bytes


def _residual(padding: str) -> bytes:
    """A residual block read by two operators (the ADD and the depthwise before it), after a stride-2 conv: a
    tensor with readers that need different rows carries from the first row either still reads."""
    b = ModelBuilder(seed=9)
    x = b.input((1, 26, 18, 3), value_range=(-0.3, 1.7))
    y = b.conv2d(x, filters=8, kernel=3, stride=2, padding=padding)
    y = b.add(y, b.depthwise_conv2d(y, kernel=3, padding="SAME", activation="NONE"))
    y = b.depthwise_conv2d(y, kernel=3, padding=padding)
    b.output(b.conv2d(y, filters=2, kernel=1))
    return b.build()


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
def test_stream_strips_of_a_residual_block_are_bit_identical(padding):
    data = _residual(padding)
    graph = read_model(data)
    sg = graph.main
    target = sg.operators[-1].inputs[0]
    for strips in range(2, min(sg.tensors[target].shape[1], 10) + 1):
        tiled = tile(graph, sg.inputs[0], target, (strips, 1), stream=True)
        _same_outputs(data, tiled)
        # VALID: the rows no window reads (the stride-2 conv's last input row) are never computed
        assert graph_macs(tiled) <= graph_macs(graph)


def test_stream_strips_span_the_width(stem):
    graph = read_model(stem)
    with pytest.raises(NotApplicable, match="whole width"):
        tile(graph, graph.main.inputs[0], graph.main.operators[-1].inputs[0], (2, 2), stream=True)


def test_search_streams_where_no_recomputation_is_affordable(stem):
    graph = read_model(stem)
    result = rewrite_auto(graph, max_mac_overhead=0.0)
    assert result.rewritten and all(t.stream for t in result.tilings), result.reason
    assert "stream strips" in result.reason
    assert result.macs_after == result.macs_before
    assert result.declared_bytes < result.original_declared_bytes
    _same_outputs(stem, result.model)
    # with room for halos the search still weighs both kinds: the points include stream strips at 0 extra MACs
    assert any(c.stream and c.macs == result.macs_before for c in result.pareto)


@needs_firmware_tools
def test_stream_strips_run_on_tflm_on_qemu_m4_in_the_predicted_arena(stem, tmp_path: Path):
    graph = read_model(stem)
    result = rewrite_auto(graph, max_mac_overhead=0.0)
    path = tmp_path / "stream.tflite"
    path.write_bytes(result.model.data)
    measured = measure(path, "qemu-m4", runtime="tflm", iterations=1, warmup=0, timeout=120)
    assert measured.outputs_match, measured.mismatched_outputs
    assert measured.arena_used_bytes == measured.arena_predicted_used_bytes
    assert measured.arena_used_bytes == result.head_bytes + result.tail_bytes
