/* lowtide runtime: int8 and float32 kernels bit-exact with TFLite Micro's reference kernels.
 *
 * Plain C99: no malloc, no globals, no hardware access. Every quantization parameter that TFLM computes in a
 * kernel's Prepare (multipliers, shifts, activation ranges, padding) is computed ahead of time by
 * `lowtide compile` and passed in a const parameter struct, so these functions only do the Eval arithmetic.
 * Build float kernels with -ffp-contract=off (C99 mode does this on GCC) so results match the host oracle.
 */
#ifndef LT_RUNTIME_H
#define LT_RUNTIME_H

#include <stdint.h>

#include "lt_params.h" /* LT_MAX_DIMS and the kernels' parameter structs, generated */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { LT_FLOAT32 = 1, LT_INT32 = 2, LT_UINT8 = 3, LT_BOOL = 6, LT_INT16 = 7, LT_INT8 = 9 } lt_type;

/* One model input or output: where it lives in the arena and how to read it. */
typedef struct {
    const char *name;
    lt_type type;
    uint32_t offset; /* bytes from the start of the arena */
    uint32_t bytes;
    float scale; /* 0 when not quantized */
    int32_t zero_point;
    int32_t ndim;
    int32_t dims[LT_MAX_DIMS];
} lt_tensor_info;

/* Called before (after == 0) and after (after == 1) each operator, e.g. to read a cycle counter. */
typedef void (*lt_op_hook)(int op_index, int after, void *user);

/* SVDF's weights as lowtide prepares them (lt_svdf.c): the feature weights packed four rows by four
 * (lt_dot_rows4_s8), the zero points folded into a feature bias and a time offset. */
typedef struct {
    const uint32_t *feature_weights; /* num_filters rows of input_size */
    const int32_t *feature_bias;     /* -input_zero_point * row sums (num_filters) */
    const void *time_weights;        /* num_filters x memory_size, of the state's type */
    const int32_t *time_offset;      /* -state_zero_point * sums of each filter's time weights (num_filters) */
    const int32_t *bias;             /* num_units, or NULL */
} lt_svdf_weights;

/* Each gate's weights packed four rows by four (lt_dot_rows_s8), and its biases with the zero points folded in. */
typedef struct {
    const uint32_t *input_weights[4];     /* state_size rows of input_size */
    const uint32_t *recurrent_weights[4]; /* state_size rows of state_size */
    const int32_t *input_bias[4];       /* bias - input_zero_point * row sums (state_size) */
    const int32_t *recurrent_bias[4];   /* -hidden_zero_point * row sums (state_size) */
} lt_lstm_weights;

/* int8 kernels */
void lt_conv2d_s8(const lt_conv_params *p, const int8_t *input, const int8_t *filter, const int32_t *bias,
                  const int32_t *multiplier, const int32_t *shift, int8_t *output);
void lt_depthwise_conv2d_s8(const lt_conv_params *p, const int8_t *input, const int8_t *filter, const int32_t *bias,
                            const int32_t *multiplier, const int32_t *shift, int8_t *output);
void lt_fully_connected_s8(const lt_fc_params *p, const int8_t *input, const int8_t *filter, const int32_t *bias,
                           const int32_t *multiplier, const int32_t *shift, int8_t *output);
void lt_average_pool_s8(const lt_conv_params *p, const int8_t *input, int8_t *output);
void lt_max_pool_s8(const lt_conv_params *p, const int8_t *input, int8_t *output);
void lt_add_s8(const lt_binary_params *p, const int8_t *input1, const int8_t *input2, int8_t *output);
void lt_mul_s8(const lt_binary_params *p, const int8_t *input1, const int8_t *input2, int8_t *output);
void lt_softmax_s8(const lt_softmax_params *p, const int8_t *input, int8_t *output);
void lt_softmax_s8_s16(const lt_softmax_params *p, const int8_t *input, int16_t *output);
/* RELU: requantize with p->multiplier/shift, clamp to [act_min, act_max]. RELU6: clamp the raw input to
 * [act_min, act_max] (TFLM's RELU6 does not requantize). LEAKY_RELU: identity or alpha rescale by sign. */
