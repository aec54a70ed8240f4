"""The arithmetic of TFLM's kernel Prepare functions, done ahead of time in Python.

Python floats are IEEE doubles and `math.frexp` is C's frexp, so the double arithmetic of TFLM's
quantization_util.cc is reproduced exactly when the operations happen in the same order. Where TFLM computes in
float32 (activation ranges) numpy float32 scalars are used. TFLM's resize geometry is the model's
(`lowtide.model.operators`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
from collections.abc import Callable
from typing import TypedDict, cast

import numpy as np

INT8_MIN, INT8_MAX = -128, 127
INT16_MIN, INT16_MAX = -32768, 32767
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
TYPE_RANGES = {
    "int8": (INT8_MIN, INT8_MAX),
    "int16": (INT16_MIN, INT16_MAX),
    "uint8": (0, 255),
    "int32": (INT32_MIN, INT32_MAX),
}
FLOAT32_MAX = float(np.finfo(np.float32).max)

# TFLite ActivationFunctionType codes
ACT_NONE, ACT_RELU, ACT_RELU_N1_TO_1, ACT_RELU6 = 0, 1, 2, 3


# What the Prepare functions below compute, keyed by the kernel parameter struct members they fill
# (lowtide.compile.kernel_params): a lowering spreads one into the struct's dataclass.
class SoftmaxScaling(TypedDict):
    input_multiplier: int
    input_left_shift: int
    diff_min: int


class LogSoftmaxScaling(SoftmaxScaling):
    reverse_scaling_divisor: int  # not struct members: lt_log_softmax_s8's own arguments
    reverse_scaling_shift: int


class Rescale(TypedDict):
    multiplier: int
    shift: int


class AbsRescale(Rescale):
    rescale: int


class ReluRescale(Rescale):
    input_zero_point: int
    output_zero_point: int
    act_min: int
    act_max: int


class LeakyReluRescale(Rescale):
    input_zero_point: int
    output_zero_point: int
    alpha_multiplier: int
    alpha_shift: int


class HardSwishRescale(TypedDict):
    output_multiplier: int
    output_exponent: int
    reluish_multiplier: int
    reluish_exponent: int


class OutputRescale(TypedDict):
    output_multiplier: int
    output_shift: int


class InputsRescale(TypedDict):
    input1_multiplier: int
    input1_shift: int
    input2_multiplier: int
    input2_shift: int


class ComparisonRescale(InputsRescale):
    left_shift: int


class AddSubRescale(ComparisonRescale, OutputRescale):
    pass


class AddNRescale(OutputRescale):
    left_shift: int
    input1_multiplier: int
    input1_shift: int


def round_half_away(x: float) -> int:
    """C's round()/std::round: halfway cases away from zero (Python's round() goes to even)."""
    magnitude = abs(x)
    whole = math.floor(magnitude)
    if magnitude - whole >= 0.5:  # exact: subtracting the floor of a double loses no bits
        whole += 1
    return int(math.copysign(whole, x)) if whole else 0


def quantize_multiplier(real_multiplier: float) -> tuple[int, int]:
    """QuantizeMultiplier: a Q0.31 significand and a power-of-two exponent."""
    if real_multiplier == 0.0:
        return 0, 0
    q, shift = math.frexp(real_multiplier)
    q_fixed = round_half_away(q * (1 << 31))
    if q_fixed == 1 << 31:
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q_fixed, shift


def quantize_multiplier_greater_than_one(real_multiplier: float) -> tuple[int, int]:
    multiplier, shift = quantize_multiplier(real_multiplier)
    if shift < 0:
        raise ValueError(f"multiplier {real_multiplier} is not greater than one")
    return multiplier, shift


def per_channel_multipliers(
    input_scale: float, filter_scales: list[float], output_scale: float, channels: int
) -> tuple[list[int], list[int]]:
    """PopulateConvolutionQuantizationParams: one multiplier per output channel, per-tensor scales broadcast."""
    multipliers, shifts = [], []
    for c in range(channels):
        filter_scale = filter_scales[c] if len(filter_scales) > 1 else filter_scales[0]
        m, s = quantize_multiplier(float(input_scale) * float(filter_scale) / float(output_scale))
        multipliers.append(m)
        shifts.append(s)
    return multipliers, shifts


def activation_range_quantized(activation: int, scale: float, zero_point: int, dtype: str = "int8") -> tuple[int, int]:
    """CalculateActivationRangeQuantized for an int8 or int16 output: `zero_point + round(f / scale)` in float32."""
    lo, hi = TYPE_RANGES[dtype]

    def quantize(f: float) -> int:
        return zero_point + round_half_away(float(np.float32(f) / np.float32(scale)))

    if activation == ACT_NONE:
        return lo, hi
    if activation == ACT_RELU:
        return max(lo, quantize(0.0)), hi
    if activation == ACT_RELU6:
        return max(lo, quantize(0.0)), min(hi, quantize(6.0))
    if activation == ACT_RELU_N1_TO_1:
        return max(lo, quantize(-1.0)), min(hi, quantize(1.0))
    raise ValueError(f"fused activation {activation} is not supported")


def activation_range_int32(activation: int) -> tuple[int, int]:
    """CalculateActivationRange<int32_t>: the bounds themselves, no quantization."""
    ranges = {ACT_NONE: (INT32_MIN, INT32_MAX), ACT_RELU: (0, INT32_MAX), ACT_RELU6: (0, 6), ACT_RELU_N1_TO_1: (-1, 1)}
    if activation not in ranges:
        raise ValueError(f"fused activation {activation} is not supported")
    return ranges[activation]


def activation_range_float(activation: int) -> tuple[float, float]:
    """CalculateActivationRange<float>."""
    ranges = {
        ACT_NONE: (-FLOAT32_MAX, FLOAT32_MAX),
        ACT_RELU: (0.0, FLOAT32_MAX),
        ACT_RELU6: (0.0, 6.0),
        ACT_RELU_N1_TO_1: (-1.0, 1.0),
    }
    if activation not in ranges:
        raise ValueError(f"fused activation {activation} is not supported")
    return ranges[activation]


def mean_multiplier(multiplier: int, shift: int, count: int) -> tuple[int, int]:
    """QuantizedMeanOrSum folds 1/count into the output multiplier, keeping as many bits as it safely can."""
    extra = min(count.bit_length() - 1, 32, 31 + shift)
    return (multiplier << extra) // count, shift - extra


def calculate_input_radius(input_integer_bits: int, input_left_shift: int, total_signed_bits: int = 31) -> int:
    max_input_rescaled = (
        1.0
        * ((1 << input_integer_bits) - 1)
        * (1 << (total_signed_bits - input_integer_bits))
        / (1 << input_left_shift)
    )
    return math.floor(max_input_rescaled)


def softmax_params_int8(beta: float, input_scale: float) -> SoftmaxScaling:
    """PreprocessSoftmaxScaling with 5 integer bits for the scaled difference, and the diff_min cut-off."""
    scaled_diff_integer_bits = 5
    max_real_multiplier = float((1 << 31) - 1)
    real = min(float(beta) * float(input_scale) * (1 << (31 - scaled_diff_integer_bits)), max_real_multiplier)
    multiplier, left_shift = quantize_multiplier_greater_than_one(real)
    diff_min = int(-1.0 * calculate_input_radius(scaled_diff_integer_bits, left_shift))
    return {"input_multiplier": multiplier, "input_left_shift": left_shift, "diff_min": diff_min}


def logistic_params_int8(input_scale: float) -> dict[str, int]:
    """LOGISTIC's and TANH's Prepare for int8: Q4.27 input rescale from frexp, and the saturation radius."""
    input_integer_bits = 4
    q, left_shift = math.frexp(float(input_scale) * (1 << (31 - input_integer_bits)))
    multiplier = round_half_away(q * (1 << 31))
    return {
        "input_multiplier": multiplier,
        "input_left_shift": left_shift,
        "input_range_radius": calculate_input_radius(input_integer_bits, left_shift, 31),
    }


# The integer LSTM's fixed scales (lstm_eval_common.cc): gate pre-activations in Q3.12 and gate outputs in Q0.15,
# written there as the float32 literals below (the second is not exactly 2**-15).
LSTM_GATE_INPUT_SCALE = float(np.float32(0.00024414062))
LSTM_GATE_OUTPUT_SCALE = float(np.float32(0.00003051757))


def checked_log2(x: float) -> tuple[int, bool]:
    """CheckedLog2: log2(x) rounded, and whether x is a power of two (within 1e-3 in the exponent)."""
    power = math.log(float(x)) / math.log(2.0)
    rounded = round_half_away(power)
    return rounded, abs(power - rounded) < 1e-3


def lstm_cell_scale_power(cell_scale: float) -> int:
    """CheckedLog2 of the int16 cell state's scale, which the integer LSTM requires to be a power of two."""
    power, exact = checked_log2(cell_scale)
    if not exact:
        raise ValueError(f"cell state scale {cell_scale} is not a power of two")
    return power


