/* SOFTMAX, LOGISTIC, TANH, RELU, RELU6, LEAKY_RELU, PRELU, HARD_SWISH and ELU. The int8 SOFTMAX uses gemmlowp's
 * fixed-point exp and reciprocal exactly as reference/softmax.h does (int8 LOGISTIC, TANH and ELU are a 256-entry
 * table lowtide computes offline, lt_lookup_s8); the others mirror micro/kernels/activations.h,
 * reference/leaky_relu.h, prelu.h and hard_swish.h; L2_NORMALIZATION (reference/integer_ops/l2normalization.h,
 * l2normalization.h) and LOG_SOFTMAX (float, reference/log_softmax.h); float kernels follow the float
 * references. */
#include <float.h>
#include <math.h>
#include <stddef.h>

#include "lt_broadcast.h"
#include "lt_fixedpoint.h"
#include "lt_runtime.h"

/* exp(a) for a in [-1/4, 0), Q0.31 in and out: Taylor expansion around -1/8. */
static int32_t lt_exp_on_interval_between_negative_one_quarter_and_0_excl(int32_t a) {
    const int32_t constant_term = 1895147668;     /* exp(-1/8) */
    const int32_t constant_1_over_3 = 715827883;  /* 1/3 */
    const int32_t x = lt_wrap_add(a, 1 << 28);    /* a + 1/8 */
    const int32_t x2 = lt_srdhm(x, x);
    const int32_t x3 = lt_srdhm(x2, x);
    const int32_t x4 = lt_srdhm(x2, x2);
    const int32_t x4_over_4 = lt_rounding_divide_by_pot(x4, 2);
    const int32_t poly = lt_rounding_divide_by_pot(
        lt_wrap_add(lt_srdhm(lt_wrap_add(x4_over_4, x3), constant_1_over_3), x2), 1);
    return lt_wrap_add(constant_term, lt_srdhm(constant_term, lt_wrap_add(x, poly)));
}

int32_t lt_exp_on_negative_values(int32_t a, int integer_bits) {
    static const int32_t multipliers[7] = {1672461947, 1302514674, 790015084, 290630308, 39332535, 720401, 242};
    const int fractional_bits = 31 - integer_bits;
    const int32_t one_quarter = (int32_t)1 << (fractional_bits - 2);
    const int32_t mask = one_quarter - 1;
    const int32_t a_mod_quarter_minus_one_quarter = lt_wrap_sub(a & mask, one_quarter);
    int32_t result = lt_exp_on_interval_between_negative_one_quarter_and_0_excl(
        lt_saturating_shl(a_mod_quarter_minus_one_quarter, integer_bits));
    const int32_t remainder = lt_wrap_sub(a_mod_quarter_minus_one_quarter, a);
    /* barrel shifter over exponents -2 .. +4: multiply by exp(-2^exponent) where that bit of the remainder is set */
    for (int exponent = -2; exponent <= 4; ++exponent) {
        if (integer_bits > exponent) {
            const int shift_amount = fractional_bits + exponent;
            if (remainder & (int32_t)(1u << shift_amount)) result = lt_srdhm(result, multipliers[exponent + 2]);
        }
    }
    if (integer_bits > 5) {
        const int32_t clamp = -((int32_t)1 << (36 - integer_bits)); /* -32.0 */
        if (a < clamp) result = 0;
    }
    if (a == 0) result = INT32_MAX;
    return result;
}

/* The Newton-Raphson division of gemmlowp's one_over_one_plus_x_for_x_in_0_1: 1 / (1 + a) for a in [0, 1), Q0.31 in, Q2.29 out. */
static int32_t lt_reciprocal_one_plus_x_q2(int32_t a) {
    /* half_denominator = RoundingHalfSum(a, One) in Q0.31 */
    const int64_t sum = (int64_t)a + (int64_t)INT32_MAX;
    const int32_t half_denominator = (int32_t)((sum + (sum >= 0 ? 1 : -1)) / 2);
    const int32_t constant_48_over_17 = 1515870810;       /* Q2.29 */
    const int32_t constant_neg_32_over_17 = -1010580540;  /* Q2.29 */
    int32_t x = lt_wrap_add(constant_48_over_17, lt_srdhm(half_denominator, constant_neg_32_over_17));
    for (int i = 0; i < 3; ++i) {
        const int32_t half_denominator_times_x = lt_srdhm(half_denominator, x);                /* Q2.29 */
        const int32_t one_minus = lt_wrap_sub((int32_t)1 << 29, half_denominator_times_x);     /* Q2.29 */
        x = lt_wrap_add(x, lt_saturating_shl(lt_srdhm(x, one_minus), 2));                    /* Q4 -> Q2 */
    }
    return x;
}

