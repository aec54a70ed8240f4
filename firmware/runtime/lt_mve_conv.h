/* Helium (MVE) forms of the fast int8 CONV_2D, FULLY_CONNECTED and DEPTHWISE_CONV_2D kernels of lt_conv_dsp.h, for
 * Armv8.1-M cores with the M-profile Vector Extension (Cortex-M55: __ARM_FEATURE_MVE). lt_conv_dsp.h and
 * lt_rows.h hand their work to these where the core has MVE; elsewhere this header is empty.
 *
 * They read the weights as lowtide packs them for the DSP kernels (host/lowtide/compile/lowering/emitter.py), so
 * one compiled model runs on every core: de-interleaving vector loads (VLD2, VLD4 of 32-bit words) take a pair or
 * a block of four rows apart into one vector per row, and VMLADAVA multiplies sixteen int8 (or eight int16)
 * lanes and adds them to a scalar accumulator in one instruction. Integer sums do not depend on their order and
 * VMLADAVA's 32-bit accumulator wraps like SMLAD's, so every sum equals the DSP kernels' and the requantization is
 * theirs (lt_requantize_s8): bit-exact with them and with TFLM's reference kernels.
 *
 * A block's last 4, 8 or 12 values are loaded under a tail predicate (VCTP): lanes past the row load as zero and
 * touch no memory, so no kernel reads past its row, its window or its filter.
 */
#ifndef LT_MVE_CONV_H
#define LT_MVE_CONV_H

#include "lt_mve.h"

#ifdef LT_MVE

/* ---- data movement -------------------------------------------------------------------------------------------- */

/* n bytes from src to dst, sixteen a step (the last step predicated) */
LT_ALWAYS_INLINE void lt_mve_copy_s8(int8_t *dst, const int8_t *src, int32_t n) {
    for (; n > 0; n -= 16, src += 16, dst += 16) {
        const mve_pred16_t lanes = vctp8q((uint32_t)n);
        vstrbq_p_s8(dst, vldrbq_z_s8(src, lanes), lanes);
    }
}

LT_ALWAYS_INLINE void lt_mve_fill_s8(int8_t *dst, int32_t value, int32_t n) {
    const int8x16_t v = vdupq_n_s8((int8_t)value);
    for (; n > 0; n -= 16, dst += 16) vstrbq_p_s8(dst, v, vctp8q((uint32_t)n));
}

/* Input row y of batch b: a ring of in_slots rows (row y at slot y % in_slots), or (in_slots 0) the whole tensor;
 * NULL in the padding. */
LT_ALWAYS_INLINE const int8_t *lt_mve_input_row(const lt_conv_params *p, const int8_t *input, int32_t in_slots,
                                                int32_t b, int32_t y) {
    if (y < 0 || y >= p->in_h) return NULL;
    return input + (in_slots ? y % in_slots : b * p->in_h + y) * p->in_w * p->in_c;
}

/* The k = filter_h * filter_w * in_c int8 values of output pixel (b, oy, ox)'s window in TFLite's (fy, fx, c)
 * order, padding taps at the input zero point: a pointer into the input itself where the window is one tap
 * inside it (a 1x1 window without padding), else gathered into `dst`. */
LT_ALWAYS_INLINE const int8_t *lt_mve_window_s8(const lt_conv_params *p, const int8_t *input, int32_t in_slots,
                                                int32_t b, int32_t oy, int32_t ox, int8_t *dst) {
    const int32_t c = p->in_c, zero_point = -p->input_offset, row_bytes = p->filter_w * c;
    const int32_t y0 = oy * p->stride_h - p->pad_h, x0 = ox * p->stride_w - p->pad_w;
    if (p->filter_h == 1 && p->filter_w == 1 && p->pad_h == 0 && p->pad_w == 0)
        return lt_mve_input_row(p, input, in_slots, b, y0) + x0 * c;
    int8_t *g = dst;
    for (int32_t fy = 0; fy < p->filter_h; ++fy, g += row_bytes) {
        const int8_t *in_row = lt_mve_input_row(p, input, in_slots, b, y0 + fy * p->dilation_h);
        if (in_row == NULL) {
            lt_mve_fill_s8(g, zero_point, row_bytes);
        } else if (p->dilation_w == 1) { /* the row's taps are contiguous in NHWC: one copy between the paddings */
            const int32_t left = x0 >= 0 ? 0 : (-x0 < p->filter_w ? -x0 : p->filter_w);
            const int32_t end = x0 + p->filter_w > p->in_w ? p->in_w - x0 : p->filter_w;
            if (left > 0) lt_mve_fill_s8(g, zero_point, left * c);
            if (end > left) lt_mve_copy_s8(g + left * c, in_row + (x0 + left) * c, (end - left) * c);
            const int32_t right = end > left ? end : left;
            if (right < p->filter_w) lt_mve_fill_s8(g + right * c, zero_point, (p->filter_w - right) * c);
        } else {
            for (int32_t fx = 0; fx < p->filter_w; ++fx) {
                const int32_t x = x0 + fx * p->dilation_w;
                if (x < 0 || x >= p->in_w)
                    lt_mve_fill_s8(g + fx * c, zero_point, c);
                else
                    lt_mve_copy_s8(g + fx * c, in_row + x * c, c);
            }
        }
    }
    return dst;
}

