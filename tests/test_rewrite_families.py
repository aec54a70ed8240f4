"""Tiling the shapes real nets have (issue #23), on `lowtide.testing.families` models against the host TFLM:
squeeze-and-excitation branches run once before the patches, decoder and residual regions that hold their skip
tensors whole, regions that end where the encoder's skip tensor is still read later, and the Pareto table."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from lowtide import oracle
from lowtide.model import Graph, read_model
from lowtide.rewrite import Objective, rewrite_auto, tile
from lowtide.rewrite.regions import escaping_tensor, region_between
from lowtide.testing.families import FAMILIES


def _small(name: str) -> bytes:
    family = FAMILIES[name]
    return family.build(family.small).build()


def _tensor(graph, name: str) -> int:
    return next(t.index for t in graph.main.tensors if t.name == name)


def _same_outputs(original: bytes, rewritten: Graph) -> oracle.OracleRun:
    inputs = oracle.random_inputs(read_model(original))
    expected, got = oracle.run(original, inputs), oracle.run(rewritten.data, inputs)
    for a, b in zip(expected.outputs, got.outputs, strict=True):
        np.testing.assert_array_equal(a, b)
    assert np.unique(expected.outputs[0]).size > 5  # values spread out enough that a wrong window shows
    return got


def _opcodes(model: bytes | Graph) -> list[str]:
    graph = model if isinstance(model, Graph) else read_model(model)
    return [op.opcode for op in graph.main.operators]


def test_squeeze_excite_branch_of_the_source_runs_once_before_the_patches():
    """MobileNetV3's first bottleneck: the SE branch (MEAN, two 1x1 convolutions, hard-sigmoid) reduces the
    region's source, so it runs once, whole; every patch multiplies its window by the per-channel scale."""
    data = _small("mobilenet_v3_se")
    graph = read_model(data)
    source, target = _tensor(graph, "depthwise_conv_2d_2"), _tensor(graph, "conv_2d_9")
    region = region_between(graph, source, target)
    assert region.broadcast_ops == (3, 4, 5, 6, 7)  # MEAN, CONV_2D, CONV_2D, ADD (+3, RELU6), MUL (1/6)
    assert [rop.op for rop in region.ops] == [8, 9]  # the scaling MUL and the projection, per patch
    tiled = tile(graph, source, target, (3, 1))
    assert _opcodes(tiled).count("MEAN") == _opcodes(data).count("MEAN")
    assert _opcodes(tiled).count("MUL") == _opcodes(data).count("MUL") + 2  # the scaling MUL once per patch
    _same_outputs(data, tiled)


def test_residual_se_block_tiled_from_inside_holds_its_input_whole():
    """EfficientNet's MBConv with SE and a residual ADD, tiled from its depthwise output: the block's input is a
    skip tensor, read per patch from the whole tensor, and the SE branch of the source runs before the patches."""
    data = _small("efficientnet_se")
    graph = read_model(data)
    source, target = _tensor(graph, "depthwise_conv_2d_17"), _tensor(graph, "add_24")
    region = region_between(graph, source, target)
    assert region.skips == (_tensor(graph, "conv_2d_15"),)
    assert graph.main.operators[region.broadcast_ops[0]].opcode == "MEAN"
    _same_outputs(data, tile(graph, source, target, (3, 3)))


def test_decoder_region_reads_windows_of_the_encoder_skip_tensor():
    """FastDepth's last decoder stages, from the 1/4-resolution sum to the full-resolution depth map: the 1/2
    resolution encoder tensor the last skip ADD reads is held whole and sliced per patch (through the resize's
    inverse map), the output assembled from patches."""
    data = _small("fastdepth")
    graph = read_model(data)
    source, target = _tensor(graph, "add_17"), _tensor(graph, "conv_2d_25")
    region = region_between(graph, source, target)
    assert region.skips == (_tensor(graph, "conv_2d_0"),)
    _same_outputs(data, tile(graph, source, target, (2, 3)))


def test_a_region_may_end_before_the_encoder_skip_tensor_is_read_again():
    """The encoder's first block, ending at its depthwise output: not a cut tensor (the decoder reads the stem's
    output at the end), but nothing the region computes is read after it. A region that computes that stem
    output itself cannot end there."""
    data = _small("fastdepth")
    graph = read_model(data)
    stem, depthwise = _tensor(graph, "conv_2d_0"), _tensor(graph, "depthwise_conv_2d_2")
    assert escaping_tensor(graph, stem, depthwise) == ""
    assert escaping_tensor(graph, _tensor(graph, "input_0"), depthwise) == (
        f"tensor {stem} 'conv_2d_0' computed in the region is read after it"
    )
    _same_outputs(data, tile(graph, stem, depthwise, (4, 1)))


