/* Data movement shared by every element type: RESHAPE is one memmove; TRANSPOSE, STRIDED_SLICE, CONCATENATION,
 * SPLIT, SPLIT_V and PAD are box copies between strided views; RESIZE_NEAREST_NEIGHBOR reads through index maps
 * computed ahead of time. */
#include <string.h>

#include "lt_runtime.h"

void lt_copy(const void *input, void *output, uint32_t bytes) {
    if (input != output) memmove(output, input, bytes);
}

/* True when every element would be copied onto itself: the two views step alike along each dimension that has
 * more than one element. An in-place plan (SPLIT outputs on their input's bytes, CONCATENATION inputs on their
 * output's) makes such copies, which are left as they are: memcpy must not be given overlapping ranges. */
static int lt_same_view(const lt_copy_params *p) {
    for (int32_t d = 0; d < p->ndim; ++d)
        if (p->dims[d] > 1 && p->src_steps[d] != p->dst_steps[d]) return 0;
    return 1;
}

void lt_copy_strided(const lt_copy_params *p, const void *input, void *output) {
    if (input == output && lt_same_view(p)) return;
    const uint8_t *src = (const uint8_t *)input;
    uint8_t *dst = (uint8_t *)output;
    const int32_t size = p->elem_size;
    /* Where both views are contiguous along the last dimension, each row is one memcpy. */
    int32_t ndim = p->ndim;
    size_t run = (size_t)size;
    if (ndim > 0 && p->src_steps[ndim - 1] == 1 && p->dst_steps[ndim - 1] == 1) {
        --ndim;
        run *= (size_t)p->dims[ndim];
    }
    int32_t idx[LT_MAX_DIMS] = {0};
    int32_t total = 1, s = 0, t = 0;
    for (int32_t d = 0; d < ndim; ++d) total *= p->dims[d];
    for (int32_t n = 0; n < total; ++n) {
        memcpy(dst + (int64_t)t * size, src + (int64_t)s * size, run);
        for (int32_t d = ndim - 1; d >= 0; --d) {
            s += p->src_steps[d];
            t += p->dst_steps[d];
            if (++idx[d] < p->dims[d]) break;
            s -= p->src_steps[d] * p->dims[d];
            t -= p->dst_steps[d] * p->dims[d];
            idx[d] = 0;
        }
    }
}

void lt_fill(void *output, uint32_t count, const void *value, int32_t elem_size) {
    uint8_t *dst = (uint8_t *)output;
    for (uint32_t i = 0; i < count; ++i) memcpy(dst + (size_t)i * (size_t)elem_size, value, (size_t)elem_size);
}

void lt_resize_nearest(const lt_resize_params *p, const int32_t *y_map, const int32_t *x_map, const void *input,
                       void *output) {
    const uint8_t *src = (const uint8_t *)input;
    uint8_t *dst = (uint8_t *)output;
    const size_t pixel = (size_t)p->channels * (size_t)p->elem_size;
    for (int32_t b = 0; b < p->batches; ++b)
        for (int32_t y = 0; y < p->out_h; ++y)
            for (int32_t x = 0; x < p->out_w; ++x) {
                const size_t from = (((size_t)b * p->in_h + y_map[y]) * p->in_w + x_map[x]) * pixel;
                const size_t to = (((size_t)b * p->out_h + y) * p->out_w + x) * pixel;
                memcpy(dst + to, src + from, pixel);
            }
}
