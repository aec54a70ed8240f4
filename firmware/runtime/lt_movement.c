/* Data movement shared by every element type: RESHAPE is one memmove; TRANSPOSE, STRIDED_SLICE, CONCATENATION,
 * SPLIT, SPLIT_V, PAD, SPACE_TO_DEPTH, DEPTH_TO_SPACE, SPACE_TO_BATCH_ND and BATCH_TO_SPACE_ND are box copies
 * between strided views; RESIZE_NEAREST_NEIGHBOR and MIRROR_PAD read through index maps computed ahead of time;
 * GATHER, GATHER_ND, SELECT_V2, EMBEDDING_LOOKUP and DYNAMIC_UPDATE_SLICE pick elements by run-time indices or
 * conditions (reference/gather*.h, select.h, micro/kernels/embedding_lookup.cc, dynamic_update_slice.cc);
 * BROADCAST_ARGS (reference/broadcast_args.h) combines run-time shapes. And RESIZE_BILINEAR (reference/resize_bilinear.h), int8 in integer arithmetic, float in float. */
#include <math.h>
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

/* ComputeInterpolationValuesInteger: the source coordinate in 10 fractional bits and its two neighbours. */
static void lt_interpolation_integer(int32_t value, int32_t scale_10, int32_t half_pixel_centers, int32_t input_size,
                                     int32_t *scaled, int32_t *lower, int32_t *upper) {
    *scaled = half_pixel_centers ? value * scale_10 + scale_10 / 2 - (1 << 9) : value * scale_10;
    *lower = *scaled / (1 << 10) > 0 ? *scaled / (1 << 10) : 0; /* C division truncates, as the reference's */
    const int32_t up = (*scaled + (1 << 10) - 1) / (1 << 10);
    *upper = up < input_size - 1 ? up : input_size - 1;
}

/* reference_ops::ResizeBilinearInteger<int8_t> (double rounding: halfway away from zero). */
void lt_resize_bilinear_s8(const lt_resize_params *p, const int8_t *input, int8_t *output) {
    const int32_t c = p->channels;
    for (int32_t b = 0; b < p->batches; ++b)
        for (int32_t y = 0; y < p->out_h; ++y) {
            int32_t in_y, y0, y1;
            lt_interpolation_integer(y, p->height_scale_10, p->half_pixel_centers, p->in_h, &in_y, &y0, &y1);
            const int64_t dy = in_y - (1 << 10) * y0;
            for (int32_t x = 0; x < p->out_w; ++x) {
                int32_t in_x, x0, x1;
                lt_interpolation_integer(x, p->width_scale_10, p->half_pixel_centers, p->in_w, &in_x, &x0, &x1);
                const int64_t dx = in_x - (1 << 10) * x0;
                const int8_t *row0 = input + ((int64_t)b * p->in_h + y0) * p->in_w * c;
                const int8_t *row1 = input + ((int64_t)b * p->in_h + y1) * p->in_w * c;
                int8_t *out = output + (((int64_t)b * p->out_h + y) * p->out_w + x) * c;
                for (int32_t k = 0; k < c; ++k) {
                    const int64_t sum = (int64_t)row0[x0 * c + k] * ((1 << 10) - dy) * ((1 << 10) - dx) +
                                        (int64_t)row1[x0 * c + k] * dy * ((1 << 10) - dx) +
                                        (int64_t)row0[x1 * c + k] * ((1 << 10) - dy) * dx +
                                        (int64_t)row1[x1 * c + k] * dy * dx;
                    const int64_t round = sum > 0 ? (1 << 19) : -(1 << 19);
                    out[k] = (int8_t)((sum + round) / (1 << 20));
                }
            }
        }
}

/* ComputeInterpolationValues in float. */
static void lt_interpolation_float(int32_t value, float scale, int32_t half_pixel_centers, int32_t input_size,
                                   float *scaled, int32_t *lower, int32_t *upper) {
    *scaled = half_pixel_centers ? ((float)value + 0.5f) * scale - 0.5f : (float)value * scale;
    const int32_t low = (int32_t)floorf(*scaled);
    const int32_t up = (int32_t)ceilf(*scaled);
    *lower = low > 0 ? low : 0;
    *upper = up < input_size - 1 ? up : input_size - 1;
}

