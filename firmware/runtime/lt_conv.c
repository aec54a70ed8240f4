/* CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED and TRANSPOSE_CONV, following TFLM's reference kernels
 * (reference/integer_ops/conv.h, depthwise_conv.h, fully_connected.h, transpose_conv.h and their float versions),
 * and BATCH_MATMUL (reference/batch_matmul.h).
 * Integer accumulation is exact, so only the float kernels keep the reference's summation order. */
#include "lt_fixedpoint.h"
#include "lt_runtime.h"

static inline int32_t lt_requantize_acc(int32_t acc, int32_t multiplier, int32_t shift, int32_t output_offset,
                                        int32_t act_min, int32_t act_max) {
    acc = lt_multiply_by_quantized_multiplier(acc, multiplier, shift) + output_offset;
    return lt_clamp(acc, act_min, act_max);
}

void lt_conv2d_s8(const lt_conv_params *p, const int8_t *input, const int8_t *filter, const int32_t *bias,
                  const int32_t *multiplier, const int32_t *shift, int8_t *output) {
    const int32_t groups = p->in_c / p->filter_in_c;
    const int32_t filters_per_group = p->out_c / groups;
    for (int32_t b = 0; b < p->batches; ++b) {
        for (int32_t oy = 0; oy < p->out_h; ++oy) {
            const int32_t in_y0 = oy * p->stride_h - p->pad_h;
            for (int32_t ox = 0; ox < p->out_w; ++ox) {
                const int32_t in_x0 = ox * p->stride_w - p->pad_w;
                for (int32_t oc = 0; oc < p->out_c; ++oc) {
                    const int32_t group = oc / filters_per_group;
                    int32_t acc = 0;
                    for (int32_t fy = 0; fy < p->filter_h; ++fy) {
                        const int32_t in_y = in_y0 + p->dilation_h * fy;
                        if (in_y < 0 || in_y >= p->in_h) continue;
                        for (int32_t fx = 0; fx < p->filter_w; ++fx) {
                            const int32_t in_x = in_x0 + p->dilation_w * fx;
                            if (in_x < 0 || in_x >= p->in_w) continue;
                            const int8_t *in = input + ((b * p->in_h + in_y) * p->in_w + in_x) * p->in_c +
                                               group * p->filter_in_c;
                            const int8_t *f = filter + ((oc * p->filter_h + fy) * p->filter_w + fx) * p->filter_in_c;
                            for (int32_t ic = 0; ic < p->filter_in_c; ++ic) {
                                acc += (int32_t)f[ic] * ((int32_t)in[ic] + p->input_offset);
                            }
                        }
                    }
                    if (bias) acc += bias[oc];
                    output[((b * p->out_h + oy) * p->out_w + ox) * p->out_c + oc] =
                        (int8_t)lt_requantize_acc(acc, multiplier[oc], shift[oc], p->output_offset, p->act_min,
                                                  p->act_max);
                }
            }
        }
    }
}

void lt_depthwise_conv2d_s8(const lt_conv_params *p, const int8_t *input, const int8_t *filter, const int32_t *bias,
                            const int32_t *multiplier, const int32_t *shift, int8_t *output) {
    for (int32_t b = 0; b < p->batches; ++b) {
        for (int32_t oy = 0; oy < p->out_h; ++oy) {
            const int32_t in_y0 = oy * p->stride_h - p->pad_h;
            for (int32_t ox = 0; ox < p->out_w; ++ox) {
                const int32_t in_x0 = ox * p->stride_w - p->pad_w;
                for (int32_t ic = 0; ic < p->in_c; ++ic) {
                    for (int32_t m = 0; m < p->depth_multiplier; ++m) {
                        const int32_t oc = ic * p->depth_multiplier + m;
                        int32_t acc = 0;
                        for (int32_t fy = 0; fy < p->filter_h; ++fy) {
                            const int32_t in_y = in_y0 + p->dilation_h * fy;
                            if (in_y < 0 || in_y >= p->in_h) continue;
                            for (int32_t fx = 0; fx < p->filter_w; ++fx) {
                                const int32_t in_x = in_x0 + p->dilation_w * fx;
                                if (in_x < 0 || in_x >= p->in_w) continue;
                                const int32_t in_val = input[((b * p->in_h + in_y) * p->in_w + in_x) * p->in_c + ic];
                                const int32_t f_val = filter[(fy * p->filter_w + fx) * p->out_c + oc];
                                acc += f_val * (in_val + p->input_offset);
                            }
                        }
                        if (bias) acc += bias[oc];
                        output[((b * p->out_h + oy) * p->out_w + ox) * p->out_c + oc] =
                            (int8_t)lt_requantize_acc(acc, multiplier[oc], shift[oc], p->output_offset, p->act_min,
                                                      p->act_max);
                    }
                }
            }
        }
    }
}

