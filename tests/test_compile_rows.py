"""Row chains of the compiled runtime (`lowtide.compile.rows`, firmware/runtime/lt_rows.h): layers run one output
row at a time through rings of the rows still needed, bit-exact with the host TFLM (on the host under ASan/UBSan,
and through the DSP path on qemu-m4), and the arena smaller than the whole-tensor plan by the rings' saving."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import SHARED_MODELS, needs_firmware_tools
from lowtide.compile import compile_model, verify_compiled
from lowtide.compile.codegen import arena_plan
from lowtide.compile.lowering.emitter import RingGuest
from lowtide.compile.rows import RowRefusal
from lowtide.memory import align_up
from lowtide.model.builder import ModelBuilder, Padding
from lowtide.pipeline.measure import measure
from lowtide.testing.families import FAMILIES
from lowtide.validation import load_model
from support.cli import lowtide_cli

PERSON_DETECT = SHARED_MODELS / "tflm_person_detect.tflite"
KWS_DSCNN = SHARED_MODELS / "mlperf_kws_dscnn_int8.tflite"


def _every_kind(path: Path) -> Path:
    """One chain of each kind of row layer: a 3x3 convolution, pointwise expansions and projections, depthwise
    layers at stride 1 and (with the PAD before it fused) stride 2, a residual ADD, a stride-2 convolution."""
    b = ModelBuilder(seed=7, name="every_row_kind")
    x = b.input((1, 40, 20, 8))
    x = b.conv2d(x, 8, kernel=3, activation="RELU")  # 0
    y = b.conv2d(x, 32, kernel=1, activation="RELU6")  # 1
    y = b.depthwise_conv2d(y, kernel=3, activation="RELU6")  # 2
    y = b.conv2d(y, 8, kernel=1, activation="NONE")  # 3
    x = b.add(x, y)  # 4: residual
    y = b.conv2d(x, 32, kernel=1, activation="RELU6")  # 5
    y = b.pad(y, rows=(0, 1), cols=(0, 1))  # 6: fused into 7
    y = b.depthwise_conv2d(y, kernel=3, stride=2, padding="VALID", activation="RELU6")  # 7
    y = b.conv2d(y, 16, kernel=1, activation="NONE")  # 8
    y = b.conv2d(y, 16, kernel=3, stride=2, activation="RELU")  # 9
    b.output(b.conv2d(y, 8, kernel=1))  # 10
    path.write_bytes(b.build())
    return path


def _expansion(path: Path) -> Path:
    """8 channels expanded to 32, a depthwise convolution, projected back: the wide tensors only as rings."""
    b = ModelBuilder(seed=3, name="expansion")
    x = b.input((1, 32, 16, 8))
    y = b.conv2d(x, 32, kernel=1, activation="RELU6")
    y = b.depthwise_conv2d(y, kernel=3, activation="RELU6")
    b.output(b.conv2d(y, 8, kernel=1, activation="NONE"))
    path.write_bytes(b.build())
    return path


def test_a_chain_of_every_row_kind_is_bit_exact_on_the_host(tmp_path):
    """Every operator but the fused PAD and the last two runs in a chain (the PAD runs no code): the 3x3
    convolution alone over its input's rows, the residual block, the expansion with the stride-2 depthwise (its
    PAD fused) and projection (the cuts with the least largest chain RAM); the stride-2 convolution with the last
    projection would be a chain too, but away from the arena's peak it would only cost instructions, so it runs
    whole. The output is TFLM's to the bit for several inputs, and the plan without chains is the whole-tensor
    one."""
    path = _every_kind(tmp_path / "every_kind.tflite")
    compiled = compile_model(load_model(path))
    assert [c.ops for c in compiled.row_chains] == [(0,), (1, 2, 3, 4), (5, 7, 8)]
    assert RowRefusal((9, 10), "the arena is no smaller with this chain") in compiled.row_refusals
    source = compiled.files["model.c"]
    for kernel in ("lt_conv_ring_s8_fast", "lt_depthwise_ring_s8_fast", "lt_add_s8", "fused into operator 7"):
        assert kernel in source
    for seed in (0, 1):
        result = verify_compiled(load_model(path), seed=seed, sanitize=True)
        assert result.passed, result.outputs
    whole = compile_model(load_model(path), row_chains=False)
    assert not whole.row_chains and "lt_conv_ring_s8_fast" not in whole.files["model.c"]
    assert compiled.arena_bytes < whole.arena_bytes


def test_rings_replace_the_expanded_tensors_by_the_rows_still_needed(tmp_path):
    """The expansion's 32-channel tensors (16 KiB each whole) are held as a ring of the 3 rows the depthwise window
    reads, and the depthwise output's row y in the slot of the expanded row y - 1, which its row y was the last to
    read (a guest of the ring: channel c written after channel c of the window was copied); the input and output,
    4 KiB each, share their bytes (an output row is written after the input rows under it were read), and the
    three layers share one scratch buffer, the projection's two expanded pixels of 32 int16 values."""
    path = _expansion(tmp_path / "expansion.tflite")
    graph = load_model(path)
    plan = arena_plan(graph)
    (chain,) = plan.rows.chains
    row = 16 * 32  # bytes of a 32-channel row
    expanded, depthwise = (graph.main.operators[op].outputs[0] for op in (0, 1))
    assert chain.ops == (0, 1, 2) and chain.ring_rows == ((expanded, 3),)
    assert chain.guests == (RingGuest(depthwise, expanded, 1, 2),)  # row y in slot (y - 1) % 3
    assert chain.ring_bytes == 3 * row and chain.whole_bytes == 2 * 32 * row
    assert chain.overlap == (graph.main.inputs[0], 0)
    assert plan.head_bytes == 32 * 16 * 8 + chain.ring_bytes + align_up(2 * 32 * 2)
    whole = arena_plan(graph, row_chains=False)
    # whole: the depthwise output (in place over the expansion) and the output, with the projection's scratch
    assert not whole.rows.chains and whole.head_bytes == 2 * 32 * row // 2 + 32 * 16 * 8 + 128 == 20_608
    assert whole.head_bytes - plan.head_bytes == 14_848
    result = verify_compiled(load_model(path), seed=4, sanitize=True)
    assert result.passed and result.arena_bytes == plan.head_bytes


