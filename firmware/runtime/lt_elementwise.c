/* ADD, MUL (reference/integer_ops/add.h, mul.h and float add/mul with broadcasting), SUB, MAXIMUM, MINIMUM,
 * SQUARED_DIFFERENCE, DIV, ADD_N, FLOOR_DIV, FLOOR_MOD (reference/sub.h, maximum_minimum.h,
 * micro/kernels/squared_difference.cc, div.h, add_n.h, floor_div.h, floor_mod.h), the float unary functions, ABS
 * and RSQRT (micro/kernels/elementwise.cc), CAST, comparisons and logical operators
 * (reference/comparisons.h, binary_function.h), QUANTIZE and DEQUANTIZE (reference/quantize.h, dequantize.h,
 * requantize.h). */
#include <math.h>

#include "lt_broadcast.h"
#include "lt_conv_dsp.h"
#include "lt_fixedpoint.h"
#include "lt_mve.h"
#include "lt_runtime.h"

/* reference_ops::AddElementwise and Sub for int8 and int16 (left_shift 20 and 15): both inputs rescaled to twice
 * the larger input scale, combined with `op`, requantized. */
#define LT_ADD_OR_SUB_QUANTIZED(T, op)                                                                            \
    LT_BINARY_LOOP({                                                                                             \
        const int32_t shifted1 = lt_shl(p->input1_offset + input1[i1], p->left_shift);                            \
        const int32_t shifted2 = lt_shl(p->input2_offset + input2[i2], p->left_shift);                            \
        const int32_t scaled1 = lt_multiply_by_quantized_multiplier(shifted1, p->input1_multiplier, p->input1_shift); \
        const int32_t scaled2 = lt_multiply_by_quantized_multiplier(shifted2, p->input2_multiplier, p->input2_shift); \
        const int32_t raw = lt_multiply_by_quantized_multiplier(scaled1 op scaled2, p->output_multiplier,         \
                                                                p->output_shift) + p->output_offset;            \
        output[o] = (T)lt_clamp(raw, p->act_min, p->act_max);                                                    \
    })

/* The element count where both inputs have the output's shape and layout (no broadcasting: i1 = i2 = o in
 * LT_BINARY_LOOP), else 0. */
static int32_t lt_same_shape_count(const lt_binary_params *p) {
    int32_t stride = 1;
    for (int32_t d = p->ndim - 1; d >= 0; --d) {
        if (p->dims[d] > 1 && (p->step1[d] != stride || p->step2[d] != stride)) return 0;
        stride *= p->dims[d];
    }
    return stride;
}

/* One rescale of the int8 ADD where lt_add_s8 checked |x| < 2^30 (x2 = 2x fits int32), multiplier >= 0 and a right
 * shift 0 <= r <= 31: SaturatingRoundingDoublingHighMul(x, m) = (x m + 2^30) >> 31 is SMMULR(2x, m) = h, and
 * RoundingDivideByPOT(h, r) is (h + 2^(r - 1) - (h < 0)) >> r for r >= 1, h for r = 0: `round` 2^(r - 1) or 0
 * (one SMMLAR adds it), `negative` -1 or 0 (r = 0) selects the -(h < 0). As LT_SHORT_ACC's requantization
 * (lt_conv_dsp.h), the sign of x2 stands for h's: where x2 < 0 but h = 0, (2^(r - 1) - 1) >> r is 0 too. */
static inline int32_t lt_add_rescale(int32_t x2, int32_t multiplier, int32_t round, int32_t negative, int32_t right) {
    const int32_t rounded = lt_smmlar(x2, multiplier, round);
    return (int32_t)((uint32_t)rounded + (uint32_t)((x2 >> 31) & negative)) >> right;
}