void lt_fully_connected_s8(const lt_fc_params *p, const int8_t *input, const int8_t *filter, const int32_t *bias,
                           const int32_t *multiplier, const int32_t *shift, int8_t *output) {
    for (int32_t b = 0; b < p->batches; ++b) {
        const int8_t *in = input + b * p->accum_depth;
        for (int32_t oc = 0; oc < p->out_depth; ++oc) {
            const int8_t *f = filter + oc * p->accum_depth;
            int32_t acc = 0;
            for (int32_t d = 0; d < p->accum_depth; ++d) {
                acc += ((int32_t)f[d] + p->filter_offset) * ((int32_t)in[d] + p->input_offset);
            }
            if (bias) acc += bias[oc];
            output[b * p->out_depth + oc] =
                (int8_t)lt_requantize_acc(acc, multiplier[oc], shift[oc], p->output_offset, p->act_min, p->act_max);
        }
    }
}

/* The 16x8 kernels (reference_integer_ops::ConvPerChannel / DepthwiseConvPerChannel / FullyConnected on int16
 * input, int8 filter): symmetric int16 activations (no offsets), 64-bit accumulation. With an int64 bias the accumulator is
 * scaled by the int64 MultiplyByQuantizedMultiplier (a 16-bit multiplier, one rounding); with an int32 bias
 * (CONV_2D, FULLY_CONNECTED) it is the int32 accumulator and the usual int32 rescale. Exactly one bias pointer is given. */
static inline int32_t lt_scale_acc_64(int64_t acc, const int32_t *bias32, const int64_t *bias64, int32_t oc,
                                      int32_t multiplier, int32_t shift) {
    if (bias32) return lt_multiply_by_quantized_multiplier((int32_t)(acc + bias32[oc]), multiplier, shift);
    return lt_multiply_by_quantized_multiplier_wide(acc + bias64[oc], multiplier, shift);
}

void lt_conv2d_s16(const lt_conv_params *p, const int16_t *input, const int8_t *filter, const int32_t *bias32,
                   const int64_t *bias64, const int32_t *multiplier, const int32_t *shift, int16_t *output) {
    const int32_t groups = p->in_c / p->filter_in_c;
    const int32_t filters_per_group = p->out_c / groups;
    for (int32_t b = 0; b < p->batches; ++b)
        for (int32_t oy = 0; oy < p->out_h; ++oy) {
            const int32_t in_y0 = oy * p->stride_h - p->pad_h;
            for (int32_t ox = 0; ox < p->out_w; ++ox) {
                const int32_t in_x0 = ox * p->stride_w - p->pad_w;
                for (int32_t oc = 0; oc < p->out_c; ++oc) {
                    const int32_t group = oc / filters_per_group;
                    int64_t acc = 0;
                    for (int32_t fy = 0; fy < p->filter_h; ++fy) {
                        const int32_t in_y = in_y0 + p->dilation_h * fy;
                        if (in_y < 0 || in_y >= p->in_h) continue;
                        for (int32_t fx = 0; fx < p->filter_w; ++fx) {
                            const int32_t in_x = in_x0 + p->dilation_w * fx;
                            if (in_x < 0 || in_x >= p->in_w) continue;
                            const int16_t *in = input + ((b * p->in_h + in_y) * p->in_w + in_x) * p->in_c +
                                                group * p->filter_in_c;
                            const int8_t *f = filter + ((oc * p->filter_h + fy) * p->filter_w + fx) * p->filter_in_c;
                            for (int32_t ic = 0; ic < p->filter_in_c; ++ic) acc += (int32_t)f[ic] * in[ic];
                        }
                    }
                    output[((b * p->out_h + oy) * p->out_w + ox) * p->out_c + oc] = (int16_t)lt_clamp(
                        lt_scale_acc_64(acc, bias32, bias64, oc, multiplier[oc], shift[oc]), p->act_min, p->act_max);
                }
            }
        }
}