def lstm_tanh_input_scaling(cell_scale_power: int) -> tuple[int, int]:
    """The multiplier and right shift lstm_internal::Tanh hands to the int16 tanh for a Q(15+power) input:
    a positive left shift folds into the multiplier (3 << shift), a negative one becomes a right shift of x*3."""
    left_shift = 15 + cell_scale_power - 3
    return (3 << left_shift, 0) if left_shift >= 0 else (3, -left_shift)


def lstm_cell_clip(cell_clip: float, cell_scale: float) -> int:
    """CreateLstmCellStateInfo: the clip in cell-state units, in double, clamped to int16 and truncated."""
    if not cell_clip > 0:
        return 0
    return int(min(max(float(np.float32(cell_clip)) / float(cell_scale), -32768.0), 32767.0))


def lstm_mul_multiplier(scale1: float, scale2: float, output_scale: float) -> tuple[int, int]:
    """CreateInterGateMulParams: the product of two float32 scales over the output's, in double."""
    return quantize_multiplier(float(scale1) * float(scale2) / float(output_scale))


def relu_params(
    input_scale: float, input_zero_point: int, output_scale: float, output_zero_point: int, dtype: str
) -> ReluRescale:
    """CalculateReluOpData: the input-to-output rescale (scales divided in float32) and the clamp from 0 up."""
    lo, hi = TYPE_RANGES[dtype]
    m, s = quantize_multiplier(float(np.float32(input_scale) / np.float32(output_scale)))
    return {
        "input_zero_point": input_zero_point,
        "output_zero_point": output_zero_point,
        "multiplier": m,
        "shift": s,
        "act_min": max(lo, output_zero_point),
        "act_max": hi,
    }


