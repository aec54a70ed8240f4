/* SOFTMAX and LOGISTIC: the int8 kernels use gemmlowp's fixed-point exp and reciprocal exactly as
 * reference/softmax.h and reference/integer_ops/logistic.h do; the float kernels follow the float references. */
#include <float.h>
#include <math.h>
#include <stddef.h>

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

int32_t lt_one_over_one_plus_x_for_x_in_0_1(int32_t a) {
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
    return lt_saturating_shl(x, 1); /* ExactMulByPot<-1> then Rescale<0> */
}

static int lt_count_leading_zeros(uint32_t x) {
    int n = 0;
    if (x == 0) return 32;
    while (!(x & 0x80000000u)) {
        x <<= 1;
        ++n;
    }
    return n;
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

void lt_logistic_s8(const int8_t *input, int8_t *output, int32_t count, int32_t input_zero_point,
                    int32_t input_range_radius, int32_t input_multiplier, int32_t input_left_shift) {
    enum { kInputIntegerBits = 4, kOutputIntegerBits = 8 };
    for (int32_t i = 0; i < count; ++i) {
        const int32_t in = input[i] - input_zero_point;
        if (in <= -input_range_radius) {
            output[i] = INT8_MIN;
        } else if (in >= input_range_radius) {
            output[i] = INT8_MAX;
        } else {
            const int32_t a = lt_multiply_by_quantized_multiplier(in, input_multiplier, input_left_shift);
            /* gemmlowp::logistic on Q4.27: 1 / (1 + exp(-|a|)), mirrored for negative a */
            int32_t result;
            if (a == 0) {
                result = 1 << 30;
            } else {
                const int32_t abs_a = a > 0 ? a : lt_wrap_sub(0, a);
                const int32_t positive = lt_one_over_one_plus_x_for_x_in_0_1(
                    lt_exp_on_negative_values(lt_wrap_sub(0, abs_a), kInputIntegerBits));
                result = a > 0 ? positive : lt_wrap_sub(INT32_MAX, positive);
            }
            const int32_t q = lt_rounding_divide_by_pot(result, 31 - kOutputIntegerBits) + INT8_MIN;
            output[i] = (int8_t)lt_clamp(q, INT8_MIN, INT8_MAX);
        }
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
