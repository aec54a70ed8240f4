/* AVERAGE_POOL_2D, MAX_POOL_2D (reference/pooling.h, integer_ops/pooling.h) and MEAN (reference/reduce.h
 * QuantizedMeanOrSum) as TFLM's reduce kernel dispatches it. */
#include <float.h>

#include "lt_fixedpoint.h"
#include "lt_runtime.h"

/* The window of one output position, clipped to the input as the reference kernels clip it. */
typedef struct {
    int32_t y0, x0, fy_start, fy_end, fx_start, fx_end;
} lt_window;

static lt_window lt_pool_window(const lt_conv_params *p, int32_t oy, int32_t ox) {
    lt_window w;
    w.y0 = oy * p->stride_h - p->pad_h;
    w.x0 = ox * p->stride_w - p->pad_w;
    w.fy_start = w.y0 < 0 ? -w.y0 : 0;
    w.fy_end = p->filter_h < p->in_h - w.y0 ? p->filter_h : p->in_h - w.y0;
    w.fx_start = w.x0 < 0 ? -w.x0 : 0;
    w.fx_end = p->filter_w < p->in_w - w.x0 ? p->filter_w : p->in_w - w.x0;
    return w;
}

#define LT_POOL_LOOP(...)                                                                           \
    for (int32_t b = 0; b < p->batches; ++b)                                                        \
        for (int32_t oy = 0; oy < p->out_h; ++oy)                                                   \
            for (int32_t ox = 0; ox < p->out_w; ++ox) {                                             \
                const lt_window w = lt_pool_window(p, oy, ox);                                      \
                for (int32_t c = 0; c < p->in_c; ++c) {                                             \
                    const int32_t out_index = ((b * p->out_h + oy) * p->out_w + ox) * p->out_c + c; \
                    __VA_ARGS__                                                                          \
                }                                                                                   \
            }

#define LT_IN(fy, fx) input[((b * p->in_h + w.y0 + (fy)) * p->in_w + w.x0 + (fx)) * p->in_c + c]

void lt_average_pool_s8(const lt_conv_params *p, const int8_t *input, int8_t *output) {
    LT_POOL_LOOP({
        int32_t acc = 0, count = 0;
        for (int32_t fy = w.fy_start; fy < w.fy_end; ++fy)
            for (int32_t fx = w.fx_start; fx < w.fx_end; ++fx) {
                acc += LT_IN(fy, fx);
                ++count;
            }
        if (count == 0) count = 1; /* TFLM fails the op here; a planned model never has an empty window */
        acc = acc > 0 ? (acc + count / 2) / count : (acc - count / 2) / count;
        output[out_index] = (int8_t)lt_clamp(acc, p->act_min, p->act_max);
    })
}

void lt_max_pool_s8(const lt_conv_params *p, const int8_t *input, int8_t *output) {
    LT_POOL_LOOP({
        int32_t max = INT8_MIN;
        for (int32_t fy = w.fy_start; fy < w.fy_end; ++fy)
            for (int32_t fx = w.fx_start; fx < w.fx_end; ++fx) {
                const int32_t v = LT_IN(fy, fx);
                if (v > max) max = v;
            }
        output[out_index] = (int8_t)lt_clamp(max, p->act_min, p->act_max);
    })
}

void lt_average_pool_f32(const lt_conv_params *p, const float *input, float *output) {
    LT_POOL_LOOP({
        float total = 0.0f;
        int32_t count = 0;
        for (int32_t fy = w.fy_start; fy < w.fy_end; ++fy)
            for (int32_t fx = w.fx_start; fx < w.fx_end; ++fx) {
                total += LT_IN(fy, fx);
                ++count;
            }
        output[out_index] = lt_clamp_f(total / (float)count, p->act_min_f, p->act_max_f);
    })
}

void lt_max_pool_f32(const lt_conv_params *p, const float *input, float *output) {
    LT_POOL_LOOP({
        float max = -FLT_MAX;
        for (int32_t fy = w.fy_start; fy < w.fy_end; ++fy)
            for (int32_t fx = w.fx_start; fx < w.fx_end; ++fx) {
                const float v = LT_IN(fy, fx);
                if (v > max) max = v;
            }
        output[out_index] = lt_clamp_f(max, p->act_min_f, p->act_max_f);
    })
}

/* Walks the elements reduced into one output: calls `ACC` with the input element offset. */
#define LT_MEAN_SUM(base, ACC)                                                 \
    do {                                                                       \
        int32_t idx[LT_MAX_DIMS] = {0};                                        \
        int32_t offset = (base);                                               \
        for (int32_t n = 0; n < p->count; ++n) {                               \
            ACC;                                                               \
            for (int32_t d = p->reduced_ndim - 1; d >= 0; --d) {               \
                offset += p->reduced_steps[d];                                 \
                if (++idx[d] < p->reduced_dims[d]) break;                      \
                offset -= p->reduced_steps[d] * p->reduced_dims[d];            \
                idx[d] = 0;                                                    \
            }                                                                  \
        }                                                                      \
    } while (0)

static int32_t lt_kept_count(const lt_mean_params *p) {
    int32_t n = 1;
    for (int32_t d = 0; d < p->kept_ndim; ++d) n *= p->kept_dims[d];
    return n;
}

static int32_t lt_next_kept(const lt_mean_params *p, int32_t *idx, int32_t base) {
    for (int32_t d = p->kept_ndim - 1; d >= 0; --d) {
        base += p->kept_steps[d];
        if (++idx[d] < p->kept_dims[d]) return base;
        base -= p->kept_steps[d] * p->kept_dims[d];
        idx[d] = 0;
    }
    return base;
}

void lt_mean_s8(const lt_mean_params *p, const int8_t *input, int8_t *output) {
    const int32_t outputs = lt_kept_count(p);
    int32_t kept[LT_MAX_DIMS] = {0};
    int32_t base = 0;
    for (int32_t o = 0; o < outputs; ++o) {
        int32_t sum = 0;
        LT_MEAN_SUM(base, sum += input[offset]);
        const int32_t result = lt_multiply_by_quantized_multiplier(sum - p->input_zero_point * p->count,
                                                                   p->multiplier, p->shift);
        output[o] = (int8_t)lt_clamp(result + p->output_zero_point, INT8_MIN, INT8_MAX);
        base = lt_next_kept(p, kept, base);
    }
}

void lt_mean_f32(const lt_mean_params *p, const float *input, float *output) {
    const int32_t outputs = lt_kept_count(p);
    int32_t kept[LT_MAX_DIMS] = {0};
    int32_t base = 0;
    for (int32_t o = 0; o < outputs; ++o) {
        float sum = 0.0f;
        LT_MEAN_SUM(base, sum += input[offset]);
        output[o] = sum / (float)p->count;
        base = lt_next_kept(p, kept, base);
    }
}