def float_to_quantized(value: float, scale: float, zero_point: int, dtype: str) -> int:
    """FloatToQuantizedType: round(value / scale) in float32, plus the zero point, clamped to the type."""
    lo, hi = TYPE_RANGES[dtype]
    return min(hi, max(lo, round_half_away(float(np.float32(value) / np.float32(scale))) + zero_point))


def leaky_relu_params(
    input_scale: float, input_zero_point: int, alpha: float, output_scale: float, output_zero_point: int
) -> LeakyReluRescale:
    """CalculateOpDataLeakyRelu: both multipliers from float32 products and quotients."""
    f32 = np.float32
    alpha_m, alpha_s = quantize_multiplier(float(f32(input_scale) * f32(alpha) / f32(output_scale)))
    m, s = quantize_multiplier(float(f32(input_scale) / f32(output_scale)))
    return {
        "input_zero_point": input_zero_point,
        "output_zero_point": output_zero_point,
        "multiplier": m,
        "shift": s,
        "alpha_multiplier": alpha_m,
        "alpha_shift": alpha_s,
    }


def prelu_params(input_scale: float, alpha_scale: float, output_scale: float) -> InputsRescale:
    """CalculatePreluParams: identity and input x alpha multipliers, in double."""
    m1, s1 = quantize_multiplier(float(input_scale) / float(output_scale))
    m2, s2 = quantize_multiplier(float(input_scale) * float(alpha_scale) / float(output_scale))
    return {"input1_multiplier": m1, "input1_shift": s1, "input2_multiplier": m2, "input2_shift": s2}


def downscale_multiplier_to_int16(multiplier: int) -> int:
    """DownScaleInt32ToInt16Multiplier: the Q0.31 multiplier rounded to Q0.15."""
    rounding = 1 << 15
    if multiplier >= (1 << 31) - 1 - rounding:
        return INT16_MAX
    return (multiplier + rounding) >> 16


def hard_swish_params_int8(input_scale: float, output_scale: float) -> HardSwishRescale:
    """HardSwishPrepare: the input on a 128x finer scale, the output and 'reluish' multipliers in float32."""
    f32 = np.float32
    hires_input_scale = f32(1.0 / 128.0) * f32(input_scale)
    reluish_scale = f32(3.0) / f32(32768.0)
    out_m, out_e = quantize_multiplier(float(hires_input_scale / f32(output_scale)))
    if out_e > 0:
        raise ValueError("HARD_SWISH output scale is below the input scale / 128 (TFLM needs exponent <= 0)")
    relu_m, relu_e = quantize_multiplier(float(hires_input_scale / reluish_scale))
    return {
        "output_multiplier": downscale_multiplier_to_int16(out_m),
        "output_exponent": out_e,
        "reluish_multiplier": downscale_multiplier_to_int16(relu_m),
        "reluish_exponent": relu_e,
    }


