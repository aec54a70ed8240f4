"""Rewriting never makes things worse or fails: every tensor a patch creates has its source's type and quantization,
every rewritten candidate is validated and run once on the host TFLM before it is weighed, and one TFLM refuses is
dropped with its reason while `optimize` goes on to the next candidate or the original."""

from __future__ import annotations

import io
import json
import sys
from contextlib import redirect_stdout
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

import lowtide.cli.optimize_cmd  # noqa: F401  registers the command
from lowtide import oracle
from lowtide.cli import main
from lowtide.model import Graph, read_model
from lowtide.model.builder import ModelBuilder
from lowtide.model.reader import object_tree
from lowtide.rewrite import NotApplicable, Objective, regions, rewrite_auto, tile


def _camera_net(dtype: str) -> bytes:
    """A classifier whose input arrives as a camera delivers it (uint8 or float32, QUANTIZE to int8 at the edge)."""
    b = ModelBuilder(seed=4)
    x = b.input((1, 48, 48, 3), value_range=(0.0, 1.0), dtype=dtype)
    y = b.conv2d(x if dtype == "int8" else b.quantize(x), 16, 3)
    y = b.conv2d(b.conv2d(y, 16, 3, stride=2), 24, 3, stride=2)
    b.output(b.fully_connected(b.mean(y), 10))
    return b.build()


def _detector(dtype: str) -> bytes:
    """An SSD-style detector: box heads on two feature maps, reshaped and CONCATENATED into one output."""
    b = ModelBuilder(seed=5)
    x = b.input((1, 48, 48, 3), value_range=(0.0, 1.0), dtype=dtype)
    y = b.conv2d(b.conv2d(x if dtype == "int8" else b.quantize(x), 16, 3), 16, 3)
    p1 = b.conv2d(y, 16, 3, stride=2)
    p2 = b.conv2d(p1, 24, 3, stride=2)
    heads = [b.reshape(b.conv2d(p, 6, 1, activation="NONE"), (1, p.shape[1] * p.shape[2], 6)) for p in (p1, p2)]
    b.output(b.concat(heads, axis=1))
    return b.build()


def _float_segmenter() -> bytes:
    """float32 in, float32 out: QUANTIZE and DEQUANTIZE at both edges, the full-resolution output assembled from
    float32 patches."""
    b = ModelBuilder(seed=6)
    x = b.input((1, 40, 40, 3), value_range=(-1.0, 1.0), dtype="float32")
    y = b.conv2d(b.conv2d(b.quantize(x), 16, 3), 16, 3)
    b.output(b.dequantize(b.conv2d(y, 2, 1, activation="NONE")))
    return b.build()


# model -> (stock TFLM head, tiled TFLM head at most), measured on the host TFLM (the search's placement runs
# against the clock: on a loaded machine the uint8 classifier measured 15,072 B and 15,200 B)
MODELS = {
    "uint8_classifier": (lambda: _camera_net("uint8"), 46_080, 15_200),
    "float32_classifier": (lambda: _camera_net("float32"), 46_080, 27_648),
    "int8_detector": (lambda: _detector("int8"), 73_728, 18_432),
    "uint8_detector": (lambda: _detector("uint8"), 73_728, 18_432),
    "float32_segmenter": (_float_segmenter, 51_200, 19_200),
}


def _window_sources(original, tiled) -> list[tuple[object, object]]:
    """(tensor a patch created, the original tensor whose window it holds) for every patch tensor."""
    by_name = {t.name: t for t in object_tree(original).subgraphs[0].tensors}
    pairs = []
    for t in object_tree(tiled).subgraphs[0].tensors:
        name = t.name.decode() if isinstance(t.name, bytes) else t.name
        if "/patch_r" in name:
            pairs.append((t, by_name[name.rsplit("/patch_r", 1)[0].encode()]))
    return pairs


def _quantization(t) -> tuple:
    q = t.quantization
    if q is None or q.scale is None:
        return ()
    return (tuple(np.asarray(q.scale).tolist()), tuple(np.asarray(q.zeroPoint).tolist()), q.quantizedDimension)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_patches_keep_their_source_type_and_quantization_and_tflm_runs_them(name):
    build, stock_head, tiled_head = MODELS[name]
    data = build()
    original = read_model(data)
    result = rewrite_auto(original, max_mac_overhead=0.20, objective=Objective.HEAD)
    assert result.rewritten, result.reason
    assert result.rejected == ()  # every built candidate passed the validator and TFLM's Prepare and Invoke
    _assert_windows_follow_their_sources(original, result.model)
    inputs = oracle.random_inputs(original)
    expected, got = oracle.run(data, inputs), oracle.run(result.model.data, inputs)
    for a, b in zip(expected.outputs, got.outputs, strict=True):
        np.testing.assert_array_equal(a, b)
    assert expected.head_bytes == stock_head
    assert got.head_bytes == result.head_bytes <= tiled_head