void lt_relu_s8(const lt_activation_params *p, const int8_t *input, int8_t *output);
void lt_relu_s16(const lt_activation_params *p, const int16_t *input, int16_t *output);
void lt_relu6_s8(const lt_activation_params *p, const int8_t *input, int8_t *output);
void lt_relu6_s16(const lt_activation_params *p, const int16_t *input, int16_t *output);
void lt_leaky_relu_s8(const lt_activation_params *p, const int8_t *input, int8_t *output);
void lt_leaky_relu_s16(const lt_activation_params *p, const int16_t *input, int16_t *output);
/* PRELU with broadcasting: input1 is the input, input2 alpha; input1/2_multiplier and shift are PreluParams'
 * output_multiplier_1/2 (identity, input x alpha). */
void lt_prelu_s8(const lt_binary_params *p, const int8_t *input, const int8_t *alpha, int8_t *output);
void lt_prelu_s16(const lt_binary_params *p, const int16_t *input, const int8_t *alpha, int16_t *output);
void lt_hard_swish_s8(const lt_hard_swish_params *p, const int8_t *input, int8_t *output);
/* int16 LOGISTIC and TANH (zero points 0, output scale 2^-15): TFLM's interpolated uint16 sigmoid table; multiplier
 * and shift rescale the input, a multiplier of 0 meaning the power-of-two case. */
void lt_logistic_s16(const lt_activation_params *p, const int16_t *input, int16_t *output);
void lt_tanh_s16(const lt_activation_params *p, const int16_t *input, int16_t *output);
/* int8 LOG_SOFTMAX (output scale 16/256, zero point 127): reverse_scaling_* turn the log of the sum back into
 * input steps. */
void lt_log_softmax_s8(const lt_softmax_params *p, int32_t reverse_scaling_divisor, int32_t reverse_scaling_shift,
                       const int8_t *input, int8_t *output);
/* A 256-entry table indexed by the input byte: int8 LOGISTIC, TANH and ELU, the table built at compile time. */
void lt_lookup_s8(const int8_t *table, const int8_t *input, int8_t *output, int32_t count);
/* SUM uses the MEAN kernels with a multiplier that leaves out 1/count (and lt_sum_f32 for float). */
void lt_mean_s16(const lt_mean_params *p, const int16_t *input, int16_t *output);
void lt_reduce_max_s8(const lt_mean_params *p, const int8_t *input, int8_t *output);
void lt_reduce_min_s8(const lt_mean_params *p, const int8_t *input, int8_t *output);
void lt_arg_max_s8(const lt_axis_params *p, const int8_t *input, int32_t *output);
void lt_arg_min_s8(const lt_axis_params *p, const int8_t *input, int32_t *output);
/* CUMSUM of int8: q holds ADD_N's rescaling (input1_*, output_*, left_shift, act_min/max). */
void lt_cumsum_s8(const lt_axis_params *p, const lt_binary_params *q, const int8_t *input, int8_t *output);
/* L2_NORMALIZATION over the last dimension (outer x depth); int8 output in Q0.7 whatever its quantization. */
void lt_l2_normalization_s8(const lt_softmax_params *p, int32_t input_zero_point, const int8_t *input,
                            int8_t *output);
void lt_mean_s8(const lt_mean_params *p, const int8_t *input, int8_t *output);
void lt_svdf_s8_s16(const lt_svdf_params *p, const lt_svdf_weights *w, const int8_t *input, int16_t *state,
                    int32_t *filter_scratch, int32_t *unit_scratch, int8_t *output);
void lt_svdf_s8_s8(const lt_svdf_params *p, const lt_svdf_weights *w, const int8_t *input, int8_t *state,
                   int32_t *filter_scratch, int32_t *unit_scratch, int8_t *output);
void lt_lstm_s8_s16(const lt_lstm_params *p, const lt_lstm_weights *w, const int8_t *input, int8_t *hidden,
                    int16_t *cell, int16_t *scratch0, int16_t *scratch1, int16_t *scratch2, int16_t *scratch3,
                    int8_t *output);