/* lt_add_s8's same-shape loop; `full_range`: the clamp is all of int8, one SSAT (a constant where it is inlined). */
LT_ALWAYS_INLINE void lt_add_same_shape_s8(const lt_binary_params *p, const int8_t *input1, const int8_t *input2,
                                           int8_t *output, int32_t count, const int full_range) {
    const int32_t off1 = p->input1_offset, off2 = p->input2_offset, left = p->left_shift + 1;
    const int32_t m1 = p->input1_multiplier, r1 = -p->input1_shift, round1 = r1 ? 1 << (r1 - 1) : 0;
    const int32_t m2 = p->input2_multiplier, r2 = -p->input2_shift, round2 = r2 ? 1 << (r2 - 1) : 0;
    const int32_t mo = p->output_multiplier, ro = -p->output_shift, roundo = ro ? 1 << (ro - 1) : 0;
    const int32_t neg1 = r1 ? -1 : 0, neg2 = r2 ? -1 : 0, nego = ro ? -1 : 0;
    const int32_t offo = p->output_offset, lo = p->act_min, hi = p->act_max;
#define LT_ADD_ONE(i)                                                                                         \
    do {                                                                                                      \
        const int32_t scaled1 = lt_add_rescale(lt_shl(off1 + input1[i], left), m1, round1, neg1, r1);         \
        const int32_t scaled2 = lt_add_rescale(lt_shl(off2 + input2[i], left), m2, round2, neg2, r2);         \
        const int32_t raw = lt_add_rescale(lt_shl(scaled1 + scaled2, 1), mo, roundo, nego, ro) + offo;        \
        output[i] = (int8_t)(full_range ? lt_ssat8(raw) : lt_clamp(raw, lo, hi));                             \
    } while (0)
    int32_t i = 0;
#if defined(LT_DUAL_ISSUE) && LT_DUAL_ISSUE
    /* two elements a step on the M7: their independent chains of multiplies and shifts interleave and issue in
     * pairs (one element's chain alone runs about one instruction a cycle; on the M4 the pair only costs registers) */
    for (; i + 2 <= count; i += 2) {
        LT_ADD_ONE(i);
        LT_ADD_ONE(i + 1);
    }
#endif
    for (; i < count; ++i) LT_ADD_ONE(i);
#undef LT_ADD_ONE
}

void lt_add_s8(const lt_binary_params *p, const int8_t *input1, const int8_t *input2, int8_t *output) {
#ifdef LT_MVE
    if (p->ndim == 1 && p->step1[0] == 1 && p->step2[0] == 1) {
        lt_mve_add_s8(p, input1, input2, output, p->dims[0]);
        return;
    }
#endif
    const int32_t count = lt_same_shape_count(p);
    /* a residual connection's ADD (same shapes), with TFLM's int8 scaling (left shift 20, right shifts: every
     * |(offset + x) << left_shift| < 2^29, so each rescaled input is too and their sum is below 2^30): one straight
     * loop, each rescale one SMMLAR and a rounding shift, instead of the broadcast bookkeeping and a 64-bit product
     * and rounding division per rescale: the same values as the reference */
    if (count > 0 && p->left_shift <= 20 && p->input1_multiplier >= 0 && p->input2_multiplier >= 0 &&
        p->output_multiplier >= 0 && p->input1_shift <= 0 && p->input2_shift <= 0 && p->output_shift <= 0 &&
        p->input1_shift > -32 && p->input2_shift > -32 && p->output_shift > -32 &&
        p->input1_offset >= -255 && p->input1_offset <= 255 && p->input2_offset >= -255 && p->input2_offset <= 255) {
        if (p->act_min == INT8_MIN && p->act_max == INT8_MAX)
            lt_add_same_shape_s8(p, input1, input2, output, count, 1);
        else
            lt_add_same_shape_s8(p, input1, input2, output, count, 0);
        return;
    }
    LT_ADD_OR_SUB_QUANTIZED(int8_t, +);
}

void lt_add_s16(const lt_binary_params *p, const int16_t *input1, const int16_t *input2, int16_t *output) {
    LT_ADD_OR_SUB_QUANTIZED(int16_t, +);
}

