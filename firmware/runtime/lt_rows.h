/* Row-wise forms of the fast int8 kernels (lt_conv_dsp.h), for the row chains `lowtide compile` forms: each call
 * writes one output row, reading the input rows its window needs from a ring of `in_slots` rows (input row y at
 * slot y % in_slots; in_slots = in_h: a whole tensor). Bit-exact with the whole-tensor kernels: the same sums
 * and the same requantization, pixel by pixel. */
#ifndef LT_ROWS_H
#define LT_ROWS_H

#include "lt_conv_dsp.h"

/* The most filter rows a row kernel takes (lowtide rolls no taller window): its row pointers are a fixed array. */
#define LT_RING_MAX_FILTER_ROWS 16

/* rows[fy]: the input row filter row fy of output row oy reads, or NULL where it falls in the padding. */
LT_ALWAYS_INLINE void lt_window_rows(const lt_conv_params *p, const int8_t *input, int32_t in_slots, int32_t oy,
                                     const int8_t **rows) {
    const int32_t row_bytes = p->in_w * p->in_c, y0 = oy * p->stride_h - p->pad_h;
    for (int32_t fy = 0; fy < p->filter_h; ++fy) {
        const int32_t y = y0 + fy * p->dilation_h;
        rows[fy] = y < 0 || y >= p->in_h ? NULL : input + (y % in_slots) * row_bytes;
    }
}

/* Output row oy of a CONV_2D (batch 1) into `output` (that row's out_w * out_c bytes). scratch: as
 * lt_conv_s8_fast's, two expanded rows (one where out_w is 1) and the byte gather. */
LT_ALWAYS_INLINE void lt_conv_ring_s8_fast(const lt_conv_params *p, const int8_t *input, int32_t in_slots, int32_t oy,
                                           const void *filter, const int32_t *bias, const lt_requant *rq,
                                           int8_t *output, int16_t *scratch, const unsigned flags) {
    const int32_t k = p->filter_h * p->filter_w * p->in_c, k4 = (k + 3) & ~3;
    const int32_t out_w = p->out_w, out_c = p->out_c, in_c = p->in_c;
#ifdef LT_MVE
    lt_mve_conv_s8(p, input, in_slots, oy * out_w, out_w, filter, bias, rq, output, scratch, flags);
    return;
#endif
    const int pointwise = p->filter_h == 1 && p->filter_w == 1 && p->stride_w == 1 && p->pad_h == 0 &&
                          p->pad_w == 0 && p->in_w == p->out_w;
    const int8_t *in_row = input + ((oy * p->stride_h) % in_slots) * p->in_w * in_c; /* pointwise: its one row */
    int16_t *row0 = scratch, *row1 = scratch + k4;
    int8_t *gather = (int8_t *)(scratch + (out_w > 1 ? 2 : 1) * k4);
    int32_t ox = 0;
    for (; ox + 2 <= out_w; ox += 2) {
        if (pointwise) {
            lt_expand_s8(in_row + ox * in_c, in_c, row0);
            lt_expand_s8(in_row + (ox + 1) * in_c, in_c, row1);
        } else {
            lt_im2col_window_s8(p, input, in_slots, oy, ox, row0, gather);
            lt_im2col_window_s8(p, input, in_slots, oy, ox + 1, row1, gather);
        }
        lt_matmul_2(row0, row1, filter, k4, out_c, bias, rq, p, output + ox * out_c, output + (ox + 1) * out_c, flags);
    }
    if (ox < out_w) {
        if (pointwise)
            lt_expand_s8(in_row + ox * in_c, in_c, row0);
        else
            lt_im2col_window_s8(p, input, in_slots, oy, ox, row0, gather);
        lt_matmul_1(row0, filter, k4, out_c, bias, rq, p, output + ox * out_c, flags);
    }
}

/* The window of output pixel (oy, ox) read from an NCHW input, channel c's plane of in_h x in_w bytes after
 * channel c - 1's (a TRANSPOSE to NHWC fused into the convolution), gathered in the filter's (row, column,
 * channel) order with padding at the input zero point, and expanded to int16. */
LT_ALWAYS_INLINE void lt_im2col_planes_s8(const lt_conv_params *p, const int8_t *planes, int32_t oy, int32_t ox,
                                          int16_t *row, int8_t *gather) {
    const int32_t channels = p->in_c, plane = p->in_h * p->in_w;
    const int8_t zero_point = (int8_t)-p->input_offset;
    const int32_t y0 = oy * p->stride_h - p->pad_h, x0 = ox * p->stride_w - p->pad_w;
    int8_t *g = gather;
    for (int32_t fy = 0; fy < p->filter_h; ++fy) {
        const int32_t y = y0 + fy * p->dilation_h;
        for (int32_t fx = 0; fx < p->filter_w; ++fx) {
            const int32_t x = x0 + fx * p->dilation_w;
            if (y < 0 || y >= p->in_h || x < 0 || x >= p->in_w) {
                for (int32_t c = 0; c < channels; ++c) *g++ = zero_point;
            } else {
                const int8_t *src = planes + y * p->in_w + x;
                for (int32_t c = 0; c < channels; ++c, src += plane) *g++ = *src;
            }
        }
    }
    lt_expand_s8(gather, p->filter_h * p->filter_w * channels, row);
}

/* Output row oy of a CONV_2D (batch 1) whose input is NCHW planes (`lt_im2col_planes_s8`) into `output`; scratch
 * as lt_conv_ring_s8_fast's. */
