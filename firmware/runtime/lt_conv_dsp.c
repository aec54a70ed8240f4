/* The data movement of the fast depthwise convolution (lt_conv_dsp.h): one channel's padded input plane. */
#include "lt_conv_dsp.h"

void lt_depthwise_plane_s8(const lt_conv_params *p, const int8_t *input, int32_t c, int32_t plane_h,
                           int32_t plane_w, int16_t *plane) {
    for (int32_t py = 0; py < plane_h; ++py, plane += plane_w) {
        const int32_t y = py - p->pad_h;
        lt_plane_row_s8(p, y < 0 || y >= p->in_h ? NULL : input + y * p->in_w * p->in_c, c, plane_w, plane);
    }
}