/* int32 ADD and MUL wrap on overflow, as TFLM's plain C++ arithmetic does on its targets. */
void lt_add_s32(const lt_binary_params *p, const int32_t *input1, const int32_t *input2, int32_t *output) {
    LT_BINARY_LOOP(output[o] = lt_clamp(lt_wrap_add(input1[i1], input2[i2]), p->act_min, p->act_max));
}

/* reference_integer_ops::MulElementwise: the zero-point-corrected product requantized (int16: zero points 0). */
#define LT_MUL_QUANTIZED(T)                                                                                     \
    LT_BINARY_LOOP({                                                                                            \
        const int32_t v1 = p->input1_offset + input1[i1];                                                       \
        const int32_t v2 = p->input2_offset + input2[i2];                                                       \
        const int32_t raw = p->output_offset +                                                                  \
                            lt_multiply_by_quantized_multiplier(v1 * v2, p->output_multiplier, p->output_shift); \
        output[o] = (T)lt_clamp(raw, p->act_min, p->act_max);                                                   \
    })

void lt_mul_s8(const lt_binary_params *p, const int8_t *input1, const int8_t *input2, int8_t *output) {
    LT_MUL_QUANTIZED(int8_t);
}

void lt_mul_s16(const lt_binary_params *p, const int16_t *input1, const int16_t *input2, int16_t *output) {
    LT_MUL_QUANTIZED(int16_t);
}

void lt_mul_s32(const lt_binary_params *p, const int32_t *input1, const int32_t *input2, int32_t *output) {
    LT_BINARY_LOOP({
        const int32_t product = (int32_t)((uint32_t)input1[i1] * (uint32_t)input2[i2]);
        output[o] = lt_clamp(product, p->act_min, p->act_max);
    });
}

void lt_add_f32(const lt_binary_params *p, const float *input1, const float *input2, float *output) {
    LT_BINARY_LOOP(output[o] = lt_clamp_f(input1[i1] + input2[i2], p->act_min_f, p->act_max_f));
}

void lt_mul_f32(const lt_binary_params *p, const float *input1, const float *input2, float *output) {
    LT_BINARY_LOOP(output[o] = lt_clamp_f(input1[i1] * input2[i2], p->act_min_f, p->act_max_f));
}

/* AffineQuantize: round(x / scale) in float (halfway away from zero), plus the zero point, clamped. */
#define LT_QUANTIZE_LOOP(T, min, max)                                                   \
    for (int32_t i = 0; i < count; ++i) {                                              \
        const int32_t q = (int32_t)roundf(input[i] / scale) + zero_point;               \
        ((T *)output)[i] = (T)lt_clamp(q, min, max);                                    \
    }

void lt_quantize_f32(const float *input, lt_type output_type, void *output, int32_t count, float scale,
                     int32_t zero_point) {
    if (output_type == LT_INT16) LT_QUANTIZE_LOOP(int16_t, INT16_MIN, INT16_MAX)
    else LT_QUANTIZE_LOOP(int8_t, INT8_MIN, INT8_MAX)
}

/* reference_ops::Requantize of one element, before the clamp to the output type. The int32 arithmetic wraps as
 * TFLM's does on its targets (an int32 input far from its zero point, an int32 output's zero point added). */
static inline int32_t lt_requantize_value(int32_t value, int32_t input_zero_point, int32_t multiplier, int32_t shift,
                                          int32_t output_zero_point) {
    return lt_wrap_add(lt_multiply_by_quantized_multiplier(lt_wrap_sub(value, input_zero_point), multiplier, shift),
                       output_zero_point);
}

/* One loop per input type: each element is read before the output element at the same index is written. */
#define LT_REQUANTIZE_LOOP(IN, OUT, min, max)                                                                \
    for (int32_t i = 0; i < count; ++i) {                                                                    \
        const int32_t v = lt_requantize_value(((const IN *)input)[i], input_zero_point, multiplier, shift,   \
                                              output_zero_point);                                           \
        ((OUT *)output)[i] = (OUT)lt_clamp(v, min, max);                                                     \
    }