def test_auto_tiles_an_encoder_decoder_whose_peak_is_in_the_decoder():
    """FastDepth at 64x64: every region around the peak used to need the whole encoder-decoder ("no tiling of the
    10 regions around the peak fits the budget"); with skip tensors held whole, the encoder's block and the
    decoder's full-resolution stages are tiled on their own: 98,304 -> 35,488 B (2.77x; 2.82x at 160x160; 49,152 B
    before the first round's alternatives got rounds of their own, 52,672 B before the second looks in turn),
    within the MAC budget."""
    data = _small("fastdepth")
    result = rewrite_auto(read_model(data), max_mac_overhead=0.20, objective=Objective.HEAD)
    assert result.rewritten, result.reason
    run = _same_outputs(data, result.model)
    assert run.head_bytes == result.head_bytes
    assert result.original_head_bytes == 98_304
    assert result.head_bytes == 35_488
    assert result.macs_after <= 1.20 * result.macs_before


def test_second_looks_in_turn_take_two_level_regions_below_half_the_best_order():
    """MobileNetV3's stem and first bottleneck at 96x96: the 56x56-stage region is tiled first, then the input's;
    their peaks are then level, and only finer grids of both go lower. The second looks, in turn, with grids of
    one live peak ranked by the region's own peak, reach 2.45x below the best order (2.49x at 224x224), within
    the MAC budget and bit-identical."""
    family = FAMILIES["mobilenet_v3_se"]
    data = family.build(96).build()
    result = rewrite_auto(read_model(data), max_mac_overhead=0.20, objective=Objective.HEAD)
    assert len(result.tilings) == 2, result.reason
    run = _same_outputs(data, result.model)
    assert run.head_bytes == result.head_bytes
    assert result.original_head_bytes >= 2 * result.head_bytes
    assert result.macs_after <= 1.20 * result.macs_before


def test_optimize_table_shows_the_pareto_front_with_the_written_point(tmp_path):
    model, out = tmp_path / "pan.tflite", tmp_path / "out.tflite"
    model.write_bytes(_small("pan_detector"))
    env = {**os.environ, "COLUMNS": "220"}
    result = subprocess.run(
        [sys.executable, "-m", "lowtide", "optimize", str(model), "-o", str(out), "--rewrite", "auto"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "Pareto front" in line)
    rows = [line for line in lines[start:] if line.startswith("│") and " -> " in line]
    assert rows, result.stdout
    # pan_detector: weighing TFLM's persistent tail beside the head, the search tiles its stem as 3x1 patches from
    # row strips of the input, which optimize writes: that point of the front is marked as written.
    rewrite_line = next(line for line in lines if line.startswith("rewrite: tiled "))
    written = [line for line in rows if "written" in line and "not written" not in line]
    tiling = rewrite_line.removeprefix("rewrite: ").split(" (+")[0].split("; then ")[-1]
    source, rest = tiling.removeprefix("tiled ").split(" -> ", 1)
    grid = rest.split(" as ")[1].split(" patches")[0]
    assert len(written) == 1 and source in written[0] and grid in written[0], result.stdout
    # The front: extra MACs rise while the declared arena falls, row by row.
    overheads = [float(line.split("%")[0].split()[-1]) for line in rows]
    assert overheads == sorted(overheads)


def test_squeeze_and_excitation_stages_reach_half_the_best_order():
    """EfficientNet-B0's first stages at 96x96: four regions, the SE blocks' SPLIT_V halves planned inside their
    input once the MEAN has read it (an order-only in-place block), reach 2.01x below the best order
    (276,480 -> 137,664 B; 2.22x at 224x224), within the MAC budget and bit-identical on the host TFLM."""
    family = FAMILIES["efficientnet_se"]
    data = family.build(96).build()
    result = rewrite_auto(read_model(data), max_mac_overhead=0.20, objective=Objective.HEAD)
    run = _same_outputs(data, result.model)
    assert run.head_bytes == result.head_bytes
    assert result.original_head_bytes >= 2 * result.head_bytes, (result.original_head_bytes, result.head_bytes)
    assert result.macs_after <= 1.20 * result.macs_before
