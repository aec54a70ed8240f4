"""`lowtide compile`: generated C + the lowtide runtime, built with the host gcc, against the host TFLM interpreter.

Every check compares with TFLM itself (`lowtide.oracle`) or with values known by construction. The shared models
run end to end; `first_divergence` exposes every operator output, so each kernel call is compared, not just the
model's final (often saturated) outputs. Small models built here cover operators no shared model uses
(LOGISTIC, CONCATENATION, STRIDED_SLICE, int8 requantize, float ADD/MUL/MEAN).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from lowtide import oracle
from lowtide.compile import compile_model, verify_compiled
from lowtide.compile.hostcheck import first_divergence
from lowtide.compile.quantization import mean_multiplier, quantize_multiplier, round_half_away
from lowtide.errors import LowtideError
from lowtide.memory import tflm_plan
from lowtide.model.attributes import (
    Activation,
    AddAttributes,
    ConcatenationAttributes,
    Conv2DAttributes,
    DepthwiseConv2DAttributes,
    FullyConnectedAttributes,
    MulAttributes,
    Padding,
    Pool2DAttributes,
    ReducerAttributes,
    ResizeAttributes,
    SoftmaxAttributes,
    StridedSliceAttributes,
)
from lowtide.model.edit import with_offline_plan
from lowtide.model.offline_memory import OfflinePlan
from lowtide.validation import load_model
from support.compiled import assert_compiled_arena
from support.models import TinyModel, unsupported_model

MODELS = Path(__file__).resolve().parents[1] / ".." / "shared" / "models"

QUICK_MODELS = [
    "tflm_hello_world_int8",  # FULLY_CONNECTED
    "tflm_micro_speech_quantized",  # RESHAPE, DEPTHWISE_CONV_2D, SOFTMAX
    "tflm_magic_wand",  # float32 CONV/DEPTHWISE (depth multiplier 8)/MAX_POOL/FC/SOFTMAX
    "mcunet_detection",  # PAD, RESIZE_NEAREST_NEIGHBOR, QUANTIZE/DEQUANTIZE, MAX_POOL, ADD
    "mltk_fingerprint_signature",  # AVERAGE_POOL, MEAN without keep_dims
    "mltk_rock_paper_scissors",  # float I/O
]
SLOW_MODELS = [
    "tflm_person_detect",
    "mlperf_ad01_int8",
    "mlperf_ic_resnet8_int8",
    "mlperf_ic_resnet_large_int8",
    "mlperf_kws_dscnn_int8",
    "mlperf_str_ww_int8",
    "mlperf_vww_96_int8",
    "mlperf_vww_96_14blk_int8",
    "mlperf_vww_96_20blk_int8",
    "mlperf_ic_resnet_6blk_750k_int8",
    "mcunet_vww",
    "mltk_kws_on_off_v3",
    "mltk_kws_pacman_v3",
    "mltk_image_classification",
    "mltk_image_example1",
    "tflm_mobilenet_v2_quantized_224",  # TRANSPOSE, MEAN with equal in/out quantization
    "mcunetv2_large",  # broadcast MUL and ADD
]


def _model(name: str) -> Path:
    path = MODELS / f"{name}.tflite"
    if not path.exists():
        pytest.skip(f"shared model {name} not present")
    return path


# ---- fixed-point preparation: values known by construction -------------------------------------------------


def test_round_half_away_from_zero_like_c():
    assert [round_half_away(x) for x in (2.5, -2.5, 0.5, -0.5, 1.4999999, 0.49999999999999994)] == [3, -3, 1, -1, 1, 0]


def test_quantize_multiplier_matches_frexp_rounding():
    assert quantize_multiplier(0.5) == (1 << 30, 0)
    assert quantize_multiplier(1.0) == (1 << 30, 1)
    assert quantize_multiplier(0.0) == (0, 0)
    # 1 - 2^-40 rounds up to a full Q31 significand, which is halved and the exponent bumped
    assert quantize_multiplier(1 - 2**-40) == (1 << 30, 1)
    assert quantize_multiplier(2**-40) == (0, 0)  # exponent below -31 flushes to zero


def test_mean_multiplier_folds_in_the_element_count():
    # 49 elements: floor(log2 49) = 5 extra bits, multiplier scaled by 32/49
    assert mean_multiplier(1 << 30, 1, 49) == ((1 << 35) // 49, -4)


# ---- shared models against the host TFLM ---------------------------------------------------------------------


def test_hello_world_end_to_end_with_ram_accounting(tmp_path):
    path = _model("tflm_hello_world_int8")
    result = verify_compiled(load_model(path), seed=3, workdir=tmp_path)
    assert result.passed
    assert result.hook_pairs == result.operator_count == 3
    assert [o.mismatches for o in result.outputs] == [0]
    # TFLM's 32 B of activations and nothing else: each FULLY_CONNECTED is one row, which the whole-input kernel
    # reads in place with the packed weights (no int16 copy of the row in scratch); nothing in static RAM.
    assert_compiled_arena(path, result)
    assert result.arena_bytes == result.tflm_head_bytes == 32
    assert result.fixed_state_bytes == 0
    assert result.ram_bytes < result.tflm_total_bytes
    header = (tmp_path / "model.h").read_text()
    assert "#define MODEL_ARENA_SIZE 32u" in header
    assert "#define MODEL_OPERATOR_COUNT 3" in header
    graph_hash = compile_model(load_model(path)).model_hash
    assert f'#define MODEL_HASH "{graph_hash}"' in header and len(graph_hash) == 16


@pytest.mark.parametrize("name", QUICK_MODELS)
def test_quick_models_bit_exact(name):
    """Under AddressSanitizer and UBSan: an out-of-bounds access or overflow in a kernel fails the run."""
    result = verify_compiled(load_model(_model(name)), seed=0, sanitize=True)
    assert result.passed, result.outputs
    assert all(o.max_abs_diff == 0 for o in result.outputs)
    assert_compiled_arena(_model(name), result)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW_MODELS)
def test_slow_models_bit_exact(name):
    result = verify_compiled(load_model(_model(name)), seed=0, sanitize=True)
    assert result.passed, result.outputs
    assert_compiled_arena(_model(name), result)


@pytest.mark.slow
@pytest.mark.parametrize("name", QUICK_MODELS + SLOW_MODELS)
def test_every_operator_output_matches_tflm(name):
    assert first_divergence(load_model(_model(name)), seed=1) is None


def test_every_operator_output_of_a_conv_model_matches_tflm():
    assert first_divergence(load_model(_model("mlperf_kws_dscnn_int8")), seed=2) is None


def _with_offline_plan(path: Path, offsets: dict[int, int], out: Path) -> Path:
    """`path` with an OfflineMemoryAllocation plan giving each tensor of `offsets` its offset (others: online)."""
    graph = load_model(path)
    plan = OfflinePlan.from_offsets(graph.tensor_counts, {(0, t): o for t, o in offsets.items()})
    out.write_bytes(with_offline_plan(graph, plan).data)
    return out


def test_offline_plan_offsets_are_used(tmp_path):
    """With an OfflineMemoryAllocation plan no larger than the compiled runtime's own, activations go where the
    plan says (the fast kernels' scratch fitted around them) and TFLM agrees on the values; a larger plan gives
    way to the compiled runtime's."""
    path = _model("tflm_hello_world_int8")
    graph = load_model(path)
    chain = [t.index for t in graph.main.tensors if t.planned]  # input, two hidden layers, output: 16 B each
    mirrored = {t: 16 * (k % 2) for k, t in enumerate(chain)}  # TFLM's greedy planner alternates the other way
    assert mirrored != dict(zip((b.tensor for b in tflm_plan(graph).buffers), tflm_plan(graph).offsets))
    planned_path = _with_offline_plan(path, mirrored, tmp_path / "planned.tflite")
    compiled = compile_model(load_model(planned_path))
    assert compiled.arena_bytes == 32  # the two live tensors; the one-row FULLY_CONNECTEDs need no scratch
    assert [t.offset for t in compiled.inputs + compiled.outputs] == [
        mirrored[t] for t in graph.main.inputs + graph.main.outputs
    ]
    result = verify_compiled(load_model(planned_path), seed=5)
    assert result.passed and result.tflm_head_bytes == 32

    apart = {t: 16 * k for k, t in enumerate(reversed(chain))}  # every tensor apart: 64 B, and the scratch
    spread_path = _with_offline_plan(path, apart, tmp_path / "apart.tflite")
    spread = compile_model(load_model(spread_path))
    assert (
        spread.arena_bytes
        == compiled.arena_bytes
        < compile_model(load_model(spread_path), keep_model_plan=True).arena_bytes
    )
    assert verify_compiled(load_model(spread_path), seed=5).passed


# ---- operators no shared model uses, on small models built here ----------------------------------------------


def _slice_graph(m: TinyModel, dtype: str, q) -> tuple[list[int], list[int]]:
    """CONCATENATION -> STRIDED_SLICE (negative begin, end mask, stride 3, shrink) -> LOGISTIC -> MUL (broadcast
    constant) -> ADD -> MEAN; int8 adds a requantizing QUANTIZE."""
    x = m.tensor((1, 4, 6, 8), dtype, *q(0.05, 3))
    y = m.tensor((1, 4, 6, 8), dtype, *q(0.05, 3))
    cat = m.tensor((1, 4, 6, 16), dtype, *q(0.05, 3))
    m.op("CONCATENATION", [x, y], [cat], ConcatenationAttributes(axis=-1))
    begin = m.tensor((4,), "int32", data=[0, 1, -5, 2])
    end = m.tensor((4,), "int32", data=[1, 4, 0, 14])
    strides = m.tensor((4,), "int32", data=[1, 2, 1, 3])
    sl = m.tensor((2, 5, 4), dtype, *q(0.05, 3))  # axis 0 shrunk
    m.op("STRIDED_SLICE", [cat, begin, end, strides], [sl], StridedSliceAttributes(end_mask=1 << 2, shrink_axis_mask=1))
    lg = m.tensor((2, 5, 4), dtype, *q(1 / 256, -128))
    m.op("LOGISTIC", [sl], [lg])
    k = m.tensor(
        (1, 1, 4), dtype, *q(0.02, -7), data=[-100, 3, 77, 127] if dtype == "int8" else [-1.5, 0.25, 2.0, 0.75]
    )
    mul = m.tensor((2, 5, 4), dtype, *q(0.01, 2))
    m.op("MUL", [lg, k], [mul], MulAttributes(fused_activation=Activation.NONE))
    add = m.tensor((2, 5, 4), dtype, *q(0.03, -1))
    m.op("ADD", [mul, sl], [add], AddAttributes(fused_activation=Activation.RELU6))
    axis = m.tensor((1,), "int32", data=[1])
    mean = m.tensor((2, 4), dtype, *q(0.02, 5))
    m.op("MEAN", [add, axis], [mean], ReducerAttributes(keep_dims=False))
    outputs = [mean, lg]
    if dtype == "int8":
        requantized = m.tensor((2, 4), dtype, 0.07, -20)
        m.op("QUANTIZE", [mean], [requantized])
        outputs.append(requantized)
    return [x, y], outputs


@pytest.mark.parametrize("dtype", ["int8", "float32"])
def test_small_model_with_logistic_concat_strided_slice(tmp_path, dtype):
    m = TinyModel()
    inputs, outputs = _slice_graph(m, dtype, (lambda s, z: (s, z)) if dtype == "int8" else (lambda s, z: ()))
    path = m.save(tmp_path / f"slice_{dtype}.tflite", inputs, outputs)
    for seed in (0, 1):
        result = verify_compiled(load_model(path), seed=seed)
        assert result.passed, result.outputs
    assert first_divergence(load_model(path), seed=2) is None
    # the graph is not trivial: the logistic output spans a range of values
    logistic = oracle.run(path.read_bytes(), oracle.random_inputs(load_model(path), 0)).outputs[1]
    assert len(np.unique(logistic)) > 5


def _window_graph(m: TinyModel, dtype: str) -> tuple[list[int], list[int]]:
    """Geometry the shared models do not reach: dilated SAME convolutions with stride 2 and odd sizes,
    RELU_N1_TO_1, depth multiplier 2, pools with clipped windows, align-corners and half-pixel resizes,
    per-channel FULLY_CONNECTED, softmax with beta 0.5, grouped convolution."""
    rng = np.random.default_rng(7)
    int8 = dtype == "int8"

    def act(shape, scale, zero_point):
        return m.tensor(shape, dtype, *((scale, zero_point) if int8 else ()))

    def weights(shape, scales, axis):
        if int8:
            return m.tensor(shape, "int8", list(scales), 0, rng.integers(-127, 128, size=shape), axis=axis)
        return m.tensor(shape, "float32", data=rng.uniform(-0.5, 0.5, size=shape))

    def bias(n, scales):
        if int8:
            return m.tensor((n,), "int32", list(scales), 0, rng.integers(-3000, 3000, size=n))
        return m.tensor((n,), "float32", data=rng.uniform(-1, 1, size=n))

    x = act((1, 9, 7, 4), 0.05, 3)
    w1_scales = rng.uniform(0.005, 0.02, size=6)
    conv = act((1, 5, 4, 6), 0.01, -2)
    m.op(
        "CONV_2D",
        [x, weights((6, 3, 3, 4), w1_scales, 0), bias(6, 0.05 * w1_scales)],
        [conv],
        Conv2DAttributes(
            padding=Padding.SAME, stride=(2, 2), fused_activation=Activation.RELU_N1_TO_1, dilation=(2, 2)
        ),
    )
    w2_scales = rng.uniform(0.005, 0.02, size=12)
    dw = act((1, 5, 4, 12), 0.02, 4)
    m.op(
        "DEPTHWISE_CONV_2D",
        [conv, weights((1, 3, 3, 12), w2_scales, 3), bias(12, 0.01 * w2_scales)],
        [dw],
        DepthwiseConv2DAttributes(
            padding=Padding.SAME, stride=(1, 1), depth_multiplier=2, fused_activation=Activation.NONE, dilation=(2, 2)
        ),
    )
    avg = act((1, 3, 2, 12), 0.02, 4)
    m.op(
        "AVERAGE_POOL_2D",
        [dw],
        [avg],
        Pool2DAttributes(padding=Padding.SAME, stride=(2, 2), filter=(3, 3), fused_activation=Activation.RELU6),
    )
    mx = act((1, 3, 2, 12), 0.02, 4)
    m.op(
        "MAX_POOL_2D",
        [avg],
        [mx],
        Pool2DAttributes(padding=Padding.SAME, stride=(1, 1), filter=(2, 2), fused_activation=Activation.NONE),
    )
    up = act((1, 6, 5, 12), 0.02, 4)
    m.op(
        "RESIZE_NEAREST_NEIGHBOR",
        [mx, m.tensor((2,), "int32", data=[6, 5])],
        [up],
        ResizeAttributes(align_corners=True, half_pixel_centers=False),
    )
    up2 = act((1, 7, 8, 12), 0.02, 4)
    m.op(
        "RESIZE_NEAREST_NEIGHBOR",
        [up, m.tensor((2,), "int32", data=[7, 8])],
        [up2],
        ResizeAttributes(align_corners=False, half_pixel_centers=True),
    )
    flat = act((1, 672), 0.02, 4)
    m.op("RESHAPE", [up2, m.tensor((2,), "int32", data=[1, 672])], [flat])
    w3_scales = rng.uniform(0.002, 0.004, size=8)
    fc = act((1, 8), 0.1, 0)
    m.op(
        "FULLY_CONNECTED",
        [flat, weights((8, 672), w3_scales, 0), bias(8, 0.02 * w3_scales)],
        [fc],
        FullyConnectedAttributes(fused_activation=Activation.RELU),
    )
    sm = act((1, 8), 1 / 256, -128)
    m.op("SOFTMAX", [fc], [sm], SoftmaxAttributes(beta=0.5))
    w4_scales = rng.uniform(0.005, 0.02, size=6)
    grouped = act((1, 9, 7, 6), 0.02, 1)  # 4 input channels, filters of depth 2: two groups
    m.op(
        "CONV_2D",
        [x, weights((6, 1, 1, 2), w4_scales, 0), bias(6, 0.05 * w4_scales)],
        [grouped],
        Conv2DAttributes(padding=Padding.VALID, stride=(1, 1), dilation=(1, 1)),
    )
    return [x], [sm, fc, up2, conv, grouped]


@pytest.mark.parametrize("dtype", ["int8", "float32"])
def test_small_model_with_dilation_padding_and_resizes(tmp_path, dtype):
    m = TinyModel()
    inputs, outputs = _window_graph(m, dtype)
    path = m.save(tmp_path / f"window_{dtype}.tflite", inputs, outputs)
    assert verify_compiled(load_model(path), seed=0).passed
    assert first_divergence(load_model(path), seed=1) is None
    softmax = oracle.run(path.read_bytes(), oracle.random_inputs(load_model(path), 0)).outputs[0]
    assert len(np.unique(softmax)) > 3


# ---- errors, CLI ---------------------------------------------------------------------------------------------


def test_unsupported_operator_fails_before_writing(tmp_path):
    path = unsupported_model(tmp_path / "l2_pool.tflite")
    out = tmp_path / "generated"
    runner = CliRunner()
    from lowtide.cli import app, compile_cmd  # noqa: F401  (registers the command)

    with pytest.raises(LowtideError, match=r"operator 0 \(L2_POOL_2D float32 -> float32\): no kernel") as error:
        compile_model(load_model(path))
    assert "l2_pool.tflite" in str(error.value) and len(str(error.value).splitlines()) == 1
    result = runner.invoke(app, ["compile", str(path), "-o", str(out)])
    assert result.exit_code != 0 and isinstance(result.exception, LowtideError)
    assert not out.exists()


def test_unsupported_type_names_the_operator_and_its_types(tmp_path):
    """TFLM's HARD_SWISH has float32 and int8 kernels only; the error lists the supported ones."""
    m = TinyModel()
    x = m.tensor((1, 4), "int16", 0.1, 0)
    y = m.tensor((1, 4), "int16", 0.01, 0)
    m.op("HARD_SWISH", [x], [y])
    path = m.save(tmp_path / "q.tflite", [x], [y])
    with pytest.raises(
        LowtideError,
        match=r"operator 0 \(HARD_SWISH int16 -> int16\): no int16 kernel "
        r"\(supported: int8, float32\)",
    ):
        compile_model(load_model(path))


def test_prefix_must_be_a_c_identifier():
    with pytest.raises(LowtideError, match="not a C identifier"):
        compile_model(load_model(_model("tflm_hello_world_int8")), prefix="9lives")


def test_cli_json_reports_ram_next_to_tflm(tmp_path):
    from lowtide.cli import app, compile_cmd  # noqa: F401

    path = _model("mlperf_kws_dscnn_int8")
    result = CliRunner().invoke(
        app, ["compile", str(path), "-o", str(tmp_path), "--verify", "--json", "--prefix", "kws"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    reference = oracle.run(path.read_bytes(), path=str(path))
    assert report["tflm_total_bytes"] == reference.total_bytes
    # the compiled runtime's plan: row chains write the first convolution's and each pointwise layer's rows over
    # their input's rows already read (16,256 B on whole tensors, above TFLM's 16,000 B head with the fast
    # kernels' int16 scratch): about one 8,000 B tensor
    assert (
        report["arena_bytes"] == compile_model(load_model(path)).arena_bytes == 8_384 < reference.head_bytes == 16_000
    )
    assert [c["operators"] for c in report["row_chains"]] == [[0], [2], [4], [6], [8]]
    assert report["ram_bytes"] == report["arena_bytes"] + report["fixed_state_bytes"]
    assert report["verify"]["passed"] and report["verify"]["hook_pairs"] == report["operators"] == 13
    assert sorted(Path(f).name for f in report["files"]) == ["kws.c", "kws.h"]
    assert "int kws_invoke(uint8_t *arena, lt_op_hook hook, void *user);" in (tmp_path / "kws.h").read_text()