int32_t lt_one_over_one_plus_x_for_x_in_0_1(int32_t a) {
    return lt_saturating_shl(lt_reciprocal_one_plus_x_q2(a), 1); /* ExactMulByPot<-1> then Rescale<0> */
}

/* reference_ops::Softmax<int8_t, OutputT>: exactly one of output8 / output16 is given; the output type's width
 * sets the final shift and its minimum is the zero point. */
static void lt_softmax_s8_any(const lt_softmax_params *p, const int8_t *input, int8_t *output8, int16_t *output16) {
    const int output_bits = output8 ? 8 : 16;
    const int32_t output_min = output8 ? INT8_MIN : INT16_MIN;
    const int32_t output_max = output8 ? INT8_MAX : INT16_MAX;
    enum { kScaledDiffIntegerBits = 5, kAccumulationIntegerBits = 12 };
    for (int32_t i = 0; i < p->outer; ++i) {
        const int8_t *in = input + i * p->depth;
        int32_t max_in_row = INT8_MIN;
        for (int32_t c = 0; c < p->depth; ++c) max_in_row = in[c] > max_in_row ? in[c] : max_in_row;

        int32_t sum_of_exps = 0; /* Q12.19 */
        for (int32_t c = 0; c < p->depth; ++c) {
            const int32_t diff = in[c] - max_in_row;
            if (diff >= p->diff_min) {
                const int32_t rescaled = lt_srdhm(lt_shl(diff, p->input_left_shift), p->input_multiplier);
                const int32_t e = lt_exp_on_negative_values(rescaled, kScaledDiffIntegerBits);
                sum_of_exps = lt_wrap_add(sum_of_exps, lt_rounding_divide_by_pot(e, kAccumulationIntegerBits));
            }
        }

        /* GetReciprocal */
        const int headroom_plus_one = lt_count_leading_zeros((uint32_t)sum_of_exps);
        const int num_bits_over_unit = kAccumulationIntegerBits - headroom_plus_one;
        const int32_t shifted_sum_minus_one =
            (int32_t)(((uint32_t)sum_of_exps << headroom_plus_one) - ((uint32_t)1 << 31));
        const int32_t shifted_scale = lt_one_over_one_plus_x_for_x_in_0_1(shifted_sum_minus_one);

        for (int32_t c = 0; c < p->depth; ++c) {
            const int32_t diff = in[c] - max_in_row;
            int32_t value = output_min;
            if (diff >= p->diff_min) {
                const int32_t rescaled = lt_srdhm(lt_shl(diff, p->input_left_shift), p->input_multiplier);
                const int32_t e = lt_exp_on_negative_values(rescaled, kScaledDiffIntegerBits);
                const int32_t unsat =
                    lt_rounding_divide_by_pot(lt_srdhm(shifted_scale, e), num_bits_over_unit + 31 - output_bits);
                value = lt_clamp(unsat + output_min, output_min, output_max);
            }
            if (output8) output8[i * p->depth + c] = (int8_t)value;
            else output16[i * p->depth + c] = (int16_t)value;
        }
    }
}

void lt_softmax_s8(const lt_softmax_params *p, const int8_t *input, int8_t *output) {
    lt_softmax_s8_any(p, input, output, NULL);
}

void lt_softmax_s8_s16(const lt_softmax_params *p, const int8_t *input, int16_t *output) {
    lt_softmax_s8_any(p, input, NULL, output);
}

void lt_softmax_f32(const lt_softmax_params *p, const float *input, float *output) {
    for (int32_t i = 0; i < p->outer; ++i) {
        const float *in = input + i * p->depth;
        float *out = output + i * p->depth;
        float max = -FLT_MAX;
        for (int32_t c = 0; c < p->depth; ++c) max = in[c] > max ? in[c] : max;
        float sum = 0.0f;
        for (int32_t c = 0; c < p->depth; ++c) {
            out[c] = expf((in[c] - max) * p->beta);
            sum += out[c];
        }
        for (int32_t c = 0; c < p->depth; ++c) out[c] = out[c] / sum;
    }
}