/* k int8 values as the int16 rows lt_mve_matmul_w16 reads, k4 values (k rounded up to 4, zeros after k): per
 * block of 16 values its 8 even-indexed values, then its 8 odd ones (a last block of 4, 8 or 12 values likewise,
 * its halves 2, 4 or 6 apart). Those are the lanes of the widened filter's words (values 0 and 2, then 1 and 3)
 * as VLD4 takes a channel's four blocks apart. */
LT_ALWAYS_INLINE void lt_mve_widen_s8(const int8_t *src, int32_t k, int32_t k4, int16_t *dst) {
    int32_t i = 0;
    for (; i + 16 <= k4; i += 16) {
        const int8x16_t v = vldrbq_z_s8(src + i, vctp8q((uint32_t)(k - i)));
        vstrhq_s16(dst + i, vmovlbq_s8(v));
        vstrhq_s16(dst + i + 8, vmovltq_s8(v));
    }
    if (i < k4) {
        const int32_t half = (k4 - i) / 2;
        const mve_pred16_t lanes = vctp16q((uint32_t)half);
        const int8x16_t v = vldrbq_z_s8(src + i, vctp8q((uint32_t)(k - i)));
        vstrhq_p_s16(dst + i, vmovlbq_s8(v), lanes);
        vstrhq_p_s16(dst + i + half, vmovltq_s8(v), lanes);
    }
}

/* ---- matrix cores: two pixels (or one) x every output channel ------------------------------------------------- */

/* Writes channel oc's outputs of `pixels` pixels (1 or 2). */
LT_ALWAYS_INLINE void lt_mve_store_1(int32_t a, int32_t b, const lt_requant *q, const lt_conv_params *p,
                                     int8_t *out0, int8_t *out1, const int32_t pixels, const unsigned flags) {
    out0[0] = (int8_t)lt_requantize_s8(a, q, p, flags);
    if (pixels == 2) out1[0] = (int8_t)lt_requantize_s8(b, q, p, flags);
}

/* int16 filter (LT_WIDE_WEIGHTS, `pack_row_pairs` wide): per group of 4 values a channel's words (v0, v2) and
 * (v1, v3); two channels interleaved group by group, a last odd channel alone. x0, x1: lt_mve_widen_s8 rows. Per
 * 16 values of a channel pair: one VLD4 (four words of each of the four rows: channel oc's evens and odds,
 * channel oc + 1's), two row loads a pixel and four VMLADAVA.S16 a pixel. */