#define LT_REQUANTIZE_TO(IN)                                                                      \
    switch (output_type) {                                                                        \
        case LT_INT8: LT_REQUANTIZE_LOOP(IN, int8_t, INT8_MIN, INT8_MAX) break;                  \
        case LT_UINT8: LT_REQUANTIZE_LOOP(IN, uint8_t, 0, UINT8_MAX) break;                      \
        case LT_INT16: LT_REQUANTIZE_LOOP(IN, int16_t, INT16_MIN, INT16_MAX) break;              \
        default: LT_REQUANTIZE_LOOP(IN, int32_t, INT32_MIN, INT32_MAX) break;                    \
    }

void lt_requantize(lt_type input_type, const void *input, lt_type output_type, void *output, int32_t count,
                   int32_t input_zero_point, int32_t multiplier, int32_t shift, int32_t output_zero_point) {
    switch (input_type) {
        case LT_INT8: LT_REQUANTIZE_TO(int8_t) break;
        case LT_UINT8: LT_REQUANTIZE_TO(uint8_t) break;
        case LT_INT16: LT_REQUANTIZE_TO(int16_t) break;
        default: LT_REQUANTIZE_TO(int32_t) break;
    }
}

/* reference_ops::Dequantize: the double scale times the zero-point-corrected value, rounded to float. */
#define LT_DEQUANTIZE_LOOP(IN) \
    for (int32_t i = 0; i < count; ++i) output[i] = (float)(scale * (double)(((const IN *)input)[i] - zero_point));

void lt_dequantize(lt_type input_type, const void *input, float *output, int32_t count, double scale,
                   int32_t zero_point) {
    switch (input_type) {
        case LT_UINT8: LT_DEQUANTIZE_LOOP(uint8_t) break;
        case LT_INT16: LT_DEQUANTIZE_LOOP(int16_t) break;
        default: LT_DEQUANTIZE_LOOP(int8_t) break;
    }
}

void lt_sub_s8(const lt_binary_params *p, const int8_t *input1, const int8_t *input2, int8_t *output) {
    LT_ADD_OR_SUB_QUANTIZED(int8_t, -);
}

void lt_sub_s16(const lt_binary_params *p, const int16_t *input1, const int16_t *input2, int16_t *output) {
    LT_ADD_OR_SUB_QUANTIZED(int16_t, -);
}

void lt_sub_s32(const lt_binary_params *p, const int32_t *input1, const int32_t *input2, int32_t *output) {
    LT_BINARY_LOOP(output[o] = lt_clamp(lt_wrap_sub(input1[i1], input2[i2]), p->act_min, p->act_max));
}

void lt_sub_f32(const lt_binary_params *p, const float *input1, const float *input2, float *output) {
    LT_BINARY_LOOP(output[o] = lt_clamp_f(input1[i1] - input2[i2], p->act_min_f, p->act_max_f));
}

#define LT_MAXIMUM(T) LT_BINARY_LOOP({ const T a = input1[i1], b = input2[i2]; output[o] = a > b ? a : b; })
#define LT_MINIMUM(T) LT_BINARY_LOOP({ const T a = input1[i1], b = input2[i2]; output[o] = a < b ? a : b; })

void lt_maximum_s8(const lt_binary_params *p, const int8_t *input1, const int8_t *input2, int8_t *output) {
    LT_MAXIMUM(int8_t);
}

void lt_maximum_s16(const lt_binary_params *p, const int16_t *input1, const int16_t *input2, int16_t *output) {
    LT_MAXIMUM(int16_t);
}

void lt_maximum_s32(const lt_binary_params *p, const int32_t *input1, const int32_t *input2, int32_t *output) {
    LT_MAXIMUM(int32_t);
}

void lt_maximum_f32(const lt_binary_params *p, const float *input1, const float *input2, float *output) {
    LT_MAXIMUM(float);
}

void lt_minimum_s8(const lt_binary_params *p, const int8_t *input1, const int8_t *input2, int8_t *output) {
    LT_MINIMUM(int8_t);
}

void lt_minimum_s16(const lt_binary_params *p, const int16_t *input1, const int16_t *input2, int16_t *output) {
    LT_MINIMUM(int16_t);
}