void lt_logistic_f32(const float *input, float *output, int32_t count) {
    const float cutoff_upper = 16.619047164916992188f;
    const float cutoff_lower = -9.0f;
    for (int32_t i = 0; i < count; ++i) {
        const float v = input[i];
        if (v > cutoff_upper) {
            output[i] = 1.0f;
        } else if (v < cutoff_lower) {
            output[i] = expf(v);
        } else {
            output[i] = 1.0f / (1.0f + expf(-v));
        }
    }
}

void lt_tanh_f32(const float *input, float *output, int32_t count) {
    for (int32_t i = 0; i < count; ++i) output[i] = tanhf(input[i]);
}

/* common.h's sigmoid_table_uint16: sigmoid(i / 24) in Q0.16, the table TFLM's int16 LOGISTIC and TANH
 * interpolate in (tanh(x) = 2 sigmoid(2x) - 1). */
static const uint16_t lt_sigmoid_table_uint16[256] = {
    32768, 33451, 34133, 34813, 35493, 36169, 36843, 37513, 38180, 38841, 39498, 40149, 40794, 41432, 42064, 42688,
    43304, 43912, 44511, 45102, 45683, 46255, 46817, 47369, 47911, 48443, 48964, 49475, 49975, 50464, 50942, 51409,
    51865, 52311, 52745, 53169, 53581, 53983, 54374, 54755, 55125, 55485, 55834, 56174, 56503, 56823, 57133, 57433,
    57724, 58007, 58280, 58544, 58800, 59048, 59288, 59519, 59743, 59959, 60168, 60370, 60565, 60753, 60935, 61110,
    61279, 61441, 61599, 61750, 61896, 62036, 62172, 62302, 62428, 62549, 62666, 62778, 62886, 62990, 63090, 63186,
    63279, 63368, 63454, 63536, 63615, 63691, 63765, 63835, 63903, 63968, 64030, 64090, 64148, 64204, 64257, 64308,
    64357, 64405, 64450, 64494, 64536, 64576, 64614, 64652, 64687, 64721, 64754, 64786, 64816, 64845, 64873, 64900,
    64926, 64950, 64974, 64997, 65019, 65039, 65060, 65079, 65097, 65115, 65132, 65149, 65164, 65179, 65194, 65208,
    65221, 65234, 65246, 65258, 65269, 65280, 65291, 65301, 65310, 65319, 65328, 65337, 65345, 65352, 65360, 65367,
    65374, 65381, 65387, 65393, 65399, 65404, 65410, 65415, 65420, 65425, 65429, 65433, 65438, 65442, 65445, 65449,
    65453, 65456, 65459, 65462, 65465, 65468, 65471, 65474, 65476, 65479, 65481, 65483, 65485, 65488, 65489, 65491,
    65493, 65495, 65497, 65498, 65500, 65501, 65503, 65504, 65505, 65507, 65508, 65509, 65510, 65511, 65512, 65513,
    65514, 65515, 65516, 65517, 65517, 65518, 65519, 65520, 65520, 65521, 65522, 65522, 65523, 65523, 65524, 65524,
    65525, 65525, 65526, 65526, 65526, 65527, 65527, 65528, 65528, 65528, 65529, 65529, 65529, 65529, 65530, 65530,
    65530, 65530, 65531, 65531, 65531, 65531, 65531, 65532, 65532, 65532, 65532, 65532, 65532, 65533, 65533, 65533,
    65533, 65533, 65533, 65533, 65533, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65535};

/* The int16 input rescaled as reference_integer_ops::Logistic / Tanh do: a multiplier of 0 is the power-of-two
 * case, 3 << shift with no shift after. Arithmetic right shift of a negative value, as TFLM's targets do. */
static inline int32_t lt_sigmoid_input_s16(const lt_activation_params *p, int16_t value) {
    const int32_t multiplier = p->multiplier == 0 ? 3 << p->shift : p->multiplier;
    const int32_t shift = p->multiplier == 0 ? 0 : p->shift;
    const int32_t round = shift > 0 ? 1 << (shift - 1) : 0;
    return (value * multiplier + round) >> shift;
}

/* The table interpolated at |x| with `fraction_bits` bits below the index; 0 past its end. */
static inline uint32_t lt_sigmoid_lookup(uint32_t abs_input, int fraction_bits, uint32_t saturated) {
    const uint32_t index = abs_input >> fraction_bits;
    if (index >= 255) return saturated;
    const uint32_t a = lt_sigmoid_table_uint16[index], b = lt_sigmoid_table_uint16[index + 1];
    return (a << fraction_bits) + (abs_input & ((1u << fraction_bits) - 1)) * (b - a);
}