LT_ALWAYS_INLINE void lt_mve_matmul_w16(const int16_t *x0, const int16_t *x1, const int32_t pixels, const uint32_t *w,
                                        int32_t k4, int32_t out_c, const int32_t *bias, const lt_requant *rq,
                                        const lt_conv_params *p, int8_t *out0, int8_t *out1, const unsigned flags) {
    const int32_t blocks = k4 >> 4, tail = (k4 >> 2) & 3, half = 2 * tail;
    const mve_pred16_t tail_words = vctp32q((uint32_t)tail), tail_values = vctp16q((uint32_t)half);
    int32_t oc = 0;
    for (; oc + 2 <= out_c; oc += 2) {
        int32_t a0 = bias[oc], a1 = bias[oc + 1], b0 = a0, b1 = a1;
        const int16_t *xa = x0, *xb = x1;
        for (int32_t j = 0; j < blocks; ++j, w += 16, xa += 16, xb += 16) {
            const int32x4x4_t v = vld4q_s32((const int32_t *)w);
            const int16x8_t u_even = vreinterpretq_s16_s32(v.val[0]), u_odd = vreinterpretq_s16_s32(v.val[1]);
            const int16x8_t v_even = vreinterpretq_s16_s32(v.val[2]), v_odd = vreinterpretq_s16_s32(v.val[3]);
            const int16x8_t ae = vldrhq_s16(xa), ao = vldrhq_s16(xa + 8);
            a0 = vmladavaq_s16(a0, ae, u_even);
            a0 = vmladavaq_s16(a0, ao, u_odd);
            a1 = vmladavaq_s16(a1, ae, v_even);
            a1 = vmladavaq_s16(a1, ao, v_odd);
            if (pixels == 2) {
                const int16x8_t be = vldrhq_s16(xb), bo = vldrhq_s16(xb + 8);
                b0 = vmladavaq_s16(b0, be, u_even);
                b0 = vmladavaq_s16(b0, bo, u_odd);
                b1 = vmladavaq_s16(b1, be, v_even);
                b1 = vmladavaq_s16(b1, bo, v_odd);
            }
        }
        if (tail) { /* words 0, 4, 8 (of 4 * tail) of each of the four rows */
            const uint32x4_t offsets = vidupq_n_u32(0, 4);
            const int32_t *ww = (const int32_t *)w;
            const int16x8_t u_even = vreinterpretq_s16_s32(vldrwq_gather_shifted_offset_z_s32(ww, offsets, tail_words));
            const int16x8_t u_odd =
                vreinterpretq_s16_s32(vldrwq_gather_shifted_offset_z_s32(ww + 1, offsets, tail_words));
            const int16x8_t v_even =
                vreinterpretq_s16_s32(vldrwq_gather_shifted_offset_z_s32(ww + 2, offsets, tail_words));
            const int16x8_t v_odd =
                vreinterpretq_s16_s32(vldrwq_gather_shifted_offset_z_s32(ww + 3, offsets, tail_words));
            w += 4 * tail;
            const int16x8_t ae = vldrhq_z_s16(xa, tail_values), ao = vldrhq_z_s16(xa + half, tail_values);
            a0 = vmladavaq_s16(a0, ae, u_even);
            a0 = vmladavaq_s16(a0, ao, u_odd);
            a1 = vmladavaq_s16(a1, ae, v_even);
            a1 = vmladavaq_s16(a1, ao, v_odd);
            if (pixels == 2) {
                const int16x8_t be = vldrhq_z_s16(xb, tail_values), bo = vldrhq_z_s16(xb + half, tail_values);
                b0 = vmladavaq_s16(b0, be, u_even);
                b0 = vmladavaq_s16(b0, bo, u_odd);
                b1 = vmladavaq_s16(b1, be, v_even);
                b1 = vmladavaq_s16(b1, bo, v_odd);
            }
        }
        if (pixels == 2) {
            lt_store_2x2_s8(a0, a1, b0, b1, &rq[oc], p, out0 + oc, out1 - out0, flags);
        } else {
            out0[oc] = (int8_t)lt_requantize_s8(a0, &rq[oc], p, flags);
            out0[oc + 1] = (int8_t)lt_requantize_s8(a1, &rq[oc + 1], p, flags);
        }
    }
    if (oc < out_c) { /* the last odd channel: its evens and odds word by word (VLD2) */
        int32_t a0 = bias[oc], b0 = a0;
        const int16_t *xa = x0, *xb = x1;
        for (int32_t j = 0; j < blocks; ++j, w += 8, xa += 16, xb += 16) {
            const int32x4x2_t v = vld2q_s32((const int32_t *)w);
            const int16x8_t u_even = vreinterpretq_s16_s32(v.val[0]), u_odd = vreinterpretq_s16_s32(v.val[1]);
            a0 = vmladavaq_s16(vmladavaq_s16(a0, vldrhq_s16(xa), u_even), vldrhq_s16(xa + 8), u_odd);
            if (pixels == 2) b0 = vmladavaq_s16(vmladavaq_s16(b0, vldrhq_s16(xb), u_even), vldrhq_s16(xb + 8), u_odd);
        }
        if (tail) {
            const uint32x4_t offsets = vidupq_n_u32(0, 2);
            const int32_t *ww = (const int32_t *)w;
            const int16x8_t u_even = vreinterpretq_s16_s32(vldrwq_gather_shifted_offset_z_s32(ww, offsets, tail_words));
            const int16x8_t u_odd =
                vreinterpretq_s16_s32(vldrwq_gather_shifted_offset_z_s32(ww + 1, offsets, tail_words));
            a0 = vmladavaq_s16(a0, vldrhq_z_s16(xa, tail_values), u_even);
            a0 = vmladavaq_s16(a0, vldrhq_z_s16(xa + half, tail_values), u_odd);
            if (pixels == 2) {
                b0 = vmladavaq_s16(b0, vldrhq_z_s16(xb, tail_values), u_even);
                b0 = vmladavaq_s16(b0, vldrhq_z_s16(xb + half, tail_values), u_odd);
            }
        }
        lt_mve_store_1(a0, b0, &rq[oc], p, out0 + oc, out1 + oc, pixels, flags);
    }
}

/* int8 filter (`pack_row_pairs`): a word (4 values) of channel oc, then of oc + 1, a last odd channel alone.
 * x: `pixels` (1 to 3) int8 rows of k4 values, k4 apart; out: the first pixel's outputs, the others out_c apart.
 * Per 16 values of a channel pair: one VLD2 (four words of each channel), one row load a pixel and two VMLADAVA.S8
 * a pixel (three pixels: the accumulators take six of the seven even registers VMLADAVA can write). */
