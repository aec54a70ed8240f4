/* The 16-bit matrix products: TRANSPOSE_CONV 16x8 (reference_integer_ops::TransposeConv on int16 input and int8
 * filter, an int64 scratch) and BATCH_MATMUL on int16 (reference_ops::BatchMatMul<int16_t, int64_t>). Both sum in
 * 64 bits and scale with the int64 MultiplyByQuantizedMultiplier: a 16-bit multiplier, one rounding. Zero points
 * are 0, as TFLM requires, so there are no offsets. */
#include "lt_fixedpoint.h"
#include "lt_runtime.h"

static inline int16_t lt_scale_to_s16(int64_t acc, int32_t multiplier, int32_t shift, int32_t act_min,
                                      int32_t act_max) {
    return (int16_t)lt_clamp(lt_multiply_by_quantized_multiplier_wide(acc, multiplier, shift), act_min, act_max);
}

/* Each output element gathers the products the reference scatters onto it (integer sums: the order is free). */
void lt_transpose_conv_s16(const lt_conv_params *p, const int16_t *input, const int8_t *filter, const int64_t *bias,
                           const int32_t *multiplier, const int32_t *shift, int16_t *output) {
    for (int32_t b = 0; b < p->batches; ++b)
        for (int32_t oy = 0; oy < p->out_h; ++oy)
            for (int32_t ox = 0; ox < p->out_w; ++ox)
                for (int32_t oc = 0; oc < p->out_c; ++oc) {
                    int64_t acc = 0;
                    for (int32_t iy = 0; iy < p->in_h; ++iy) {
                        const int32_t fy = oy - (iy * p->stride_h - p->pad_h);
                        if (fy < 0 || fy >= p->filter_h) continue;
                        for (int32_t ix = 0; ix < p->in_w; ++ix) {
                            const int32_t fx = ox - (ix * p->stride_w - p->pad_w);
                            if (fx < 0 || fx >= p->filter_w) continue;
                            const int16_t *in = input + ((int64_t)(b * p->in_h + iy) * p->in_w + ix) * p->in_c;
                            const int8_t *f = filter + ((int64_t)(oc * p->filter_h + fy) * p->filter_w + fx) * p->in_c;
                            for (int32_t ic = 0; ic < p->in_c; ++ic) acc += (int32_t)in[ic] * f[ic];
                        }
                    }
                    if (bias) acc += bias[oc];
                    output[(((int64_t)b * p->out_h + oy) * p->out_w + ox) * p->out_c + oc] =
                        lt_scale_to_s16(acc, multiplier[oc], shift[oc], p->act_min, p->act_max);
                }
}

void lt_batch_matmul_s16(const lt_batch_matmul_params *p, const int16_t *lhs, const int16_t *rhs, int16_t *output) {
    int32_t idx[LT_MAX_DIMS] = {0};
    int32_t lb = 0, rb = 0, batches = 1;
    for (int32_t d = 0; d < p->batch_ndim; ++d) batches *= p->batch_dims[d];
    for (int32_t o = 0; o < batches; ++o) {
        for (int32_t i = 0; i < p->rows; ++i)
            for (int32_t j = 0; j < p->cols; ++j) {
                int64_t acc = 0;
                for (int32_t k = 0; k < p->depth; ++k)
                    acc += (int32_t)lhs[lb + i * p->lhs_row_step + k * p->lhs_depth_step] *
                           rhs[rb + k * p->rhs_depth_step + j * p->rhs_col_step];
                output[((int64_t)o * p->rows + i) * p->cols + j] =
                    lt_scale_to_s16(acc, p->multiplier, p->shift, INT16_MIN, INT16_MAX);
            }
        for (int32_t d = p->batch_ndim - 1; d >= 0; --d) {
            lb += p->lhs_batch_steps[d];
            rb += p->rhs_batch_steps[d];
            if (++idx[d] < p->batch_dims[d]) break;
            lb -= p->lhs_batch_steps[d] * p->batch_dims[d];
            rb -= p->rhs_batch_steps[d] * p->batch_dims[d];
            idx[d] = 0;
        }
    }
}