void lt_logistic_s16(const lt_activation_params *p, const int16_t *input, int16_t *output) {
    for (int32_t i = 0; i < p->count; ++i) {
        const int32_t x = lt_sigmoid_input_s16(p, input[i]);
        uint32_t result = lt_sigmoid_lookup((uint32_t)(x < 0 ? -x : x), 9, 0x7FFFu << 10);
        result = x >= 0 ? result + (1u << 9) : (1u << 25) - result + (1u << 9) - 1;
        output[i] = (int16_t)(result >> 10);
    }
}

void lt_tanh_s16(const lt_activation_params *p, const int16_t *input, int16_t *output) {
    for (int32_t i = 0; i < p->count; ++i) {
        const int32_t x = lt_sigmoid_input_s16(p, input[i]);
        const int32_t looked_up = (int32_t)lt_sigmoid_lookup((uint32_t)(x < 0 ? -x : x), 8, 0xFFFFu << 8);
        const int32_t result = x >= 0 ? looked_up - (1 << 23) + (1 << 7) : -looked_up + (1 << 23) + (1 << 7) - 1;
        output[i] = (int16_t)(result >> 8);
    }
}

/* ReluQuantized: requantize, then clamp. */
#define LT_RELU_QUANTIZED(p, input, output)                                                                  \
    for (int32_t i = 0; i < (p)->count; ++i) {                                                               \
        const int32_t v = (p)->output_zero_point + lt_multiply_by_quantized_multiplier(                     \
                                                       (input)[i] - (p)->input_zero_point, (p)->multiplier, \
                                                       (p)->shift);                                          \
        (output)[i] = lt_clamp(v, (p)->act_min, (p)->act_max);                                               \
    }

void lt_relu_s8(const lt_activation_params *p, const int8_t *input, int8_t *output) {
    LT_RELU_QUANTIZED(p, input, output)
}

void lt_relu_s16(const lt_activation_params *p, const int16_t *input, int16_t *output) {
    LT_RELU_QUANTIZED(p, input, output)
}

/* Relu6Quantized: `val > upper ? upper : val < lower ? lower : val` on the input's own values. */
#define LT_RELU6_QUANTIZED(p, input, output)                                                               \
    for (int32_t i = 0; i < (p)->count; ++i) {                                                             \
        const int32_t v = (input)[i];                                                                      \
        (output)[i] = v > (p)->act_max ? (p)->act_max : (v < (p)->act_min ? (p)->act_min : v);             \
    }

void lt_relu6_s8(const lt_activation_params *p, const int8_t *input, int8_t *output) {
    LT_RELU6_QUANTIZED(p, input, output)
}

void lt_relu6_s16(const lt_activation_params *p, const int16_t *input, int16_t *output) {
    LT_RELU6_QUANTIZED(p, input, output)
}

void lt_relu_f32(const float *input, float *output, int32_t count) {
    for (int32_t i = 0; i < count; ++i) output[i] = input[i] < 0.0f ? 0.0f : input[i];
}

void lt_relu6_f32(const float *input, float *output, int32_t count) {
    for (int32_t i = 0; i < count; ++i) {
        const float v = input[i];
        output[i] = v > 6.0f ? 6.0f : (v < 0.0f ? 0.0f : v);
    }
}

/* QuantizeLeakyRelu: a negative alpha multiplier is applied as its magnitude and the product negated. */
static int32_t lt_leaky_relu_value(const lt_activation_params *p, int32_t value, int32_t min, int32_t max) {
    const int32_t in = value - p->input_zero_point;
    int32_t out = p->output_zero_point;
    if (in >= 0) {
        out += lt_multiply_by_quantized_multiplier(in, p->multiplier, p->shift);
    } else {
        const int negative_alpha = p->alpha_multiplier < 0;
        const int32_t scaled = lt_multiply_by_quantized_multiplier(
            in, negative_alpha ? -p->alpha_multiplier : p->alpha_multiplier, p->alpha_shift);
        out += negative_alpha ? -scaled : scaled;
    }
    return lt_clamp(out, min, max);
}

void lt_leaky_relu_s8(const lt_activation_params *p, const int8_t *input, int8_t *output) {
    for (int32_t i = 0; i < p->count; ++i) output[i] = (int8_t)lt_leaky_relu_value(p, input[i], INT8_MIN, INT8_MAX);
}

void lt_leaky_relu_s16(const lt_activation_params *p, const int16_t *input, int16_t *output) {
    for (int32_t i = 0; i < p->count; ++i)
        output[i] = (int16_t)lt_leaky_relu_value(p, input[i], INT16_MIN, INT16_MAX);
}

