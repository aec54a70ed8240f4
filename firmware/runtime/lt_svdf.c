/* SVDF, integer (svdf_common.cc EvalIntegerSvdfReference): int8 input, weights and output, with the time weights and
 * the persistent activation state both int16 or both int8. Each invocation shifts the state one step left,
 * writes the feature projection of the new input into each filter's newest slot, then filters every filter's
 * memory with its time weights. int32 sums wrap as TFLM's do on its targets (signed overflow is undefined in C). */
#include <string.h>

#include "lt_fixedpoint.h"
#include "lt_runtime.h"

/* One kernel for both state widths: `state_bytes` (1 or 2) says how the state and the time weights are stored. */
static int32_t lt_load(const void *data, int32_t i, int32_t bytes) {
    return bytes == 2 ? ((const int16_t *)data)[i] : ((const int8_t *)data)[i];
}

static void lt_svdf_any(const lt_svdf_params *p, const int8_t *input, const int8_t *weights_feature,
                        const void *weights_time, const int32_t *bias, void *state, int32_t state_bytes,
                        int32_t *filter_scratch, int32_t *unit_scratch, int8_t *output) {
    const int32_t memory = p->memory_size, filters = p->num_filters, units = p->num_units;
    const int32_t state_min = state_bytes == 2 ? INT16_MIN : INT8_MIN;
    const int32_t state_max = state_bytes == 2 ? INT16_MAX : INT8_MAX;
    const int32_t state_count = p->batches * filters * memory;

    /* The whole state moves one element left; every filter's last slot is then overwritten below. */
    if (state_count > 1)
        memmove(state, (uint8_t *)state + state_bytes, (size_t)(state_count - 1) * (size_t)state_bytes);

    for (int32_t b = 0; b < p->batches; ++b) {
        const int8_t *in = input + b * p->input_size;
        for (int32_t f = 0; f < filters; ++f) {
            const int8_t *row = weights_feature + f * p->input_size;
            int32_t dot = 0;
            for (int32_t c = 0; c < p->input_size; ++c) dot = lt_wrap_add(dot, row[c] * (in[c] - p->input_zero_point));
            dot = lt_multiply_by_quantized_multiplier(dot, p->feature_multiplier, p->feature_shift);
            /* the state's zero point goes in before the clamp to the state type */
            const int32_t value = lt_clamp(lt_wrap_add(p->state_zero_point, dot), state_min, state_max);
            const int32_t slot = (b * filters + f) * memory + memory - 1;
            if (state_bytes == 2) ((int16_t *)state)[slot] = (int16_t)value;
            else ((int8_t *)state)[slot] = (int8_t)value;
        }
    }

    for (int32_t b = 0; b < p->batches; ++b) {
        for (int32_t f = 0; f < filters; ++f) {
            const int32_t base = (b * filters + f) * memory;
            int32_t sum = 0;
            for (int32_t j = 0; j < memory; ++j)
                sum = lt_wrap_add(sum, lt_load(weights_time, f * memory + j, state_bytes) *
                                           (lt_load(state, base + j, state_bytes) - p->state_zero_point));
            filter_scratch[b * filters + f] = sum;
        }
    }

    for (int32_t b = 0; b < p->batches; ++b) {
        for (int32_t u = 0; u < units; ++u) {
            int32_t sum = bias ? bias[u] : 0;
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

void lt_svdf_s8_s16(const lt_svdf_params *p, const int8_t *input, const int8_t *weights_feature,
                    const int16_t *weights_time, const int32_t *bias, int16_t *state, int32_t *filter_scratch,
                    int32_t *unit_scratch, int8_t *output) {
    lt_svdf_any(p, input, weights_feature, weights_time, bias, state, 2, filter_scratch, unit_scratch, output);
}

void lt_svdf_s8_s8(const lt_svdf_params *p, const int8_t *input, const int8_t *weights_feature,
                   const int8_t *weights_time, const int32_t *bias, int8_t *state, int32_t *filter_scratch,
                   int32_t *unit_scratch, int8_t *output) {
    lt_svdf_any(p, input, weights_feature, weights_time, bias, state, 1, filter_scratch, unit_scratch, output);
}
