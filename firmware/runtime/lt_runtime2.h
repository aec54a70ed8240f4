/* Declarations of the runtime's newest kernels: 16-bit TRANSPOSE_CONV and BATCH_MATMUL with 64-bit accumulators
 * (lt_matmul.c), int64 MAXIMUM, MINIMUM and comparisons, float FLOOR_DIV and FLOOR_MOD (lt_elementwise.c),
 * DYNAMIC_UPDATE_SLICE, BROADCAST_ARGS and the hybrid EMBEDDING_LOOKUP (lt_movement.c), int16 SOFTMAX
 * (lt_activation.c). They belong in
 * lt_runtime.h and move there when it is next reworked; generated code includes this header where it calls them. */
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

/* DYNAMIC_UPDATE_SLICE: the operand copied to the output, then the update written over it from the start
 * indices (int32 or int64, read when the operator runs), each clamped to [0, dims - update_dims]. */
typedef struct {
    int32_t ndim;
    int32_t dims[LT_MAX_DIMS], update_dims[LT_MAX_DIMS];
    int32_t elem_size;
    int32_t indices_64; /* 1: the start indices are int64 */
} lt_update_slice_params;
void lt_dynamic_update_slice(const lt_update_slice_params *p, const void *operand, const void *update,
                             const void *indices, void *output);
/* BROADCAST_ARGS: the broadcast of two shape vectors (int32 or int64 elements) of count1 and count2 elements
 * into count_out elements, aligned at their ends (a missing dimension is 1). */
void lt_broadcast_args_s32(const int32_t *shape1, int32_t count1, const int32_t *shape2, int32_t count2,
                           int32_t *output, int32_t count_out);
void lt_broadcast_args_s64(const int64_t *shape1, int32_t count1, const int64_t *shape2, int32_t count2,
                           int64_t *output, int32_t count_out);
/* EMBEDDING_LOOKUP from int8 rows to float32: row lookup[i] of `value`, `columns` elements each, times the scale
 * (zero point 0), as micro_utils.h's Dequantize computes it in float. */
void lt_embedding_lookup_hybrid(const int8_t *value, const int32_t *lookup, int32_t count, int32_t columns,
                                float scale, float *output);

/* SOFTMAX int16 -> int16 (reference_ops::SoftmaxInt16): each difference from the row's maximum rescaled by
 * input_multiplier / input_left_shift onto [-10, 0], exp through the 513-entry interpolated table, the sum's
 * reciprocal through the 1 / (1 + x) table; both tables as TFLM's Prepare populates them (LUTPopulate). */
void lt_softmax_s16(const lt_softmax_params *p, const int16_t *exp_lut, const int16_t *one_over_one_plus_x_lut,
                    const int16_t *input, int16_t *output);

#endif /* LT_RUNTIME2_H */