void lt_leaky_relu_f32(const lt_activation_params *p, const float *input, float *output) {
    for (int32_t i = 0; i < p->count; ++i) output[i] = input[i] > 0 ? input[i] : input[i] * p->alpha;
}

/* BroadcastPrelu4DSlow: identity rescale where the input is >= 0, else input x alpha rescaled. */
static int32_t lt_prelu_value(const lt_binary_params *p, int32_t input, int32_t alpha, int32_t min, int32_t max) {
    const int32_t in = p->input1_offset + input;
    int32_t out;
    if (in >= 0) {
        out = lt_multiply_by_quantized_multiplier(in, p->input1_multiplier, p->input1_shift);
    } else {
        out = lt_multiply_by_quantized_multiplier(in * (p->input2_offset + alpha), p->input2_multiplier,
                                                  p->input2_shift);
    }
    return lt_clamp(out + p->output_offset, min, max);
}

void lt_prelu_s8(const lt_binary_params *p, const int8_t *input, const int8_t *alpha, int8_t *output) {
    LT_BINARY_LOOP(output[o] = (int8_t)lt_prelu_value(p, input[i1], alpha[i2], INT8_MIN, INT8_MAX));
}

void lt_prelu_s16(const lt_binary_params *p, const int16_t *input, const int8_t *alpha, int16_t *output) {
    LT_BINARY_LOOP(output[o] = (int16_t)lt_prelu_value(p, input[i1], alpha[i2], INT16_MIN, INT16_MAX));
}

void lt_prelu_f32(const lt_binary_params *p, const float *input, const float *alpha, float *output) {
    LT_BINARY_LOOP(output[o] = input[i1] >= 0.0f ? input[i1] : input[i1] * alpha[i2]);
}

/* gemmlowp SaturatingRoundingDoublingHighMul<int16_t>. */
static int16_t lt_srdhm16(int16_t a, int16_t b) {
    if (a == b && a == INT16_MIN) return INT16_MAX;
    const int32_t ab = (int32_t)a * (int32_t)b;
    const int32_t nudge = ab >= 0 ? (1 << 14) : (1 - (1 << 14));
    return (int16_t)((ab + nudge) / (1 << 15));
}

/* hard_swish.h's SaturatingLeftShift and (non-rounding) SaturatingDoublingHighMul on int16. */
static int16_t lt_saturating_shl16(int16_t value, int amount) {
    return (int16_t)lt_clamp((int32_t)value * (1 << amount), INT16_MIN, INT16_MAX);
}

static int16_t lt_sdhm16(int16_t a, int16_t b) {
    if (a == b && a == INT16_MIN) return INT16_MAX;
    return (int16_t)(((int32_t)a * (int32_t)b) / (1 << 15));
}

void lt_hard_swish_s8(const lt_hard_swish_params *p, const int8_t *input, int8_t *output) {
    for (int32_t i = 0; i < p->count; ++i) {
        const int16_t in = (int16_t)(input[i] - p->input_zero_point);
        const int16_t in_hires = (int16_t)(in * (1 << 7)); /* |in| <= 255: fits */
        const int16_t in_preshift_output = lt_srdhm16(in_hires, (int16_t)p->output_multiplier);
        int16_t reluish = in_hires;
        if (p->reluish_exponent > 0) reluish = lt_saturating_shl16(reluish, p->reluish_exponent - 1);
        reluish = lt_srdhm16(reluish, (int16_t)p->reluish_multiplier);
        if (p->reluish_exponent > 0) reluish = lt_saturating_shl16(reluish, 1);
        /* gemmlowp's RoundingDivideByPOT on int16 equals the int32 one for exponents below 16 */
        if (p->reluish_exponent < 0) reluish = (int16_t)lt_rounding_divide_by_pot(reluish, -p->reluish_exponent);
        reluish = (int16_t)((reluish + (1 << 15)) >> 1); /* [-1, 1] in Q0.15 -> [0, 1] */
        const int16_t preshift_output = lt_sdhm16(reluish, in_preshift_output);
        /* int16 arithmetic as the reference's: the zero point is added before the clamp, wrapping */
        const int16_t out = (int16_t)(lt_rounding_divide_by_pot(preshift_output, -p->output_exponent) +
                                      p->output_zero_point);
        output[i] = (int8_t)lt_clamp(out, INT8_MIN, INT8_MAX);
    }
}