LT_ALWAYS_INLINE void lt_mve_matmul_s8(const int8_t *x, const int32_t pixels, const uint32_t *w, int32_t k4,
                                       int32_t out_c, const int32_t *bias, const lt_requant *rq,
                                       const lt_conv_params *p, int8_t *out, const unsigned flags) {
    const int32_t blocks = k4 >> 4, tail = (k4 >> 2) & 3;
    const mve_pred16_t tail_words = vctp32q((uint32_t)tail), tail_values = vctp8q((uint32_t)(4 * tail));
    int32_t oc = 0;
    for (; oc + 2 <= out_c; oc += 2) {
        int32_t a0 = bias[oc], a1 = bias[oc + 1], b0 = a0, b1 = a1, c0 = a0, c1 = a1;
        const int8_t *xa = x, *xb = x + k4, *xc = x + 2 * k4;
        for (int32_t j = 0; j < blocks; ++j, w += 8, xa += 16, xb += 16, xc += 16) {
            const int32x4x2_t v = vld2q_s32((const int32_t *)w);
            const int8x16_t u = vreinterpretq_s8_s32(v.val[0]), uv = vreinterpretq_s8_s32(v.val[1]);
            const int8x16_t a = vldrbq_s8(xa);
            a0 = vmladavaq_s8(a0, a, u);
            a1 = vmladavaq_s8(a1, a, uv);
            if (pixels >= 2) {
                const int8x16_t b = vldrbq_s8(xb);
                b0 = vmladavaq_s8(b0, b, u);
                b1 = vmladavaq_s8(b1, b, uv);
            }
            if (pixels == 3) {
                const int8x16_t c = vldrbq_s8(xc);
                c0 = vmladavaq_s8(c0, c, u);
                c1 = vmladavaq_s8(c1, c, uv);
            }
        }
        if (tail) {
            const uint32x4_t offsets = vidupq_n_u32(0, 2);
            const int32_t *ww = (const int32_t *)w;
            const int8x16_t u = vreinterpretq_s8_s32(vldrwq_gather_shifted_offset_z_s32(ww, offsets, tail_words));
            const int8x16_t uv = vreinterpretq_s8_s32(vldrwq_gather_shifted_offset_z_s32(ww + 1, offsets, tail_words));
            w += 2 * tail;
            const int8x16_t a = vldrbq_z_s8(xa, tail_values);
            a0 = vmladavaq_s8(a0, a, u);
            a1 = vmladavaq_s8(a1, a, uv);
            if (pixels >= 2) {
                const int8x16_t b = vldrbq_z_s8(xb, tail_values);
                b0 = vmladavaq_s8(b0, b, u);
                b1 = vmladavaq_s8(b1, b, uv);
            }
            if (pixels == 3) {
                const int8x16_t c = vldrbq_z_s8(xc, tail_values);
                c0 = vmladavaq_s8(c0, c, u);
                c1 = vmladavaq_s8(c1, c, uv);
            }
        }
        if (pixels >= 2) {
            lt_store_2x2_s8(a0, a1, b0, b1, &rq[oc], p, out + oc, out_c, flags);
        } else {
            out[oc] = (int8_t)lt_requantize_s8(a0, &rq[oc], p, flags);
            out[oc + 1] = (int8_t)lt_requantize_s8(a1, &rq[oc + 1], p, flags);
        }
        if (pixels == 3) {
            out[2 * out_c + oc] = (int8_t)lt_requantize_s8(c0, &rq[oc], p, flags);
            out[2 * out_c + oc + 1] = (int8_t)lt_requantize_s8(c1, &rq[oc + 1], p, flags);
        }
    }
    if (oc < out_c) { /* the last odd channel: its words one after another */
        const int8_t *wb = (const int8_t *)w;
        for (int32_t px = 0; px < pixels; ++px) {
            int32_t acc = bias[oc];
            for (int32_t i = 0; i < k4; i += 16) {
                const mve_pred16_t lanes = vctp8q((uint32_t)(k4 - i));
                acc = vmladavaq_s8(acc, vldrbq_z_s8(x + px * k4 + i, lanes), vldrbq_z_s8(wb + i, lanes));
            }
            out[px * out_c + oc] = (int8_t)lt_requantize_s8(acc, &rq[oc], p, flags);
        }
    }
}

/* ---- CONV_2D (groups 1) and FULLY_CONNECTED of several rows ------------------------------------------------- */

/* Output pixels [pixel0, pixel0 + pixels) of the whole output (batch, row, column), written from `output` on: the
 * whole tensor (in_slots 0) or one output row from a ring of input rows (in_slots > 0, batch 1). Three pixels at a
 * time (int16 filters: two): their windows are read before any of their outputs is written, as lt_conv_s8_fast
 * does, so a pointwise layer may run in place. scratch: as lt_conv_s8_fast's, room for two expanded rows of k4
 * int16 values (one where there is a single pixel) then k4 bytes of gather; int8 filters keep three windows as
 * bytes in the rows' room. */
