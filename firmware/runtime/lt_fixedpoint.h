/* Fixed-point primitives with the exact rounding of gemmlowp and TFLite's quantization_util
 * (SaturatingRoundingDoublingHighMul, RoundingDivideByPOT, MultiplyByQuantizedMultiplier in its double-rounding
 * form, which is what TFLM builds without TFLITE_SINGLE_ROUNDING). Wrapping adds go through uint32_t because
 * gemmlowp's raw adds wrap and signed overflow is undefined in C. Internal to the runtime. */
#ifndef LT_FIXEDPOINT_H
#define LT_FIXEDPOINT_H

#include <stdint.h>

static inline int32_t lt_wrap_add(int32_t a, int32_t b) { return (int32_t)((uint32_t)a + (uint32_t)b); }
static inline int32_t lt_wrap_sub(int32_t a, int32_t b) { return (int32_t)((uint32_t)a - (uint32_t)b); }
static inline int32_t lt_shl(int32_t x, int n) { return (int32_t)((uint32_t)x << n); }

static inline int32_t lt_srdhm(int32_t a, int32_t b) {
    if (a == b && a == INT32_MIN) return INT32_MAX;
    int64_t ab = (int64_t)a * (int64_t)b;
    int32_t nudge = ab >= 0 ? (1 << 30) : (1 - (1 << 30));
    return (int32_t)((ab + nudge) / ((int64_t)1 << 31)); /* division truncates toward zero, as in gemmlowp */
}

static inline int32_t lt_rounding_divide_by_pot(int32_t x, int exponent) {
    int32_t mask = (int32_t)(((int64_t)1 << exponent) - 1);
    int32_t remainder = x & mask;
    int32_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
    return (x >> exponent) + (remainder > threshold ? 1 : 0);
}

static inline int32_t lt_multiply_by_quantized_multiplier(int32_t x, int32_t multiplier, int shift) {
    int left = shift > 0 ? shift : 0;
    int right = shift > 0 ? 0 : -shift;
    return lt_rounding_divide_by_pot(lt_srdhm(lt_shl(x, left), multiplier), right);
}

/* MultiplyByQuantizedMultiplier(int64_t x, ...) of TFLM's common.cc, for the 16-bit kernels' 64-bit sums: the
 * multiplier reduced to 16 bits, one rounding. */
static inline int32_t lt_multiply_by_quantized_multiplier_wide(int64_t x, int32_t multiplier, int shift) {
    const int32_t reduced = multiplier < 0x7FFF0000 ? (multiplier + (1 << 15)) >> 16 : 0x7FFF;
    const int total_shift = 15 - shift;
    return (int32_t)((x * reduced + ((int64_t)1 << (total_shift - 1))) >> total_shift);
}

/* gemmlowp SaturatingRoundingMultiplyByPOT<exponent> for exponent > 0 */
static inline int32_t lt_saturating_shl(int32_t x, int exponent) {
    int32_t threshold = (int32_t)((1u << (31 - exponent)) - 1u);
    if (x > threshold) return INT32_MAX;
    if (x < -threshold) return INT32_MIN;
    return lt_shl(x, exponent);
}

/* CountLeadingZeros (32 for 0) and CountLeadingSignBits (31 for 0), portable. */
static inline int lt_count_leading_zeros(uint32_t x) {
    int n = 0;
    if (x == 0) return 32;
    while (!(x & 0x80000000u)) {
        x <<= 1;
        ++n;
    }
    return n;
}

static inline int lt_count_leading_sign_bits(int32_t x) {
    return lt_count_leading_zeros(x < 0 ? ~(uint32_t)x : (uint32_t)x) - 1;
}

static inline int32_t lt_clamp(int32_t x, int32_t lo, int32_t hi) { return x < lo ? lo : (x > hi ? hi : x); }
static inline float lt_clamp_f(float x, float lo, float hi) {
    /* TFLM's ActivationFunctionWithMinMax: min(max(x, lo), hi) */
    float y = x < lo ? lo : x;
    return y > hi ? hi : y;
}

/* gemmlowp exp_on_negative_values for FixedPoint<int32_t, integer_bits> input (integer_bits <= 5), Q0.31 result. */
int32_t lt_exp_on_negative_values(int32_t a, int integer_bits);
/* gemmlowp one_over_one_plus_x_for_x_in_0_1, Q0.31 in and out. */
int32_t lt_one_over_one_plus_x_for_x_in_0_1(int32_t a);
/* GetInvSqrtQuantizedMultiplierExp with kReverseShift: 1 / sqrt(input) as a multiplier and a left shift. */
void lt_inv_sqrt_multiplier(int32_t input, int32_t *multiplier, int32_t *shift);

#endif /* LT_FIXEDPOINT_H */