def test_kws_runs_each_layer_over_its_own_input():
    """DS-CNN's layers all keep 25 x 5 x 64: no chain's rings pay, but the first convolution and each pointwise
    layer write their rows over their input's rows already read (a pointwise layer at the same place), and the
    depthwise layers run whole in place, so the arena is about one tensor: 16,256 B before, 8,384 B now."""
    plan = arena_plan(load_model(KWS_DSCNN))
    assert [c.ops for c in plan.rows.chains] == [(0,), (2,), (4,), (6,), (8,)]
    assert arena_plan(load_model(KWS_DSCNN), row_chains=False).head_bytes == 16_256
    assert plan.head_bytes == 8_384


def test_a_transpose_after_convolutions_writes_no_row_over_bytes_still_to_read(tmp_path):
    """mcunet_vww ends in convolutions and a TRANSPOSE to NCHW. The TRANSPOSE reads its source across the whole
    tensor (output row c is channel c, one byte in every source pixel), and it forms a chain alone, its source made
    by the run's last convolution. Its rows may land only below the source's first byte (offset -9,168: 48 B of
    the 9,216 B output over it). Row chains once placed the output at -144, over channels still to be read, and the
    output differed from TFLM."""
    b = ModelBuilder(seed=5, name="conv_transpose")
    x = b.input((1, 12, 12, 16))
    x = b.conv2d(b.conv2d(x, 16, kernel=3, activation="RELU"), 64, kernel=1, activation="RELU")
    b.output(b.mean(b.transpose(x, (0, 3, 1, 2)), axes=(2, 3), keep_dims=False))
    path = tmp_path / "conv_transpose.tflite"
    path.write_bytes(b.build())
    result = verify_compiled(load_model(path), seed=0, sanitize=True)
    assert result.passed, result.outputs
    compiled = compile_model(load_model(SHARED_MODELS / "mcunet_vww.tflite"))
    transpose = [c for c in compiled.row_chains if c.ops == (58,)]
    assert transpose and transpose[0].overlap == (105, -1_296)  # 3x3x160 B: 144 B over the source's head