def _libm_float_function(name: str) -> Callable[[float], float]:
    """The C library's float function `name` (expf, ...): the one the host TFLM's kernels call, so tables built
    here hold the very values TFLM's Prepare computes (numpy's float32 functions may differ in the last bit)."""
    function = getattr(ctypes.CDLL(ctypes.util.find_library("m")), name)
    function.restype, function.argtypes = ctypes.c_float, [ctypes.c_float]
    return cast(Callable[[float], float], function)


def elu_table_int8(input_scale: float, input_zero_point: int, output_scale: float, output_zero_point: int) -> list[int]:
    """ELU's PopulateLookupTable<int8_t>: every int8 input dequantized, transformed and requantized in float32,
    indexed by the input's byte."""
    f32, expf = np.float32, _libm_float_function("expf")
    inverse_scale = f32(1) / f32(output_scale)
    table = [0] * 256
    for value in range(INT8_MIN, INT8_MAX + 1):
        dequantized = f32(input_scale) * f32(value - input_zero_point)
        transformed = f32(expf(float(dequantized))) - f32(1) if dequantized < 0 else dequantized
        rescaled = f32(round_half_away(float(f32(transformed * inverse_scale))))
        quantized = int(rescaled + f32(output_zero_point))  # float to int32: truncation
        table[value & 0xFF] = min(INT8_MAX, max(INT8_MIN, quantized))
    return table


def _wrap32(x: int) -> int:
    return (x + (1 << 31)) % (1 << 32) - (1 << 31)


def _srdhm(a: int, b: int) -> int:
    """gemmlowp SaturatingRoundingDoublingHighMul."""
    if a == b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    nudged = ab + ((1 << 30) if ab >= 0 else 1 - (1 << 30))
    quotient = abs(nudged) >> 31  # division truncating toward zero
    return quotient if nudged >= 0 else -quotient


def _rounding_divide_by_pot(x: int, exponent: int) -> int:
    mask = (1 << exponent) - 1
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if (x & mask) > threshold else 0)


def multiply_by_quantized_multiplier(x: int, multiplier: int, shift: int) -> int:
    """TFLM's MultiplyByQuantizedMultiplier of an int32 (the left shift wrapping as its int32 product does)."""
    left, right = max(shift, 0), max(-shift, 0)
    return _rounding_divide_by_pot(_srdhm(_wrap32(x * (1 << left)), multiplier), right)


def _saturating_shl(x: int, exponent: int) -> int:
    threshold = (1 << (31 - exponent)) - 1
    return INT32_MAX if x > threshold else INT32_MIN if x < -threshold else _wrap32(x << exponent)


def _exp_on_negative_values(a: int, integer_bits: int) -> int:
    """gemmlowp exp_on_negative_values, Q(integer_bits).(31 - integer_bits) in, Q0.31 out."""
    fractional_bits = 31 - integer_bits
    one_quarter = 1 << (fractional_bits - 2)
    a_mod_quarter_minus_one_quarter = _wrap32((a & (one_quarter - 1)) - one_quarter)
    x = _wrap32(_saturating_shl(a_mod_quarter_minus_one_quarter, integer_bits) + (1 << 28))  # + 1/8
    x2 = _srdhm(x, x)
    x3 = _srdhm(x2, x)
    x4_over_4 = _rounding_divide_by_pot(_srdhm(x2, x2), 2)
    poly = _rounding_divide_by_pot(_wrap32(_srdhm(_wrap32(x4_over_4 + x3), 715827883) + x2), 1)
    result = _wrap32(1895147668 + _srdhm(1895147668, _wrap32(x + poly)))  # exp(-1/8) (1 + x + poly)
    remainder = _wrap32(a_mod_quarter_minus_one_quarter - a)
    multipliers = (1672461947, 1302514674, 790015084, 290630308, 39332535, 720401, 242)
    for exponent in range(-2, 5):
        if integer_bits > exponent and remainder & (1 << (fractional_bits + exponent)):
            result = _srdhm(result, multipliers[exponent + 2])
    if integer_bits > 5 and a < -(1 << (36 - integer_bits)):
        result = 0
    return INT32_MAX if a == 0 else result


