"""The fast int8 convolution kernels (firmware/runtime/lt_conv_dsp.h): their requantization against TFLM's
MultiplyByQuantizedMultiplier on the host, whole models bit-exact with the host TFLM through the portable path
(under ASan/UBSan), and the DSP path (SXTB16, SMLAD, SMMULR) on the emulated Cortex-M4."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import SHARED_MODELS, needs_firmware_tools
from lowtide.compile import compile_model, verify_compiled
from lowtide.compile.codegen import arena_plan
from lowtide.model.builder import ModelBuilder
from lowtide.model.reader import object_tree
from lowtide.model.writer import model_bytes
from lowtide.pipeline.measure import measure
from lowtide.resources import RUNTIME_DIR
from lowtide.validation import load_model

KWS_DSCNN = SHARED_MODELS / "mlperf_kws_dscnn_int8.tflite"
PERSON_DETECT = SHARED_MODELS / "tflm_person_detect.tflite"

# Random accumulators (below 2^30, as LT_SHORT_ACC requires), multipliers in [2^30, 2^31), right shifts 1..20,
# output offsets -128..127: the SMMLAR path (on the sum and on the doubled sum of LT_DOUBLED_ACC layers) against
# the runtime's reference requantization, and the offset added after the shift at right shifts 1..30.
_REQUANT_CHECK = r"""
#include <stdio.h>
#include "lt_conv_dsp.h"
#include "lt_fixedpoint.h"

static uint32_t state = 12345u;
static uint32_t next(void) { state ^= state << 13; state ^= state >> 17; state ^= state << 5; return state; }

int main(void) {
    lt_conv_params p;
    memset(&p, 0, sizeof p);
    for (long i = 0; i < 2000000; ++i) {
        const int32_t scale = (int32_t)(next() % 30u);
        const int32_t acc = (int32_t)(next() >> 2) >> scale ^ ((next() & 1u) ? -1 : 0);
        const int32_t multiplier = (int32_t)((1u << 30) | (next() >> 2));
        const int32_t shift = -(int32_t)(1u + next() % 20u);
        p.output_offset = (int32_t)(next() % 256u) - 128;
        p.act_min = -128 + (int32_t)(next() % 2u) * 100;
        p.act_max = 127;
        const lt_requant q = {multiplier, shift, (1 << (-shift - 1)) + (p.output_offset << -shift), -shift};
        int32_t want = lt_multiply_by_quantized_multiplier(acc, multiplier, shift) + p.output_offset;
        want = want < p.act_min ? p.act_min : (want > p.act_max ? p.act_max : want);
        const int32_t fast = lt_requantize_s8(acc, &q, &p, LT_SHORT_ACC);
        const int32_t doubled = lt_requantize_s8((int32_t)((uint32_t)acc << 1), &q, &p, LT_SHORT_ACC | LT_DOUBLED_ACC);
        const int32_t general = lt_requantize_s8(acc, &q, &p, 0);
        /* the offset after the shift, at any right shift 1..30 */
        const int32_t long_shift = -(int32_t)(1u + next() % 30u);
        const lt_requant q_after = {multiplier, long_shift, 1 << (-long_shift - 1), -long_shift};
        int32_t want_after = lt_multiply_by_quantized_multiplier(acc, multiplier, long_shift) + p.output_offset;
        want_after = want_after < p.act_min ? p.act_min : (want_after > p.act_max ? p.act_max : want_after);
        const int32_t after = lt_requantize_s8(acc, &q_after, &p, LT_SHORT_ACC | LT_OFFSET_AFTER);
        if (fast != want || doubled != want || general != want || after != want_after) {
            printf("acc %ld multiplier %ld shift %ld: %ld %ld %ld, want %ld; shift %ld: %ld, want %ld\n", (long)acc,
                   (long)multiplier, (long)shift, (long)fast, (long)doubled, (long)general, (long)want,
                   (long)long_shift, (long)after, (long)want_after);
            return 1;
        }
    }
    puts("ok");
    return 0;
}
"""


def test_requantization_matches_multiply_by_quantized_multiplier(tmp_path):
    source = tmp_path / "requant.c"
    source.write_text(_REQUANT_CHECK)
    binary = tmp_path / "requant"
    subprocess.run(
        [
            "gcc",
            "-O2",
            "-std=c99",
            "-Wall",
            "-Werror",
            "-I",
            str(RUNTIME_DIR),
            str(source),
            "-o",
            str(binary),
        ],
        check=True,
    )
    result = subprocess.run([str(binary)], capture_output=True, text=True, check=False)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout


# lt_add_s8's same-shape path (one SMMULR and a rounding shift per rescale) against TFLM's AddElementwise written
# with the runtime's reference fixed-point functions: 2,000 random scalings (multipliers in [0, 2^31), shifts -31..0,
# input offsets -255..255, left shift 20, as TFLM's int8 ADD prepares them), every pair of int8 inputs each.
_ADD_CHECK = r"""
#include <stdio.h>
#include <string.h>
#include "lt_fixedpoint.h"
#include "lt_runtime.h"

