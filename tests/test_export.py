"""Export with an offline memory plan, checked against the host TFLM interpreter, and the whole pipeline on
every shared model."""

from __future__ import annotations

import dataclasses
import json
import re
import struct
from pathlib import Path

import pytest

from lowtide import oracle
from lowtide.errors import LowtideError
from lowtide.export import OFFLINE_PLAN_NAME, export_optimized
from lowtide.memory import buffer_lifetimes, buffers_to_plan, stored_order, tflm_plan
from lowtide.memory.placement import live_lower_bound, place
from lowtide.model.reader import object_tree
from lowtide.model.writer import misaligned_buffers
from lowtide.pipeline.optimize import optimize_model
from lowtide.schedule import find_schedule
from lowtide.validation import load_model

MODELS = Path(__file__).resolve().parents[1] / ".." / "shared" / "models"
MODEL_PATHS = sorted(MODELS.glob("*.tflite"))


def unplanned(graph, order):
    return [dataclasses.replace(b, offline_offset=None) for b in buffer_lifetimes(graph, order)[0]]


def same_outputs(a, b) -> bool:
    return all(x.dtype == y.dtype and x.tobytes() == y.tobytes() for x, y in zip(a, b, strict=True))


def test_export_writes_order_plan_header_and_sidecar_that_tflm_honours(tmp_path):
    graph = load_model(MODELS / "mww_v1_okay_nabu.tflite")
    order = find_schedule(graph).order
    assert order != stored_order(graph)
    buffers = unplanned(graph, order)
    placement = place(buffers)
    out = tmp_path / "nabu-opt.tflite"
    result = export_optimized(graph, order, dict(zip(buffers, placement.offsets)), out)
    assert not out.exists()  # checked, not yet written: the pipeline writes once every check has passed
    result.write()

    data = out.read_bytes()
    written = load_model(out)
    assert misaligned_buffers(data) == []
    # Operators stored in the new order.
    for sg, ops in order.items():
        assert [op.opcode for op in written.subgraphs[sg].operators] == [
            graph.subgraphs[sg].operators[i].opcode for i in ops
        ]
    # The plan: [version 1, subgraphs, n, offsets...], an offset for every planned tensor, -1 for the rest.
    words = struct.unpack(f"<{len(written.metadata[OFFLINE_PLAN_NAME]) // 4}i", written.metadata[OFFLINE_PLAN_NAME])
    assert words[:3] == (1, 2, graph.tensor_count)
    base = [0, len(graph.subgraphs[0].tensors)]
    expected = [-1] * graph.tensor_count
    for b, offset in zip(buffers, placement.offsets):
        expected[base[b.subgraph] + b.tensor] = offset
    assert list(words[3:]) == expected
    assert result.planned_head_bytes == placement.head_bytes == 14_208

    # Host TFLM: same outputs, head exactly as planned.
    inputs = oracle.random_inputs(graph)
    before = oracle.run((MODELS / "mww_v1_okay_nabu.tflite").read_bytes(), inputs)
    after = oracle.run(data, inputs)
    assert same_outputs(before.outputs, after.outputs)
    assert after.head_bytes == result.planned_head_bytes < before.head_bytes == 21_216

    # Arena on the 32-bit MCU: TFLM's own allocator for the Cortex-M4 (tests/test_tflm.py checks it on the board),
    # or, without the Arm tools, the host tail less 12 B per tensor and 32 B per operator, marked as an estimate.
    tail = oracle.allocate(data).tail_bytes
    assert result.host_tail_bytes == tail
    arena = result.mcu32
    assert arena.head_bytes == result.planned_head_bytes
    assert arena.used_bytes == arena.head_bytes + arena.tail_bytes <= result.arena_size_bytes == arena.arena_bytes
    if not arena.exact:
        assert arena.tail_bytes == tail - 12 * graph.tensor_count - 32 * graph.operator_count
        assert arena.method.startswith("estimate")
    else:
        assert arena.tail_bytes < tail  # 32-bit structs are smaller
    header = (tmp_path / "nabu-opt.h").read_text()
    assert f"#define NABU_OPT_ARENA_SIZE {result.arena_size_bytes}\n" in header
    assert f"#define NABU_OPT_ARENA_USED_BYTES {arena.used_bytes}\n" in header
    sidecar = json.loads((tmp_path / "nabu-opt.json").read_text())
    assert sidecar["arena_size_bytes"] == result.arena_size_bytes
    assert sidecar["planned_head_bytes"] == 14_208
    assert sidecar["mcu32"]["used_bytes"] == arena.used_bytes


