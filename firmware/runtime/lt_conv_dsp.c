/* The data movement of the fast convolutions (lt_conv_dsp.h): int8 rows expanded to int16 in SXTB16 order, the
 * im2col window of one output pixel, and one channel's padded input plane for depthwise convolution. */
#include "lt_conv_dsp.h"

void lt_expand_s8(const int8_t *src, int32_t n, int16_t *dst) {
    uint32_t *d = (uint32_t *)(void *)dst;
    for (; n >= 8; n -= 8, src += 8, d += 4) {
        const uint32_t u = lt_read32(src), v = lt_read32(src + 4);
        d[0] = lt_sxtb16(u);
        d[1] = lt_sxtb16_ror8(u);
        d[2] = lt_sxtb16(v);
        d[3] = lt_sxtb16_ror8(v);
    }
    if (n >= 4) {
        const uint32_t u = lt_read32(src);
        d[0] = lt_sxtb16(u);
        d[1] = lt_sxtb16_ror8(u);
        n -= 4;
        src += 4;
        d += 2;
    }
    if (n > 0) {
        int8_t tail[4] = {0, 0, 0, 0};
        memcpy(tail, src, (size_t)n);
        const uint32_t u = lt_read32(tail);
        d[0] = lt_sxtb16(u);
        d[1] = lt_sxtb16_ror8(u);
    }
}

void lt_im2col_s8(const lt_conv_params *p, const int8_t *input, int32_t pixel, int16_t *row, int8_t *gather) {
    const int32_t ox = pixel % p->out_w, oy = (pixel / p->out_w) % p->out_h, b = pixel / (p->out_w * p->out_h);
    const int32_t c = p->in_c, zero_point = -p->input_offset;
    const int32_t y0 = oy * p->stride_h - p->pad_h, x0 = ox * p->stride_w - p->pad_w;
    const int8_t *in_b = input + b * p->in_h * p->in_w * c;
    if ((c & 3) == 0) { /* taps start on 4-value boundaries: expand each tap in place */
        const uint32_t pad = (uint16_t)zero_point | ((uint32_t)(uint16_t)zero_point << 16);
        uint32_t *d = (uint32_t *)(void *)row;
        for (int32_t fy = 0; fy < p->filter_h; ++fy) {
            const int32_t y = y0 + fy * p->dilation_h;
            for (int32_t fx = 0; fx < p->filter_w; ++fx, d += c / 2) {
                const int32_t x = x0 + fx * p->dilation_w;
                if (y < 0 || y >= p->in_h || x < 0 || x >= p->in_w) {
                    for (int32_t i = 0; i < c / 2; ++i) d[i] = pad;
                } else {
                    lt_expand_s8(in_b + (y * p->in_w + x) * c, c, (int16_t *)(void *)d);
                }
            }
        }
        return;
    }
    int8_t *g = gather;
    const int32_t row_bytes = p->filter_w * c;
    for (int32_t fy = 0; fy < p->filter_h; ++fy, g += row_bytes) {
        const int32_t y = y0 + fy * p->dilation_h;
        if (y < 0 || y >= p->in_h) {
            memset(g, zero_point, (size_t)row_bytes);
        } else if (p->dilation_w == 1) { /* the row's taps are contiguous in NHWC: one copy between the paddings */
            const int32_t left = x0 >= 0 ? 0 : (-x0 < p->filter_w ? -x0 : p->filter_w);
            const int32_t end = x0 + p->filter_w > p->in_w ? p->in_w - x0 : p->filter_w;
            if (left > 0) memset(g, zero_point, (size_t)(left * c));
            if (end > left) memcpy(g + left * c, in_b + (y * p->in_w + x0 + left) * c, (size_t)((end - left) * c));
            const int32_t right = end > left ? end : left;
            if (right < p->filter_w) memset(g + right * c, zero_point, (size_t)((p->filter_w - right) * c));
        } else {
            for (int32_t fx = 0; fx < p->filter_w; ++fx) {
                const int32_t x = x0 + fx * p->dilation_w;
                if (x < 0 || x >= p->in_w)
                    memset(g + fx * c, zero_point, (size_t)c);
                else
                    memcpy(g + fx * c, in_b + (y * p->in_w + x) * c, (size_t)c);
            }
        }
    }
    lt_expand_s8(gather, p->filter_h * row_bytes, row);
}

void lt_depthwise_plane_s8(const lt_conv_params *p, const int8_t *input, int32_t c, int32_t plane_h,
                           int32_t plane_w, int16_t *plane) {
    const int32_t channels = p->in_c, zero_point = -p->input_offset;
    /* columns [left, right) of the plane hold input columns; the others are padding */
    const int32_t left = p->pad_w, right = p->pad_w + p->in_w < plane_w ? p->pad_w + p->in_w : plane_w;
    for (int32_t py = 0; py < plane_h; ++py, plane += plane_w) {
        const int32_t y = py - p->pad_h;
        if (y < 0 || y >= p->in_h) {
            for (int32_t px = 0; px < plane_w; ++px) plane[px] = (int16_t)zero_point;
            continue;
        }
        for (int32_t px = 0; px < left; ++px) plane[px] = (int16_t)zero_point;
        const int8_t *src = input + (y * p->in_w + (left - p->pad_w)) * channels + c;
        int32_t px = left;
        for (; px + 4 <= right; px += 4, src += 4 * channels) {
            plane[px] = src[0];
            plane[px + 1] = src[channels];
            plane[px + 2] = src[2 * channels];
            plane[px + 3] = src[3 * channels];
        }
        for (; px < right; ++px, src += channels) plane[px] = src[0];
        for (; px < plane_w; ++px) plane[px] = (int16_t)zero_point;
    }
}