LT_ALWAYS_INLINE void lt_mve_conv_s8(const lt_conv_params *p, const int8_t *input, int32_t in_slots, int32_t pixel0,
                                     int32_t pixels, const void *filter, const int32_t *bias, const lt_requant *rq,
                                     int8_t *output, int16_t *scratch, const unsigned flags) {
    const int32_t k = p->filter_h * p->filter_w * p->in_c, k4 = (k + 3) & ~3, out_c = p->out_c;
    int16_t *row0 = scratch, *row1 = scratch + k4;
    int8_t *gather = (int8_t *)(scratch + (pixels > 1 ? 2 : 1) * k4);
    int32_t ox = pixel0 % p->out_w, oy = (pixel0 / p->out_w) % p->out_h, b = pixel0 / (p->out_w * p->out_h);
#define LT_MVE_NEXT_PIXEL()                 \
    do {                                    \
        if (++ox == p->out_w) {             \
            ox = 0;                         \
            if (++oy == p->out_h) oy = 0, ++b; \
        }                                   \
    } while (0)
    if (!(flags & LT_WIDE_WEIGHTS)) { /* three pixels at a time, their windows as bytes in the rows' room */
        int8_t *bytes = (int8_t *)scratch;
        for (int32_t px = 0; px < pixels; px += 3, output += 3 * out_c) {
            const int32_t count = pixels - px >= 3 ? 3 : pixels - px;
            for (int32_t i = 0; i < count; ++i) {
                const int8_t *window = lt_mve_window_s8(p, input, in_slots, b, oy, ox, bytes + i * k4);
                if (window != bytes + i * k4) lt_mve_copy_s8(bytes + i * k4, window, k); /* read before written */
                LT_MVE_NEXT_PIXEL();
            }
            if (count == 3)
                lt_mve_matmul_s8(bytes, 3, (const uint32_t *)filter, k4, out_c, bias, rq, p, output, flags);
            else if (count == 2)
                lt_mve_matmul_s8(bytes, 2, (const uint32_t *)filter, k4, out_c, bias, rq, p, output, flags);
            else
                lt_mve_matmul_s8(bytes, 1, (const uint32_t *)filter, k4, out_c, bias, rq, p, output, flags);
        }
        return;
    }
    for (int32_t px = 0; px < pixels; px += 2, output += 2 * out_c) {
        lt_mve_widen_s8(lt_mve_window_s8(p, input, in_slots, b, oy, ox, gather), k, k4, row0);
        LT_MVE_NEXT_PIXEL();
        if (pixels - px >= 2) {
            lt_mve_widen_s8(lt_mve_window_s8(p, input, in_slots, b, oy, ox, gather), k, k4, row1);
            LT_MVE_NEXT_PIXEL();
            lt_mve_matmul_w16(row0, row1, 2, (const uint32_t *)filter, k4, out_c, bias, rq, p, output,
                              output + out_c, flags);
        } else {
            lt_mve_matmul_w16(row0, row0, 1, (const uint32_t *)filter, k4, out_c, bias, rq, p, output, output, flags);
        }
    }
#undef LT_MVE_NEXT_PIXEL
}

/* ---- one output pixel whose window is the whole input: FULLY_CONNECTED of one row, such a CONV_2D ------------ */

/* lt_vector_s8_fast's work: the filter packed four rows by four word by word (`pack_rows_by_four`), the last
 * out_c % 4 rows one after another. Per 16 values of four channels: one VLD4 (four words of each row), one
 * input load and four VMLADAVA.S8. */