void lt_depthwise_conv2d_s16(const lt_conv_params *p, const int16_t *input, const int8_t *filter,
                             const int32_t *bias32, const int64_t *bias64, const int32_t *multiplier,
                             const int32_t *shift, int16_t *output) {
    for (int32_t b = 0; b < p->batches; ++b)
        for (int32_t oy = 0; oy < p->out_h; ++oy) {
            const int32_t in_y0 = oy * p->stride_h - p->pad_h;
            for (int32_t ox = 0; ox < p->out_w; ++ox) {
                const int32_t in_x0 = ox * p->stride_w - p->pad_w;
                for (int32_t ic = 0; ic < p->in_c; ++ic)
                    for (int32_t m = 0; m < p->depth_multiplier; ++m) {
                        const int32_t oc = ic * p->depth_multiplier + m;
                        int64_t acc = 0;
                        for (int32_t fy = 0; fy < p->filter_h; ++fy) {
                            const int32_t in_y = in_y0 + p->dilation_h * fy;
                            if (in_y < 0 || in_y >= p->in_h) continue;
                            for (int32_t fx = 0; fx < p->filter_w; ++fx) {
                                const int32_t in_x = in_x0 + p->dilation_w * fx;
                                if (in_x < 0 || in_x >= p->in_w) continue;
                                acc += (int64_t)filter[(fy * p->filter_w + fx) * p->out_c + oc] *
                                       input[((b * p->in_h + in_y) * p->in_w + in_x) * p->in_c + ic];
                            }
                        }
                        output[((b * p->out_h + oy) * p->out_w + ox) * p->out_c + oc] = (int16_t)lt_clamp(
                            lt_scale_acc_64(acc, bias32, bias64, oc, multiplier[oc], shift[oc]), p->act_min,
                            p->act_max);
                    }
            }
        }
}

void lt_fully_connected_s16(const lt_fc_params *p, const int16_t *input, const int8_t *filter, const int32_t *bias32,
                            const int64_t *bias64, const int32_t *multiplier, const int32_t *shift, int16_t *output) {
    for (int32_t b = 0; b < p->batches; ++b) {
        const int16_t *in = input + b * p->accum_depth;
        for (int32_t oc = 0; oc < p->out_depth; ++oc) {
            const int8_t *f = filter + oc * p->accum_depth;
            int64_t acc = 0;
            for (int32_t d = 0; d < p->accum_depth; ++d)
                acc += ((int32_t)f[d] + p->filter_offset) * ((int32_t)in[d] + p->input_offset);
            const int32_t scaled = lt_scale_acc_64(acc, bias32, bias64, oc, multiplier[oc], shift[oc]);
            output[b * p->out_depth + oc] = (int16_t)lt_clamp(scaled + p->output_offset, p->act_min, p->act_max);
        }
    }
}

void lt_conv2d_f32(const lt_conv_params *p, const float *input, const float *filter, const float *bias,
                   float *output) {
    const int32_t groups = p->in_c / p->filter_in_c;
    const int32_t filters_per_group = p->out_c / groups;
    for (int32_t b = 0; b < p->batches; ++b) {
        for (int32_t oy = 0; oy < p->out_h; ++oy) {
            const int32_t in_y0 = oy * p->stride_h - p->pad_h;
            for (int32_t ox = 0; ox < p->out_w; ++ox) {
                const int32_t in_x0 = ox * p->stride_w - p->pad_w;
                for (int32_t oc = 0; oc < p->out_c; ++oc) {
                    const int32_t group = oc / filters_per_group;
                    float total = 0.0f;
                    for (int32_t fy = 0; fy < p->filter_h; ++fy) {
                        const int32_t in_y = in_y0 + p->dilation_h * fy;
                        for (int32_t fx = 0; fx < p->filter_w; ++fx) {
                            const int32_t in_x = in_x0 + p->dilation_w * fx;
                            if (in_y < 0 || in_y >= p->in_h || in_x < 0 || in_x >= p->in_w) continue;
                            const float *in = input + ((b * p->in_h + in_y) * p->in_w + in_x) * p->in_c +
                                              group * p->filter_in_c;
                            const float *f = filter + ((oc * p->filter_h + fy) * p->filter_w + fx) * p->filter_in_c;
                            for (int32_t ic = 0; ic < p->filter_in_c; ++ic) total += in[ic] * f[ic];
                        }
                    }
                    const float bias_value = bias ? bias[oc] : 0.0f;
                    output[((b * p->out_h + oy) * p->out_w + ox) * p->out_c + oc] =
                        lt_clamp_f(total + bias_value, p->act_min_f, p->act_max_f);
                }
            }
        }
    }
}

