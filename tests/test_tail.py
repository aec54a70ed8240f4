"""`lowtide.memory.tail`: TFLM's persistent tail on a 32-bit core from the graph alone, against the oracle (TFLM's
allocator built for the Cortex-M4 and run in QEMU, `lowtide.tflm.sizer`): to the byte on every shared model, and
on tiled models, whose patches add the operators (STRIDED_SLICE, PAD, SPLIT_V, CONCATENATION) the rewrite pays
for in the tail."""

from __future__ import annotations

import pytest

from conftest import SHARED_MODELS, needs_firmware_tools, shared_model_names
from lowtide.memory.tail import persistent_tail
from lowtide.model.ir import Graph
from lowtide.rewrite import Tiling, apply_tilings, planned_model
from lowtide.rewrite.regions import cut_tensors
from lowtide.settings import read_settings
from lowtide.tflm.sizer import predict_arena32
from lowtide.tflm.tree import KernelSet
from lowtide.validation import load_model


def _sizer_tail(graph: Graph) -> int:
    return predict_arena32(graph, KernelSet.REFERENCE, read_settings()).tail_bytes


@needs_firmware_tools
@pytest.mark.parametrize("name", shared_model_names())
def test_tail_of_every_shared_model_is_tflms_to_the_byte(name):
    graph = load_model(SHARED_MODELS / f"{name}.tflite")
    estimate = persistent_tail(graph)
    assert estimate.exact, estimate.unmodelled
    assert estimate.tail_bytes == _sizer_tail(graph)


def _tiled(name: str, grid: tuple[int, int], split_source: bool) -> Graph:
    """The model with its input to its fourth cut tensor run as `grid` patches."""
    graph = load_model(SHARED_MODELS / f"{name}.tflite")
    cuts = [graph.main.tensors[t].name for t in cut_tensors(graph)]
    return apply_tilings(graph, (Tiling(cuts[0], cuts[3], grid, split_source),))


@needs_firmware_tools
@pytest.mark.parametrize(
    ("name", "grid", "split_source"),
    [
        # from row strips of the input: SPLIT_V, STRIDED_SLICE windows, PAD, CONCATENATION of rows and columns
        ("tflm_person_detect", (3, 2), True),
        ("mlperf_vww_96_int8", (2, 2), False),
        ("mcunet_vww", (3, 2), True),  # a float32 input, quantized in place
    ],
)
def test_tail_of_tiled_models_is_tflms_to_the_byte(name, grid, split_source):
    _, planned = planned_model(_tiled(name, grid, split_source))  # with its offline plan, as optimize writes it
    original = load_model(SHARED_MODELS / f"{name}.tflite")
    assert persistent_tail(planned).tail_bytes == _sizer_tail(planned) > _sizer_tail(original)


def test_tail_counts_what_each_patch_adds():
    """Without the oracle: a finer grid of the same region adds operators, and each adds its node, parameters and
    kernel data to the tail."""
    graph = load_model(SHARED_MODELS / "mlperf_vww_96_int8.tflite")
    tails = [persistent_tail(_tiled("mlperf_vww_96_int8", grid, False)).tail_bytes for grid in ((2, 1), (2, 2), (3, 3))]
    assert persistent_tail(graph).tail_bytes < tails[0] < tails[1] < tails[2]
