"""`NotApplicable`: a rewrite that does not fit here says why, searches over candidates catch only that and
report every candidate's reason, and any other error still reaches the caller."""

from __future__ import annotations

import pytest

import lowtide.pipeline.optimize as pipeline
from lowtide.budget import WallClock
from lowtide.errors import LowtideError
from lowtide.model import read_model
from lowtide.model.builder import ModelBuilder
from lowtide.rewrite import NotApplicable, RewriteResult, Tiling, partition_at_peak, partition_wide_layer
from lowtide.settings import read_settings
from lowtide.tflm import DEFAULT_CORE, Arena32Mode
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
    rewritten = RewriteResult(
        model=graph,
        rewritten=True,
        reason="",
        head_bytes=0,
        original_head_bytes=0,
        stock_head_bytes=0,
        tail_bytes=0,
        original_tail_bytes=0,
        macs_before=0,
        macs_after=0,
        tilings=(Tiling("a", "b", (4, 4), True),),
        pareto=(),
        wall_clock_cut=False,
        seconds=0.0,
    )

    tried = []

    def not_applicable(_graph, tilings):
        tried.append(tilings)
        raise NotApplicable(f"grid {tilings[0].grid} does not fit")

    monkeypatch.setattr(pipeline, "apply_tilings", not_applicable)
    weigh = pipeline._Weigher("<test>", KernelSet.REFERENCE, DEFAULT_CORE, Arena32Mode.AUTO, [], read_settings())
    assert pipeline._fewer_patches(graph, rewritten, weigh, 1.0, WallClock(60)) is None
    assert len(tried) >= 2  # strips dropped, coarser grids: every variant tried, none applied

    def broken(_graph, _tilings):
        raise LowtideError("the model cannot be written")

    monkeypatch.setattr(pipeline, "apply_tilings", broken)
    with pytest.raises(LowtideError, match="cannot be written"):
        pipeline._fewer_patches(graph, rewritten, weigh, 1.0, WallClock(60))