void lt_depthwise_conv2d_f32(const lt_conv_params *p, const float *input, const float *filter, const float *bias,
                             float *output) {
    for (int32_t b = 0; b < p->batches; ++b) {
        for (int32_t oy = 0; oy < p->out_h; ++oy) {
            const int32_t in_y0 = oy * p->stride_h - p->pad_h;
            for (int32_t ox = 0; ox < p->out_w; ++ox) {
                const int32_t in_x0 = ox * p->stride_w - p->pad_w;
                for (int32_t ic = 0; ic < p->in_c; ++ic) {
                    for (int32_t m = 0; m < p->depth_multiplier; ++m) {
                        const int32_t oc = ic * p->depth_multiplier + m;
                        float total = 0.0f;
                        for (int32_t fy = 0; fy < p->filter_h; ++fy) {
                            const int32_t in_y = in_y0 + p->dilation_h * fy;
                            for (int32_t fx = 0; fx < p->filter_w; ++fx) {
                                const int32_t in_x = in_x0 + p->dilation_w * fx;
                                if (in_y < 0 || in_y >= p->in_h || in_x < 0 || in_x >= p->in_w) continue;
                                total += input[((b * p->in_h + in_y) * p->in_w + in_x) * p->in_c + ic] *
                                         filter[(fy * p->filter_w + fx) * p->out_c + oc];
                            }
                        }
                        const float bias_value = bias ? bias[oc] : 0.0f;
                        output[((b * p->out_h + oy) * p->out_w + ox) * p->out_c + oc] =
                            lt_clamp_f(total + bias_value, p->act_min_f, p->act_max_f);
                    }
                }
            }
        }
    }
}

void lt_fully_connected_f32(const lt_fc_params *p, const float *input, const float *filter, const float *bias,
                            float *output) {
    for (int32_t b = 0; b < p->batches; ++b) {
        for (int32_t oc = 0; oc < p->out_depth; ++oc) {
            float total = 0.0f;
            for (int32_t d = 0; d < p->accum_depth; ++d) {
                total += input[b * p->accum_depth + d] * filter[oc * p->accum_depth + d];
            }
            const float bias_value = bias ? bias[oc] : 0.0f;
            output[b * p->out_depth + oc] = lt_clamp_f(total + bias_value, p->act_min_f, p->act_max_f);
        }
    }
}

/* TRANSPOSE_CONV. The reference scatters every input pixel's products into the output (an int32 scratch for
 * int8); here each output element gathers the products that land on it, in the order the scatter adds them
 * (input row, column, channel ascending), so the float sums are the same too and no scratch is needed. The
 * filter is [out_c][filter_h][filter_w][in_c]. */
#define LT_TRANSPOSE_CONV(ACC_T, ACC_INIT, PRODUCT, FINISH)                                                    \
    for (int32_t b = 0; b < p->batches; ++b)                                                                   \
        for (int32_t oy = 0; oy < p->out_h; ++oy)                                                              \
            for (int32_t ox = 0; ox < p->out_w; ++ox)                                                          \
                for (int32_t oc = 0; oc < p->out_c; ++oc) {                                                    \
                    ACC_T acc = ACC_INIT;                                                                      \
                    for (int32_t iy = 0; iy < p->in_h; ++iy) {                                                 \
                        const int32_t fy = oy - (iy * p->stride_h - p->pad_h);                                 \
                        if (fy < 0 || fy >= p->filter_h) continue;                                             \
                        for (int32_t ix = 0; ix < p->in_w; ++ix) {                                             \
                            const int32_t fx = ox - (ix * p->stride_w - p->pad_w);                             \
                            if (fx < 0 || fx >= p->filter_w) continue;                                         \
                            const int64_t in_at = ((int64_t)(b * p->in_h + iy) * p->in_w + ix) * p->in_c;      \
                            const int64_t f_at = ((int64_t)(oc * p->filter_h + fy) * p->filter_w + fx) * p->in_c; \
                            for (int32_t ic = 0; ic < p->in_c; ++ic) acc += PRODUCT;                           \
                        }                                                                                      \
                    }                                                                                          \
                    output[(((int64_t)b * p->out_h + oy) * p->out_w + ox) * p->out_c + oc] = FINISH;           \
                }