def _reciprocal_one_plus_x_q2(a: int) -> int:
    """The Newton-Raphson 1 / (1 + a) of gemmlowp's one_over_one_plus_x_for_x_in_0_1, Q0.31 in, Q2.29 out."""
    total = a + INT32_MAX
    half_denominator = (total + 1) // 2 if total >= 0 else -((-total + 1) // 2)  # RoundingHalfSum
    x = _wrap32(1515870810 + _srdhm(half_denominator, -1010580540))  # 48/17 - 32/17 d
    for _ in range(3):
        one_minus = _wrap32((1 << 29) - _srdhm(half_denominator, x))
        x = _wrap32(x + _saturating_shl(_srdhm(x, one_minus), 2))
    return x


def sigmoid_table_int8(input_scale: float, input_zero_point: int, tanh: bool) -> list[int]:
    """reference_integer_ops::Logistic (output scale 1/256, zero point -128) or Tanh (1/128, 0) of every int8
    input, gemmlowp's fixed point to the bit, indexed by the input's byte: the kernel is then one lookup."""
    params = logistic_params_int8(input_scale)
    radius, multiplier, shift = params["input_range_radius"], params["input_multiplier"], params["input_left_shift"]
    table = [0] * 256
    for value in range(INT8_MIN, INT8_MAX + 1):
        centred = value - input_zero_point
        if centred <= -radius:
            out = INT8_MIN
        elif centred >= radius:
            out = INT8_MAX
        else:
            a = (
                _rounding_divide_by_pot(_srdhm(_wrap32(centred << shift), multiplier), 0)
                if shift >= 0
                else _rounding_divide_by_pot(_srdhm(centred, multiplier), -shift)
            )
            if tanh:  # -tanh(n) for n = -|a| is (1 - exp(2n)) / (1 + exp(2n)), the sign put back after
                result = 0
                if a:
                    negative = a if a < 0 else _wrap32(-a)
                    t = _saturating_shl(
                        _wrap32(_reciprocal_one_plus_x_q2(_exp_on_negative_values(negative, 5)) - (1 << 29)), 2
                    )
                    result = _wrap32(-t) if a < 0 else t
                out = _rounding_divide_by_pot(result, 24)
            else:  # 1 / (1 + exp(-|a|)), mirrored for negative a
                result = 1 << 30
                if a:
                    positive = _saturating_shl(
                        _reciprocal_one_plus_x_q2(_exp_on_negative_values(_wrap32(-abs(a)), 4)), 1
                    )
                    result = positive if a > 0 else _wrap32(INT32_MAX - positive)
                out = _rounding_divide_by_pot(result, 23) + INT8_MIN
            out = min(INT8_MAX, max(INT8_MIN, out))
        table[value & 0xFF] = out
    return table


def add_sub_params(scale1: float, scale2: float, output_scale: float, left_shift: int) -> AddSubRescale:
    """CalculateOpDataAdd and CalculateOpDataSub (left shift 20 for int8, 15 for int16): both inputs rescaled to
    twice the larger scale, in double. (The TFLM tree read divides the float32 scales in float32
    first; the host TFLM the outputs are checked against computes in double, which differs in the last bit.)"""
    twice_max_input_scale = 2 * float(max(np.float32(scale1), np.float32(scale2)))
    m1, s1 = quantize_multiplier(float(scale1) / twice_max_input_scale)
    m2, s2 = quantize_multiplier(float(scale2) / twice_max_input_scale)
    mo, so = quantize_multiplier(twice_max_input_scale / ((1 << left_shift) * float(output_scale)))
    return {
        "left_shift": left_shift,
        "input1_multiplier": m1,
        "input1_shift": s1,
        "input2_multiplier": m2,
        "input2_shift": s2,
        "output_multiplier": mo,
        "output_shift": so,
    }


def squared_difference_params(scale1: float, scale2: float, output_scale: float, left_shift: int) -> AddSubRescale:
    """squared_difference.cc's PrepareQuantized: in double, the output multiplier over the squared scale."""
    twice_max_input_scale = 2.0 * float(max(np.float32(scale1), np.float32(scale2)))
    m1, s1 = quantize_multiplier(float(scale1) / twice_max_input_scale)
    m2, s2 = quantize_multiplier(float(scale2) / twice_max_input_scale)
    mo, so = quantize_multiplier(
        twice_max_input_scale
        * twice_max_input_scale
        / float(np.float32(1 << (2 * left_shift)) * np.float32(output_scale))
    )
    return {
        "left_shift": left_shift,
        "input1_multiplier": m1,
        "input1_shift": s1,
        "input2_multiplier": m2,
        "input2_shift": s2,
        "output_multiplier": mo,
        "output_shift": so,
    }