/* QUANTIZE and DEQUANTIZE. Requantize (reference_ops::Requantize) converts between int8, uint8, int16 and int32;
 * its int8 <-> uint8 fast path (XOR 0x80 when only the zero point moves by 128) gives the same bytes as the general
 * one. They may run in place when the output is no wider than the input: `output` may start at `input` (no
 * restrict on purpose). Each loop reads element i before writing output element i at byte
 * i * sizeof(output element) <= i * sizeof(input element), so a write only lands on input elements already
 * read; the compiler must assume the two may alias and keep the order. An output starting after the input would
 * not be safe. */
void lt_quantize_f32(const float *input, lt_type output_type, void *output, int32_t count, float scale,
                     int32_t zero_point);
void lt_requantize(lt_type input_type, const void *input, lt_type output_type, void *output, int32_t count,
                   int32_t input_zero_point, int32_t multiplier, int32_t shift, int32_t output_zero_point);
void lt_dequantize(lt_type input_type, const void *input, float *output, int32_t count, double scale,
                   int32_t zero_point);

void lt_batch_matmul_s8(const lt_batch_matmul_params *p, const int8_t *lhs, const int8_t *rhs, int8_t *output);
void lt_batch_matmul_f32(const lt_batch_matmul_params *p, const float *lhs, const float *rhs, float *output);
/* TRANSPOSE_CONV: lt_conv_params' in_* is the input, out_* the output, pad_* as TFLM computes it from the output
 * size. */
void lt_transpose_conv_s8(const lt_conv_params *p, const int8_t *input, const int8_t *filter, const int32_t *bias,
                          const int32_t *multiplier, const int32_t *shift, int8_t *output);
void lt_transpose_conv_f32(const lt_conv_params *p, const float *input, const float *filter, const float *bias,
                           float *output);
/* int16 activations with int8 filters (16x8): see lt_conv.c; exactly one of bias32 / bias64 is given. */
void lt_conv2d_s16(const lt_conv_params *p, const int16_t *input, const int8_t *filter, const int32_t *bias32,
                   const int64_t *bias64, const int32_t *multiplier, const int32_t *shift, int16_t *output);
void lt_depthwise_conv2d_s16(const lt_conv_params *p, const int16_t *input, const int8_t *filter,
                             const int32_t *bias32, const int64_t *bias64, const int32_t *multiplier,
                             const int32_t *shift, int16_t *output);
void lt_fully_connected_s16(const lt_fc_params *p, const int16_t *input, const int8_t *filter, const int32_t *bias32,
                            const int64_t *bias64, const int32_t *multiplier, const int32_t *shift, int16_t *output);

/* float32 kernels */
void lt_conv2d_f32(const lt_conv_params *p, const float *input, const float *filter, const float *bias,
                   float *output);
void lt_depthwise_conv2d_f32(const lt_conv_params *p, const float *input, const float *filter, const float *bias,
                             float *output);
void lt_fully_connected_f32(const lt_fc_params *p, const float *input, const float *filter, const float *bias,
                            float *output);
void lt_average_pool_f32(const lt_conv_params *p, const float *input, float *output);
void lt_max_pool_f32(const lt_conv_params *p, const float *input, float *output);
void lt_add_f32(const lt_binary_params *p, const float *input1, const float *input2, float *output);
void lt_mul_f32(const lt_binary_params *p, const float *input1, const float *input2, float *output);
void lt_softmax_f32(const lt_softmax_params *p, const float *input, float *output);
void lt_log_softmax_f32(const lt_softmax_params *p, const float *input, float *output);
void lt_l2_normalization_f32(const lt_softmax_params *p, const float *input, float *output);
void lt_logistic_f32(const float *input, float *output, int32_t count);
void lt_mean_f32(const lt_mean_params *p, const float *input, float *output);
void lt_sum_f32(const lt_mean_params *p, const float *input, float *output);
void lt_reduce_max_f32(const lt_mean_params *p, const float *input, float *output);
void lt_reduce_min_f32(const lt_mean_params *p, const float *input, float *output);
void lt_arg_max_f32(const lt_axis_params *p, const float *input, int32_t *output);
void lt_arg_min_f32(const lt_axis_params *p, const float *input, int32_t *output);
void lt_cumsum_f32(const lt_axis_params *p, const float *input, float *output);
void lt_relu_f32(const float *input, float *output, int32_t count);
void lt_relu6_f32(const float *input, float *output, int32_t count);
void lt_leaky_relu_f32(const lt_activation_params *p, const float *input, float *output);
void lt_prelu_f32(const lt_binary_params *p, const float *input, const float *alpha, float *output);
void lt_hard_swish_f32(const float *input, float *output, int32_t count);
void lt_tanh_f32(const float *input, float *output, int32_t count);
void lt_elu_f32(const float *input, float *output, int32_t count);

