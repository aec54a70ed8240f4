/* Declarations of the runtime's newest kernels: 16-bit TRANSPOSE_CONV and BATCH_MATMUL with 64-bit accumulators
 * (lt_matmul.c), int64 MAXIMUM, MINIMUM and comparisons, float FLOOR_DIV and FLOOR_MOD (lt_elementwise.c). They
 * belong in lt_runtime.h and move there when it is next reworked; generated code includes this header where it
 * calls them. */
#ifndef LT_RUNTIME2_H
#define LT_RUNTIME2_H

#include "lt_runtime.h"

/* BATCH_MATMUL on int16 operands (zero points 0, as TFLM requires): 64-bit sums, the int64
 * MultiplyByQuantizedMultiplier, saturated to int16. */
void lt_batch_matmul_s16(const lt_batch_matmul_params *p, const int16_t *lhs, const int16_t *rhs, int16_t *output);
/* TRANSPOSE_CONV 16x8: int16 input (zero point 0), int8 per-channel filter, int64 bias (an int16 bias is widened
 * by the lowering, as TFLM's Eval widens it) or none, 64-bit sums, int16 output. */
void lt_transpose_conv_s16(const lt_conv_params *p, const int16_t *input, const int8_t *filter, const int64_t *bias,
                           const int32_t *multiplier, const int32_t *shift, int16_t *output);

void lt_maximum_s64(const lt_binary_params *p, const int64_t *input1, const int64_t *input2, int64_t *output);
void lt_minimum_s64(const lt_binary_params *p, const int64_t *input1, const int64_t *input2, int64_t *output);
void lt_compare_s64(lt_comparison op, const lt_binary_params *p, const int64_t *input1, const int64_t *input2,
                    uint8_t *output);
/* floor(x / y) and x - floor(x / y) * y as TFLM's reference computes them (in double; fmod for FLOOR_MOD). TFLM's
 * FLOOR_DIV refuses a zero divisor at run time; here it gives what the division gives. */
void lt_floor_div_f32(const lt_binary_params *p, const float *input1, const float *input2, float *output);
void lt_floor_mod_f32(const lt_binary_params *p, const float *input1, const float *input2, float *output);

#endif /* LT_RUNTIME2_H */
