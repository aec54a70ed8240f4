"""`NotApplicable`: a rewrite that does not fit here says why, searches over candidates catch only that and
report every candidate's reason, and any other error still reaches the caller."""

from __future__ import annotations

import pytest

import lowtide.rewrite.variants as variants
from lowtide.budget import WallClock
from lowtide.errors import LowtideError
from lowtide.model import read_model
from lowtide.model.builder import ModelBuilder
from lowtide.rewrite import NotApplicable, Tiling, partition_at_peak, partition_wide_layer
from lowtide.settings import read_settings
from lowtide.tflm import DEFAULT_CORE, Arena32Mode, mcu32_arena
from lowtide.tflm.tree import KernelSet


def _bottleneck_with_relu_projection() -> bytes:
    """An inverted bottleneck whose projection has a ReLU (not linear), fed by no concatenation."""
    b = ModelBuilder(seed=6)
    x = b.input((1, 12, 12, 8))
    wide = b.depthwise_conv2d(b.conv2d(x, filters=48, kernel=1, activation="RELU6"), kernel=3, activation="RELU6")
    b.output(b.conv2d(wide, filters=8, kernel=1, activation="RELU"))
    return b.build()


def test_not_applicable_is_a_one_line_user_error():
    assert issubclass(NotApplicable, LowtideError)
    graph = read_model(_bottleneck_with_relu_projection())
    with pytest.raises(NotApplicable, match="not linear"):
        partition_wide_layer(graph, expand_op=0)


def test_partition_at_peak_reports_why_each_candidate_does_not_apply():
    graph = read_model(_bottleneck_with_relu_projection())
    with pytest.raises(NotApplicable) as caught:
        partition_at_peak(graph)
    message = str(caught.value)
    assert message.startswith("the memory peak (operator ")
    # The bottleneck opened by the expand: its projection is not linear. The convolutions at and after the peak:
    # none reads a concatenation.
    assert "projection operator 2 is not linear (fused activation)" in message
    assert "does not read a concatenation along channels" in message
    assert "\n" not in message


def test_fewer_patches_skips_variants_that_do_not_apply_and_passes_real_errors_on(monkeypatch):
    graph = read_model(_bottleneck_with_relu_projection())
    tilings = (Tiling("a", "b", (4, 4), True),)

    tried = []

    def not_applicable(_graph, tilings):
        tried.append(tilings)
        raise NotApplicable(f"grid {tilings[0].grid} does not fit")

    monkeypatch.setattr(variants, "apply_tilings", not_applicable)
    settings = read_settings()
    weigh = variants.Weigher(
        "<test>",
        KernelSet.REFERENCE.value,
        lambda g: (
            mcu32_arena(g, 0, KernelSet.REFERENCE, DEFAULT_CORE, mode=Arena32Mode.AUTO, settings=settings).tail_bytes
        ),
        [],
        settings,
    )
    assert variants.fewer_patches(graph, tilings, weigh, 1.0, WallClock(60)) is None
    assert len(tried) >= 2  # strips dropped, coarser grids: every variant tried, none applied

    def broken(_graph, _tilings):
        raise LowtideError("the model cannot be written")

    monkeypatch.setattr(variants, "apply_tilings", broken)
    with pytest.raises(LowtideError, match="cannot be written"):
        variants.fewer_patches(graph, tilings, weigh, 1.0, WallClock(60))