LT_ALWAYS_INLINE void lt_conv_planes_row_s8_fast(const lt_conv_params *p, const int8_t *planes, int32_t oy,
                                                 const void *filter, const int32_t *bias, const lt_requant *rq,
                                                 int8_t *output, int16_t *scratch, const unsigned flags) {
    const int32_t k4 = (p->filter_h * p->filter_w * p->in_c + 3) & ~3, out_w = p->out_w, out_c = p->out_c;
    int16_t *row0 = scratch, *row1 = scratch + k4;
    int8_t *gather = (int8_t *)(scratch + (out_w > 1 ? 2 : 1) * k4);
    int32_t ox = 0;
    for (; ox + 2 <= out_w; ox += 2) {
        lt_im2col_planes_s8(p, planes, oy, ox, row0, gather);
        lt_im2col_planes_s8(p, planes, oy, ox + 1, row1, gather);
        lt_matmul_2(row0, row1, filter, k4, out_c, bias, rq, p, output + ox * out_c, output + (ox + 1) * out_c, flags);
    }
    if (ox < out_w) {
        lt_im2col_planes_s8(p, planes, oy, ox, row0, gather);
        lt_matmul_1(row0, filter, k4, out_c, bias, rq, p, output + ox * out_c, flags);
    }
}

/* Output row oy of a DEPTHWISE_CONV_2D (batch 1, depth multiplier 1) into `output`, one channel at a time: its
 * window rows copied into `scratch` (filter_h int16 plane rows of (out_w - 1) * stride_w + filter_w values), then
 * its outputs written. */
LT_ALWAYS_INLINE void lt_depthwise_ring_s8_fast(const lt_conv_params *p, const int8_t *input, int32_t in_slots,
                                                int32_t oy, const uint32_t *filter, const int32_t *bias,
                                                const lt_requant *rq, int8_t *output, int16_t *scratch,
                                                const unsigned flags) {
    const int32_t kh = p->filter_h, pairs = (p->filter_w + 1) / 2, c_count = p->out_c;
    const int32_t plane_w = (p->out_w - 1) * p->stride_w + p->filter_w;
    const int8_t *rows[LT_RING_MAX_FILTER_ROWS];
    lt_window_rows(p, input, in_slots, oy, rows);
    for (int32_t c = 0; c < c_count; ++c) {
        for (int32_t fy = 0; fy < kh; ++fy) lt_plane_row_s8(p, rows[fy], c, plane_w, scratch + fy * plane_w);
        lt_depthwise_row_s8(p, scratch, plane_w, filter + c * kh * pairs, rq[c], bias[c], output + c, c_count, flags);
    }
}

/* Output row oy of an int8 MAX_POOL_2D (batch 1) into `output`: lt_max_pool_s8's maximum over the window's
 * pixels inside the input, clamped, channel by channel. */
LT_ALWAYS_INLINE void lt_max_pool_ring_s8(const lt_conv_params *p, const int8_t *input, int32_t in_slots, int32_t oy,
                                          int8_t *output) {
    const int32_t c_count = p->in_c;
    const int8_t *rows[LT_RING_MAX_FILTER_ROWS];
    lt_window_rows(p, input, in_slots, oy, rows);
    for (int32_t ox = 0; ox < p->out_w; ++ox) {
        const int32_t x0 = ox * p->stride_w - p->pad_w;
        const int32_t fx_start = x0 < 0 ? -x0 : 0;
        const int32_t fx_end = p->filter_w < p->in_w - x0 ? p->filter_w : p->in_w - x0;
        int8_t *out = output + ox * c_count;
        for (int32_t c = 0; c < c_count; ++c) {
            int32_t max = INT8_MIN;
            for (int32_t fy = 0; fy < p->filter_h; ++fy) {
                if (rows[fy] == NULL) continue;
                const int8_t *v = rows[fy] + (x0 + fx_start) * c_count + c;
                for (int32_t fx = fx_start; fx < fx_end; ++fx, v += c_count)
                    if (*v > max) max = *v;
            }
            out[c] = (int8_t)(max < p->act_min ? p->act_min : (max > p->act_max ? p->act_max : max));
        }
    }
}

/* Output row of an int8 RESIZE_BILINEAR (batch 1) from the two input rows it reads, `row0` above `row1` (they
 * may be one): lt_resize_bilinear_s8's sums and rounding, the rows' distance `dy` and each output column's two
 * input columns and distance (x_lower, x_upper, x_delta) in 10 fractional bits, as ComputeInterpolationValues-
 * Integer gives them. */
LT_ALWAYS_INLINE void lt_resize_bilinear_row_s8(const lt_resize_params *p, const int8_t *row0, const int8_t *row1,
                                                int32_t dy, const int32_t *x_lower, const int32_t *x_upper,
                                                const int32_t *x_delta, int8_t *output) {
    const int32_t c = p->channels;
    const int64_t y = dy;
    for (int32_t x = 0; x < p->out_w; ++x) {
        const int64_t dx = x_delta[x];
        const int32_t x0 = x_lower[x] * c, x1 = x_upper[x] * c;
        int8_t *out = output + x * c;
        for (int32_t k = 0; k < c; ++k) {
            const int64_t sum = (int64_t)row0[x0 + k] * ((1 << 10) - y) * ((1 << 10) - dx) +
                                (int64_t)row1[x0 + k] * y * ((1 << 10) - dx) +
                                (int64_t)row0[x1 + k] * ((1 << 10) - y) * dx + (int64_t)row1[x1 + k] * y * dx;
            const int64_t round = sum > 0 ? (1 << 19) : -(1 << 19);
            out[k] = (int8_t)((sum + round) / (1 << 20));
        }
    }
}

#endif /* LT_ROWS_H */