void lt_minimum_s32(const lt_binary_params *p, const int32_t *input1, const int32_t *input2, int32_t *output) {
    LT_MINIMUM(int32_t);
}

void lt_minimum_f32(const lt_binary_params *p, const float *input1, const float *input2, float *output) {
    LT_MINIMUM(float);
}

void lt_maximum_s64(const lt_binary_params *p, const int64_t *input1, const int64_t *input2, int64_t *output) {
    LT_MAXIMUM(int64_t);
}

void lt_minimum_s64(const lt_binary_params *p, const int64_t *input1, const int64_t *input2, int64_t *output) {
    LT_MINIMUM(int64_t);
}

/* reference_ops::FloorDiv (floor of the double quotient) and FloorMod (fmodf, moved to the divisor's sign). */
void lt_floor_div_f32(const lt_binary_params *p, const float *input1, const float *input2, float *output) {
    LT_BINARY_LOOP(output[o] = (float)floor((double)input1[i1] / (double)input2[i2]));
}

void lt_floor_mod_f32(const lt_binary_params *p, const float *input1, const float *input2, float *output) {
    LT_BINARY_LOOP({
        const float divisor = input2[i2], trunc_mod = fmodf(input1[i1], divisor);
        output[o] = trunc_mod != 0.0f && ((divisor < 0.0f) != (trunc_mod < 0.0f)) ? trunc_mod + divisor : trunc_mod;
    });
}

/* squared_difference.cc's SquaredDifference<T>(x, y, params) for int8 and int16. */
#define LT_SQUARED_DIFFERENCE_QUANTIZED(T)                                                                       \
    LT_BINARY_LOOP({                                                                                             \
        const int32_t shifted1 = lt_shl(p->input1_offset + input1[i1], p->left_shift);                            \
        const int32_t shifted2 = lt_shl(p->input2_offset + input2[i2], p->left_shift);                            \
        const int32_t scaled1 = lt_multiply_by_quantized_multiplier(shifted1, p->input1_multiplier, p->input1_shift); \
        const int32_t scaled2 = lt_multiply_by_quantized_multiplier(shifted2, p->input2_multiplier, p->input2_shift); \
        const int32_t difference = scaled1 - scaled2;                                                            \
        const int32_t raw = lt_multiply_by_quantized_multiplier(difference * difference, p->output_multiplier,   \
                                                                p->output_shift) + p->output_offset;            \
        output[o] = (T)lt_clamp(raw, p->act_min, p->act_max);                                                    \
    })

void lt_squared_difference_s8(const lt_binary_params *p, const int8_t *input1, const int8_t *input2,
                              int8_t *output) {
    LT_SQUARED_DIFFERENCE_QUANTIZED(int8_t);
}

void lt_squared_difference_s16(const lt_binary_params *p, const int16_t *input1, const int16_t *input2,
                               int16_t *output) {
    LT_SQUARED_DIFFERENCE_QUANTIZED(int16_t);
}

void lt_squared_difference_s32(const lt_binary_params *p, const int32_t *input1, const int32_t *input2,
                               int32_t *output) {
    LT_BINARY_LOOP({
        const uint32_t difference = (uint32_t)lt_wrap_sub(input1[i1], input2[i2]);
        output[o] = (int32_t)(difference * difference);
    });
}

void lt_squared_difference_f32(const lt_binary_params *p, const float *input1, const float *input2,
                               float *output) {
    LT_BINARY_LOOP({
        const float difference = input1[i1] - input2[i2];
        output[o] = difference * difference;
    });
}

void lt_div_f32(const lt_binary_params *p, const float *input1, const float *input2, float *output) {
    LT_BINARY_LOOP(output[o] = lt_clamp_f(input1[i1] / input2[i2], p->act_min_f, p->act_max_f));
}