static uint32_t state = 2024u;
static uint32_t next(void) { state ^= state << 13; state ^= state >> 17; state ^= state << 5; return state; }
static int32_t shift(void) { return (next() & 3u) ? -(int32_t)(next() % 32u) : 0; }

int main(void) {
    static int8_t a[65536], b[65536], out[65536];
    for (int32_t i = 0; i < 65536; ++i) {
        a[i] = (int8_t)(i & 255);
        b[i] = (int8_t)(i >> 8);
    }
    lt_binary_params p;
    memset(&p, 0, sizeof p);
    p.ndim = 1;
    p.dims[0] = 65536;
    p.step1[0] = p.step2[0] = 1;
    p.left_shift = 20;
    for (int t = 0; t < 2000; ++t) {
        p.input1_offset = (int32_t)(next() % 511u) - 255;
        p.input2_offset = (int32_t)(next() % 511u) - 255;
        p.output_offset = (int32_t)(next() % 256u) - 128;
        p.input1_multiplier = (int32_t)(next() >> 1);
        p.input2_multiplier = (next() & 1u) ? 1 << 30 : (int32_t)(next() >> 1);
        p.output_multiplier = (int32_t)(next() >> 1);
        p.input1_shift = shift();
        p.input2_shift = shift();
        p.output_shift = shift();
        p.act_min = -128 + (int32_t)(next() % 2u) * 100;
        p.act_max = 127;
        lt_add_s8(&p, a, b, out);
        for (int32_t i = 0; i < 65536; ++i) {
            const int32_t s1 = lt_multiply_by_quantized_multiplier(lt_shl(p.input1_offset + a[i], 20),
                                                                   p.input1_multiplier, p.input1_shift);
            const int32_t s2 = lt_multiply_by_quantized_multiplier(lt_shl(p.input2_offset + b[i], 20),
                                                                   p.input2_multiplier, p.input2_shift);
            const int32_t want = lt_clamp(
                lt_multiply_by_quantized_multiplier(s1 + s2, p.output_multiplier, p.output_shift) + p.output_offset,
                p.act_min, p.act_max);
            if (out[i] != want) {
                printf("trial %d: %d + %d -> %d, want %ld\n", t, a[i], b[i], out[i], (long)want);
                return 1;
            }
        }
    }
    puts("ok");
    return 0;
}
"""


def test_same_shape_int8_add_matches_the_reference_rescaling(tmp_path):
    source = tmp_path / "add.c"
    source.write_text(_ADD_CHECK)
    binary = tmp_path / "add"
    runtime = [str(RUNTIME_DIR / name) for name in ("lt_elementwise.c", "lt_activation.c")]  # RSQRT's helper
    flags = ["gcc", "-O2", "-std=c99", "-Wall", "-Werror", "-I", str(RUNTIME_DIR)]
    subprocess.run([*flags, str(source), *runtime, "-o", str(binary), "-lm"], check=True)
    result = subprocess.run([str(binary)], capture_output=True, text=True, check=False)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout


@pytest.mark.parametrize("model", [KWS_DSCNN, PERSON_DETECT], ids=lambda p: p.stem)
def test_fast_kernels_bit_exact_on_the_host_under_sanitizers(model, tmp_path):
    """kws_dscnn: a 10x4 stride-2 convolution of one channel (im2col through the byte gather), 3x3 depthwise,
    1x1 convolutions, FULLY_CONNECTED; person_detect: a one-channel depthwise with multiplier 8 (as a
    convolution) and stride-2 depthwise layers. On whole tensors and in row chains (the default)."""
    whole = compile_model(load_model(model), row_chains=False).files["model.c"]
    assert "lt_conv_s8_fast" in whole and "lt_depthwise_s8_fast" in whole
    rows = compile_model(load_model(model)).files["model.c"]
    # kws_dscnn's depthwise layers, each alone between pointwise ones, run whole in place
    assert "lt_conv_ring_s8_fast" in rows and ("lt_depthwise_ring_s8_fast" in rows) == (model == PERSON_DETECT)
    for row_chains in (False, True):
        result = verify_compiled(
            load_model(model), seed=3, workdir=tmp_path / str(row_chains), sanitize=True, row_chains=row_chains
        )
        assert result.passed, result.outputs


@needs_firmware_tools
def test_dsp_kernels_bit_exact_on_qemu_m4():
    """The same model through the SIMD path (the M4 has the DSP extension), outputs against the host TFLM."""
    result = measure(PERSON_DETECT, "qemu-m4", iterations=1, warmup=0, timeout=60, seed=2)
    assert result.outputs_match, result.mismatched_outputs


def test_a_single_pixel_convolution_keeps_its_gather_inside_its_planned_scratch(tmp_path):
    """A 3x3 SAME convolution of a 1x1x3 input has one output pixel, its window padded: its one int16 row (k4 = 28
    values) is followed by the byte gather (3 channels: not a multiple of 4), and the plan reserves exactly those
    84 B (the kernel puts the gather after the rows it uses, not where two rows would end); bit-exact with the
    host TFLM."""
    b = ModelBuilder(seed=3, name="one_pixel")
    x = b.input((1, 1, 1, 3))
    b.output(b.fully_connected(b.conv2d(x, 8, kernel=3, padding="SAME", activation="RELU"), 4))
    path = tmp_path / "one_pixel.tflite"
    path.write_bytes(b.build())
    plan = arena_plan(load_model(path))
    assert plan.fast_scratch_bytes[0] == 2 * 28 + 28
    for seed in (0, 1):
        result = verify_compiled(load_model(path), seed=seed, sanitize=True)
        assert result.passed, result.outputs


def test_im2col_gathers_rows_between_paddings_and_dilated_taps(tmp_path):
    """Channel counts that are not multiples of 4 (3, 5, 1) make im2col gather bytes: one copy per filter row
    between the left and right padding (5x5 SAME at stride 1 and 2; a 7x7 filter over a 7-wide one-channel
    input, whose windows are cut by 1 to 3 columns on either side) and tap by tap where dilation spreads them (3x3
    dilated by 2); bit-exact with the host TFLM under ASan/UBSan."""
    b = ModelBuilder(seed=5, name="gathers")
    x = b.input((1, 9, 7, 3))
    y = b.conv2d(x, 5, kernel=5, stride=1, activation="NONE")
    y = b.conv2d(y, 6, kernel=5, stride=2, activation="RELU")
    z = b.conv2d(b.conv2d(x, 5, kernel=3, dilation=2, activation="RELU"), 1, kernel=1, activation="NONE")
    z = b.conv2d(z, 4, kernel=7, stride=1, activation="RELU")
    b.output(y)
    b.output(z)
    path = tmp_path / "gathers.tflite"
    path.write_bytes(b.build())
    assert compile_model(load_model(path), row_chains=False).files["model.c"].count("lt_conv_s8_fast") == 5
    for seed, row_chains in ((0, False), (1, False), (0, True)):  # whole tensors, and row by row
        result = verify_compiled(load_model(path), seed=seed, sanitize=True, row_chains=row_chains)
        assert result.passed, result.outputs


def test_one_pixel_over_the_whole_input_reads_it_in_place(tmp_path):
    """FULLY_CONNECTED of one row and a VALID convolution whose window is its whole input run lt_vector_s8_fast,
    such depthwise convolutions lt_depthwise_vector_s8_fast: no im2col, no plane, no scratch; output channels in
    blocks of four and a remainder (6, 7, 5; depthwise 6 and 4), depths that are not multiples of 4 (3 x 3 x 3 =
    27, 6, 7); bit-exact with the host TFLM under ASan/UBSan."""
    b = ModelBuilder(seed=7, name="whole_input")
    x = b.input((1, 3, 3, 3))
    y = b.conv2d(x, 6, kernel=3, padding="VALID", activation="RELU")
    y = b.fully_connected(b.fully_connected(y, 7, activation="RELU"), 5)
    b.output(y)
    z = b.depthwise_conv2d(b.conv2d(x, 6, kernel=1, activation="RELU"), kernel=3, padding="VALID", activation="NONE")
    b.output(z)
    w = b.depthwise_conv2d(
        b.conv2d(b.input((1, 5, 5, 2)), 4, kernel=1, activation="NONE"), kernel=5, padding="VALID", activation="RELU"
    )
    b.output(w)
    path = tmp_path / "whole_input.tflite"
    path.write_bytes(b.build())
    source = compile_model(load_model(path)).files["model.c"]
    assert source.count("lt_vector_s8_fast(") == 3 and source.count("lt_depthwise_vector_s8_fast(") == 2
    # scratch only for the two 1x1 convolutions over 9 and 25 pixels (operators 3 and 5)
    assert set(arena_plan(load_model(path)).fast_scratch_bytes) == {3, 5}
    for seed in (0, 1, 2):
        result = verify_compiled(load_model(path), seed=seed, sanitize=True)
        assert result.passed, result.outputs


def _with_edited_channels(path: Path, out: Path) -> Path:
    """`path` (a 1x1 convolution of 16 channels first) with three channels of that convolution as real models have
    them: channel 3 pruned (weights 0, bias 2^30, a filter scale of 2^-40), channel 5 near-dead (its filter scale
    so small that no input moves its output off the zero point), channel 7 with a bias of 2^30 - 2^20 and a
    right shift of 30 (an output the input moves, whose offset * 2^r does not fit the rounding term)."""
    raw = object_tree(load_model(path))
    sg = raw.subgraphs[0]
    conv = sg.operators[0]
    filt, bias, inp, outp = (sg.tensors[i] for i in (conv.inputs[1], conv.inputs[2], conv.inputs[0], conv.outputs[0]))
    weights = np.frombuffer(bytes(raw.buffers[filt.buffer].data), dtype=np.int8).reshape(16, -1).copy()
    biases = np.frombuffer(bytes(raw.buffers[bias.buffer].data), dtype="<i4").copy()
    scales = [float(s) for s in filt.quantization.scale]
    ratio = float(outp.quantization.scale[0]) / float(inp.quantization.scale[0])  # filter scale per unit multiplier
    weights[3] = 0
    biases[3] = 1 << 30
    scales[3] = 2.0**-40
    scales[5] = 2.0**-36 * ratio
    biases[7] = (1 << 30) - (1 << 20)
    scales[7] = 2.0**-31 * (1 << 30) / ((1 << 30) - (1 << 20)) * ratio  # x near 2^29: the input moves its output
    raw.buffers[filt.buffer].data = np.frombuffer(weights.tobytes(), dtype=np.uint8)
    raw.buffers[bias.buffer].data = np.frombuffer(biases.astype("<i4").tobytes(), dtype=np.uint8)
    filt.quantization.scale = scales
    outp.quantization.zeroPoint = [23]  # an offset that the short path must add
    bias.quantization.scale = [s * float(inp.quantization.scale[0]) for s in scales]
    out.write_bytes(model_bytes(raw))
    return out


def test_constant_and_long_shift_channels_keep_the_short_requantization(tmp_path):
    """Channels whose output is one value (pruned: weights 0 and a bias of 2^30; near-dead: a tiny scale) are
    written as multiplier 0 with their value in the rounding term, so they do not keep the layer off the short
    requantization, and a channel whose right shift is 30 adds the output offset after the shift; bit-exact with
    the host TFLM on the host (portable path, ASan/UBSan) and through the DSP path on qemu-m4."""
    b = ModelBuilder(seed=11, name="edited_channels")
    x = b.input((1, 6, 6, 8))
    y = b.conv2d(x, 16, kernel=1, activation="NONE")
    y = b.depthwise_conv2d(y, kernel=3, activation="RELU")
    b.output(b.conv2d(y, 4, kernel=3, stride=2, activation="NONE"))
    built = tmp_path / "built.tflite"
    built.write_bytes(b.build())
    path = _with_edited_channels(built, tmp_path / "edited_channels.tflite")
    source = compile_model(load_model(path), row_chains=False).files["model.c"]
    first = source[source.index("op0_run(const void") :].split("\n")[1]
    assert "LT_SHORT_ACC" in first and "LT_OFFSET_AFTER" in first and "LT_DOUBLED_ACC" in first, first
    requant = source[source.index("op0_requant[16] = {") :].split("};")[0]
    assert requant.count("{0, -1, ") == 2  # channels 3 and 5
    for seed in (0, 1, 2):
        result = verify_compiled(load_model(path), seed=seed, sanitize=True)
        assert result.passed, result.outputs
    if shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm"):
        measured = measure(path, "qemu-m4", iterations=1, warmup=0, timeout=60, seed=4)
        assert measured.outputs_match, measured.mismatched_outputs