/* reference_ops::ResizeBilinear<float>: the four products summed in the reference's order. */
void lt_resize_bilinear_f32(const lt_resize_params *p, const float *input, float *output) {
    const int32_t c = p->channels;
    for (int32_t b = 0; b < p->batches; ++b)
        for (int32_t y = 0; y < p->out_h; ++y) {
            float in_y;
            int32_t y0, y1;
            lt_interpolation_float(y, p->height_scale, p->half_pixel_centers, p->in_h, &in_y, &y0, &y1);
            const float dy = in_y - (float)y0;
            for (int32_t x = 0; x < p->out_w; ++x) {
                float in_x;
                int32_t x0, x1;
                lt_interpolation_float(x, p->width_scale, p->half_pixel_centers, p->in_w, &in_x, &x0, &x1);
                const float dx = in_x - (float)x0;
                const float *row0 = input + ((int64_t)b * p->in_h + y0) * p->in_w * c;
                const float *row1 = input + ((int64_t)b * p->in_h + y1) * p->in_w * c;
                float *out = output + (((int64_t)b * p->out_h + y) * p->out_w + x) * c;
                for (int32_t k = 0; k < c; ++k)
                    out[k] = row0[x0 * c + k] * (1 - dy) * (1 - dx) + row1[x0 * c + k] * dy * (1 - dx) +
                             row0[x1 * c + k] * (1 - dy) * dx + row1[x1 * c + k] * dy * dx + 0.0f;
            }
        }
}

void lt_gather(const lt_gather_params *p, const void *input, const int32_t *coords, void *output) {
    const size_t slice = (size_t)p->inner * (size_t)p->elem_size;
    const uint8_t *src = (const uint8_t *)input;
    uint8_t *dst = (uint8_t *)output;
    for (int32_t b = 0; b < p->batches; ++b)
        for (int32_t o = 0; o < p->outer; ++o)
            for (int32_t c = 0; c < p->coords; ++c) {
                const size_t from = ((size_t)(b * p->outer + o) * p->axis_size + coords[b * p->coords + c]) * slice;
                memcpy(dst + ((size_t)(b * p->outer + o) * p->coords + c) * slice, src + from, slice);
            }
}

void lt_gather_nd(const lt_gather_nd_params *p, const void *input, const int32_t *indices, void *output) {
    const size_t slice = (size_t)p->slice_size * (size_t)p->elem_size;
    for (int32_t i = 0; i < p->slices; ++i) {
        size_t from = 0;
        for (int32_t j = 0; j < p->indices_nd; ++j)
            from += (size_t)indices[i * p->indices_nd + j] * (size_t)p->element_steps[j];
        memcpy((uint8_t *)output + (size_t)i * slice, (const uint8_t *)input + from * (size_t)p->elem_size, slice);
    }
}

void lt_select(const lt_select_params *p, const uint8_t *condition, const void *if_true, const void *if_false,
               void *output) {
    int32_t idx[LT_MAX_DIMS] = {0};
    int32_t ic = 0, it = 0, iff = 0, total = 1;
    const size_t size = (size_t)p->elem_size;
    for (int32_t d = 0; d < p->ndim; ++d) total *= p->dims[d];
    for (int32_t o = 0; o < total; ++o) {
        const uint8_t *from = condition[ic] ? (const uint8_t *)if_true + (size_t)it * size
                                            : (const uint8_t *)if_false + (size_t)iff * size;
        memcpy((uint8_t *)output + (size_t)o * size, from, size);
        for (int32_t d = p->ndim - 1; d >= 0; --d) {
            ic += p->step_condition[d];
            it += p->step_true[d];
            iff += p->step_false[d];
            if (++idx[d] < p->dims[d]) break;
            ic -= p->step_condition[d] * p->dims[d];
            it -= p->step_true[d] * p->dims[d];
            iff -= p->step_false[d] * p->dims[d];
            idx[d] = 0;
        }
    }
}

