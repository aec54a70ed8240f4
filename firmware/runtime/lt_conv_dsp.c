/* The data movement of the fast depthwise convolution (lt_conv_dsp.h): one channel's padded input plane. */
#include "lt_conv_dsp.h"

void lt_plane_row_s8(const lt_conv_params *p, const int8_t *src, int32_t c, int32_t plane_w, int16_t *plane) {
    const int32_t channels = p->in_c, zero_point = -p->input_offset;
    if (src == NULL) {
        for (int32_t px = 0; px < plane_w; ++px) plane[px] = (int16_t)zero_point;
        return;
    }
    /* columns [left, right) of the plane hold input columns; the others are padding */
    const int32_t left = p->pad_w, right = p->pad_w + p->in_w < plane_w ? p->pad_w + p->in_w : plane_w;
    for (int32_t px = 0; px < left; ++px) plane[px] = (int16_t)zero_point;
    src += (left - p->pad_w) * channels + c;
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

void lt_depthwise_plane_s8(const lt_conv_params *p, const int8_t *input, int32_t c, int32_t plane_h,
                           int32_t plane_w, int16_t *plane) {
    for (int32_t py = 0; py < plane_h; ++py, plane += plane_w) {
        const int32_t y = py - p->pad_h;
        lt_plane_row_s8(p, y < 0 || y >= p->in_h ? NULL : input + y * p->in_w * p->in_c, c, plane_w, plane);
    }
}