def test_existing_plan_is_replaced_and_scratch_buffers_are_placed_by_tflm(tmp_path):
    # The LSTM kernel requests four scratch buffers, which TFLM places online around the planned tensors.
    source = MODELS / "tflm_micro_speech_lstm.tflite"
    graph = load_model(source)
    order = stored_order(graph)
    buffers = unplanned(graph, order)
    assert any(b.tensor is None for b in buffers)
    # First plan: every tensor stacked in a column (wasteful, but valid).
    stacked, top = {}, 0
    for b in buffers:
        stacked[b] = top
        top += b.size
    first = export_optimized(graph, order, stacked, tmp_path / "first.tflite")
    first.write()
    planned = load_model(tmp_path / "first.tflite")
    assert planned.offline_plan is not None
    assert first.planned_head_bytes > tflm_plan(graph).head_bytes
    assert oracle.allocate((tmp_path / "first.tflite").read_bytes()).head_bytes == first.planned_head_bytes

    # Second plan over the first: the old entry is replaced, not duplicated.
    replanned_buffers = unplanned(planned, order)
    placement = place(replanned_buffers)
    second = export_optimized(
        planned, order, dict(zip(replanned_buffers, placement.offsets)), tmp_path / "second.tflite"
    )
    second.write()
    data = (tmp_path / "second.tflite").read_bytes()
    result = load_model(tmp_path / "second.tflite")
    assert [m.name for m in object_tree(result).metadata].count(OFFLINE_PLAN_NAME.encode()) == 1
    assert len(object_tree(result).buffers) == len(object_tree(planned).buffers)
    assert second.planned_head_bytes == 17_168
    inputs = oracle.random_inputs(graph)
    measured = oracle.run(data, inputs)
    assert measured.head_bytes == second.planned_head_bytes
    assert same_outputs(oracle.run(source.read_bytes(), inputs).outputs, measured.outputs)


def test_overlapping_plan_is_rejected_before_anything_is_written(tmp_path):
    graph = load_model(MODELS / "mlperf_vww_96_int8.tflite")
    order = stored_order(graph)
    buffers = unplanned(graph, order)
    offsets = dict(zip(buffers, place(buffers).offsets))
    # Put the first operator's output where its input is: both live while that operator runs.
    first_op = graph.main.operators[0]
    by_tensor = {b.tensor: b for b in buffers}
    offsets[by_tensor[first_op.outputs[0]]] = offsets[by_tensor[first_op.inputs[0]]]
    out = tmp_path / "bad.tflite"
    pattern = (
        rf"overlaps: .*t{first_op.inputs[0]}\b.* and .*t{first_op.outputs[0]}\b|"
        rf"overlaps: .*t{first_op.outputs[0]}\b.* and .*t{first_op.inputs[0]}\b"
    )
    with pytest.raises(LowtideError, match=pattern):
        export_optimized(graph, order, offsets, out)
    assert list(tmp_path.iterdir()) == []


def test_plan_made_for_another_order_is_refused(tmp_path):
    graph = load_model(MODELS / "mltk_kws_on_off_v3.tflite")
    stored = stored_order(graph)
    buffers = unplanned(graph, stored)
    offsets = dict(zip(buffers, place(buffers).offsets))
    scheduled = find_schedule(graph).order
    assert scheduled != stored
    with pytest.raises(LowtideError, match="another operator order"):
        export_optimized(graph, scheduled, offsets, tmp_path / "x.tflite")
    assert list(tmp_path.iterdir()) == []


def test_missing_offset_is_refused(tmp_path):
    graph = load_model(MODELS / "tflm_person_detect.tflite")
    buffers = unplanned(graph, stored_order(graph))
    offsets = dict(zip(buffers[1:], place(buffers).offsets[1:]))
    with pytest.raises(LowtideError, match=re.escape(f"no offset for {buffers[0].label}")):
        export_optimized(graph, stored_order(graph), offsets, tmp_path / "x.tflite")


# Measured heads the optimized models must reach (stock TFLM: 21,568 / 73,728 / 21,216 bytes).
HEAD_TARGETS = {"mltk_kws_on_off_v3": 19_616, "mlperf_vww_96_int8": 55_296, "mww_v1_okay_nabu": 14_500}


@pytest.mark.slow
@pytest.mark.parametrize("path", MODEL_PATHS, ids=lambda p: p.stem)
def test_every_shared_model_optimizes_and_verifies_on_host_tflm(path, tmp_path):
    result = optimize_model(path, tmp_path / "out.tflite", verify=True)
    assert result.verification is not None and result.verification.outputs_identical
    assert result.verification.measured_head_bytes == result.planned_head_bytes
    assert result.planned_head_bytes <= result.stock_head_bytes
    assert result.planned_head_bytes <= 1.05 * result.placement.lower_bound_bytes
    # The placement's bound is the live peak of the buffers it placed: with CONCATENATION inputs inside their
    # output and the like (`placed_plan`'s blocks) where that placed lower, else without them.
    graph = load_model(path)
    plain = tflm_plan(graph, result.order).live_peak_bytes
    blocks = live_lower_bound(buffers_to_plan(graph, result.order, blocks=True))
    assert result.placement.lower_bound_bytes in (plain, blocks)
    if path.stem in HEAD_TARGETS:
        assert result.verification.measured_head_bytes <= HEAD_TARGETS[path.stem]