def test_rows_that_would_cost_many_more_instructions_are_refused_unless_allowed(tmp_path):
    """mlperf_str_ww's tensors are one pixel wide: by rows every pointwise layer runs one-pixel matrix calls the
    whole tensor pairs up, and every depthwise row copies its window's rows again. Estimated: the chains of
    operators 0-1 and 4-5 would run ~36% more instructions (measured on qemu-m4, operator counts: +50% and +49%),
    so by default (at most 15%) those run whole; `--max-row-overhead 100` takes the RAM: 4,864 -> 3,712 B, still
    bit-exact. The lone pointwise layers 3 and 5 run as one row of all their pixels: nothing extra."""
    model = SHARED_MODELS / "mlperf_str_ww_int8.tflite"
    default = lowtide_cli("compile", str(model), "-o", str(tmp_path / "default"), "--json")
    assert default.returncode == 0, default.stderr
    report = json.loads(default.stdout)
    assert report["arena_bytes"] == 4_864
    assert [c["operators"] for c in report["row_chains"]] == [[3], [5]]  # pointwise, each as one row
    refused = {tuple(r["operators"]): r["reason"] for r in report["row_refusals"]}
    for op in (0, 1, 2, 4):  # the least the layer would add, alone or in any chain through it
        least = re.fullmatch(
            r"by rows, alone or in a chain, it would run ~(\d+)% more instructions \(limit 15%\)", refused[(op,)]
        )
        assert least is not None and int(least.group(1)) > 15, refused[(op,)]
    allowed = lowtide_cli(
        "compile", str(model), "-o", str(tmp_path / "allowed"), "--json", "--max-row-overhead", "100", "--verify"
    )
    assert allowed.returncode == 0, allowed.stderr
    report = json.loads(allowed.stdout)
    assert report["arena_bytes"] == 3_712 and report["verify"]["passed"]
    extra = {
        tuple(c["operators"]): c["estimated_extra_instructions"] / c["estimated_instructions_whole"]
        for c in report["row_chains"]
    }
    assert extra[(3,)] == 0
    assert 0.30 < extra[(0, 1)] < 0.60 and 0.30 < extra[(4, 5)] < 0.60