/* reference_ops::DivElementwise for int8: the divisor's reciprocal (GetReciprocal) times the dividend at full
 * headroom, requantized. A divisor at its zero point is a division by zero TFLM does not check: GetReciprocal
 * shifts the 0 by 32 bits, which gives 0 on x86 and Arm, and the rest is ordinary arithmetic; the same result is
 * computed here without the undefined shift. */
void lt_div_s8(const lt_binary_params *p, const int8_t *input1, const int8_t *input2, int8_t *output) {
    LT_BINARY_LOOP({
        int32_t v1 = p->input1_offset + input1[i1];
        int32_t v2 = p->input2_offset + input2[i2];
        if (v2 < 0) {
            v1 = -v1;
            v2 = -v2;
        }
        const int headroom_plus_one = lt_count_leading_zeros((uint32_t)v2);
        const int recip_shift = 31 - headroom_plus_one;
        const uint32_t normalized = headroom_plus_one < 32 ? (uint32_t)v2 << headroom_plus_one : 0u;
        const int32_t reciprocal = lt_one_over_one_plus_x_for_x_in_0_1((int32_t)(normalized - 0x80000000u));
        const int headroom = lt_count_leading_sign_bits(v1);
        const int32_t unscaled = lt_srdhm(lt_shl(v1, headroom), reciprocal);
        const int total_shift = p->output_shift - recip_shift - headroom;
        const int32_t raw = p->output_offset +
                            lt_rounding_divide_by_pot(lt_srdhm(unscaled, p->output_multiplier), -total_shift);
        output[o] = (int8_t)lt_clamp(raw, p->act_min, p->act_max);
    });
}

/* reference_ops::Div<int32_t>: C division, truncating. A zero divisor gives 0 and INT32_MIN / -1 gives INT32_MIN,
 * as the Cortex-M SDIV instruction does (TFLM's `a / b` traps on x86 in both cases). */
void lt_div_s32(const lt_binary_params *p, const int32_t *input1, const int32_t *input2, int32_t *output) {
    LT_BINARY_LOOP({
        const int32_t a = input1[i1], b = input2[i2];
        const int32_t quotient = b == 0 ? 0 : (b == -1 ? lt_wrap_sub(0, a) : a / b);
        output[o] = lt_clamp(quotient, p->act_min, p->act_max);
    });
}

void lt_add_n_s8(const lt_binary_params *p, const int8_t *const *inputs, int32_t n, int8_t *output, int32_t count) {
    /* the sum starts from the zero point's own rescaled value, as reference_ops::AddN does */
    const int32_t scaled_zero =
        lt_multiply_by_quantized_multiplier(lt_shl(p->input1_offset, p->left_shift), p->input1_multiplier,
                                            p->input1_shift);
    for (int32_t i = 0; i < count; ++i) {
        int32_t sum = scaled_zero;
        for (int32_t j = 0; j < n; ++j) {
            const int32_t shifted = lt_shl(p->input1_offset + inputs[j][i], p->left_shift);
            sum += lt_multiply_by_quantized_multiplier(shifted, p->input1_multiplier, p->input1_shift);
        }
        const int32_t raw =
            lt_multiply_by_quantized_multiplier(sum, p->output_multiplier, p->output_shift) + p->output_offset;
        output[i] = (int8_t)lt_clamp(raw, p->act_min, p->act_max);
    }
}

void lt_add_n_f32(const float *const *inputs, int32_t n, float *output, int32_t count) {
    for (int32_t i = 0; i < count; ++i) {
        float sum = 0.0f;
        for (int32_t j = 0; j < n; ++j) sum += inputs[j][i];
        output[i] = sum;
    }
}

#define LT_ABS_QUANTIZED(min, max)                                                                     \
    for (int32_t i = 0; i < p->count; ++i) {                                                           \
        const int32_t in = input[i] - p->input_zero_point;                                             \
        const int32_t magnitude = in < 0 ? -in : in;                                                   \
        const int32_t scaled =                                                                         \
            p->rescale ? lt_multiply_by_quantized_multiplier(magnitude, p->multiplier, p->shift) : magnitude; \
        output[i] = lt_clamp(scaled + p->output_zero_point, min, max);                                 \
    }