/* Element-wise math. SUB: ADD's arithmetic (int16: left shift 15), the difference of the rescaled inputs.
 * MAXIMUM, MINIMUM: the raw values compared (TFLM does not requantize). SQUARED_DIFFERENCE: the rescaled
 * difference squared, then requantized; int32 wraps as TFLM's int32 arithmetic does on its targets. DIV: float. */
void lt_sub_s8(const lt_binary_params *p, const int8_t *input1, const int8_t *input2, int8_t *output);
void lt_sub_s16(const lt_binary_params *p, const int16_t *input1, const int16_t *input2, int16_t *output);
void lt_sub_s32(const lt_binary_params *p, const int32_t *input1, const int32_t *input2, int32_t *output);
void lt_add_s16(const lt_binary_params *p, const int16_t *input1, const int16_t *input2, int16_t *output);
void lt_add_s32(const lt_binary_params *p, const int32_t *input1, const int32_t *input2, int32_t *output);
void lt_mul_s16(const lt_binary_params *p, const int16_t *input1, const int16_t *input2, int16_t *output);
void lt_mul_s32(const lt_binary_params *p, const int32_t *input1, const int32_t *input2, int32_t *output);
void lt_sub_f32(const lt_binary_params *p, const float *input1, const float *input2, float *output);
void lt_maximum_s8(const lt_binary_params *p, const int8_t *input1, const int8_t *input2, int8_t *output);
void lt_maximum_s16(const lt_binary_params *p, const int16_t *input1, const int16_t *input2, int16_t *output);
void lt_maximum_s32(const lt_binary_params *p, const int32_t *input1, const int32_t *input2, int32_t *output);
void lt_maximum_f32(const lt_binary_params *p, const float *input1, const float *input2, float *output);
void lt_minimum_s8(const lt_binary_params *p, const int8_t *input1, const int8_t *input2, int8_t *output);
void lt_minimum_s16(const lt_binary_params *p, const int16_t *input1, const int16_t *input2, int16_t *output);
void lt_minimum_s32(const lt_binary_params *p, const int32_t *input1, const int32_t *input2, int32_t *output);
void lt_minimum_f32(const lt_binary_params *p, const float *input1, const float *input2, float *output);
void lt_squared_difference_s8(const lt_binary_params *p, const int8_t *input1, const int8_t *input2,
                              int8_t *output);
void lt_squared_difference_s16(const lt_binary_params *p, const int16_t *input1, const int16_t *input2,
                               int16_t *output);
void lt_squared_difference_s32(const lt_binary_params *p, const int32_t *input1, const int32_t *input2,
                               int32_t *output);
void lt_squared_difference_f32(const lt_binary_params *p, const float *input1, const float *input2,
                               float *output);
void lt_div_f32(const lt_binary_params *p, const float *input1, const float *input2, float *output);
void lt_div_s8(const lt_binary_params *p, const int8_t *input1, const int8_t *input2, int8_t *output);
void lt_div_s32(const lt_binary_params *p, const int32_t *input1, const int32_t *input2, int32_t *output);
/* ADD_N: `count` elements of each of `n` inputs summed; int8 uses input1_multiplier/shift for every input. */
void lt_add_n_s8(const lt_binary_params *p, const int8_t *const *inputs, int32_t n, int8_t *output, int32_t count);
void lt_add_n_f32(const float *const *inputs, int32_t n, float *output, int32_t count);
/* ABS of quantized values: |x - input zero point|, rescaled when p->rescale, plus the output zero point. */
void lt_abs_s8(const lt_activation_params *p, const int8_t *input, int8_t *output);
void lt_abs_s16(const lt_activation_params *p, const int16_t *input, int16_t *output);
/* RSQRT of quantized values (inputs below the zero point are an error in TFLM): multiplier and shift rescale
 * 1 / sqrt(input scale) to the output scale. */
