/* Helium (MVE) forms of the element-wise kernels of lt_elementwise.c (lt_mve.h): the same fixed-point steps in
 * four int32 lanes, to the bit. gemmlowp's SaturatingRoundingDoublingHighMul is VQRDMULH ((2ab + 2^31) >> 32,
 * saturated where a = b = INT32_MIN: the same value as its nudge and truncating division, lt_fixedpoint.h), and
 * RoundingDivideByPOT (round half away from zero) is VRSHL's rounding shift (half up) of x - 1 where x < 0. */
#include "lt_mve.h"

#ifdef LT_MVE

/* MultiplyByQuantizedMultiplier (double rounding): x << left, the doubling high product, the rounding shift. */
static inline int32x4_t lt_mve_scale(int32x4_t x, int32_t multiplier, int32_t shift) {
    const int32_t left = shift > 0 ? shift : 0, right = shift > 0 ? 0 : -shift;
    const int32x4_t high = vqrdmulhq_n_s32(vshlq_s32(x, vdupq_n_s32(left)), multiplier);
    if (!right) return high;
    const int32x4_t fixup = vshrq_n_s32(high, 31); /* -1 where high < 0 */
    return vrshlq_s32(vqaddq_s32(high, fixup), vdupq_n_s32(-right));
}

void lt_mve_add_s8(const lt_binary_params *p, const int8_t *input1, const int8_t *input2, int8_t *output,
                   int32_t count) {
    const int32x4_t left = vdupq_n_s32(p->left_shift);
    for (int32_t i = 0; i < count; i += 4) {
        const mve_pred16_t lanes = vctp32q((uint32_t)(count - i));
        const int32x4_t x1 = vshlq_s32(vaddq_n_s32(vldrbq_z_s32(input1 + i, lanes), p->input1_offset), left);
        const int32x4_t x2 = vshlq_s32(vaddq_n_s32(vldrbq_z_s32(input2 + i, lanes), p->input2_offset), left);
        const int32x4_t sum = vaddq_s32(lt_mve_scale(x1, p->input1_multiplier, p->input1_shift),
                                        lt_mve_scale(x2, p->input2_multiplier, p->input2_shift));
        int32x4_t y = vaddq_n_s32(lt_mve_scale(sum, p->output_multiplier, p->output_shift), p->output_offset);
        y = vminq_s32(vmaxq_s32(y, vdupq_n_s32(p->act_min)), vdupq_n_s32(p->act_max));
        vstrbq_p_s32(output + i, y, lanes);
    }
}

#endif /* LT_MVE */