def _assert_windows_follow_their_sources(original: Graph, rewritten: Graph) -> None:
    pairs = _window_sources(original, read_model(rewritten.data))  # as written
    assert pairs
    for patch, source in pairs:
        assert (patch.type, _quantization(patch)) == (source.type, _quantization(source)), patch.name


@pytest.mark.parametrize("split_source, tiled_head", [(False, 40_064), (True, 42_560)])
def test_float32_windows_at_both_edges(split_source, tiled_head):
    """The float32 input sliced (or cut into strips) and QUANTIZEd per patch; the float32 output DEQUANTIZEd per
    patch and concatenated: float32 and int8 windows, each its source's type, bit-identical on TFLM."""
    data = _float_segmenter()
    original = read_model(data)
    sg = original.main
    tiled = tile(original, sg.inputs[0], sg.outputs[0], (3, 2), split_source=split_source)
    _assert_windows_follow_their_sources(original, tiled)
    assert {t.dtype for t in tiled.main.tensors if "/patch_r" in t.name} == {"float32", "int8"}
    inputs = oracle.random_inputs(original)
    expected, got = oracle.run(data, inputs), oracle.run(tiled.data, inputs)
    np.testing.assert_array_equal(expected.outputs[0], got.outputs[0])
    assert (expected.head_bytes, got.head_bytes) == (51_200, tiled_head)


def test_a_uint8_input_is_quantized_whole_and_the_region_starts_after_it():
    """STRIDED_SLICE and CONCATENATION refuse uint8 in TFLM: the uint8 input is never cut into windows. The first
    region starts at the QUANTIZE's int8 output (a later one, where the peak moved, from a tensor after it)."""
    original = read_model(_camera_net("uint8"))
    result = rewrite_auto(original, objective=Objective.HEAD)
    sources = [t.source for t in result.tilings]
    assert sources[0] == "quantize_0" and "input_0" not in sources, sources
    tiled = result.model.main
    assert {t.dtype for t in tiled.tensors if "/patch_r" in t.name} == {"int8"}
    with pytest.raises(NotApplicable, match="tensor 0 'input_0' is uint8"):
        tile(original, 0, next(t.index for t in original.main.tensors if t.name == "conv_2d_3"), (2, 2))


def _optimize_json(model: Path, out: Path, *extra: str) -> tuple[int, dict | None]:
    stdout = io.StringIO()
    argv = ["lowtide", "optimize", str(model), "-o", str(out), "--rewrite", "auto", "--verify", "--json", *extra]
    with mock.patch.object(sys, "argv", argv), redirect_stdout(stdout):
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code
    return code, json.loads(stdout.getvalue()) if code == 0 else None


def test_optimize_drops_candidates_tflm_refuses_and_goes_on(tmp_path, monkeypatch):
    """With uint8 windows allowed again (the bug this guards against), TFLM refuses every candidate that slices or
    concatenates the uint8 input: each is dropped with TFLM's own reason, and optimize still writes a model that
    runs, bit-identical, no larger than plain optimization."""
    model = tmp_path / "in" / "uint8_detector.tflite"
    model.parent.mkdir()
    model.write_bytes(_detector("uint8"))
    monkeypatch.setattr(regions, "WINDOW_TYPES", regions.WINDOW_TYPES | {"uint8"})
    code, report = _optimize_json(model, tmp_path / "out.tflite")
    assert code == 0
    rejected = report["rewrite"]["rejected_candidates"]
    assert rejected and all(set(r) == {"candidate", "reason"} for r in rejected)
    assert all("tiled input_0 -> " in r["candidate"] for r in rejected)
    assert any("concatenation.cc" in r["reason"] or "Type UINT8 (3) not supported" in r["reason"] for r in rejected), (
        rejected
    )
    assert report["outputs_identical"] is True
    assert report["after"]["tflm_head_bytes"] == report["after"]["planned_head_bytes"]
    assert report["after"]["arena_size_bytes_mcu32"] <= report["before"]["mcu32"]["arena_bytes"]
    written = (tmp_path / "out.tflite").read_bytes()
    assert oracle.refusal(written) is None


def test_optimize_reports_no_rejections_once_windows_follow_their_source(tmp_path):
    model = tmp_path / "in" / "uint8_detector.tflite"
    model.parent.mkdir()
    model.write_bytes(_detector("uint8"))
    code, report = _optimize_json(model, tmp_path / "out.tflite")
    assert code == 0
    assert report["rewrite"]["used"] is True and report["rewrite"]["rejected_candidates"] == []
    assert report["outputs_identical"] is True
    assert report["after"]["tflm_head_bytes"] * 2 < report["before"]["tflm_head_bytes"] == 73_728