LT_ALWAYS_INLINE void lt_mve_vector_s8(const lt_conv_params *p, const int8_t *input, const uint32_t *filter,
                                       const int32_t *bias, const lt_requant *rq, int8_t *output,
                                       const unsigned flags) {
    const int32_t k = p->filter_h * p->filter_w * p->in_c, out_c = p->out_c;
    const int32_t blocks = k >> 4, rest = k & 15, tail = (rest + 3) >> 2, words = (k + 3) >> 2;
    const mve_pred16_t tail_words = vctp32q((uint32_t)tail), tail_values = vctp8q((uint32_t)rest);
    int32_t oc = 0;
    for (; oc + 4 <= out_c; oc += 4) {
        int32_t a0 = bias[oc], a1 = bias[oc + 1], a2 = bias[oc + 2], a3 = bias[oc + 3];
        const int8_t *x = input;
        for (int32_t j = 0; j < blocks; ++j, filter += 16, x += 16) {
            const int32x4x4_t v = vld4q_s32((const int32_t *)filter);
            const int8x16_t xv = vldrbq_s8(x);
            a0 = vmladavaq_s8(a0, xv, vreinterpretq_s8_s32(v.val[0]));
            a1 = vmladavaq_s8(a1, xv, vreinterpretq_s8_s32(v.val[1]));
            a2 = vmladavaq_s8(a2, xv, vreinterpretq_s8_s32(v.val[2]));
            a3 = vmladavaq_s8(a3, xv, vreinterpretq_s8_s32(v.val[3]));
        }
        if (rest) {
            const uint32x4_t offsets = vidupq_n_u32(0, 4);
            const int32_t *ww = (const int32_t *)filter;
            const int8x16_t xv = vldrbq_z_s8(x, tail_values);
            a0 = vmladavaq_s8(a0, xv, vreinterpretq_s8_s32(vldrwq_gather_shifted_offset_z_s32(ww, offsets, tail_words)));
            a1 = vmladavaq_s8(a1, xv,
                              vreinterpretq_s8_s32(vldrwq_gather_shifted_offset_z_s32(ww + 1, offsets, tail_words)));
            a2 = vmladavaq_s8(a2, xv,
                              vreinterpretq_s8_s32(vldrwq_gather_shifted_offset_z_s32(ww + 2, offsets, tail_words)));
            a3 = vmladavaq_s8(a3, xv,
                              vreinterpretq_s8_s32(vldrwq_gather_shifted_offset_z_s32(ww + 3, offsets, tail_words)));
            filter += 4 * tail;
        }
        output[oc] = (int8_t)lt_requantize_s8(a0, &rq[oc], p, flags);
        output[oc + 1] = (int8_t)lt_requantize_s8(a1, &rq[oc + 1], p, flags);
        output[oc + 2] = (int8_t)lt_requantize_s8(a2, &rq[oc + 2], p, flags);
        output[oc + 3] = (int8_t)lt_requantize_s8(a3, &rq[oc + 3], p, flags);
    }
    for (int32_t left = out_c & 3; left > 0; --left, ++oc, filter += words) {
        const int8_t *wb = (const int8_t *)filter;
        int32_t acc = bias[oc];
        for (int32_t i = 0; i < k; i += 16) {
            const mve_pred16_t lanes = vctp8q((uint32_t)(k - i));
            acc = vmladavaq_s8(acc, vldrbq_z_s8(input + i, lanes), vldrbq_z_s8(wb + i, lanes));
        }
        output[oc] = (int8_t)lt_requantize_s8(acc, &rq[oc], p, flags);
    }
}

/* ---- requantization, four lanes ------------------------------------------------------------------------------ */

/* lt_requantize_s8 of four accumulators of one channel: SMMULR is VRMULH ((a * b + 2^31) >> 32), the doubling high
 * product VQRDMULH (saturating only where both are INT32_MIN: m > 0), the shifts by register VSHL (negative: an
 * arithmetic right shift), the adds wrapping as the scalar code's. */
LT_ALWAYS_INLINE int32x4_t lt_mve_requantize_s8(int32x4_t acc, const lt_requant *q, const lt_conv_params *p,
                                                const unsigned flags) {
    int32x4_t x;
    if (flags & LT_SHORT_ACC) {
        const int32x4_t acc2 = (flags & LT_DOUBLED_ACC) ? acc : vshlq_n_s32(acc, 1);
        x = vaddq_n_s32(vrmulhq_s32(acc2, vdupq_n_s32(q->multiplier)), q->round);
        x = vshlq_s32(vaddq_s32(x, vshrq_n_s32(acc2, 31)), vdupq_n_s32(-q->right_shift));
        if (flags & LT_OFFSET_AFTER) x = vaddq_n_s32(x, p->output_offset);
    } else {
        const int32_t left = q->shift > 0 ? q->shift : 0, right = q->shift > 0 ? 0 : -q->shift;
        x = vqrdmulhq_n_s32(vshlq_s32(acc, vdupq_n_s32(left)), q->multiplier);
        if (right) {
            x = vaddq_s32(vaddq_n_s32(x, (int32_t)(1u << (right - 1))), vshrq_n_s32(x, 31));
            x = vshlq_s32(x, vdupq_n_s32(-right));
        }
        x = vaddq_n_s32(x, p->output_offset);
    }
    if (flags & LT_FULL_RANGE) return vminq_s32(vmaxq_s32(x, vdupq_n_s32(-128)), vdupq_n_s32(127));
    return vminq_s32(vmaxq_s32(x, vdupq_n_s32(p->act_min)), vdupq_n_s32(p->act_max));
}

/* ---- DEPTHWISE_CONV_2D: a channel's output row, four outputs a step ---------------------------------------- */