def test_compile_json_lists_chains_and_refusals(tmp_path):
    """An average pool (no row kernel) between two runs of convolutions ends a chain, a window taller than the row
    kernels take keeps its layer out, and the chain after the pool, away from the arena's peak, runs whole:
    `compile --json` lists the chain and the layers left out with the reasons."""
    b = ModelBuilder(seed=2, name="pooled")
    x = b.input((1, 24, 24, 4))
    y = b.conv2d(b.conv2d(x, 16, kernel=3), 4, kernel=1)
    y = b.avg_pool(y, 2)
    y = b.conv2d(b.conv2d(y, 16, kernel=1), 4, kernel=3, stride=2)
    b.output(b.conv2d(y, 4, kernel=17))
    path = tmp_path / "pooled.tflite"
    path.write_bytes(b.build())
    run = lowtide_cli("compile", str(path), "-o", str(tmp_path / "out"), "--json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert [c["operators"] for c in report["row_chains"]] == [[0, 1]]
    assert all(c["ring_bytes"] < c["whole_bytes"] for c in report["row_chains"])
    assert report["row_refusals"] == [
        {"operators": [3, 4], "reason": "the arena is no smaller with this chain"},
        {"operators": [5], "reason": "a window of 17 rows (row kernels take at most 16)"},
    ]
    assert report["arena_bytes"] < compile_model(load_model(path), row_chains=False).arena_bytes


@needs_firmware_tools
@pytest.mark.parametrize("model", ["every_kind", "person_detect"])
def test_row_kernels_bit_exact_on_qemu_m4(tmp_path, model):
    """The row kernels through the SIMD path (the M4 has the DSP extension), outputs against the host TFLM; the
    board's arena is the compiled plan's (person_detect: 13,984 B, 55,328 B on whole tensors)."""
    path = PERSON_DETECT if model == "person_detect" else _every_kind(tmp_path / "every_kind.tflite")
    result = measure(path, "qemu-m4", iterations=1, warmup=0, timeout=120, seed=5)
    assert result.outputs_match, result.mismatched_outputs
    assert result.board_planned_bytes == compile_model(load_model(path)).arena_bytes
    if model == "person_detect":
        assert result.board_planned_bytes == 13_984


def _upsampling(
    path: Path, align_corners: bool = False, half_pixel_centers: bool = False, method: str = "nearest"
) -> Path:
    """A convolution, a resize doubling rows and columns (nearest or bilinear), a convolution: a decoder stage."""
    b = ModelBuilder(seed=11, name="upsampling")
    x = b.input((1, 16, 12, 8))
    y = b.conv2d(x, 32, kernel=3, activation="RELU")
    y = b.resize(y, 2, method, align_corners=align_corners, half_pixel_centers=half_pixel_centers)
    b.output(b.conv2d(y, 4, kernel=3, activation="RELU"))
    path.write_bytes(b.build())
    return path


@pytest.mark.parametrize(("align_corners", "half_pixel_centers"), [(False, False), (True, False), (False, True)])
def test_a_nearest_resize_runs_inside_a_chain(tmp_path, align_corners, half_pixel_centers):
    """Output row oy of the resize copies the one input row TFLM's map gives it (floor, rounded with align_corners,
    shifted half a pixel with half_pixel_centers): the three layers form one chain, the 32-channel tensors before
    and after the resize held as rings (the 1 row of the first convolution's output the resize reads, the second
    convolution's 3 window rows of the resize's output), bit-exact with TFLM, and the arena a quarter of the
    whole-tensor plan's or less (which holds the 24 x 24 x 32 resized tensor whole): 7,200 B against 30,720 B."""
    path = _upsampling(tmp_path / "upsampling.tflite", align_corners, half_pixel_centers)
    compiled = compile_model(load_model(path))
    assert [c.ops for c in compiled.row_chains] == [(0, 1, 2)]
    assert [rows for _, rows in compiled.row_chains[0].ring_rows] == [1, 3]
    assert "void op1_row(uint8_t *arena, int32_t oy) {\n    lt_resize_nearest(" in compiled.files["model.c"]
    for seed in (0, 1):
        result = verify_compiled(load_model(path), seed=seed, sanitize=True)
        assert result.passed, result.outputs
    whole = compile_model(load_model(path), row_chains=False)
    assert whole.arena_bytes >= 24 * 24 * 32  # the resized tensor whole
    assert (compiled.arena_bytes, whole.arena_bytes) == (7_200, 30_720)


@pytest.mark.parametrize(("align_corners", "half_pixel_centers"), [(False, False), (True, False), (False, True)])
def test_a_bilinear_resize_runs_inside_a_chain(tmp_path, align_corners, half_pixel_centers):
    """Output row oy of a bilinear resize interpolates the two input rows TFLM's integer kernel reads for it (the
    same row twice at the edges), in its arithmetic: the three layers form one chain, the resize's input a ring
    of the 2 rows one output row reads, its output a ring of the 3 rows the second convolution's window reads,
    bit-exact with TFLM; the 24 x 24 x 32 resized tensor is not held whole."""
    path = _upsampling(tmp_path / "bilinear.tflite", align_corners, half_pixel_centers, "bilinear")
    compiled = compile_model(load_model(path))
    assert [c.ops for c in compiled.row_chains] == [(0, 1, 2)]
    assert [rows for _, rows in compiled.row_chains[0].ring_rows] == [2, 3]
    assert "void op1_row(uint8_t *arena, int32_t oy) {\n    lt_resize_bilinear_row_s8(" in compiled.files["model.c"]
    for seed in (0, 1):
        result = verify_compiled(load_model(path), seed=seed, sanitize=True)
        assert result.passed, result.outputs
    whole = compile_model(load_model(path), row_chains=False)
    assert compiled.arena_bytes < whole.arena_bytes // 3


@pytest.mark.parametrize(
    ("name", "opcodes", "arenas"),
    [
        ("fastdepth", {"RESIZE_NEAREST_NEIGHBOR"}, (172_608, 525_136)),
        ("face_landmarks", {"PRELU", "MAX_POOL_2D", "PAD"}, (131_152, 442_432)),
    ],
)
def test_families_run_through_their_resizes_pools_prelus_and_pads(tmp_path, name, opcodes, arenas):
    """FastDepth's decoder stages (depthwise 5x5, pointwise, nearest x2 resize, skip ADD) and face_landmarks'
    PReLU residual blocks (their strided skip paths max-pooled and channel-padded) run as chains through those
    operators, so no upsampled or full-resolution tensor is held whole: FastDepth 172,608 B compiled (514,560 B
    when the resizes broke the chains), face_landmarks 131,152 B (440,832 B when the PRELUs, pools and PADs did),
    bit-exact with TFLM."""
    family = FAMILIES[name]
    path = tmp_path / f"{name}.tflite"
    path.write_bytes(family.build(family.full).build())
    graph = load_model(path)
    compiled = compile_model(graph)
    rolled = {op.index for op in graph.main.operators if op.opcode in opcodes}
    assert rolled and rolled <= {op for chain in compiled.row_chains for op in chain.ops}
    assert (compiled.arena_bytes, compile_model(load_model(path), row_chains=False).arena_bytes) == arenas
    result = verify_compiled(load_model(path), seed=0, sanitize=True)
    assert result.passed, result.outputs


def _pooled(path: Path, size: int, stride: int, padding: Padding) -> Path:
    """A convolution, an int8 max pool, a convolution."""
    b = ModelBuilder(seed=13, name="pooled_chain")
    x = b.input((1, 48, 40, 4))
    y = b.conv2d(x, 32, kernel=3, activation="RELU")
    y = b.max_pool(y, size, stride, padding)
    b.output(b.conv2d(y, 4, kernel=3, activation="NONE"))
    path.write_bytes(b.build())
    return path


@pytest.mark.parametrize(("size", "stride", "padding"), [(2, 2, "VALID"), (3, 2, "SAME"), (3, 1, "SAME")])
def test_a_max_pool_runs_inside_a_chain(tmp_path, size, stride, padding):
    """A max pool's output row reads its window's input rows as a convolution's does (stride, filter rows, padding
    above): the three layers form one chain, the 32-channel tensors before and after the pool held as rings of
    the rows still needed, bit-exact with TFLM, and the arena below the whole-tensor plan's."""
    path = _pooled(tmp_path / "pooled_chain.tflite", size, stride, padding)
    compiled = compile_model(load_model(path))
    assert [c.ops for c in compiled.row_chains] == [(0, 1, 2)]
    assert [rows for _, rows in compiled.row_chains[0].ring_rows] == [size, 3]
    assert "void op1_row(uint8_t *arena, int32_t oy) {\n    lt_max_pool_ring_s8(" in compiled.files["model.c"]
    for seed in (0, 1):
        result = verify_compiled(load_model(path), seed=seed, sanitize=True)
        assert result.passed, result.outputs
    whole = compile_model(load_model(path), row_chains=False)
    assert compiled.arena_bytes < whole.arena_bytes // 2


@needs_firmware_tools
@pytest.mark.parametrize("model", ["max_pool", "resize", "pad", "concatenation", "nchw", "bilinear"])
def test_pool_resize_and_pad_rows_bit_exact_on_qemu_m4(tmp_path, model):
    """The max pool, nearest and bilinear resize, channel-PAD and concatenation row layers inside chains, and a convolution
    reading NCHW planes, through the M4's build, outputs against the host TFLM, the board's arena the compiled
    plan's."""
    if model == "nchw":
        path = _nchw_stem(tmp_path / "nchw_stem.tflite")
    elif model == "bilinear":
        path = _upsampling(tmp_path / "bilinear.tflite", half_pixel_centers=True, method="bilinear")
    elif model == "max_pool":
        path = _pooled(tmp_path / "pooled_chain.tflite", 3, 2, "SAME")
    elif model == "resize":
        path = _upsampling(tmp_path / "upsampling.tflite", half_pixel_centers=True)
    elif model == "pad":
        path = _padded(tmp_path / "padded.tflite", skip=True)
    else:
        path = _dense(tmp_path / "concat_chain.tflite")
    result = measure(path, "qemu-m4", iterations=1, warmup=0, timeout=120, seed=5)
    assert result.outputs_match, result.mismatched_outputs
    assert (
        result.board_planned_bytes
        == compile_model(load_model(path)).arena_bytes
        == {
            "max_pool": 14_880,
            "resize": 7_200,
            "pad": 7_824,
            "concatenation": 8_736,
            "nchw": 8_592,
            "bilinear": 7_584,
        }[model]
    )


def test_a_prelu_runs_inside_a_chain(tmp_path):
    """A PRELU's output row is its input row with the per-channel slopes (the same on every row): a stride-2 stem,
    PRELU, a depthwise block, its residual ADD, a PRELU and a stride-2 convolution form one chain, bit-exact with
    TFLM, and no 48 x 40 x 16 tensor is held whole: 28,880 B against 92,224 B."""
    b = ModelBuilder(seed=17, name="prelu_chain")
    x = b.prelu(b.conv2d(b.input((1, 96, 80, 3)), 16, kernel=3, stride=2, activation="NONE"))
    y = b.conv2d(b.depthwise_conv2d(x, kernel=3, activation="NONE"), 16, kernel=1, activation="NONE")
    b.output(b.conv2d(b.prelu(b.add(x, y)), 4, kernel=3, stride=2, activation="NONE"))
    path = tmp_path / "prelu_chain.tflite"
    path.write_bytes(b.build())
    compiled = compile_model(load_model(path))
    assert [c.ops for c in compiled.row_chains] == [(0, 1, 2, 3, 4, 5, 6)]  # PRELUs: 1 and 5
    assert "void op1_row(uint8_t *arena, int32_t oy) {\n    lt_prelu_s8(" in compiled.files["model.c"]
    for seed in (0, 1):
        result = verify_compiled(load_model(path), seed=seed, sanitize=True)
        assert result.passed, result.outputs
    whole = compile_model(load_model(path), row_chains=False)
    assert (compiled.arena_bytes, whole.arena_bytes) == (28_880, 92_224)


def test_a_prelu_alone_runs_over_its_input_whole(tmp_path):
    """A PRELU between operators with no row kernel is a chain alone (taken with the expansion's chain), written
    over its input's bytes: as a lone pointwise layer it runs as one row of all its pixels (the whole kernel, in place), every row of it (it once
    ran the first row only, and face_landmarks differed from TFLM)."""
    b = ModelBuilder(seed=19, name="prelu_alone")
    x = b.avg_pool(b.prelu(b.avg_pool(b.input((1, 64, 32, 8)), 2)), 1)
    y = b.depthwise_conv2d(b.conv2d(x, 32, kernel=1, activation="RELU6"), kernel=3, activation="RELU6")
    b.output(b.conv2d(y, 8, kernel=1, activation="NONE"))
    path = tmp_path / "prelu_alone.tflite"
    path.write_bytes(b.build())
    compiled = compile_model(load_model(path))
    assert [(c.ops, c.one_row) for c in compiled.row_chains] == [((1,), True), ((3, 4, 5), False)]
    for seed in (0, 1):
        result = verify_compiled(load_model(path), seed=seed, sanitize=True)
        assert result.passed, result.outputs


def _padded(path: Path, skip: bool) -> Path:
    """`skip`: a strided block whose skip path is max-pooled and padded with zero-point channels to the main
    path's width, then added; else a convolution whose output is padded in columns and channels before a VALID
    3x3 convolution."""
    b = ModelBuilder(seed=23, name="padded")
    if skip:
        x = b.conv2d(b.input((1, 48, 40, 3)), 16, kernel=3, stride=2, activation="RELU")
        y = b.conv2d(b.depthwise_conv2d(x, kernel=3, stride=2, activation="NONE"), 32, kernel=1, activation="NONE")
        b.output(b.conv2d(b.add(y, b.pad(b.max_pool(x, 2), channels=(0, 16))), 8, kernel=3, stride=2))
    else:
        x = b.conv2d(b.input((1, 40, 20, 4)), 16, kernel=3, activation="RELU")
        x = b.pad(x, cols=(1, 2), channels=(0, 8))
        b.output(b.conv2d(x, 4, kernel=3, padding="VALID", activation="NONE"))
    path.write_bytes(b.build())
    return path


@pytest.mark.parametrize(
    ("skip", "chain", "arenas"), [(True, (0, 1, 2, 3, 4, 5), (7_824, 13_584)), (False, (0, 1, 2), (6_352, 34_880))]
)
def test_a_pad_of_columns_and_channels_runs_inside_a_chain(tmp_path, skip, chain, arenas):
    """A PAD's output row is its input row padded (with the output's zero point) in columns and channels: the
    strided block with its padded skip path is one chain (the last convolution apart: the minimax cut), the
    padded tensor of the other model a ring; bit-exact with TFLM, the arena below the whole-tensor plan's."""
    path = _padded(tmp_path / "padded.tflite", skip)
    compiled = compile_model(load_model(path))
    assert chain in [c.ops for c in compiled.row_chains]
    pad = next(op.index for op in load_model(path).main.operators if op.opcode == "PAD")
    assert f"void op{pad}_row(uint8_t *arena, int32_t oy) {{\n    lt_fill(" in compiled.files["model.c"]
    for seed in (0, 1):
        result = verify_compiled(load_model(path), seed=seed, sanitize=True)
        assert result.passed, result.outputs
    assert (compiled.arena_bytes, compile_model(load_model(path), row_chains=False).arena_bytes) == arenas


def _dense(path: Path) -> Path:
    """A convolution's output and its depthwise-pointwise branch concatenated, then a stride-2 convolution."""
    b = ModelBuilder(seed=31, name="concat_chain")
    x = b.conv2d(b.input((1, 40, 24, 4)), 16, kernel=3, activation="RELU")
    y = b.conv2d(b.depthwise_conv2d(x, kernel=3), 16, kernel=1)
    b.output(b.conv2d(b.concat([x, y], axis=3), 4, kernel=3, stride=2))
    path.write_bytes(b.build())
    return path


def test_a_concatenation_of_channels_runs_inside_a_chain(tmp_path):
    """A CONCATENATION's output row is row oy of each input side by side: a dense block (a convolution's output
    and its depthwise-pointwise branch concatenated, then a stride-2 convolution) is one chain, both branches and
    the concatenation held as rings, bit-exact with TFLM: 8,736 B against 61,440 B."""
    path = _dense(tmp_path / "concat_chain.tflite")
    compiled = compile_model(load_model(path))
    assert [c.ops for c in compiled.row_chains] == [(0, 1, 2, 3, 4)]
    assert "void op3_row(uint8_t *arena, int32_t oy) {\n    lt_copy_strided(" in compiled.files["model.c"]
    for seed in (0, 1):
        result = verify_compiled(load_model(path), seed=seed, sanitize=True)
        assert result.passed, result.outputs
    assert (compiled.arena_bytes, compile_model(load_model(path), row_chains=False).arena_bytes) == (8_736, 61_440)


def _nchw_stem(path: Path) -> Path:
    """mobilenet_v2's stem on a small input: an NCHW input transposed to NHWC, padded, a stride-2 3x3
    convolution, a depthwise block."""
    b = ModelBuilder(seed=37, name="nchw_stem")
    x = b.transpose(b.input((1, 3, 48, 40)), (0, 2, 3, 1))
    x = b.conv2d(b.pad(x, rows=(1, 1), cols=(1, 1)), 16, kernel=3, stride=2, padding="VALID", activation="RELU6")
    y = b.depthwise_conv2d(x, kernel=3, activation="RELU6")
    b.output(b.conv2d(y, 8, kernel=1, activation="NONE"))
    path.write_bytes(b.build())
    return path


def test_a_convolution_reads_an_nchw_input_through_its_transpose(tmp_path):
    """The TRANSPOSE of the NCHW input and the PAD run no code: the stride-2 convolution's row kernel gathers its
    windows from the input's channel planes (no ring of transposed rows), and the chain's output lands on the
    planes' rows already read; bit-exact with TFLM."""
    path = _nchw_stem(tmp_path / "nchw_stem.tflite")
    compiled = compile_model(load_model(path))
    (chain,) = compiled.row_chains
    assert chain.ops == (2, 3, 4) and chain.transposes == ((2, 0),) and chain.sources == (0,)
    assert chain.overlap is not None and chain.overlap[0] == 0
    source = compiled.files["model.c"]
    assert "/* fused into operator 2 */" in source and "lt_conv_planes_row_s8_fast(" in source
    for seed in (0, 1):
        result = verify_compiled(load_model(path), seed=seed, sanitize=True)
        assert result.passed, result.outputs
    assert compiled.arena_bytes < compile_model(load_model(path), row_chains=False).arena_bytes


def test_mobilenet_v2_plans_within_its_ram_target():
    """mobilenet_v2 (224): the first chain holds the whole NCHW input (150,528 B) read through its TRANSPOSE, the
    output's rows over the first plane's rows already read and 24,416 B before it, and rings of 43,008 B (the
    depthwise and projection rows over the expanded rows they were the last to read); the arena is 218,640 B
    (231,408 B before, 1,404,992 B on whole tensors), within issue 38's 220,000 B of RAM with the 30 B of
    globals. The chains away from the peak run whole. Bit-exact on the host and qemu-m4: docs/benchmarks.md."""
    graph = load_model(SHARED_MODELS / "tflm_mobilenet_v2_quantized_224.tflite")
    plan = arena_plan(graph)
    first, second = plan.rows.chains
    assert first.ops == (2, 4, 5, 6, 8, 9) and first.transposes == ((2, 0),) and second.ops[0] == 10
    assert first.overlap == (graph.main.inputs[0], -24_416) and first.ring_bytes == 43_008
    assert len(first.guests) == 3
    assert plan.head_bytes == 218_640
