/* AVERAGE_POOL_2D, MAX_POOL_2D (reference/pooling.h, integer_ops/pooling.h), MEAN and SUM (reference/reduce.h
 * QuantizedMeanOrSum) as TFLM's reduce kernel dispatches them, REDUCE_MAX and REDUCE_MIN (ReduceGeneric),
 * ARG_MAX and ARG_MIN (reference/arg_min_max.h) and CUMSUM (reference/cumsum.h). */
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

/* MEAN and SUM of int16 (QuantizedMeanOrSum<int16_t>): as lt_mean_s8, clamped to int16. */
void lt_mean_s16(const lt_mean_params *p, const int16_t *input, int16_t *output) {
    const int32_t outputs = lt_kept_count(p);
    int32_t kept[LT_MAX_DIMS] = {0};
    int32_t base = 0;
    for (int32_t o = 0; o < outputs; ++o) {
        int32_t sum = 0;
        LT_MEAN_SUM(base, sum += input[offset]);
        const int32_t result = lt_multiply_by_quantized_multiplier(sum - p->input_zero_point * p->count,
                                                                   p->multiplier, p->shift);
        output[o] = (int16_t)lt_clamp(result + p->output_zero_point, INT16_MIN, INT16_MAX);
        base = lt_next_kept(p, kept, base);
    }
}

/* SUM of floats: ReduceGeneric adds each input element to its output in input order, from 0. */
void lt_sum_f32(const lt_mean_params *p, const float *input, float *output) {
    const int32_t outputs = lt_kept_count(p);
    int32_t kept[LT_MAX_DIMS] = {0};
    int32_t base = 0;
    for (int32_t o = 0; o < outputs; ++o) {
        float sum = 0.0f;
        LT_MEAN_SUM(base, sum = input[offset] + sum);
        output[o] = sum;
        base = lt_next_kept(p, kept, base);
    }
}

/* REDUCE_MAX and REDUCE_MIN (MinMaxReducerCompare): from the type's lowest (highest) value, in input order. */
#define LT_REDUCE_EXTREMUM(T, initial, KEEP)                                       \
    const int32_t outputs = lt_kept_count(p);                                      \
    int32_t kept[LT_MAX_DIMS] = {0};                                               \
    int32_t base = 0;                                                              \
    for (int32_t o = 0; o < outputs; ++o) {                                        \
        T current = (initial);                                                     \
        LT_MEAN_SUM(base, { const T in = input[offset]; current = KEEP; });        \
        output[o] = current;                                                       \
        base = lt_next_kept(p, kept, base);                                        \
    }

void lt_reduce_max_s8(const lt_mean_params *p, const int8_t *input, int8_t *output) {
    LT_REDUCE_EXTREMUM(int8_t, INT8_MIN, in > current ? in : current)
}

void lt_reduce_max_f32(const lt_mean_params *p, const float *input, float *output) {
    LT_REDUCE_EXTREMUM(float, -FLT_MAX, in > current ? in : current)
}

void lt_reduce_min_s8(const lt_mean_params *p, const int8_t *input, int8_t *output) {
    LT_REDUCE_EXTREMUM(int8_t, INT8_MAX, in < current ? in : current)
}

void lt_reduce_min_f32(const lt_mean_params *p, const float *input, float *output) {
    LT_REDUCE_EXTREMUM(float, FLT_MAX, in < current ? in : current)
}

/* ArgMinMax: the first index along the axis whose value beats every earlier one strictly. */
#define LT_ARG_EXTREMUM(T, BEATS)                                                              \
    for (int32_t outer = 0; outer < p->outer; ++outer)                                         \
        for (int32_t inner = 0; inner < p->inner; ++inner) {                                   \
            const T *line = input + (int64_t)outer * p->axis_size * p->inner + inner;          \
            T best = line[0];                                                                  \
            int32_t best_index = 0;                                                            \
            for (int32_t i = 1; i < p->axis_size; ++i) {                                       \
                const T value = line[(int64_t)i * p->inner];                                   \
                if (BEATS) {                                                                   \
                    best = value;                                                              \
                    best_index = i;                                                            \
                }                                                                              \
            }                                                                                  \
            output[outer * p->inner + inner] = best_index;                                     \
        }

void lt_arg_max_s8(const lt_axis_params *p, const int8_t *input, int32_t *output) {
    LT_ARG_EXTREMUM(int8_t, value > best)
}

void lt_arg_max_f32(const lt_axis_params *p, const float *input, int32_t *output) {
    LT_ARG_EXTREMUM(float, value > best)
}

void lt_arg_min_s8(const lt_axis_params *p, const int8_t *input, int32_t *output) {
    LT_ARG_EXTREMUM(int8_t, value < best)
}

void lt_arg_min_f32(const lt_axis_params *p, const float *input, int32_t *output) {
    LT_ARG_EXTREMUM(float, value < best)
}

/* CUMSUM (reference_ops::CumSum) along each line: `outer` is the product of the dimensions before the axis and
 * `inner` of those after, so element (o, d, i) is at (o * axis_size + d) * inner + i. Lines are independent, so
 * the order they are visited in does not matter; along a line, `reverse` runs from the end. */
#define LT_CUMSUM_LINES(BODY)                                  \
    for (int32_t o = 0; o < p->outer; ++o)                     \
        for (int32_t i = 0; i < p->inner; ++i) BODY

void lt_cumsum_f32(const lt_axis_params *p, const float *input, float *output) {
    LT_CUMSUM_LINES({
        float accumulator = 0;
        for (int32_t di = 0; di < p->axis_size; ++di) {
            const int32_t d = p->reverse ? p->axis_size - 1 - di : di;
            const int64_t index = ((int64_t)o * p->axis_size + d) * p->inner + i;
            if (p->exclusive) {
                output[index] = accumulator;
                accumulator = accumulator + input[index];
            } else {
                accumulator = accumulator + input[index];
                output[index] = accumulator;
            }
        }
    })
}

void lt_cumsum_s8(const lt_axis_params *p, const lt_binary_params *q, const int8_t *input, int8_t *output) {
    LT_CUMSUM_LINES({
        int32_t accumulator = lt_multiply_by_quantized_multiplier(lt_shl(q->input1_offset, q->left_shift),
                                                                  q->input1_multiplier, q->input1_shift);
        for (int32_t di = 0; di < p->axis_size; ++di) {
            const int32_t d = p->reverse ? p->axis_size - 1 - di : di;
            const int64_t index = ((int64_t)o * p->axis_size + d) * p->inner + i;
            const int32_t scaled = lt_multiply_by_quantized_multiplier(
                lt_shl(q->input1_offset + input[index], q->left_shift), q->input1_multiplier, q->input1_shift);
            int32_t sum;
            if (p->exclusive) {
                sum = accumulator;
                accumulator += scaled;
            } else {
                accumulator += scaled;
                sum = accumulator;
            }
            const int32_t raw =
                lt_multiply_by_quantized_multiplier(sum, q->output_multiplier, q->output_shift) + q->output_offset;
            output[index] = (int8_t)lt_clamp(raw, q->act_min, q->act_max);
        }
    })
}