void lt_transpose_conv_s8(const lt_conv_params *p, const int8_t *input, const int8_t *filter, const int32_t *bias,
                          const int32_t *multiplier, const int32_t *shift, int8_t *output) {
    LT_TRANSPOSE_CONV(int32_t, 0, ((int32_t)input[in_at + ic] + p->input_offset) * filter[f_at + ic],
                      (int8_t)lt_requantize_acc(acc + (bias ? bias[oc] : 0), multiplier[oc], shift[oc],
                                                p->output_offset, p->act_min, p->act_max))
}

void lt_transpose_conv_f32(const lt_conv_params *p, const float *input, const float *filter, const float *bias,
                           float *output) {
    LT_TRANSPOSE_CONV(float, 0.0f, input[in_at + ic] * filter[f_at + ic],
                      lt_clamp_f(bias ? acc + bias[oc] : acc, p->act_min_f, p->act_max_f))
}

/* The depth is summed in ascending order, as the reference does (float sums depend on it). */
#define LT_BATCH_MATMUL(ACC_T, VALUE_LHS, VALUE_RHS, FINISH)                                                 \
    int32_t idx[LT_MAX_DIMS] = {0};                                                                          \
    int32_t lb = 0, rb = 0, batches = 1;                                                                     \
    for (int32_t d = 0; d < p->batch_ndim; ++d) batches *= p->batch_dims[d];                                \
    for (int32_t o = 0; o < batches; ++o) {                                                                  \
        for (int32_t i = 0; i < p->rows; ++i)                                                                \
            for (int32_t j = 0; j < p->cols; ++j) {                                                          \
                ACC_T acc = 0;                                                                               \
                for (int32_t k = 0; k < p->depth; ++k)                                                       \
                    acc += (VALUE_LHS(lhs[lb + i * p->lhs_row_step + k * p->lhs_depth_step])) *              \
                           (VALUE_RHS(rhs[rb + k * p->rhs_depth_step + j * p->rhs_col_step]));              \
                output[((int64_t)o * p->rows + i) * p->cols + j] = FINISH;                                   \
            }                                                                                                \
        for (int32_t d = p->batch_ndim - 1; d >= 0; --d) {                                                   \
            lb += p->lhs_batch_steps[d];                                                                     \
            rb += p->rhs_batch_steps[d];                                                                     \
            if (++idx[d] < p->batch_dims[d]) break;                                                          \
            lb -= p->lhs_batch_steps[d] * p->batch_dims[d];                                                  \
            rb -= p->rhs_batch_steps[d] * p->batch_dims[d];                                                  \
            idx[d] = 0;                                                                                      \
        }                                                                                                    \
    }

#define LT_LHS_S8(v) ((int32_t)(v) + p->lhs_offset)
#define LT_RHS_S8(v) ((int32_t)(v) + p->rhs_offset)
#define LT_AS_IS(v) (v)

void lt_batch_matmul_s8(const lt_batch_matmul_params *p, const int8_t *lhs, const int8_t *rhs, int8_t *output) {
    LT_BATCH_MATMUL(int32_t, LT_LHS_S8, LT_RHS_S8,
                    (int8_t)lt_requantize_acc(acc, p->multiplier, p->shift, p->output_offset, INT8_MIN, INT8_MAX))
}

void lt_batch_matmul_f32(const lt_batch_matmul_params *p, const float *lhs, const float *rhs, float *output) {
    LT_BATCH_MATMUL(float, LT_AS_IS, LT_AS_IS, acc)
}
