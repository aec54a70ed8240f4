/* ADD, MUL (reference/integer_ops/add.h, mul.h and float add/mul with broadcasting), QUANTIZE and DEQUANTIZE
 * (reference/quantize.h, dequantize.h, requantize.h). */
#include <math.h>

#include "lt_broadcast.h"
#include "lt_fixedpoint.h"
#include "lt_runtime.h"

void lt_add_s8(const lt_binary_params *p, const int8_t *input1, const int8_t *input2, int8_t *output) {
    LT_BINARY_LOOP({
        const int32_t shifted1 = lt_shl(p->input1_offset + input1[i1], p->left_shift);
        const int32_t shifted2 = lt_shl(p->input2_offset + input2[i2], p->left_shift);
        const int32_t scaled1 = lt_multiply_by_quantized_multiplier(shifted1, p->input1_multiplier, p->input1_shift);
        const int32_t scaled2 = lt_multiply_by_quantized_multiplier(shifted2, p->input2_multiplier, p->input2_shift);
        const int32_t raw = lt_multiply_by_quantized_multiplier(scaled1 + scaled2, p->output_multiplier,
                                                                p->output_shift) + p->output_offset;
        output[o] = (int8_t)lt_clamp(raw, p->act_min, p->act_max);
    });
}

void lt_mul_s8(const lt_binary_params *p, const int8_t *input1, const int8_t *input2, int8_t *output) {
    LT_BINARY_LOOP({
        const int32_t v1 = p->input1_offset + input1[i1];
        const int32_t v2 = p->input2_offset + input2[i2];
        const int32_t raw = p->output_offset +
                            lt_multiply_by_quantized_multiplier(v1 * v2, p->output_multiplier, p->output_shift);
        output[o] = (int8_t)lt_clamp(raw, p->act_min, p->act_max);
    });
}

void lt_add_f32(const lt_binary_params *p, const float *input1, const float *input2, float *output) {
    LT_BINARY_LOOP(output[o] = lt_clamp_f(input1[i1] + input2[i2], p->act_min_f, p->act_max_f));
}

void lt_mul_f32(const lt_binary_params *p, const float *input1, const float *input2, float *output) {
    LT_BINARY_LOOP(output[o] = lt_clamp_f(input1[i1] * input2[i2], p->act_min_f, p->act_max_f));
}

void lt_quantize_f32_s8(const float *input, int8_t *output, int32_t count, float scale, int32_t zero_point) {
    for (int32_t i = 0; i < count; ++i) {
        const int32_t q = (int32_t)roundf(input[i] / scale) + zero_point;
        output[i] = (int8_t)lt_clamp(q, INT8_MIN, INT8_MAX);
    }
}

/* TFLM's Requantize of one element, before the clamp to the output type. */
static inline int32_t lt_requantize_value(int32_t value, int32_t input_zero_point, int32_t multiplier, int32_t shift,
                                          int32_t output_zero_point) {
    return lt_multiply_by_quantized_multiplier(value - input_zero_point, multiplier, shift) + output_zero_point;
}

void lt_requantize_s8(const int8_t *input, int8_t *output, int32_t count, int32_t input_zero_point,
                      int32_t multiplier, int32_t shift, int32_t output_zero_point) {
    for (int32_t i = 0; i < count; ++i)
        output[i] = (int8_t)lt_clamp(lt_requantize_value(input[i], input_zero_point, multiplier, shift,
                                                         output_zero_point), INT8_MIN, INT8_MAX);
}

void lt_requantize_s8_u8(const int8_t *input, uint8_t *output, int32_t count, int32_t input_zero_point,
                         int32_t multiplier, int32_t shift, int32_t output_zero_point) {
    for (int32_t i = 0; i < count; ++i)
        output[i] = (uint8_t)lt_clamp(lt_requantize_value(input[i], input_zero_point, multiplier, shift,
                                                          output_zero_point), 0, UINT8_MAX);
}

void lt_requantize_s16_s8(const int16_t *input, int8_t *output, int32_t count, int32_t input_zero_point,
                          int32_t multiplier, int32_t shift, int32_t output_zero_point) {
    for (int32_t i = 0; i < count; ++i)
        output[i] = (int8_t)lt_clamp(lt_requantize_value(input[i], input_zero_point, multiplier, shift,
                                                         output_zero_point), INT8_MIN, INT8_MAX);
}

void lt_requantize_s16_s32(const int16_t *input, int32_t *output, int32_t count, int32_t input_zero_point,
                           int32_t multiplier, int32_t shift, int32_t output_zero_point) {
    /* the int32 range is the clamp itself; the zero-point add wraps as TFLM's int32 add does on its targets */
    for (int32_t i = 0; i < count; ++i)
        output[i] = lt_wrap_add(lt_multiply_by_quantized_multiplier(input[i] - input_zero_point, multiplier, shift),
                                output_zero_point);
}

void lt_dequantize_s8_f32(const int8_t *input, float *output, int32_t count, double scale, int32_t zero_point) {
    for (int32_t i = 0; i < count; ++i) output[i] = (float)(scale * (double)(input[i] - zero_point));
}
