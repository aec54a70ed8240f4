/* SVDF, integer (svdf_common.cc EvalIntegerSvdfReference): int8 input, weights and output, with the time weights and
 * the persistent activation state both int16 or both int8. Each invocation shifts the state one step left,
 * writes the feature projection of the new input into each filter's newest slot, then filters every filter's
 * memory with its time weights. int32 sums wrap as TFLM's do on its targets (signed overflow is undefined in C).
 *
 * lowtide prepares the weights offline: the feature weights packed four rows by four for lt_dot_rows4_s8, the
 * input zero point folded into a feature bias (-zero_point * row sum) and the state zero point into a time offset
 * per filter (-zero_point * sum of its time weights), so the dot products multiply raw values (SMLAD on the DSP
 * cores); the sums are the reference's modulo 2^32. */
#include <string.h>

#include "lt_conv_dsp.h"
#include "lt_fixedpoint.h"
#include "lt_runtime.h"

/* The state moves `bytes` (its element size) down: a word at a time, each read before any byte of it is written. */
static void lt_shift_down(uint8_t *data, int32_t bytes, int32_t count) {
    int32_t i = 0;
    for (; i + 4 <= count; i += 4) {
        const uint32_t v = lt_read32(data + i + bytes);
        memcpy(data + i, &v, 4);
    }
    for (; i < count; ++i) data[i] = data[i + bytes];
}

/* The feature projection of each batch's input into every filter's newest state slot. */
static void lt_svdf_features(const lt_svdf_params *p, const lt_svdf_weights *w, const int8_t *input, void *state,
                             int32_t state_bytes) {
    const int32_t memory = p->memory_size, filters = p->num_filters, k = p->input_size;
    const int32_t state_min = state_bytes == 2 ? INT16_MIN : INT8_MIN;
    const int32_t state_max = state_bytes == 2 ? INT16_MAX : INT8_MAX;
    for (int32_t b = 0; b < p->batches; ++b) {
        const int8_t *x = input + b * k;
        const uint32_t tail = lt_tail_word(x, k);
        const uint32_t *rows = w->feature_weights;
        for (int32_t f = 0; f < filters;) {
            int32_t acc[4];
            const int32_t n = f + 4 <= filters ? 4 : 1;
            if (n == 4) {
                acc[0] = w->feature_bias[f];
                acc[1] = w->feature_bias[f + 1];
                acc[2] = w->feature_bias[f + 2];
                acc[3] = w->feature_bias[f + 3];
                rows = lt_dot_rows4_s8(x, k, tail, rows, acc);
            } else {
                acc[0] = w->feature_bias[f];
                rows = lt_dot_row_s8(x, k, tail, rows, acc);
            }
            for (int32_t j = 0; j < n; ++j, ++f) {
                const int32_t dot = lt_scale_by_quantized_multiplier(acc[j], p->feature_multiplier, p->feature_shift);
                /* the state's zero point goes in before the clamp to the state type */
                const int32_t value = lt_clamp(lt_wrap_add(p->state_zero_point, dot), state_min, state_max);
                const int32_t slot = (b * filters + f) * memory + memory - 1;
                if (state_bytes == 2) ((int16_t *)state)[slot] = (int16_t)value;
                else ((int8_t *)state)[slot] = (int8_t)value;
            }
        }
    }
}

/* sum_j time[j] * state[j] over one filter's memory: int16 pairs by SMLAD, the odd last one by SMLABB. */
static int32_t lt_time_dot_s16(const int16_t *time, const int16_t *state, int32_t memory, int32_t acc) {
    int32_t j = 0;
    for (; j + 2 <= memory; j += 2) acc = lt_smlad(lt_read32(time + j), lt_read32(state + j), acc);
    if (j < memory) acc = lt_smlabb((uint16_t)time[j], (uint16_t)state[j], acc);
    return acc;
}

/* The same on int8: four at a time by SXTB16 and SMLAD, the rest one by one. */
static int32_t lt_time_dot_s8(const int8_t *time, const int8_t *state, int32_t memory, int32_t acc) {
    int32_t j = 0;
    for (; j + 4 <= memory; j += 4) {
        const uint32_t t = lt_read32(time + j), s = lt_read32(state + j);
        acc = lt_smlad(lt_sxtb16(t), lt_sxtb16(s), acc);
        acc = lt_smlad(lt_sxtb16_ror8(t), lt_sxtb16_ror8(s), acc);
    }
    for (; j < memory; ++j) acc = lt_wrap_add(acc, time[j] * state[j]);
    return acc;
}

static void lt_svdf_any(const lt_svdf_params *p, const lt_svdf_weights *w, const int8_t *input, void *state,
                        int32_t state_bytes, int32_t *filter_scratch, int32_t *unit_scratch, int8_t *output) {
    const int32_t memory = p->memory_size, filters = p->num_filters, units = p->num_units;
    const int32_t state_count = p->batches * filters * memory;

    /* The whole state moves one element left; every filter's last slot is then overwritten below. */
    if (state_count > 1) lt_shift_down((uint8_t *)state, state_bytes, (state_count - 1) * state_bytes);
    lt_svdf_features(p, w, input, state, state_bytes);

    for (int32_t b = 0; b < p->batches; ++b) {
        for (int32_t f = 0; f < filters; ++f) {
            const int32_t base = (b * filters + f) * memory;
            filter_scratch[b * filters + f] =
                state_bytes == 2
                    ? lt_time_dot_s16((const int16_t *)w->time_weights + f * memory, (const int16_t *)state + base,
                                      memory, w->time_offset[f])
                    : lt_time_dot_s8((const int8_t *)w->time_weights + f * memory, (const int8_t *)state + base,
                                     memory, w->time_offset[f]);
        }
    }

    for (int32_t b = 0; b < p->batches; ++b) {
        for (int32_t u = 0; u < units; ++u) {
            int32_t sum = w->bias ? w->bias[u] : 0;
            for (int32_t r = 0; r < p->rank; ++r) sum = lt_wrap_add(sum, filter_scratch[b * filters + u * p->rank + r]);
            unit_scratch[b * units + u] = sum;
        }
    }

    for (int32_t i = 0; i < p->batches * units; ++i) {
        const int32_t scaled =
            lt_multiply_by_quantized_multiplier(unit_scratch[i], p->output_multiplier, p->output_shift);
        output[i] = (int8_t)lt_clamp(lt_wrap_add(scaled, p->output_zero_point), INT8_MIN, INT8_MAX);
    }
}

void lt_svdf_s8_s16(const lt_svdf_params *p, const lt_svdf_weights *w, const int8_t *input, int16_t *state,
                    int32_t *filter_scratch, int32_t *unit_scratch, int8_t *output) {
    lt_svdf_any(p, w, input, state, 2, filter_scratch, unit_scratch, output);
}

void lt_svdf_s8_s8(const lt_svdf_params *p, const lt_svdf_weights *w, const int8_t *input, int8_t *state,
                   int32_t *filter_scratch, int32_t *unit_scratch, int8_t *output) {
    lt_svdf_any(p, w, input, state, 1, filter_scratch, unit_scratch, output);
}