void lt_copy_mapped(const lt_mapped_copy_params *p, const int32_t *offsets, const void *input, void *output) {
    int32_t idx[LT_MAX_DIMS] = {0};
    int32_t total = 1;
    const size_t size = (size_t)p->elem_size;
    for (int32_t d = 0; d < p->ndim; ++d) total *= p->dims[d];
    for (int32_t o = 0; o < total; ++o) {
        int32_t from = 0;
        for (int32_t d = 0; d < p->ndim; ++d) from += offsets[p->map_start[d] + idx[d]];
        memcpy((uint8_t *)output + (size_t)o * size, (const uint8_t *)input + (size_t)from * size, size);
        for (int32_t d = p->ndim - 1; d >= 0; --d) {
            if (++idx[d] < p->dims[d]) break;
            idx[d] = 0;
        }
    }
}

void lt_dynamic_update_slice(const lt_update_slice_params *p, const void *operand, const void *update,
                             const void *indices, void *output) {
    int32_t total = 1, update_total = 1;
    for (int32_t d = 0; d < p->ndim; ++d) {
        total *= p->dims[d];
        update_total *= p->update_dims[d];
    }
    if (total == update_total) { /* the update is the whole output, as in TFLM (whatever the indices) */
        lt_copy(update, output, (uint32_t)total * (uint32_t)p->elem_size);
        return;
    }
    lt_copy(operand, output, (uint32_t)total * (uint32_t)p->elem_size);
    if (update_total == 0) return;
    lt_copy_params box = {.ndim = p->ndim, .elem_size = p->elem_size};
    int32_t start = 0, out_step = 1, update_step = 1;
    for (int32_t d = p->ndim - 1; d >= 0; --d) {
        const int64_t index = p->indices_64 ? ((const int64_t *)indices)[d] : ((const int32_t *)indices)[d];
        const int64_t last = p->dims[d] - p->update_dims[d];
        start += (int32_t)(index < 0 ? 0 : index > last ? last : index) * out_step;
        box.dims[d] = p->update_dims[d];
        box.src_steps[d] = update_step;
        box.dst_steps[d] = out_step;
        out_step *= p->dims[d];
        update_step *= p->update_dims[d];
    }
    lt_copy_strided(&box, update, (uint8_t *)output + (int64_t)start * p->elem_size);
}

/* reference_ops::BroadcastArgs: dimension i from the end is the one that is not 1 (TFLM checks that two
 * dimensions other than 1 agree; a model that breaks this fails there). Like the reference, it reads each
 * dimension as an int. */
#define LT_BROADCAST_ARGS                                                            \
    for (int32_t i = 0; i < count_out; ++i) {                                        \
        const int32_t d1 = count1 - 1 - i >= 0 ? (int32_t)shape1[count1 - 1 - i] : 1; \
        const int32_t d2 = count2 - 1 - i >= 0 ? (int32_t)shape2[count2 - 1 - i] : 1; \
        output[count_out - 1 - i] = d1 == 1 ? d2 : d1;                               \
    }

void lt_broadcast_args_s32(const int32_t *shape1, int32_t count1, const int32_t *shape2, int32_t count2,
                           int32_t *output, int32_t count_out) {
    LT_BROADCAST_ARGS
}

void lt_broadcast_args_s64(const int64_t *shape1, int32_t count1, const int64_t *shape2, int32_t count2,
                           int64_t *output, int32_t count_out) {
    LT_BROADCAST_ARGS
}

void lt_embedding_lookup_hybrid(const int8_t *value, const int32_t *lookup, int32_t count, int32_t columns,
                                float scale, float *output) {
    for (int32_t i = 0; i < count; ++i) {
        const int8_t *row = value + (int64_t)lookup[i] * columns;
        for (int32_t c = 0; c < columns; ++c) output[(int64_t)i * columns + c] = (float)row[c] * scale;
    }
}