void lt_hard_swish_f32(const float *input, float *output, int32_t count) {
    for (int32_t i = 0; i < count; ++i) {
        const float in = input[i];
        const float relu6 = lt_clamp_f(in + 3.0f, 0.0f, 6.0f); /* min(6, max(0, in + 3)) */
        output[i] = in * relu6 / 6.0f;
    }
}

void lt_elu_f32(const float *input, float *output, int32_t count) {
    for (int32_t i = 0; i < count; ++i) output[i] = input[i] < 0.0f ? expm1f(input[i]) : input[i];
}

void lt_lookup_s8(const int8_t *table, const int8_t *input, int8_t *output, int32_t count) {
    for (int32_t i = 0; i < count; ++i) output[i] = table[(uint8_t)input[i]];
}

void lt_inv_sqrt_multiplier(int32_t input, int32_t *multiplier, int32_t *shift) {
    if (input <= 1) { /* 0 is taken as 1, as TFLM does */
        *multiplier = INT32_MAX;
        *shift = 0;
        return;
    }
    int32_t right_shift = 11;
    while (input >= (1 << 29)) {
        input /= 4;
        ++right_shift;
    }
    const int left_shift_bit_pairs = (lt_count_leading_zeros((uint32_t)input) - 1) / 2 - 1;
    right_shift -= left_shift_bit_pairs;
    input = lt_shl(input, 2 * left_shift_bit_pairs);
    /* Newton-Raphson for 1 / sqrt in Q3.28: x <- 1.5 x - (input / 2) x^3, from x = 1 */
    const int32_t half_input = lt_rounding_divide_by_pot(input >> 1, 1);
    const int32_t half_three = (1 << 28) + (1 << 27);
    int32_t x = 1 << 28;
    for (int i = 0; i < 5; ++i) {
        const int32_t x3 = lt_saturating_shl(lt_srdhm(lt_srdhm(x, x), x), 6);  /* Q9 -> Q3 */
        x = lt_saturating_shl(lt_wrap_sub(lt_srdhm(half_three, x), lt_srdhm(half_input, x3)), 3); /* Q6 -> Q3 */
    }
    x = lt_srdhm(x, 1518500250); /* times sqrt(2) / 2 in Q0.31 */
    if (right_shift < 0) {
        x = lt_shl(x, -right_shift);
        right_shift = 0;
    }
    *multiplier = x;
    *shift = -right_shift;
}

void lt_l2_normalization_s8(const lt_softmax_params *p, int32_t input_zero_point, const int8_t *input,
                            int8_t *output) {
    for (int32_t i = 0; i < p->outer; ++i) {
        const int8_t *in = input + i * p->depth;
        int32_t acc = 0;
        for (int32_t c = 0; c < p->depth; ++c) acc += (in[c] - input_zero_point) * (in[c] - input_zero_point);
        int32_t multiplier, shift;
        lt_inv_sqrt_multiplier(acc, &multiplier, &shift);
        for (int32_t c = 0; c < p->depth; ++c) {
            const int32_t q = lt_multiply_by_quantized_multiplier(in[c] - input_zero_point, multiplier, shift + 7);
            output[i * p->depth + c] = (int8_t)lt_clamp(q, INT8_MIN, INT8_MAX);
        }
    }
}

void lt_l2_normalization_f32(const lt_softmax_params *p, const float *input, float *output) {
    for (int32_t i = 0; i < p->outer; ++i) {
        const float *in = input + i * p->depth;
        float squared = 0;
        for (int32_t c = 0; c < p->depth; ++c) squared += in[c] * in[c];
        float norm = sqrtf(squared);
        norm = norm < 1e-6f ? 1e-6f : norm; /* std::max(norm, epsilon) */
        for (int32_t c = 0; c < p->depth; ++c) output[i * p->depth + c] = in[c] / norm;
    }
}

void lt_log_softmax_f32(const lt_softmax_params *p, const float *input, float *output) {
    for (int32_t i = 0; i < p->outer; ++i) {
        const float *in = input + i * p->depth;
        float max = -FLT_MAX;
        for (int32_t c = 0; c < p->depth; ++c) max = max < in[c] ? in[c] : max;
        float sum = 0.f;
        for (int32_t c = 0; c < p->depth; ++c) sum += expf(in[c] - max);
        const float log_sum = logf(sum);
        for (int32_t c = 0; c < p->depth; ++c) output[i * p->depth + c] = in[c] - max - log_sum;
    }
}

