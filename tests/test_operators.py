"""TFLM's operator semantics in one table (`lowtide.model.operators`): every opcode lowtide's stages know has a
tiling class and a TFLM in-place fact, the families the stages read are the table's, and the resize geometry
(`resize_sources`, `nearest_indices`) is what the host TFLM computes."""

from __future__ import annotations

import numpy as np
import pytest

from lowtide import oracle
from lowtide.compile.lowering import KERNELS
from lowtide.memory.in_place import COMPILED_ELEMENTWISE
from lowtide.model import shapes, validate
from lowtide.model.attributes import ResizeAttributes, ResizeBilinearAttributes
from lowtide.model.operators import (
    BINARY_OPCODES,
    CHANNEL_OPCODES,
    CONV_OPCODES,
    PAD_OPCODES,
    POOL_OPCODES,
    REDUCE_OPCODES,
    RESIZE_OPCODES,
    SEMANTICS,
    TILEABLE_OPCODES,
    UNARY_OPCODES,
    UNLISTED,
    TflmInPlace,
    TilingClass,
    nearest_indices,
    resize_sources,
    semantics,
    tiled_as,
)
from lowtide.stale import dependence
from support.models import TinyModel


def test_every_opcode_lowtide_validates_lowers_or_propagates_has_a_row():
    known = (
        set(KERNELS)
        | set(shapes.RULES)
        | set(validate._OPTIONS)
        | set(validate._REQUIRED_INPUTS)
        | set(dependence._RULES)
    )
    assert known - set(SEMANTICS) == set()
    for row in SEMANTICS.values():
        assert isinstance(row.tiling, TilingClass) and isinstance(row.tflm_in_place, TflmInPlace)
    assert semantics("CUSTOM:Unknown") is UNLISTED


def test_families_are_the_tables_tiling_classes():
    assert tiled_as(TilingClass.WINDOW) == CONV_OPCODES | POOL_OPCODES
    assert tiled_as(TilingClass.ELEMENTWISE) == UNARY_OPCODES
    assert tiled_as(TilingClass.BROADCAST) == BINARY_OPCODES
    assert tiled_as(TilingClass.PAD) == PAD_OPCODES
    assert tiled_as(TilingClass.RESIZE) == RESIZE_OPCODES
    assert tiled_as(TilingClass.CHANNEL) == CHANNEL_OPCODES
    assert tiled_as(TilingClass.GLOBAL) == REDUCE_OPCODES
    assert TILEABLE_OPCODES == (
        CONV_OPCODES | POOL_OPCODES | UNARY_OPCODES | BINARY_OPCODES | PAD_OPCODES | RESIZE_OPCODES | CHANNEL_OPCODES
    )


def test_what_the_compiled_runtime_runs_in_place_tflm_never_does():
    """The compiled runtime's own in-place kernels (memory.in_place) are exactly the operators whose TFLM kernels
    read while they write: no plan for TFLM may share their bytes, and a model's own plan may share any other's."""
    never = {opcode for opcode, row in SEMANTICS.items() if row.tflm_in_place is TflmInPlace.NEVER}
    assert never == COMPILED_ELEMENTWISE | {"DEPTHWISE_CONV_2D"}
    assert {opcode for opcode, row in SEMANTICS.items() if row.tflm_in_place is TflmInPlace.BLOCKS} == {
        "SPLIT",
        "SPLIT_V",
    }
    assert {opcode for opcode, row in SEMANTICS.items() if row.tflm_in_place is TflmInPlace.NARROWING} == {"QUANTIZE"}
    assert {opcode for opcode, row in SEMANTICS.items() if row.tflm_in_place is TflmInPlace.ASSEMBLES} == {
        "CONCATENATION"
    }


# (input rows, input columns, output rows, output columns, align_corners, half_pixel_centers). 2 -> 83 with
# align_corners has a source point just below .5 that float32 rounds up when 0.5 is added to it first.
RESIZES = [
    (6, 4, 9, 7, False, False),
    (6, 4, 9, 7, True, False),
    (6, 4, 9, 7, False, True),
    (6, 4, 4, 3, False, True),
    (2, 3, 83, 5, True, False),
    (2, 3, 84, 6, True, True),
]


def _run_resize(
    tmp_path, opcode: str, dtype: str, case: tuple[int, int, int, int, bool, bool], x: np.ndarray
) -> np.ndarray:
    in_h, in_w, out_h, out_w, align, half = case
    m = TinyModel()
    quant = (0.05, 0) if dtype == "int8" else ()
    source = m.tensor((1, in_h, in_w, 1), dtype, *quant)
    out = m.tensor((1, out_h, out_w, 1), dtype, *quant)
    attributes = ResizeBilinearAttributes if opcode == "RESIZE_BILINEAR" else ResizeAttributes
    m.op(
        opcode,
        [source, m.tensor((2,), "int32", data=[out_h, out_w])],
        [out],
        attributes(align_corners=align, half_pixel_centers=half),
    )
    path = m.save(tmp_path / "resize.tflite", [source], [out])
    return oracle.run(path.read_bytes(), [x.reshape(1, in_h, in_w, 1)]).outputs[0].reshape(out_h, out_w)


@pytest.mark.parametrize("case", RESIZES)
def test_nearest_neighbor_indices_match_the_host_tflm(tmp_path, case):
    in_h, in_w, out_h, out_w, align, half = case
    x = (np.arange(in_h)[:, None] * 64 + np.arange(in_w)[None, :]).astype(np.float32)  # each pixel its own value
    got = _run_resize(tmp_path, "RESIZE_NEAREST_NEIGHBOR", "float32", case, x)
    rows, cols = nearest_indices(in_h, out_h, align, half), nearest_indices(in_w, out_w, align, half)
    np.testing.assert_array_equal(got, x[rows][:, cols])
    for bilinear in (False, True):  # the nearest map is what rewrite tiles by, whatever the element type
        first, last, _ = resize_sources(False, in_h, out_h, align, half, bilinear)
        assert np.array_equal(first, rows) and np.array_equal(last, rows)


@pytest.mark.parametrize("dtype", ["float32", "int8"])
@pytest.mark.parametrize("case", [c for c in RESIZES if not (c[4] and c[5])])  # TFLM refuses both modes at once
def test_bilinear_sources_and_weights_match_the_host_tflm(tmp_path, case, dtype):
    """Rows alternate between far-apart values, columns are constant: each output row is its two source rows
    mixed by the weight, so a wrong source row or weight is off by far more than the kernel's rounding."""
    in_h, in_w, out_h, out_w, align, half = case
    integer = dtype == "int8"
    row_values = np.where(np.arange(in_h) % 2, 100, -90) + 3 * np.arange(in_h)
    x = np.repeat(row_values[:, None], in_w, axis=1)
    got = _run_resize(tmp_path, "RESIZE_BILINEAR", dtype, case, x.astype(np.int8 if integer else np.float32))
    first, last, weight = resize_sources(True, in_h, out_h, align, half, integer)
    fraction = weight / 1024 if integer else weight.astype(np.float64)
    expected = row_values[first] * (1 - fraction) + row_values[last] * fraction
    np.testing.assert_allclose(got, np.repeat(expected[:, None], out_w, axis=1), atol=1.0 if integer else 1e-3)
