"""The window maps (`lowtide.model.windows`) against the host TFLM: MIRROR_PAD's source indices, which stale-memory
analysis propagates, are the elements TFLM's kernel copies, and every output window's input window, which rewrite
tiles by, holds them."""

from __future__ import annotations

import numpy as np
import pytest

from lowtide import oracle
from lowtide.model import read_model
from lowtide.model.builder import ModelBuilder
from lowtide.model.windows import MirrorMap, pad_maps

# (input rows, input columns, rows (before, after), columns (before, after)): up to the widest REFLECT allows, one
# less than the input.
MIRRORS = [(5, 7, (2, 1), (3, 0)), (4, 4, (0, 3), (1, 2)), (1, 6, (0, 0), (4, 5)), (3, 2, (2, 2), (1, 1))]


@pytest.mark.parametrize("mode", ["REFLECT", "SYMMETRIC"])
@pytest.mark.parametrize("case", MIRRORS)
def test_mirror_pad_sources_are_what_the_host_tflm_copies(mode, case):
    in_h, in_w, rows, cols = case
    b = ModelBuilder(seed=1)
    x = b.input((1, in_h, in_w, 1))
    b.output(b.pad(x, rows, cols, mode=mode))
    data = b.build()
    pixels = (np.arange(in_h * in_w) - 100).astype(np.int8).reshape(1, in_h, in_w, 1)  # each pixel its own value
    got = oracle.run(data, [pixels]).outputs[0][0, :, :, 0]
    op = read_model(data).main.operators[-1]
    widths = ((0, 0), rows, cols, (0, 0))
    _, row_map, col_map, _ = pad_maps(op, widths, (1, in_h, in_w, 1))
    assert isinstance(row_map, MirrorMap) and isinstance(col_map, MirrorMap)
    row_sources = row_map.sources(np.arange(got.shape[0]))
    col_sources = col_map.sources(np.arange(got.shape[1]))
    np.testing.assert_array_equal(got, pixels[0, :, :, 0][row_sources][:, col_sources])
    for axis_map, sources in ((row_map, row_sources), (col_map, col_sources)):
        for lo in range(len(sources)):
            for hi in range(lo + 1, len(sources) + 1):
                first, last = axis_map.needed((lo, hi))
                assert first <= sources[lo:hi].min() and sources[lo:hi].max() < last