void lt_rsqrt_s8(const lt_activation_params *p, const int8_t *input, int8_t *output);
void lt_rsqrt_s16(const lt_activation_params *p, const int16_t *input, int16_t *output);

/* EQUAL, NOT_EQUAL, LESS, LESS_EQUAL, GREATER, GREATER_EQUAL with broadcasting, bool (0/1 byte) outputs. int8
 * compares the inputs rescaled (ADD's input arithmetic with left_shift 8 and each input's scale as multiplier). */
typedef enum { LT_EQUAL, LT_NOT_EQUAL, LT_LESS, LT_LESS_EQUAL, LT_GREATER, LT_GREATER_EQUAL } lt_comparison;
void lt_compare_s8(lt_comparison op, const lt_binary_params *p, const int8_t *input1, const int8_t *input2,
                   uint8_t *output);
void lt_compare_s32(lt_comparison op, const lt_binary_params *p, const int32_t *input1, const int32_t *input2,
                    uint8_t *output);
void lt_compare_f32(lt_comparison op, const lt_binary_params *p, const float *input1, const float *input2,
                    uint8_t *output);
void lt_compare_bool(lt_comparison op, const lt_binary_params *p, const uint8_t *input1, const uint8_t *input2,
                     uint8_t *output);
/* LOGICAL_AND (and_op 1) and LOGICAL_OR (and_op 0) with broadcasting; LOGICAL_NOT. */
void lt_logical(int32_t and_op, const lt_binary_params *p, const uint8_t *input1, const uint8_t *input2,
                uint8_t *output);
void lt_logical_not(const uint8_t *input, uint8_t *output, int32_t count);

/* Float functions of one element, as TFLM's float kernels compute them (libm's float functions). */
typedef enum {
    LT_ABS, LT_NEG, LT_SQUARE, LT_SQRT, LT_RSQRT, LT_EXP, LT_LOG, LT_SIN, LT_COS, LT_FLOOR, LT_CEIL, LT_ROUND
} lt_unary_op;
void lt_unary_f32(lt_unary_op op, const float *input, float *output, int32_t count);
/* CAST: static_cast of every element between int8, int16, int32 and float32 (float to integer truncates toward
 * zero and saturates to int8/int16 as the host TFLM does; integer narrowing keeps the low bits). */
void lt_cast(lt_type input_type, const void *input, lt_type output_type, void *output, int32_t count);

/* type-agnostic data movement */
void lt_copy(const void *input, void *output, uint32_t bytes); /* any overlap: memmove */
void lt_copy_strided(const lt_copy_params *p, const void *input, void *output);
void lt_fill(void *output, uint32_t count, const void *value, int32_t elem_size);
void lt_resize_nearest(const lt_resize_params *p, const int32_t *y_map, const int32_t *x_map, const void *input,
                       void *output);
void lt_gather(const lt_gather_params *p, const void *input, const int32_t *coords, void *output);
void lt_gather_nd(const lt_gather_nd_params *p, const void *input, const int32_t *indices, void *output);
void lt_select(const lt_select_params *p, const uint8_t *condition, const void *if_true, const void *if_false,
               void *output);
void lt_copy_mapped(const lt_mapped_copy_params *p, const int32_t *offsets, const void *input, void *output);
void lt_resize_bilinear_s8(const lt_resize_params *p, const int8_t *input, int8_t *output);
void lt_resize_bilinear_f32(const lt_resize_params *p, const float *input, float *output);

/* 16-bit TRANSPOSE_CONV and BATCH_MATMUL with 64-bit accumulators (lt_matmul.c), int64 MAXIMUM, MINIMUM and
 * comparisons, float FLOOR_DIV and FLOOR_MOD, DYNAMIC_UPDATE_SLICE, BROADCAST_ARGS, the hybrid EMBEDDING_LOOKUP
 * and int16 SOFTMAX. */

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

#ifdef __cplusplus
}
#endif

#endif /* LT_RUNTIME_H */