/* lt_plane_row_s8's copy: input columns by a gather of eight bytes `channels` apart (VLDRB gather, widened to
 * int16), padding at the input zero point. Offsets are 16-bit: channels * 7 must fit (else the scalar copy). */
LT_ALWAYS_INLINE int lt_mve_plane_row_s8(const lt_conv_params *p, const int8_t *src, int32_t c, int32_t plane_w,
                                         int16_t *plane) {
    const int32_t channels = p->in_c, zero_point = -p->input_offset;
    if (channels * 7 > 0xFFFF) return 0;
    const int16x8_t pad = vdupq_n_s16((int16_t)zero_point);
    if (src == NULL) {
        for (int32_t px = 0; px < plane_w; px += 8) vstrhq_p_s16(plane + px, pad, vctp16q((uint32_t)(plane_w - px)));
        return 1;
    }
    const int32_t left = p->pad_w, right = p->pad_w + p->in_w < plane_w ? p->pad_w + p->in_w : plane_w;
    for (int32_t px = 0; px < left; px += 8) vstrhq_p_s16(plane + px, pad, vctp16q((uint32_t)(left - px)));
    const uint16x8_t offsets = vmulq_n_u16(vidupq_n_u16(0, 1), (uint16_t)channels);
    const uint8_t *from = (const uint8_t *)src + c; /* the first input column's byte of channel c */
    for (int32_t px = left; px < right; px += 8, from += 8 * channels) {
        const mve_pred16_t lanes = vctp16q((uint32_t)(right - px));
        vstrhq_p_s16(plane + px, vldrbq_gather_offset_z_s16((const int8_t *)from, offsets, lanes), lanes);
    }
    for (int32_t px = right; px < plane_w; px += 8) vstrhq_p_s16(plane + px, pad, vctp16q((uint32_t)(plane_w - px)));
    return 1;
}

/* Four neighbouring outputs of a line of one channel's plane in the lanes of one accumulator: the sum over taps
 * (a, b) of line[a * line_stride + b + i * stride] * w[a * w_a + b * w_b] for outputs i; each tap one load of the
 * four plane values (a gather at stride > 1) and one VMLA by the tap's weight. Requantized in the lanes and stored
 * `out_step` bytes apart (a scatter). A line is a plane row (lt_depthwise_row_s8), or a column of a transposed
 * plane (lt_mve_depthwise_s8), whose taps are the filter's transposed. */
LT_ALWAYS_INLINE void lt_mve_depthwise_line_s8(const lt_conv_params *p, const int16_t *line, const int32_t line_stride,
                                               const int32_t taps_a, const int32_t taps_b, const int16_t *w,
                                               const int32_t w_a, const int32_t w_b, const int32_t stride,
                                               const int32_t count, const lt_requant *q, const int32_t acc0, int8_t *out,
                                               const int32_t out_step, const unsigned flags) {
    const uint32x4_t in_offsets = vmulq_n_u32(vidupq_n_u32(0, 1), (uint32_t)stride);
    const uint32x4_t out_offsets = vmulq_n_u32(vidupq_n_u32(0, 1), (uint32_t)out_step);
#define LT_MVE_TAP_LOAD(r, lanes)                                                                         \
    (stride == 1 ? vldrhq_z_s32((r), (lanes)) : vldrhq_gather_shifted_offset_z_s32((r), in_offsets, (lanes)))
#define LT_MVE_TAP_LOAD_ALL(r) (stride == 1 ? vldrhq_s32(r) : vldrhq_gather_shifted_offset_s32((r), in_offsets))
    int32_t i = 0;
    for (; i + 4 <= count; i += 4, line += 4 * stride, out += 4 * out_step) {
        int32x4_t acc = vdupq_n_s32(acc0);
        LT_UNROLL for (int32_t a = 0; a < taps_a; ++a) {
            LT_UNROLL for (int32_t b = 0; b < taps_b; ++b)
                acc = vmlaq_n_s32(acc, LT_MVE_TAP_LOAD_ALL(line + a * line_stride + b), w[a * w_a + b * w_b]);
        }
        vstrbq_scatter_offset_s32(out, out_offsets, lt_mve_requantize_s8(acc, q, p, flags));
    }
    if (i < count) {
        const mve_pred16_t lanes = vctp32q((uint32_t)(count - i));
        int32x4_t acc = vdupq_n_s32(acc0);
        LT_UNROLL for (int32_t a = 0; a < taps_a; ++a) {
            LT_UNROLL for (int32_t b = 0; b < taps_b; ++b)
                acc = vmlaq_n_s32(acc, LT_MVE_TAP_LOAD(line + a * line_stride + b, lanes), w[a * w_a + b * w_b]);
        }
        vstrbq_scatter_offset_p_s32(out, out_offsets, lt_mve_requantize_s8(acc, q, p, flags), lanes);
    }
#undef LT_MVE_TAP_LOAD
#undef LT_MVE_TAP_LOAD_ALL
}