/* gemmlowp Rescale / common.h SaturatingRoundingMultiplyByPOTParam: x times 2^exponent, saturating up, rounding
 * down. */
static int32_t lt_multiply_by_pot(int32_t x, int exponent) {
    if (exponent > 0) return lt_saturating_shl(x, exponent);
    return exponent < 0 ? lt_rounding_divide_by_pot(x, -exponent) : x;
}

static int32_t lt_saturating_add(int32_t a, int32_t b) {
    const int64_t sum = (int64_t)a + b;
    return sum > INT32_MAX ? INT32_MAX : (sum < INT32_MIN ? INT32_MIN : (int32_t)sum);
}

/* common.h log_x_for_x_greater_than_or_equal_to_1_impl<5, 12>: log of a Q12.19 value >= 1, Q5.26 result,
 * accumulated in Q6.25. */
static int32_t lt_log_q12_to_q5(int32_t input) {
    enum { kInputIntegerBits = 12, kOutputIntegerBits = 5, kAccumIntegerBits = 6 };
    const int32_t log_2 = 1488522236, sqrt_sqrt_half = 1805811301, sqrt_half = 1518500250;
    const int32_t alpha_n = 117049297, alpha_d = 127690142, alpha_i = 1057819769, alpha_f = 638450708;
    const int32_t shifted_quarter = lt_multiply_by_pot(536870912, -kAccumIntegerBits); /* 1/4 in Q6.25 */
    const int z_a_headroom_plus_1 = lt_count_leading_zeros((uint32_t)input);
    const int32_t r_a_tmp = lt_multiply_by_pot(input, z_a_headroom_plus_1 - 1);
    const int32_t r_a_raw = lt_multiply_by_pot(lt_srdhm(r_a_tmp, sqrt_half), 1);
    const int32_t z_a_pow_2_adj = lt_saturating_add(
        lt_multiply_by_pot(kInputIntegerBits - z_a_headroom_plus_1, 31 - kAccumIntegerBits), shifted_quarter);
    const int32_t z_b = lt_srdhm(input, sqrt_half);
    const int z_b_headroom = lt_count_leading_zeros((uint32_t)z_b) - 1;
    const int32_t r_b_raw = lt_multiply_by_pot(input, z_b_headroom);
    const int32_t z_b_pow_2_adj = lt_saturating_add(
        lt_multiply_by_pot(kInputIntegerBits - z_b_headroom, 31 - kAccumIntegerBits), -shifted_quarter);
    const int32_t r = r_a_raw < r_b_raw ? r_a_raw : r_b_raw;
    const int32_t z_pow_2_adj = z_a_pow_2_adj > z_b_pow_2_adj ? z_a_pow_2_adj : z_b_pow_2_adj;
    const int64_t half_sum = (int64_t)r + sqrt_sqrt_half; /* RoundingHalfSum */
    const int32_t p = (int32_t)((half_sum + (half_sum >= 0 ? 1 : -1)) / 2);
    int32_t q = lt_wrap_sub(r, sqrt_sqrt_half);
    q = lt_wrap_add(q, q);
    const int32_t common_sq = lt_srdhm(q, q);
    const int32_t num = lt_wrap_add(lt_srdhm(q, r), lt_srdhm(lt_srdhm(q, common_sq), alpha_n));
    const int32_t denom_minus_one_0 = lt_wrap_add(
        lt_srdhm(p, lt_wrap_add(lt_wrap_add(alpha_i, q), lt_srdhm(alpha_d, common_sq))), lt_srdhm(alpha_f, q));
    const int32_t recip_denom = lt_one_over_one_plus_x_for_x_in_0_1(denom_minus_one_0);
    const int32_t num_scaled = lt_multiply_by_pot(num, -kAccumIntegerBits);
    return lt_multiply_by_pot(lt_wrap_add(lt_srdhm(z_pow_2_adj, log_2), lt_srdhm(num_scaled, recip_denom)),
                              kAccumIntegerBits - kOutputIntegerBits);
}

/* reference_ops::LogSoftmaxQuantized<int8_t>: the input difference in Q5.26, exps summed in Q12.19, the log of
 * the sum subtracted; output scale 16/256 and zero point 127. */