void lt_abs_s8(const lt_activation_params *p, const int8_t *input, int8_t *output) {
    LT_ABS_QUANTIZED(INT8_MIN, INT8_MAX)
}

void lt_abs_s16(const lt_activation_params *p, const int16_t *input, int16_t *output) {
    LT_ABS_QUANTIZED(INT16_MIN, INT16_MAX)
}

/* reference_ops::RoundToNearest: halfway cases to the even neighbour. */
static float lt_round_to_nearest_even(float value) {
    const float floor_value = floorf(value);
    const float diff = value - floor_value;
    if (diff < 0.5f || (diff == 0.5f && (int32_t)floor_value % 2 == 0)) return floor_value;
    return floor_value + 1.0f;
}

void lt_unary_f32(lt_unary_op op, const float *input, float *output, int32_t count) {
    for (int32_t i = 0; i < count; ++i) {
        const float x = input[i];
        float y;
        switch (op) {
            case LT_ABS: y = fabsf(x); break;
            case LT_NEG: y = -x; break;
            case LT_SQUARE: y = x * x; break;
            case LT_SQRT: y = sqrtf(x); break;
            case LT_RSQRT: y = 1.0f / sqrtf(x); break;
            case LT_EXP: y = expf(x); break;
            case LT_LOG: y = logf(x); break;
            case LT_SIN: y = sinf(x); break;
            case LT_COS: y = cosf(x); break;
            case LT_FLOOR: y = floorf(x); break;
            case LT_CEIL: y = ceilf(x); break;
            default: y = lt_round_to_nearest_even(x); break;
        }
        output[i] = y;
    }
}

/* One element as an exact wide value: integers as int64_t, floats as double. */
static int lt_is_float(lt_type type) { return type == LT_FLOAT32; }

static int64_t lt_read_integer(lt_type type, const void *data, int32_t i) {
    switch (type) {
        case LT_INT8: return ((const int8_t *)data)[i];
        case LT_INT16: return ((const int16_t *)data)[i];
        case LT_BOOL: return ((const uint8_t *)data)[i] != 0;
        default: return ((const int32_t *)data)[i];
    }
}

/* static_cast of an integer to a narrower integer keeps the low bits (two's complement targets). */
static void lt_write_integer(lt_type type, void *data, int32_t i, int64_t value) {
    switch (type) {
        case LT_INT8: ((int8_t *)data)[i] = (int8_t)(uint8_t)(uint64_t)value; break;
        case LT_INT16: ((int16_t *)data)[i] = (int16_t)(uint16_t)(uint64_t)value; break;
        default: ((int32_t *)data)[i] = (int32_t)(uint32_t)(uint64_t)value; break;
    }
}

void lt_cast(lt_type input_type, const void *input, lt_type output_type, void *output, int32_t count) {
    for (int32_t i = 0; i < count; ++i) {
        if (lt_is_float(input_type)) {
            const float x = ((const float *)input)[i];
            /* static_cast of a float outside the integer type's range is undefined; the host TFLM's build
             * saturates to the range (vectorized packs), and so does this (beyond int32 it stays undefined) */
            if (lt_is_float(output_type)) ((float *)output)[i] = x;
            else if (output_type == LT_INT8) ((int8_t *)output)[i] = (int8_t)lt_clamp((int32_t)x, INT8_MIN, INT8_MAX);
            else if (output_type == LT_INT16)
                ((int16_t *)output)[i] = (int16_t)lt_clamp((int32_t)x, INT16_MIN, INT16_MAX);
            else ((int32_t *)output)[i] = (int32_t)x;
        } else {
            const int64_t x = lt_read_integer(input_type, input, i);
            if (lt_is_float(output_type)) ((float *)output)[i] = (float)x;
            else lt_write_integer(output_type, output, i, x);
        }
    }
}

/* RsqrtEvalQuantized: 1 / sqrt of the zero-point-corrected value (0 gives the type's maximum), with 20 bits kept
 * between the two rescales. */