def add_n_params_int8(input_scale: float, output_scale: float) -> AddNRescale:
    """add_n.cc's CalculateOpData for int8: every input shares one scale; left shift 20, in double."""
    left_shift = 20
    twice_max_input_scale = 2 * float(input_scale)
    m, s = quantize_multiplier(float(input_scale) / twice_max_input_scale)
    mo, so = quantize_multiplier(twice_max_input_scale / ((1 << left_shift) * float(output_scale)))
    return {
        "left_shift": left_shift,
        "input1_multiplier": m,
        "input1_shift": s,
        "output_multiplier": mo,
        "output_shift": so,
    }


def rsqrt_params(input_scale: float, output_scale: float) -> Rescale:
    """SetRsqrtOutputMultiplier: 1 / (sqrt(input scale) x output scale), the product in float32 (sqrt is exact
    rounding in both), the reciprocal in double."""
    f32 = np.float32
    m, s = quantize_multiplier(1.0 / float(np.sqrt(f32(input_scale)) * f32(output_scale)))
    return {"multiplier": m, "shift": s}


def comparison_params_int8(scale1: float, scale2: float) -> ComparisonRescale:
    """ComparisonsPrepare for int8: inputs shifted left by 8 and multiplied by their own scales."""
    m1, s1 = quantize_multiplier(float(scale1))
    m2, s2 = quantize_multiplier(float(scale2))
    return {"left_shift": 8, "input1_multiplier": m1, "input1_shift": s1, "input2_multiplier": m2, "input2_shift": s2}


def abs_params(input_scale: float, output_scale: float) -> AbsRescale:
    """ABS's Prepare: a rescale only when the float32 scales differ (input / output in float32)."""
    rescale = bool(np.float32(input_scale) != np.float32(output_scale))
    m, s = quantize_multiplier(float(np.float32(input_scale) / np.float32(output_scale))) if rescale else (0, 0)
    return {"rescale": int(rescale), "multiplier": m, "shift": s}


def sigmoid_params_int16(input_scale: float, output_scale: float, tanh: bool) -> Rescale:
    """The int16 LOGISTIC's and TANH's Prepare: the input rescaled to the sigmoid table's 1/(3*4096) steps, a
    multiplier of 0 for a power-of-two input scale the kernel shifts itself (LOGISTIC: shift 0; TANH: 0 or 1).
    The output scale must be 2^-15."""
    if checked_log2(output_scale) != (-15, True):
        raise ValueError(f"int16 {'tanh' if tanh else 'logistic'} output scale must be 2^-15, not {output_scale}")
    power, exact = checked_log2(input_scale)
    shift = 12 + power
    if exact and shift in ((0, 1) if tanh else (0,)):
        return {"multiplier": 0, "shift": shift}
    multiplier, shift = float(input_scale) * 4096.0 * 3.0, 0
    while multiplier <= 32767.0 / 2.0 and shift <= 30:
        shift += 1
        multiplier *= 2.0
    return {"multiplier": int(multiplier), "shift": shift}


def log_softmax_params_int8(input_scale: float) -> LogSoftmaxScaling:
    """LOG_SOFTMAX's Prepare (PreprocessLogSoftmaxScalingExp, beta 1, 5 integer bits): SOFTMAX's input scaling
    and its inverse for the log of the sum."""
    params = softmax_params_int8(1.0, input_scale)
    divisor = (1 << (31 - params["input_left_shift"])) / float(params["input_multiplier"])
    multiplier, shift = quantize_multiplier(divisor)
    if shift > 0:
        raise ValueError(f"reverse scaling divisor {divisor} is not below one")
    return {**params, "reverse_scaling_divisor": multiplier, "reverse_scaling_shift": shift}


def div_params_int8(scale1: float, scale2: float, output_scale: float) -> OutputRescale:
    """DIV's CalculateOpDataDiv for int8: scale1 / (scale2 * output_scale) computed in float32, then quantized."""
    f32 = np.float32
    m, s = quantize_multiplier(float(f32(scale1) / (f32(scale2) * f32(output_scale))))
    return {"output_multiplier": m, "output_shift": s}