void lt_log_softmax_s8(const lt_softmax_params *p, int32_t reverse_scaling_divisor, int32_t reverse_scaling_shift,
                       const int8_t *input, int8_t *output) {
    enum { kInputIntegerBits = 5, kAccumulationIntegerBits = 12, kOutputIntegerBits = 4 };
    for (int32_t i = 0; i < p->outer; ++i) {
        const int8_t *in = input + i * p->depth;
        int8_t *out = output + i * p->depth;
        int32_t max = INT8_MIN;
        for (int32_t c = 0; c < p->depth; ++c) max = in[c] > max ? in[c] : max;
        int32_t sum_of_exps = 0;
        for (int32_t c = 0; c < p->depth; ++c) {
            const int32_t diff = in[c] - max;
            if (diff >= p->diff_min) {
                const int32_t diff_q5 = lt_multiply_by_quantized_multiplier(diff, p->input_multiplier,
                                                                            p->input_left_shift);
                sum_of_exps = lt_wrap_add(sum_of_exps, lt_multiply_by_pot(
                    lt_exp_on_negative_values(diff_q5, kInputIntegerBits), -kAccumulationIntegerBits));
            }
        }
        const int32_t log_sum_q5 = lt_log_q12_to_q5(sum_of_exps);
        const int32_t shifted_log_sum = lt_wrap_add(log_sum_q5, INT32_MIN);
        const int32_t scaled_back = lt_multiply_by_quantized_multiplier(shifted_log_sum, reverse_scaling_divisor,
                                                                        reverse_scaling_shift);
        const int32_t adjusted_diff_min = p->diff_min - 1 > scaled_back ? p->diff_min - 1 : scaled_back;
        for (int32_t c = 0; c < p->depth; ++c) {
            const int32_t diff = in[c] - max;
            if (diff > adjusted_diff_min) {
                const int32_t diff_q5 = lt_multiply_by_quantized_multiplier(diff, p->input_multiplier,
                                                                            p->input_left_shift);
                const int32_t q = lt_rounding_divide_by_pot(lt_wrap_sub(diff_q5, log_sum_q5),
                                                            31 - kInputIntegerBits - kOutputIntegerBits) + INT8_MAX;
                out[c] = (int8_t)lt_clamp(q, INT8_MIN, INT8_MAX);
            } else {
                out[c] = INT8_MIN;
            }
        }
    }
}

/* common.h's LUTLookup for int16: 512 base values and the slope to the next (an int16, as there), interpolated
 * over the low 7 bits. */
static int16_t lt_lut_lookup_s16(int16_t value, const int16_t *lut) {
    const int32_t index = 256 + (value >> 7);
    const int32_t offset = value & 0x7f;
    const int16_t slope = (int16_t)(lut[index + 1] - lut[index]);
    return (int16_t)(lut[index] + ((slope * offset + 64) >> 7));
}

void lt_softmax_s16(const lt_softmax_params *p, const int16_t *exp_lut, const int16_t *one_over_one_plus_x_lut,
                    const int16_t *input, int16_t *output) {
    for (int32_t i = 0; i < p->outer; ++i) {
        const int16_t *in = input + (int64_t)i * p->depth;
        int16_t *out = output + (int64_t)i * p->depth;
        int16_t max_in_row = INT16_MIN;
        for (int32_t c = 0; c < p->depth; ++c) max_in_row = in[c] > max_in_row ? in[c] : max_in_row;
        /* the exps are kept in the output row, as the reference does */
        int32_t sum_of_exps = 0;
        for (int32_t c = 0; c < p->depth; ++c) {
            const int32_t scaled = lt_multiply_by_quantized_multiplier(in[c] - max_in_row, p->input_multiplier,
                                                                       p->input_left_shift);
            out[c] = lt_lut_lookup_s16((int16_t)lt_clamp(scaled + 32767, INT16_MIN, INT16_MAX), exp_lut);
            sum_of_exps += out[c];
        }
        const int32_t headroom_plus_one = __builtin_clz((uint32_t)sum_of_exps);
        const int32_t shifted_sum =
            (int32_t)((((int64_t)sum_of_exps << (headroom_plus_one - 1)) + (1 << 13)) >> 14);
        const int16_t reciprocal = lt_lut_lookup_s16(
            (int16_t)lt_clamp(shifted_sum - ((1 << 15) + (1 << 16)), INT16_MIN, INT16_MAX), one_over_one_plus_x_lut);
        const int32_t right_shift = 31 - headroom_plus_one;
        for (int32_t c = 0; c < p->depth; ++c) {
            const int32_t result =
                (int32_t)(((int64_t)out[c] * reciprocal + ((int64_t)1 << (right_shift - 1))) >> right_shift);
            out[c] = (int16_t)lt_clamp(result, 0, INT16_MAX);
        }
    }
}