#define LT_RSQRT_QUANTIZED(min, max)                                                                         \
    for (int32_t i = 0; i < p->count; ++i) {                                                                 \
        const int32_t value = input[i] - p->input_zero_point;                                                \
        if (value == 0) {                                                                                    \
            output[i] = max;                                                                                 \
            continue;                                                                                        \
        }                                                                                                    \
        int32_t inv_multiplier, inv_shift;                                                                   \
        lt_inv_sqrt_multiplier(value, &inv_multiplier, &inv_shift);                                          \
        const int32_t data = lt_multiply_by_quantized_multiplier(1, inv_multiplier, inv_shift + 20);         \
        const int32_t out =                                                                                  \
            lt_multiply_by_quantized_multiplier(data, p->multiplier, p->shift - 20) + p->output_zero_point;  \
        output[i] = lt_clamp(out, min, max);                                                                 \
    }

void lt_rsqrt_s8(const lt_activation_params *p, const int8_t *input, int8_t *output) {
    LT_RSQRT_QUANTIZED(INT8_MIN, INT8_MAX)
}

void lt_rsqrt_s16(const lt_activation_params *p, const int16_t *input, int16_t *output) {
    LT_RSQRT_QUANTIZED(INT16_MIN, INT16_MAX)
}

/* One comparison of two values of any arithmetic type, as comparisons.h's functors do it. */
#define LT_COMPARE(op, a, b)                                                                        \
    ((op) == LT_EQUAL ? (a) == (b) : (op) == LT_NOT_EQUAL ? (a) != (b) : (op) == LT_LESS ? (a) < (b) \
     : (op) == LT_LESS_EQUAL ? (a) <= (b) : (op) == LT_GREATER ? (a) > (b) : (a) >= (b))

void lt_compare_s8(lt_comparison op, const lt_binary_params *p, const int8_t *input1, const int8_t *input2,
                   uint8_t *output) {
    LT_BINARY_LOOP({
        const int32_t scaled1 = lt_multiply_by_quantized_multiplier(
            lt_shl(p->input1_offset + input1[i1], p->left_shift), p->input1_multiplier, p->input1_shift);
        const int32_t scaled2 = lt_multiply_by_quantized_multiplier(
            lt_shl(p->input2_offset + input2[i2], p->left_shift), p->input2_multiplier, p->input2_shift);
        output[o] = (uint8_t)LT_COMPARE(op, scaled1, scaled2);
    });
}

void lt_compare_s32(lt_comparison op, const lt_binary_params *p, const int32_t *input1, const int32_t *input2,
                    uint8_t *output) {
    LT_BINARY_LOOP(output[o] = (uint8_t)LT_COMPARE(op, input1[i1], input2[i2]));
}

void lt_compare_s64(lt_comparison op, const lt_binary_params *p, const int64_t *input1, const int64_t *input2,
                    uint8_t *output) {
    LT_BINARY_LOOP(output[o] = (uint8_t)LT_COMPARE(op, input1[i1], input2[i2]));
}

void lt_compare_f32(lt_comparison op, const lt_binary_params *p, const float *input1, const float *input2,
                    uint8_t *output) {
    LT_BINARY_LOOP(output[o] = (uint8_t)LT_COMPARE(op, input1[i1], input2[i2]));
}

void lt_compare_bool(lt_comparison op, const lt_binary_params *p, const uint8_t *input1, const uint8_t *input2,
                     uint8_t *output) {
    LT_BINARY_LOOP(output[o] = (uint8_t)LT_COMPARE(op, input1[i1], input2[i2]));
}

void lt_logical(int32_t and_op, const lt_binary_params *p, const uint8_t *input1, const uint8_t *input2,
                uint8_t *output) {
    LT_BINARY_LOOP(output[o] = (uint8_t)(and_op ? (input1[i1] && input2[i2]) : (input1[i1] || input2[i2])));
}

void lt_logical_not(const uint8_t *input, uint8_t *output, int32_t count) {
    for (int32_t i = 0; i < count; ++i) output[i] = (uint8_t)!input[i];
}