/* lt_depthwise_row_s8's work, its plane row as the line (the filter's taps at fy * 2 * pairs + fx in its int16
 * pairs). */
LT_ALWAYS_INLINE void lt_mve_depthwise_row_s8(const lt_conv_params *p, const int16_t *row, const int32_t plane_w,
                                              const uint32_t *wc, const lt_requant q, const int32_t acc0, int8_t *out,
                                              const int32_t c_count, const unsigned flags) {
    const int32_t pairs = (p->filter_w + 1) / 2;
    lt_mve_depthwise_line_s8(p, row, plane_w, p->filter_h, p->filter_w, (const int16_t *)wc, 2 * pairs, 1, p->stride_w,
                             p->out_w, &q, acc0, out, c_count, flags);
}

/* Channel c of the input as a transposed int16 plane: plane column px (input column px - pad_w) as `plane_h`
 * contiguous values, padding at the input zero point; input rows by a gather of eight bytes a row apart. 0 where
 * those offsets do not fit 16 bits. */
LT_ALWAYS_INLINE int lt_mve_transposed_plane_s8(const lt_conv_params *p, const int8_t *input, int32_t c,
                                                int32_t plane_h, int32_t plane_w, int16_t *plane) {
    const int32_t row_bytes = p->in_w * p->in_c, zero_point = -p->input_offset;
    if (row_bytes * 7 > 0xFFFF) return 0;
    const int16x8_t pad = vdupq_n_s16((int16_t)zero_point);
    const uint16x8_t offsets = vmulq_n_u16(vidupq_n_u16(0, 1), (uint16_t)row_bytes);
    const int32_t top = p->pad_h, bottom = p->pad_h + p->in_h < plane_h ? p->pad_h + p->in_h : plane_h;
    for (int32_t px = 0; px < plane_w; ++px, plane += plane_h) {
        const int32_t x = px - p->pad_w;
        if (x < 0 || x >= p->in_w) {
            for (int32_t py = 0; py < plane_h; py += 8) vstrhq_p_s16(plane + py, pad, vctp16q((uint32_t)(plane_h - py)));
            continue;
        }
        for (int32_t py = 0; py < top; py += 8) vstrhq_p_s16(plane + py, pad, vctp16q((uint32_t)(top - py)));
        const int8_t *from = input + x * p->in_c + c;
        for (int32_t py = top; py < bottom; py += 8, from += 8 * row_bytes) {
            const mve_pred16_t lanes = vctp16q((uint32_t)(bottom - py));
            vstrhq_p_s16(plane + py, vldrbq_gather_offset_z_s16(from, offsets, lanes), lanes);
        }
        for (int32_t py = bottom; py < plane_h; py += 8)
            vstrhq_p_s16(plane + py, pad, vctp16q((uint32_t)(plane_h - py)));
    }
    return 1;
}

/* lt_depthwise_s8_fast's work where the output is taller than wide: each channel's plane transposed, so that its
 * lines (the output's columns) are the longer side, fewer lanes idle. One channel at a time, as there: its plane is
 * copied before its outputs are written, so the layer may run in place. 0 where it does not apply. */
LT_ALWAYS_INLINE int lt_mve_depthwise_s8(const lt_conv_params *p, const int8_t *input, const uint32_t *filter,
                                         const int32_t *bias, const lt_requant *rq, int8_t *output, int16_t *scratch,
                                         const unsigned flags) {
    const int32_t kh = p->filter_h, kw = p->filter_w, pairs = (kw + 1) / 2, c_count = p->out_c;
    const int32_t plane_h = (p->out_h - 1) * p->stride_h + kh, plane_w = (p->out_w - 1) * p->stride_w + kw;
    if (p->out_h <= p->out_w || p->in_w * p->in_c * 7 > 0xFFFF) return 0;
    for (int32_t b = 0; b < p->batches; ++b) {
        const int8_t *in_b = input + b * p->in_h * p->in_w * c_count;
        int8_t *out_b = output + b * p->out_h * p->out_w * c_count;
        for (int32_t c = 0; c < c_count; ++c) {
            lt_mve_transposed_plane_s8(p, in_b, c, plane_h, plane_w, scratch);
            const int16_t *w = (const int16_t *)(filter + c * kh * pairs);
            for (int32_t ox = 0; ox < p->out_w; ++ox)
                lt_mve_depthwise_line_s8(p, scratch + ox * p->stride_w * plane_h, plane_h, kw, kh, w, 1, 2 * pairs,
                                         p->stride_h, p->out_h, &rq[c], bias[c], out_b + ox * c_count + c,
                                         p->out_w * c_count, flags);
        }
    }
    return 1;
}

#endif /* LT_MVE */
#endif /* LT_MVE_CONV_H */
