"""Patch tiling through the operators real vision models use (activations, SiLU, broadcasts, padding, SAME
pooling, resizes, channel concatenation and splits, dilation), against the host TFLM: bit-identical outputs, and
heads at least 2x below the best operator order when such an operator sits at the memory peak."""

from __future__ import annotations

import numpy as np
import pytest

from lowtide import oracle
from lowtide.model import Graph, read_model
from lowtide.model.builder import ModelBuilder, TensorRef
from lowtide.rewrite import NotApplicable, Objective, rewrite_auto, tile
from lowtide.rewrite.regions import ResizeMap, _resize_axis, region_between
from lowtide.testing.zoo import mobilenet_v3_stem


def _same_outputs(original: bytes, rewritten: Graph) -> oracle.OracleRun:
    inputs = oracle.random_inputs(read_model(original))
    expected, got = oracle.run(original, inputs), oracle.run(rewritten.data, inputs)
    for a, b in zip(expected.outputs, got.outputs, strict=True):
        np.testing.assert_array_equal(a, b)
    first = expected.outputs[0]
    assert np.unique(first).size > min(20, first.size // 2)  # values spread out enough that a wrong window shows
    return got


def _fpn_merge(b: ModelBuilder, y: TensorRef) -> TensorRef:
    """A skip path added to a half-resolution path upsampled by RESIZE_BILINEAR (half-pixel centres)."""
    low = b.conv2d(y, 16, kernel=3, stride=2, activation="NONE")
    return b.binary(
        "ADD", b.conv2d(y, 16, kernel=1, activation="NONE"), b.resize(low, 2, "bilinear", half_pixel_centers=True)
    )


# One model per operator class, the operator at the memory peak (on the 32x32x16 tensors).
PEAK_OPERATORS = {
    "hard_swish": lambda b, y: b.activation(y, "HARD_SWISH"),
    "silu": lambda b, y: b.binary("MUL", y, b.activation(y, "LOGISTIC")),
    "prelu": lambda b, y: b.prelu(y),
    "broadcast": lambda b, y: b.binary("ADD", b.binary("MUL", y, np.linspace(0.5, 1.5, 16)), b.depthwise_conv2d(y, 3)),
    "channel_pad": lambda b, y: b.binary("ADD", b.pad(y, channels=(0, 16)), b.conv2d(y, 32, 3, activation="NONE")),
    "mirror_pad": lambda b, y: b.conv2d(b.pad(y, (1, 1), (1, 1), mode="REFLECT"), 16, 3, padding="VALID"),
    "same_max_pool": lambda b, y: b.conv2d(b.max_pool(y, 3, 1, "SAME"), 16, 1),
    "resize_merge": _fpn_merge,
    "concat_split": lambda b, y: b.concat([*b.split_equal(b.conv2d(y, 16, 1), 2)[::-1], y]),
    "dilated": lambda b, y: b.conv2d(y, 16, 3, dilation=2),
    "dequantize": lambda b, y: b.quantize(b.dequantize(y)),
}


def _peak_model(operator) -> bytes:
    b = ModelBuilder(seed=4)
    x = b.input((1, 32, 32, 3), value_range=(-0.3, 1.7))
    y = operator(b, b.conv2d(x, 16, 3, activation="NONE"))
    y = b.conv2d(b.conv2d(y, 16, 3, stride=2), 24, 3, stride=2)
    b.output(b.fully_connected(b.mean(y), 10))
    return b.build()


@pytest.mark.parametrize("name", sorted(PEAK_OPERATORS))
def test_auto_tiles_each_operator_class_at_the_peak_to_half_the_best_order(name):
    data = _peak_model(PEAK_OPERATORS[name])
    result = rewrite_auto(read_model(data), max_mac_overhead=0.20, objective=Objective.HEAD)
    assert result.rewritten, result.reason
    run = _same_outputs(data, result.model)
    assert run.head_bytes == result.head_bytes
    assert 2 * run.head_bytes <= result.original_head_bytes
    assert result.macs_after <= 1.20 * result.macs_before


def _chain(operator, shape=(1, 13, 11, 3)) -> bytes:
    """input -> SAME conv -> the operator(s) -> 1x1 conv: everything before the 1x1 conv is tiled. The input's
    zero point is far from 0 and the image odd-sized, so a wrong fill value or window shows."""
    b = ModelBuilder(seed=3)
    x = b.input(shape, value_range=(-0.3, 1.7))
    y = operator(b, b.conv2d(x, 8, 3, activation="NONE"))
    b.output(b.conv2d(y, 4, 1))
    return b.build()


# Variants whose windows differ from the peak models': borders, broadcasts, mirror modes, factors, centres.
WINDOW_CASES = {
    "squared_difference": lambda b, y: b.binary("SQUARED_DIFFERENCE", y, b.depthwise_conv2d(y, 3, activation="NONE")),
    "minimum_scalar": lambda b, y: b.binary("MINIMUM", y, 0.2),
    "channel_broadcast": lambda b, y: b.binary("MUL", y, b.conv2d(y, 1, 3, activation="NONE")),
    "padv2_rows_columns_channels": lambda b, y: b.conv2d(
        b.pad(y, (1, 2), (2, 1), (0, 3), value=0.5), 8, 3, padding="VALID"
    ),
    "mirror_symmetric": lambda b, y: b.conv2d(b.pad(y, (2, 2), (2, 1), mode="SYMMETRIC"), 8, 3, padding="VALID"),
    "same_max_pool_stride_2": lambda b, y: b.max_pool(y, 3, 2, "SAME"),
    "nearest_by_3": lambda b, y: b.conv2d(b.resize(y, 3), 8, 3),
    "nearest_half_pixel": lambda b, y: b.conv2d(b.resize(y, 2, half_pixel_centers=True), 8, 3),
    "bilinear": lambda b, y: b.conv2d(b.resize(y, 2, "bilinear"), 8, 3),
    "split_v": lambda b, y: b.concat(b.split(y, [3, 5], -1)[::-1]),
    "depthwise_dilated": lambda b, y: b.depthwise_conv2d(y, 3, dilation=3),
}


@pytest.mark.parametrize("name", sorted(WINDOW_CASES))
def test_windows_compute_what_the_whole_tensor_does(name):
    data = _chain(WINDOW_CASES[name])
    graph = read_model(data)
    sg = graph.main
    for grid in [(3, 2), (7, 6)]:
        _same_outputs(data, tile(graph, sg.inputs[0], sg.operators[-1].inputs[0], grid))


def test_resize_windows_follow_tflm_source_coordinates():
    # Nearest, factor 2: output row o reads input row o // 2; bilinear with half-pixel centres reads o/2 - 1/4
    # and its neighbour, clamped at the edges (ComputeInterpolationValuesInteger).
    nearest = _resize_axis(False, 4, 8, False, False, True)
    assert nearest == ResizeMap(2, (0, 0, 1, 1, 2, 2, 3, 3), (0, 0, 1, 1, 2, 2, 3, 3))
    bilinear = _resize_axis(True, 4, 8, False, True, True)
    assert bilinear == ResizeMap(2, (0, 0, 0, 1, 1, 2, 2, 3), (0, 1, 1, 2, 2, 3, 3, 3))
    assert bilinear.computed((3, 5)) == (2, 6) and bilinear.needed((2, 6)) == (1, 3)
    # align_corners scales by (in - 1) / (out - 1), which differs for every window size; 4 -> 6 is no integer
    # factor: no window reproduces the whole resize.
    assert _resize_axis(True, 4, 8, True, False, True) is None
    assert _resize_axis(False, 4, 6, False, False, True) is None


def test_what_cannot_run_on_patches_says_why():
    aligned = read_model(_chain(lambda b, y: b.conv2d(b.resize(y, 2, "bilinear", align_corners=True), 8, 3)))
    sg = aligned.main
    with pytest.raises(NotApplicable, match="align_corners"):
        region_between(aligned, sg.inputs[0], sg.operators[-1].inputs[0])
    averaged = read_model(_chain(lambda b, y: b.avg_pool(y, 3, 1, "SAME")))
    sg = averaged.main
    with pytest.raises(NotApplicable, match="averages over SAME padding"):
        region_between(averaged, sg.inputs[0], sg.operators[-1].inputs[0])


def test_squeeze_excitation_ends_a_region_and_the_report_says_so():
    data = mobilenet_v3_stem(48).build()
    result = rewrite_auto(read_model(data), objective=Objective.HEAD)
    assert result.rewritten, result.reason
    assert "(MEAN) reduces over rows and columns, so a region ends before it" in result.reason
    _same_outputs(data, result.model)
