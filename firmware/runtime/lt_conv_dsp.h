/* Fast int8 CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED, bit-exact with TFLM's reference kernels.
 *
 * The bodies are `static inline` so that `lowtide compile` can emit one function per layer that calls them with
 * that layer's constant parameter struct: the compiler then folds every shape, stride and flag into the code
 * (loop bounds, address offsets, which requantization steps exist) and unrolls the small loops.
 *
 * What lowtide prepares offline (host/lowtide/compile/lowering/conv.py):
 * - the bias folded with the input zero point: bias[oc] - input_zero_point * sum(filter[oc]), so the kernels
 *   multiply raw int8 values and a padded tap holds the input zero point (its product cancels in the fold);
 * - convolution and fully-connected filters as rows of K4 values, K = filter_h * filter_w * in_c rounded up to a
 *   multiple of 4 (zeros after K), pairs of rows interleaved in the order the matrix core reads them; int8, or
 *   (LT_WIDE_WEIGHTS, the layers with the most output pixels within a flash budget) int16 in SXTB16 order;
 * - depthwise filters per channel as int16 pairs: for each filter row, (w[fx], w[fx + 1]) words, and the last
 *   tap of an odd width alone in the low half of a word;
 * - int16 weights and the bias doubled (LT_DOUBLED_ACC) where the short requantization applies, which wants
 *   2 acc: the sums come out doubled at no cost.
 *
 * On cores with the DSP extension (Cortex-M4, M7, M33 with DSP: __ARM_FEATURE_DSP) the arithmetic is the SIMD
 * instructions SXTB16, SMLAD and SMLAxy through ACLE intrinsics; elsewhere (and in lowtide's host checks) the
 * same arithmetic in portable C. Both are exact: integer sums do not depend on their order (the accumulators
 * wrap modulo 2^32 like SMLAD's), and the requantization is TFLM's MultiplyByQuantizedMultiplier to the bit.
 */
#ifndef LT_CONV_DSP_H
#define LT_CONV_DSP_H

#include <stdint.h>
#include <string.h>

#include "lt_runtime.h"

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#include <arm_acle.h>
#define LT_DSP 1
#endif

/* The kernels inline into one function per layer; the layers stay separate functions (one frame each). */
#if defined(__GNUC__)
#define LT_ALWAYS_INLINE static inline __attribute__((always_inline))
#define LT_NOINLINE __attribute__((noinline))
#else
#define LT_ALWAYS_INLINE static inline
#define LT_NOINLINE
#endif
/* a loop over a filter's rows or taps, whose count is a constant once the layer is specialised */
#if defined(__GNUC__) && !defined(__clang__)
#define LT_UNROLL _Pragma("GCC unroll 8")
#else
#define LT_UNROLL
#endif

/* ---- the SIMD primitives ---------------------------------------------------------------------------------- */

static inline uint32_t lt_read32(const void *p) {
    uint32_t v;
    memcpy(&v, p, 4); /* one LDR on Cortex-M4/M7 (unaligned loads allowed) */
    return v;
}

#ifdef LT_DSP
/* bytes 0 and 2 of x, sign-extended into the low and high halfword */
static inline uint32_t lt_sxtb16(uint32_t x) { return (uint32_t)__sxtb16((int32_t)x); }
/* bytes 1 and 3 (GCC does not fold a rotate into SXTB16's operand by itself) */
static inline uint32_t lt_sxtb16_ror8(uint32_t x) {
    uint32_t r;
    __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(x));
    return r;
}
/* acc + lo(a) * lo(b) + hi(a) * hi(b) */
static inline int32_t lt_smlad(uint32_t a, uint32_t b, int32_t acc) { return __smlad((int32_t)a, (int32_t)b, acc); }
/* acc + lo(a) * lo(b), acc + hi(a) * hi(b) */
static inline int32_t lt_smlabb(uint32_t a, uint32_t b, int32_t acc) { return __smlabb((int32_t)a, (int32_t)b, acc); }
static inline int32_t lt_smlatt(uint32_t a, uint32_t b, int32_t acc) { return __smlatt((int32_t)a, (int32_t)b, acc); }
static inline int32_t lt_smlatb(uint32_t a, uint32_t b, int32_t acc) { return __smlatb((int32_t)a, (int32_t)b, acc); }
static inline int32_t lt_ssat8(int32_t x) { return __ssat(x, 8); }
static inline int32_t lt_ssat16(int32_t x) { return __ssat(x, 16); }
/* (a * b + 2^31) >> 32 */
static inline int32_t lt_smmulr(int32_t a, int32_t b) {
    int32_t r;
    __asm__("smmulr %0, %1, %2" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
/* acc + ((a * b + 2^31) >> 32) */
static inline int32_t lt_smmlar(int32_t a, int32_t b, int32_t acc) {
    int32_t r;
    __asm__("smmlar %0, %1, %2, %3" : "=r"(r) : "r"(a), "r"(b), "r"(acc));
    return r;
}
#else
static inline uint32_t lt_pair(int32_t lo, int32_t hi) { return (uint16_t)lo | ((uint32_t)(uint16_t)hi << 16); }
static inline int32_t lt_lo16(uint32_t x) { return (int16_t)(uint16_t)x; }
static inline int32_t lt_hi16(uint32_t x) { return (int16_t)(uint16_t)(x >> 16); }
static inline uint32_t lt_sxtb16(uint32_t x) { return lt_pair((int8_t)(uint8_t)x, (int8_t)(uint8_t)(x >> 16)); }
static inline uint32_t lt_sxtb16_ror8(uint32_t x) {
    return lt_pair((int8_t)(uint8_t)(x >> 8), (int8_t)(uint8_t)(x >> 24));
}
static inline int32_t lt_smlad(uint32_t a, uint32_t b, int32_t acc) {
    return (int32_t)((uint32_t)acc + (uint32_t)(lt_lo16(a) * lt_lo16(b)) + (uint32_t)(lt_hi16(a) * lt_hi16(b)));
}
static inline int32_t lt_smlabb(uint32_t a, uint32_t b, int32_t acc) {
    return (int32_t)((uint32_t)acc + (uint32_t)(lt_lo16(a) * lt_lo16(b)));
}
static inline int32_t lt_smlatt(uint32_t a, uint32_t b, int32_t acc) {
    return (int32_t)((uint32_t)acc + (uint32_t)(lt_hi16(a) * lt_hi16(b)));
}
static inline int32_t lt_smlatb(uint32_t a, uint32_t b, int32_t acc) {
    return (int32_t)((uint32_t)acc + (uint32_t)(lt_hi16(a) * lt_lo16(b)));
}
static inline int32_t lt_ssat8(int32_t x) { return x < -128 ? -128 : (x > 127 ? 127 : x); }
static inline int32_t lt_ssat16(int32_t x) { return x < -32768 ? -32768 : (x > 32767 ? 32767 : x); }
static inline int32_t lt_smmulr(int32_t a, int32_t b) { return (int32_t)(((int64_t)a * b + 0x80000000LL) >> 32); }
static inline int32_t lt_smmlar(int32_t a, int32_t b, int32_t acc) {
    return (int32_t)((uint32_t)acc + (uint32_t)lt_smmulr(a, b));
}
#endif

/* (x * m + 2^30) >> 31, one SMLAL on Cortex-M: TFLM's SaturatingRoundingDoublingHighMul for any m > 0 (gemmlowp's
 * nudge of 1 - 2^30 and truncating division for a negative product give the same value as this flooring shift;
 * the shift of a negative int64 is arithmetic on every compiler lowtide supports). */
static inline int32_t lt_doubling_high_mul(int32_t x, int32_t m) {
    return (int32_t)(((int64_t)x * m + (1 << 30)) >> 31);
}

/* The loads before it stay before the stores after it: on the M4 a load after a load pipelines (1 cycle, not 2), and
 * GCC would put each load beside its store. */
#ifdef LT_DSP
#define LT_LOADS_THEN_STORES() __asm__ volatile("" ::: "memory")
#else
#define LT_LOADS_THEN_STORES() ((void)0)
#endif

/* ---- requantization ----------------------------------------------------------------------------------------- */

/* One output channel's requantization as lowtide prepares it: TFLM's multiplier and shift, and for LT_SHORT_ACC
 * layers the right shift r = -shift and 2^(r - 1) + output_offset * 2^r (the rounding and the output offset in
 * one add; LT_OFFSET_AFTER: 2^(r - 1), the offset added after the shift). */
typedef struct {
    int32_t multiplier, shift, round, right_shift;
} lt_requant;

/* Layer flags lowtide knows at compile time. */
#define LT_SHORT_ACC 1u  /* every shift < 0 and every accumulator (bounded from the weights) below 2^30 */
#define LT_FULL_RANGE 2u /* the activation range is all of int8: one SSAT clamps */
#define LT_WIDE_WEIGHTS 4u /* CONV_2D: the filter is int16, laid out for lt_matmul_2_w16 */
#define LT_DOUBLED_ACC 8u  /* LT_SHORT_ACC layers: lowtide doubled the int16 weights and the bias, acc is 2 acc */
#define LT_OFFSET_AFTER 16u /* LT_SHORT_ACC layers whose offset * 2^r does not fit round: added after the shift */

/* TFLM's MultiplyByQuantizedMultiplier (double rounding) + output offset + activation clamp.
 * LT_SHORT_ACC: the doubling high product x = (acc * m + 2^30) >> 31 is SMMULR(2 acc, m), exact while 2 acc fits
 * int32, and the rounding right shift (x + 2^(r-1) - (x < 0)) >> r is gemmlowp's RoundingDivideByPOT (round half
 * away from zero), with the output offset added before the shift as offset * 2^r: one SMMLAR adds that. m > 0,
 * so x < 0 only where acc < 0, and where acc < 0 but x = 0 the -1 cannot change (2^(r-1) - 1) >> r = 0: the sign
 * of acc stands for the sign of x, known before the product. */
LT_ALWAYS_INLINE int32_t lt_requantize_s8(int32_t acc, const lt_requant *q, const lt_conv_params *p,
                                          const unsigned flags) {
    int32_t x;
    if (flags & LT_SHORT_ACC) {
        const int32_t acc2 = (flags & LT_DOUBLED_ACC) ? acc : (int32_t)((uint32_t)acc << 1);
        x = lt_smmlar(acc2, q->multiplier, q->round);
        x = (int32_t)((uint32_t)x + (uint32_t)(acc2 >> 31)) >> q->right_shift;
        if (flags & LT_OFFSET_AFTER) x += p->output_offset;
    } else {
        const int32_t left = q->shift > 0 ? q->shift : 0, right = q->shift > 0 ? 0 : -q->shift;
        x = lt_doubling_high_mul((int32_t)((uint32_t)acc << left), q->multiplier);
        if (right) x = (int32_t)(((uint32_t)x + (1u << (right - 1)) - ((uint32_t)x >> 31))) >> right;
        x += p->output_offset;
    }
    if (flags & LT_FULL_RANGE) return lt_ssat8(x);
    return x < p->act_min ? p->act_min : (x > p->act_max ? p->act_max : x);
}

/* Two channels of two pixels requantized, then stored: an int8 store may alias anything, so storing each as it is
 * made would reload the channels' requantization between the pixels. */
LT_ALWAYS_INLINE void lt_store_2x2_s8(int32_t a0, int32_t a1, int32_t b0, int32_t b1, const lt_requant *rq,
                                      const lt_conv_params *p, int8_t *out0, const int32_t pixel_stride,
                                      const unsigned flags) {
    int8_t *out1 = out0 + pixel_stride; /* one base and constant offsets: fewer pointers live across the loop */
    const lt_requant q0 = rq[0], q1 = rq[1];
    const int8_t ya0 = (int8_t)lt_requantize_s8(a0, &q0, p, flags), ya1 = (int8_t)lt_requantize_s8(a1, &q1, p, flags);
    const int8_t yb0 = (int8_t)lt_requantize_s8(b0, &q0, p, flags), yb1 = (int8_t)lt_requantize_s8(b1, &q1, p, flags);
    out0[0] = ya0;
    out0[1] = ya1;
    out1[0] = yb0;
    out1[1] = yb1;
}

#ifdef LT_DSP
/* The matrix core's inner loop: the k4 / 4 groups (4 values of k) of one channel pair and pixel pair, two
 * channels' weights against two pixels' expanded rows (x0 at a, x1 at b), 16 products a group into a0, a1 (pixel
 * a's channels) and b0, b1. Inline assembly, since GCC spills this loop's 14 live values (24 instructions per 16
 * products where 12 do) and does not group loads the way the pipelines below want; v0..v5 are the six registers
 * left for values.
 *
 * Cortex-M4 and M33 (one instruction a cycle): a load that follows a load pipelines and costs 1 cycle, where a
 * lone load, an LDRD or an LDM costs 2 for its first word, so each group's weights and pixel a's two words load
 * as one run of single loads, pixel b's as a second once a's products free their registers. int16 weights: 8 loads
 * and 8 SMLAD, 18 cycles per 16 products (LDM + 2 LDRD: 19); int8: 6 loads, 4 SXTB16 and 8 SMLAD, 20 (21).
 * The loops run four groups a pass; a count that is not a multiple of 4 enters the first pass at the group that
 * leaves whole passes (`tmp`, a free register, holds the remainder). Per group 3/4 of a cycle of SUBS and BNE. */
#define LT_LOOP_BY_FOUR(GROUP, tmp)                                                                        \
    "ands " tmp ", %[k], #3\n\t"                                                                         \
    "lsr %[k], %[k], #2\n\t"                                                                             \
    "beq 1f\n\t"                                                                                         \
    "adds %[k], %[k], #1\n\t"                                                                            \
    "cmp " tmp ", #2\n\t"                                                                                \
    "blo 4f\n\t"                                                                                         \
    "beq 3f\n\t"                                                                                         \
    "b 2f\n\t"                                                                                           \
    "1:\n\t" GROUP "2:\n\t" GROUP "3:\n\t" GROUP "4:\n\t" GROUP "subs %[k], %[k], #1\n\tbne 1b\n\t"
#define LT_PRODUCTS_2X2 /* v0, v1: channel 0's words 02 and 13; v2, v3: channel 1's; v4, v5: a pixel's */ \
    "smlad %[a0], %[v4], %[v0], %[a0]\n\t"                                                          \
    "smlad %[a0], %[v5], %[v1], %[a0]\n\t"                                                          \
    "smlad %[a1], %[v4], %[v2], %[a1]\n\t"                                                          \
    "smlad %[a1], %[v5], %[v3], %[a1]\n\t"                                                          \
    "ldr %[v5], [%[b], #4]\n\t"                                                                     \
    "ldr %[v4], [%[b]], #8\n\t"                                                                     \
    "smlad %[b0], %[v4], %[v0], %[b0]\n\t"                                                          \
    "smlad %[b0], %[v5], %[v1], %[b0]\n\t"                                                          \
    "smlad %[b1], %[v4], %[v2], %[b1]\n\t"                                                          \
    "smlad %[b1], %[v5], %[v3], %[b1]\n\t"
#define LT_GROUP_W16_RUNS                \
    "ldr %[v1], [%[w], #4]\n\t"          \
    "ldr %[v2], [%[w], #8]\n\t"          \
    "ldr %[v3], [%[w], #12]\n\t"         \
    "ldr %[v0], [%[w]], #16\n\t"         \
    "ldr %[v5], [%[a], #4]\n\t"          \
    "ldr %[v4], [%[a]], #8\n\t"          \
    LT_PRODUCTS_2X2
#define LT_GROUP_S8_RUNS                 \
    "ldr %[v2], [%[w], #4]\n\t"          \
    "ldr %[v0], [%[w]], #8\n\t"          \
    "ldr %[v5], [%[a], #4]\n\t"          \
    "ldr %[v4], [%[a]], #8\n\t"          \
    "sxtb16 %[v1], %[v0], ror #8\n\t"    \
    "sxtb16 %[v0], %[v0]\n\t"            \
    "sxtb16 %[v3], %[v2], ror #8\n\t"    \
    "sxtb16 %[v2], %[v2]\n\t"            \
    LT_PRODUCTS_2X2

/* Cortex-M7 (two instructions a cycle, one of them a load or store, one a multiply; a load's value ready two
 * cycles after it issues): each SMLAD pairs with a single load of a value needed two or more cycles later, into
 * the register that SMLAD reads for the last time, so a group of int16 weights issues in 8 cycles (16 products)
 * where loads and multiplies in runs take about 14. Software-pipelined: a group starts with its weights' and
 * pixels' 02 words and channel 0's 13 word loaded (v0 u02, v1 xa02, v2 xb02, v3 v02, v4 u13) and loads the rest
 * and the next group's while it multiplies; the last group loads nothing past the pair's rows and weights. */
#define LT_W16_DUAL_FIRST                                                                                 \
    "ldr %[v0], [%[w]]\n\t"                                                                           \
    "ldr %[v4], [%[w], #4]\n\t"                                                                       \
    "ldr %[v3], [%[w], #8]\n\t"                                                                       \
    "ldr %[v1], [%[a]]\n\t"                                                                           \
    "ldr %[v2], [%[b]]\n\t"
#define LT_W16_DUAL_GROUP                                                                                 \
    "smlad %[a0], %[v1], %[v0], %[a0]\n\tldr %[v5], [%[a], #4]\n\t"     /* xa13 */                     \
    "smlad %[a1], %[v1], %[v3], %[a1]\n\tldr %[v1], [%[b], #4]\n\t"     /* xb13 */                     \
    "smlad %[b0], %[v2], %[v0], %[b0]\n\tldr %[v0], [%[w], #12]\n\t"    /* v13 */                      \
    "smlad %[b1], %[v2], %[v3], %[b1]\n\tldr %[v2], [%[b], #8]!\n\t"    /* next xb02 */                \
    "smlad %[b1], %[v1], %[v0], %[b1]\n\tldr %[v3], [%[w], #24]\n\t"    /* next v02 */                 \
    "smlad %[b0], %[v1], %[v4], %[b0]\n\tldr %[v1], [%[a], #8]!\n\t"    /* next xa02 */                \
    "smlad %[a1], %[v5], %[v0], %[a1]\n\tldr %[v0], [%[w], #16]!\n\t"   /* next u02 */                 \
    "smlad %[a0], %[v5], %[v4], %[a0]\n\tldr %[v4], [%[w], #4]\n\t"     /* next u13 */
#define LT_W16_DUAL_LAST                                                                                  \
    "smlad %[a0], %[v1], %[v0], %[a0]\n\tldr %[v5], [%[a], #4]\n\t"                                   \
    "smlad %[a1], %[v1], %[v3], %[a1]\n\tldr %[v1], [%[b], #4]\n\t"                                   \
    "smlad %[b0], %[v2], %[v0], %[b0]\n\tldr %[v0], [%[w], #12]\n\t"                                  \
    "smlad %[b1], %[v2], %[v3], %[b1]\n\tadds %[w], %[w], #16\n\t"                                    \
    "smlad %[b1], %[v1], %[v0], %[b1]\n\t"                                                            \
    "smlad %[b0], %[v1], %[v4], %[b0]\n\t"                                                            \
    "smlad %[a1], %[v5], %[v0], %[a1]\n\t"                                                            \
    "smlad %[a0], %[v5], %[v4], %[a0]\n\t"
#define LT_W16_DUAL_LOOP                                                                                  \
    LT_W16_DUAL_FIRST "subs %[k], %[k], #1\n\tbeq 5f\n\t" LT_LOOP_BY_FOUR(LT_W16_DUAL_GROUP, "%[v5]") "5:\n\t"  \
    LT_W16_DUAL_LAST

/* The Cortex-M7 schedule where the core is known to dual issue: an M7 with its double-precision FPU (the only
 * ARMv7E-M core with one; GCC names no core in its macros), or a build that defines LT_DUAL_ISSUE. */
#if !defined(LT_DUAL_ISSUE) && defined(__ARM_ARCH_7EM__) && defined(__ARM_FP) && (__ARM_FP & 8)
#define LT_DUAL_ISSUE 1
#endif
#if defined(LT_DUAL_ISSUE) && LT_DUAL_ISSUE
#define LT_MATMUL_W16_BODY LT_W16_DUAL_LOOP
#else
#define LT_MATMUL_W16_BODY LT_LOOP_BY_FOUR(LT_GROUP_W16_RUNS, "%[v0]")
#endif
#define LT_MATMUL_S8_BODY LT_LOOP_BY_FOUR(LT_GROUP_S8_RUNS, "%[v0]")

/* The loop in the enclosing kernel's x0, x1, w, k4 and a0..b1: every live value in a register of its own. */
#define LT_MATMUL_2X2_LOOP(BODY)                                                                             \
    do {                                                                                                     \
        register const uint32_t *ra __asm__("r0") = (const uint32_t *)x0;                                    \
        register const uint32_t *rb __asm__("r1") = (const uint32_t *)x1;                                    \
        register const uint32_t *rw __asm__("r2") = w;                                                       \
        register int32_t groups __asm__("r3") = k4 >> 2;                                                     \
        register uint32_t v0 __asm__("r4"), v1 __asm__("r5"), v2 __asm__("r6"), v3 __asm__("r7");           \
        register uint32_t v4 __asm__("r8"), v5 __asm__("r9");                                                \
        register int32_t ra0 __asm__("r10") = a0, ra1 __asm__("r11") = a1, rb0 __asm__("r12") = b0;         \
        register int32_t rb1 __asm__("lr") = b1;                                                             \
        __asm__ volatile(BODY                                                                                \
                         : [a] "+r"(ra), [b] "+r"(rb), [w] "+r"(rw), [k] "+r"(groups), [a0] "+r"(ra0),       \
                           [a1] "+r"(ra1), [b0] "+r"(rb0), [b1] "+r"(rb1), [v0] "=&r"(v0), [v1] "=&r"(v1),   \
                           [v2] "=&r"(v2), [v3] "=&r"(v3), [v4] "=&r"(v4), [v5] "=&r"(v5)                    \
                         :                                                                                   \
                         : "cc", "memory");                                                                  \
        w = rw;                                                                                              \
        a0 = ra0;                                                                                            \
        a1 = ra1;                                                                                            \
        b0 = rb0;                                                                                            \
        b1 = rb1;                                                                                            \
    } while (0)
#endif

/* ---- matrix core: two pixels (or one) x every output channel ------------------------------------------------- */

/* n int8 values as int16 in SXTB16 order (per 4: bytes 0 and 2, then 1 and 3), zero-padded to a multiple of 4.
 * Inline, like the window below: with the layer's constant channel count and window the copies unroll. */
LT_ALWAYS_INLINE void lt_expand_s8(const int8_t *src, int32_t n, int16_t *dst) {
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
    if (n > 0) { /* the last 1-3 values and zeros: assembled in a register (a memcpy call costs more) */
        uint32_t u = (uint8_t)src[0];
        if (n > 1) u |= (uint32_t)(uint8_t)src[1] << 8;
        if (n > 2) u |= (uint32_t)(uint8_t)src[2] << 16;
        d[0] = lt_sxtb16(u);
        d[1] = lt_sxtb16_ror8(u);
    }
}


/* x0, x1: two expanded rows of k4 values; w: the int8 filter [out_c][k4] with each pair of rows interleaved word
 * by word (`pack_row_pairs`: row oc's word, row oc + 1's, ...), a last odd row alone. Writes out_c channels at
 * out0 and at out1. Per 16 products: 3 LDRD, 4 SXTB16, 8 SMLAD. */
LT_ALWAYS_INLINE void lt_matmul_2_s8(const int16_t *x0, const int16_t *x1, const uint32_t *w, int32_t k4,
                                     int32_t out_c, const int32_t *bias, const lt_requant *rq,
                                     const lt_conv_params *p, int8_t *out0, int8_t *out1, const unsigned flags) {
    int32_t oc = 0;
    for (; oc + 2 <= out_c; oc += 2) {
        int32_t a0 = bias[oc], a1 = bias[oc + 1], b0 = a0, b1 = a1;
#ifdef LT_DSP
        LT_MATMUL_2X2_LOOP(LT_MATMUL_S8_BODY);
#else
        const uint32_t *a = (const uint32_t *)x0, *b = (const uint32_t *)x1;
        for (int32_t k = k4 >> 2; k > 0; --k) {
            const uint32_t u = w[0], v = w[1];
            w += 2;
            const uint32_t u02 = lt_sxtb16(u), u13 = lt_sxtb16_ror8(u);
            const uint32_t v02 = lt_sxtb16(v), v13 = lt_sxtb16_ror8(v);
            const uint32_t a02 = a[0], a13 = a[1], b02 = b[0], b13 = b[1];
            a += 2;
            b += 2;
            a0 = lt_smlad(a02, u02, a0);
            a0 = lt_smlad(a13, u13, a0);
            a1 = lt_smlad(a02, v02, a1);
            a1 = lt_smlad(a13, v13, a1);
            b0 = lt_smlad(b02, u02, b0);
            b0 = lt_smlad(b13, u13, b0);
            b1 = lt_smlad(b02, v02, b1);
            b1 = lt_smlad(b13, v13, b1);
        }
#endif
        lt_store_2x2_s8(a0, a1, b0, b1, &rq[oc], p, out0 + oc, out1 - out0, flags);
    }
    if (oc < out_c) {
        const uint32_t *a = (const uint32_t *)x0, *b = (const uint32_t *)x1;
        int32_t a0 = bias[oc], b0 = a0;
        for (int32_t k = k4 >> 2; k > 0; --k) {
            const uint32_t u = *w++;
            const uint32_t u02 = lt_sxtb16(u), u13 = lt_sxtb16_ror8(u);
            a0 = lt_smlad(a[0], u02, a0);
            a0 = lt_smlad(a[1], u13, a0);
            b0 = lt_smlad(b[0], u02, b0);
            b0 = lt_smlad(b[1], u13, b0);
            a += 2;
            b += 2;
        }
        out0[oc] = (int8_t)lt_requantize_s8(a0, &rq[oc], p, flags);
        out1[oc] = (int8_t)lt_requantize_s8(b0, &rq[oc], p, flags);
    }
}

LT_ALWAYS_INLINE void lt_matmul_1_s8(const int16_t *x0, const uint32_t *w, int32_t k4, int32_t out_c,
                                     const int32_t *bias, const lt_requant *rq,
                                     const lt_conv_params *p, int8_t *out0, const unsigned flags) {
    int32_t oc = 0;
    for (; oc + 2 <= out_c; oc += 2) {
        const uint32_t *a = (const uint32_t *)x0;
        int32_t a0 = bias[oc], a1 = bias[oc + 1];
        for (int32_t k = k4 >> 2; k > 0; --k) {
            const uint32_t u = w[0], v = w[1];
            w += 2;
            const uint32_t a02 = a[0], a13 = a[1];
            a += 2;
            a0 = lt_smlad(a02, lt_sxtb16(u), a0);
            a0 = lt_smlad(a13, lt_sxtb16_ror8(u), a0);
            a1 = lt_smlad(a02, lt_sxtb16(v), a1);
            a1 = lt_smlad(a13, lt_sxtb16_ror8(v), a1);
        }
        out0[oc] = (int8_t)lt_requantize_s8(a0, &rq[oc], p, flags);
        out0[oc + 1] = (int8_t)lt_requantize_s8(a1, &rq[oc + 1], p, flags);
    }
    if (oc < out_c) {
        const uint32_t *a = (const uint32_t *)x0;
        int32_t a0 = bias[oc];
        for (int32_t k = k4 >> 2; k > 0; --k) {
            const uint32_t u = *w++;
            a0 = lt_smlad(a[0], lt_sxtb16(u), a0);
            a0 = lt_smlad(a[1], lt_sxtb16_ror8(u), a0);
            a += 2;
        }
        out0[oc] = (int8_t)lt_requantize_s8(a0, &rq[oc], p, flags);
    }
}

/* The same products over weights lowtide widened offline (`pack_row_pairs`): int16 in the SXTB16 order of the
 * expanded rows, two output channels interleaved by 4 values (channel oc's words 02 and 13, then channel
 * oc + 1's), a last odd channel alone. No SXTB16 in the loop: per 16 products 2 LDRD of weights,
 * 2 of the rows and 8 SMLAD, for twice the weights' flash. */
LT_ALWAYS_INLINE void lt_matmul_2_w16(const int16_t *x0, const int16_t *x1, const uint32_t *w, int32_t k4,
                                      int32_t out_c, const int32_t *bias, const lt_requant *rq,
                                      const lt_conv_params *p, int8_t *out0, int8_t *out1, const unsigned flags) {
    int32_t oc = 0;
    for (; oc + 2 <= out_c; oc += 2) {
        int32_t a0 = bias[oc], a1 = bias[oc + 1], b0 = a0, b1 = a1;
#ifdef LT_DSP
        LT_MATMUL_2X2_LOOP(LT_MATMUL_W16_BODY);
#else
        const uint32_t *a = (const uint32_t *)x0, *b = (const uint32_t *)x1;
        for (int32_t k = k4 >> 2; k > 0; --k) {
            const uint32_t u02 = w[0], u13 = w[1], v02 = w[2], v13 = w[3];
            w += 4;
            const uint32_t a02 = a[0], a13 = a[1];
            a += 2;
            a0 = lt_smlad(a02, u02, a0);
            a0 = lt_smlad(a13, u13, a0);
            a1 = lt_smlad(a02, v02, a1);
            a1 = lt_smlad(a13, v13, a1);
            const uint32_t b02 = b[0], b13 = b[1];
            b += 2;
            b0 = lt_smlad(b02, u02, b0);
            b0 = lt_smlad(b13, u13, b0);
            b1 = lt_smlad(b02, v02, b1);
            b1 = lt_smlad(b13, v13, b1);
        }
#endif
        lt_store_2x2_s8(a0, a1, b0, b1, &rq[oc], p, out0 + oc, out1 - out0, flags);
    }
    if (oc < out_c) {
        const uint32_t *a = (const uint32_t *)x0, *b = (const uint32_t *)x1;
        int32_t a0 = bias[oc], b0 = a0;
        for (int32_t k = k4 >> 2; k > 0; --k) {
            const uint32_t u02 = w[0], u13 = w[1];
            w += 2;
            a0 = lt_smlad(a[0], u02, a0);
            a0 = lt_smlad(a[1], u13, a0);
            b0 = lt_smlad(b[0], u02, b0);
            b0 = lt_smlad(b[1], u13, b0);
            a += 2;
            b += 2;
        }
        out0[oc] = (int8_t)lt_requantize_s8(a0, &rq[oc], p, flags);
        out1[oc] = (int8_t)lt_requantize_s8(b0, &rq[oc], p, flags);
    }
}

LT_ALWAYS_INLINE void lt_matmul_1_w16(const int16_t *x0, const uint32_t *w, int32_t k4, int32_t out_c,
                                      const int32_t *bias, const lt_requant *rq, const lt_conv_params *p,
                                      int8_t *out0, const unsigned flags) {
    int32_t oc = 0;
    for (; oc + 2 <= out_c; oc += 2) {
        const uint32_t *a = (const uint32_t *)x0;
        int32_t a0 = bias[oc], a1 = bias[oc + 1];
        for (int32_t k = k4 >> 2; k > 0; --k) {
            const uint32_t a02 = a[0], a13 = a[1];
            a += 2;
            a0 = lt_smlad(a02, w[0], a0);
            a0 = lt_smlad(a13, w[1], a0);
            a1 = lt_smlad(a02, w[2], a1);
            a1 = lt_smlad(a13, w[3], a1);
            w += 4;
        }
        out0[oc] = (int8_t)lt_requantize_s8(a0, &rq[oc], p, flags);
        out0[oc + 1] = (int8_t)lt_requantize_s8(a1, &rq[oc + 1], p, flags);
    }
    if (oc < out_c) {
        const uint32_t *a = (const uint32_t *)x0;
        int32_t a0 = bias[oc];
        for (int32_t k = k4 >> 2; k > 0; --k) {
            a0 = lt_smlad(a[0], w[0], a0);
            a0 = lt_smlad(a[1], w[1], a0);
            a += 2;
            w += 2;
        }
        out0[oc] = (int8_t)lt_requantize_s8(a0, &rq[oc], p, flags);
    }
}

/* The outputs of two expanded pixels (out0, out1) or one (out0) through the filter in the layout `flags` says: int16
 * (LT_WIDE_WEIGHTS, lt_matmul_*_w16) or int8 (lt_matmul_*_s8). */
LT_ALWAYS_INLINE void lt_matmul_2(const int16_t *x0, const int16_t *x1, const void *filter, int32_t k4, int32_t out_c,
                                  const int32_t *bias, const lt_requant *rq, const lt_conv_params *p, int8_t *out0,
                                  int8_t *out1, const unsigned flags) {
    if (flags & LT_WIDE_WEIGHTS)
        lt_matmul_2_w16(x0, x1, (const uint32_t *)filter, k4, out_c, bias, rq, p, out0, out1, flags);
    else
        lt_matmul_2_s8(x0, x1, (const uint32_t *)filter, k4, out_c, bias, rq, p, out0, out1, flags);
}

LT_ALWAYS_INLINE void lt_matmul_1(const int16_t *x0, const void *filter, int32_t k4, int32_t out_c,
                                  const int32_t *bias, const lt_requant *rq, const lt_conv_params *p, int8_t *out0,
                                  const unsigned flags) {
    if (flags & LT_WIDE_WEIGHTS)
        lt_matmul_1_w16(x0, (const uint32_t *)filter, k4, out_c, bias, rq, p, out0, flags);
    else
        lt_matmul_1_s8(x0, (const uint32_t *)filter, k4, out_c, bias, rq, p, out0, flags);
}

/* ---- matrix x vector over int8 rows packed four by four (LSTM gates, SVDF features) -------------------------- */

/* The last k % 4 of x's k values as a word, zero-padded: the dot products read x's whole words in place and this
 * one instead of the bytes past x. */
static inline uint32_t lt_tail_word(const int8_t *x, int32_t k) {
    uint32_t tail = 0;
    memcpy(&tail, x + (k & ~3), (size_t)(k & 3));
    return tail;
}

/* One word of x (4 values) against one word of a row: two SMLAD on the sign-extended pairs. */
#define LT_DOT_WORD(x02, x13, u, acc)                        \
    do {                                                     \
        (acc) = lt_smlad((x02), lt_sxtb16(u), (acc));        \
        (acc) = lt_smlad((x13), lt_sxtb16_ror8(u), (acc));   \
    } while (0)

/* acc[0..3] += dot(x, row) for the four rows at w, laid out by lowtide (`pack_rows_by_four`, on a 4-byte
 * boundary): interleaved word by word (row 0's word j, row 1's, row 2's, row 3's, then word j + 1), every row
 * zero-padded to whole words. x is read once for the four rows: per 16 products 1 + 2 loads (LDRD), 10 SXTB16 and
 * 8 SMLAD. Returns the rows after these four. */
LT_ALWAYS_INLINE const uint32_t *lt_dot_rows4_s8(const int8_t *x, int32_t k, uint32_t x_tail, const uint32_t *w,
                                                 int32_t *acc) {
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
#define LT_DOT4_WORD(xv)                                                               \
    do {                                                                               \
        const uint32_t x02 = lt_sxtb16(xv), x13 = lt_sxtb16_ror8(xv);                  \
        const uint32_t u0 = w[0], u1 = w[1], u2 = w[2], u3 = w[3];                     \
        w += 4;                                                                        \
        LT_DOT_WORD(x02, x13, u0, a0);                                                 \
        LT_DOT_WORD(x02, x13, u1, a1);                                                 \
        LT_DOT_WORD(x02, x13, u2, a2);                                                 \
        LT_DOT_WORD(x02, x13, u3, a3);                                                 \
    } while (0)
#if defined(LT_DSP) && !(defined(LT_DUAL_ISSUE) && LT_DUAL_ISSUE)
    if (k >= 4) {
        /* x's whole words in inline assembly: the word and the four rows' words as one run of single loads (on
         * the M4 and M33 a load after a load costs 1 cycle; GCC spreads them out and steps the pointers apart),
         * four words a pass: per 16 products 5 loads, 10 SXTB16 and 8 SMLAD, 25 cycles with the loop (30). The
         * M7 keeps GCC's interleaving, which pairs its loads with the SXTB16s (the run costs it 13%). */
        register const int8_t *rx __asm__("r0") = x;
        register const uint32_t *rw __asm__("r1") = w;
        register int32_t words __asm__("r2") = k >> 2;
        register int32_t r0 __asm__("r3") = a0, r1 __asm__("r4") = a1, r2 __asm__("r5") = a2, r3 __asm__("r6") = a3;
        register uint32_t x02 __asm__("r7"), x13 __asm__("r8"), u0 __asm__("r9"), u1 __asm__("r10");
        register uint32_t u2 __asm__("r11"), u3 __asm__("r12"), t __asm__("lr");
#define LT_DOT4_ROW(u, acc)                         \
    "sxtb16 %[t], %[" #u "], ror #8\n\t"           \
    "sxtb16 %[" #u "], %[" #u "]\n\t"              \
    "smlad %[" #acc "], %[x02], %[" #u "], %[" #acc "]\n\t" \
    "smlad %[" #acc "], %[x13], %[t], %[" #acc "]\n\t"
#define LT_DOT4_ASM_WORD                            \
    "ldr %[x02], [%[x]], #4\n\t"                   \
    "ldr %[u1], [%[w], #4]\n\t"                    \
    "ldr %[u2], [%[w], #8]\n\t"                    \
    "ldr %[u3], [%[w], #12]\n\t"                   \
    "ldr %[u0], [%[w]], #16\n\t"                   \
    "sxtb16 %[x13], %[x02], ror #8\n\t"            \
    "sxtb16 %[x02], %[x02]\n\t"                    \
    LT_DOT4_ROW(u0, a0) LT_DOT4_ROW(u1, a1) LT_DOT4_ROW(u2, a2) LT_DOT4_ROW(u3, a3)
        __asm__ volatile(LT_LOOP_BY_FOUR(LT_DOT4_ASM_WORD, "%[t]")
                         : [x] "+r"(rx), [w] "+r"(rw), [k] "+r"(words), [a0] "+r"(r0), [a1] "+r"(r1), [a2] "+r"(r2),
                           [a3] "+r"(r3), [x02] "=&r"(x02), [x13] "=&r"(x13), [u0] "=&r"(u0), [u1] "=&r"(u1),
                           [u2] "=&r"(u2), [u3] "=&r"(u3), [t] "=&r"(t)
                         :
                         : "cc", "memory");
#undef LT_DOT4_ASM_WORD
#undef LT_DOT4_ROW
        x = rx;
        w = rw;
        a0 = r0;
        a1 = r1;
        a2 = r2;
        a3 = r3;
    }
#else
    const int8_t *end = x + (k & ~3);
    for (; x < end; x += 4) LT_DOT4_WORD(lt_read32(x));
#endif
    if (k & 3) LT_DOT4_WORD(x_tail);
#undef LT_DOT4_WORD
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
    return w;
}

/* *acc += dot(x, row) for the one row at w (zero-padded to whole words); returns the row after it. */
LT_ALWAYS_INLINE const uint32_t *lt_dot_row_s8(const int8_t *x, int32_t k, uint32_t x_tail, const uint32_t *w,
                                               int32_t *acc) {
    int32_t a0 = *acc;
    const int8_t *end = x + (k & ~3);
    for (; x < end; x += 4, ++w) {
        const uint32_t xv = lt_read32(x);
        LT_DOT_WORD(lt_sxtb16(xv), lt_sxtb16_ror8(xv), *w, a0);
    }
    if (k & 3) {
        LT_DOT_WORD(lt_sxtb16(x_tail), lt_sxtb16_ror8(x_tail), *w, a0);
        ++w;
    }
    *acc = a0;
    return w;
}

/* TFLM's MultiplyByQuantizedMultiplier for a multiplier >= 0: SaturatingRoundingDoublingHighMul as one SMLAL
 * (lt_doubling_high_mul), then gemmlowp's RoundingDivideByPOT. */
static inline int32_t lt_scale_by_quantized_multiplier(int32_t x, int32_t multiplier, int32_t shift) {
    const int32_t left = shift > 0 ? shift : 0, right = shift > 0 ? 0 : -shift;
    const int32_t high = lt_doubling_high_mul((int32_t)((uint32_t)x << left), multiplier);
    if (!right) return high;
    const int32_t mask = (int32_t)((1u << right) - 1u), threshold = (mask >> 1) + (high < 0);
    return (high >> right) + ((high & mask) > threshold);
}

/* The same where lowtide proved |x| < 2^30 and shift < 0 and passes round = 2^(-shift - 1) (0: not proved): the
 * doubling high product is SMMULR(2 x, m) and the rounding shift one add (as LT_SHORT_ACC does below). */
static inline int32_t lt_scale_short_or_full(int32_t x, int32_t multiplier, int32_t shift, int32_t round) {
    if (round) {
        const int32_t high = lt_smmulr((int32_t)((uint32_t)x << 1), multiplier);
        return (int32_t)((uint32_t)high + (uint32_t)round + (uint32_t)(high >> 31)) >> -shift;
    }
    return lt_scale_by_quantized_multiplier(x, multiplier, shift);
}

#include "lt_mve_conv.h" /* the Helium forms of the kernels below, on cores with MVE */

/* ---- CONV_2D (groups 1, any window, stride, padding and dilation) and FULLY_CONNECTED ------------------------- */

/* n bytes from src to dst, a word at a time then the last 1-3: a window row of a few channels is a handful of
 * bytes, where a call of memcpy costs more than the copy. */
LT_ALWAYS_INLINE void lt_copy_small(int8_t *dst, const int8_t *src, int32_t n) {
    int32_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const uint32_t v = lt_read32(src + i);
        memcpy(dst + i, &v, 4);
    }
    if (n - i >= 2) {
        uint16_t h;
        memcpy(&h, src + i, 2);
        memcpy(dst + i, &h, 2);
        i += 2;
    }
    if (i < n) dst[i] = src[i];
}

LT_ALWAYS_INLINE void lt_fill_small(int8_t *dst, int32_t value, int32_t n) {
    const uint32_t v = (uint8_t)value * 0x01010101u;
    int32_t i = 0;
    for (; i + 4 <= n; i += 4) memcpy(dst + i, &v, 4);
    if (n - i >= 2) {
        memcpy(dst + i, &v, 2);
        i += 2;
    }
    if (i < n) dst[i] = (int8_t)value;
}

/* The expanded window of output pixel (oy, ox) (its k4 values, padding taps at the input zero point), input row y
 * at `input` + (y % in_slots) rows: a ring of in_slots rows, or (in_slots 0) the whole tensor. `gather` is room for
 * k4 bytes, used when in_c is not a multiple of 4. */
LT_ALWAYS_INLINE void lt_im2col_window_s8(const lt_conv_params *p, const int8_t *input, int32_t in_slots, int32_t oy,
                                          int32_t ox, int16_t *row, int8_t *gather) {
    const int32_t c = p->in_c, zero_point = -p->input_offset, in_row_bytes = p->in_w * c;
    const int32_t y0 = oy * p->stride_h - p->pad_h, x0 = ox * p->stride_w - p->pad_w;
#define LT_WINDOW_ROW(y) ((y) < 0 || (y) >= p->in_h ? NULL : input + ((in_slots) ? (y) % (in_slots) : (y)) * in_row_bytes)
    if ((c & 3) == 0) { /* taps start on 4-value boundaries: expand each tap in place */
        const uint32_t pad = (uint16_t)zero_point | ((uint32_t)(uint16_t)zero_point << 16);
        uint32_t *d = (uint32_t *)(void *)row;
        for (int32_t fy = 0; fy < p->filter_h; ++fy) {
            const int8_t *in_row = LT_WINDOW_ROW(y0 + fy * p->dilation_h);
            for (int32_t fx = 0; fx < p->filter_w; ++fx, d += c / 2) {
                const int32_t x = x0 + fx * p->dilation_w;
                if (in_row == NULL || x < 0 || x >= p->in_w) {
                    for (int32_t i = 0; i < c / 2; ++i) d[i] = pad;
                } else {
                    lt_expand_s8(in_row + x * c, c, (int16_t *)(void *)d);
                }
            }
        }
        return;
    }
    int8_t *g = gather;
    const int32_t row_bytes = p->filter_w * c;
    for (int32_t fy = 0; fy < p->filter_h; ++fy, g += row_bytes) {
        const int8_t *in_row = LT_WINDOW_ROW(y0 + fy * p->dilation_h);
        if (in_row == NULL) {
            lt_fill_small(g, zero_point, row_bytes);
        } else if (p->dilation_w == 1) { /* the row's taps are contiguous in NHWC: one copy between the paddings */
            const int32_t left = x0 >= 0 ? 0 : (-x0 < p->filter_w ? -x0 : p->filter_w);
            const int32_t end = x0 + p->filter_w > p->in_w ? p->in_w - x0 : p->filter_w;
            if (left > 0) lt_fill_small(g, zero_point, left * c);
            if (end > left) lt_copy_small(g + left * c, in_row + (x0 + left) * c, (end - left) * c);
            const int32_t right = end > left ? end : left;
            if (right < p->filter_w) lt_fill_small(g + right * c, zero_point, (p->filter_w - right) * c);
        } else {
            for (int32_t fx = 0; fx < p->filter_w; ++fx) {
                const int32_t x = x0 + fx * p->dilation_w;
                if (x < 0 || x >= p->in_w)
                    memset(g + fx * c, zero_point, (size_t)c);
                else
                    memcpy(g + fx * c, in_row + x * c, (size_t)c);
            }
        }
    }
#undef LT_WINDOW_ROW
    lt_expand_s8(gather, p->filter_h * row_bytes, row);
}

/* The expanded window of output pixel `pixel` of the whole output. */
LT_ALWAYS_INLINE void lt_im2col_s8(const lt_conv_params *p, const int8_t *input, int32_t pixel, int16_t *row,
                                   int8_t *gather) {
    const int32_t ox = pixel % p->out_w, oy = (pixel / p->out_w) % p->out_h, b = pixel / (p->out_w * p->out_h);
    lt_im2col_window_s8(p, input + b * p->in_h * p->in_w * p->in_c, 0, oy, ox, row, gather);
}


/* scratch: one expanded row per pixel computed together (2, or 1 when there is a single pixel) of k4 int16
 * values each, then k4 bytes for the byte gather, which a pointwise layer (no im2col) does not use. */
LT_ALWAYS_INLINE void lt_conv_s8_fast(const lt_conv_params *p, const int8_t *input, const void *filter,
                                      const int32_t *bias, const lt_requant *rq,
                                      int8_t *output, int16_t *scratch, const unsigned flags) {
    const int32_t k = p->filter_h * p->filter_w * p->in_c, k4 = (k + 3) & ~3;
    const int32_t pixels = p->batches * p->out_h * p->out_w, out_c = p->out_c;
#ifdef LT_MVE
    lt_mve_conv_s8(p, input, 0, 0, pixels, filter, bias, rq, output, scratch, flags);
    return;
#endif
    const int pointwise = p->filter_h == 1 && p->filter_w == 1 && p->stride_h == 1 && p->stride_w == 1 &&
                          p->pad_h == 0 && p->pad_w == 0 && p->in_h == p->out_h && p->in_w == p->out_w;
    int16_t *row0 = scratch, *row1 = scratch + k4;
    int8_t *gather = (int8_t *)(scratch + (pixels > 1 ? 2 : 1) * k4);
    int32_t px = 0;
    for (; px + 2 <= pixels; px += 2) {
        if (pointwise) {
            lt_expand_s8(input + px * p->in_c, p->in_c, row0);
            lt_expand_s8(input + (px + 1) * p->in_c, p->in_c, row1);
        } else {
            lt_im2col_s8(p, input, px, row0, gather);
            lt_im2col_s8(p, input, px + 1, row1, gather);
        }
        lt_matmul_2(row0, row1, filter, k4, out_c, bias, rq, p, output + px * out_c, output + (px + 1) * out_c, flags);
    }
    if (px < pixels) {
        if (pointwise)
            lt_expand_s8(input + px * p->in_c, p->in_c, row0);
        else
            lt_im2col_s8(p, input, px, row0, gather);
        lt_matmul_1(row0, filter, k4, out_c, bias, rq, p, output + px * out_c, flags);
    }
}

/* ---- one output pixel whose window is the whole input: FULLY_CONNECTED of one row, such a CONV_2D ------------ */

/* The input is the window itself (no padding, no im2col, no scratch): four channels at a time, each block of
 * four filter rows read once against the input's words (lt_dot_rows4_s8), the filter packed by lowtide's
 * `pack_rows_by_four`. */
LT_ALWAYS_INLINE void lt_vector_s8_fast(const lt_conv_params *p, const int8_t *input, const uint32_t *filter,
                                        const int32_t *bias, const lt_requant *rq, int8_t *output,
                                        const unsigned flags) {
#ifdef LT_MVE
    lt_mve_vector_s8(p, input, filter, bias, rq, output, flags);
    return;
#endif
    const int32_t k = p->filter_h * p->filter_w * p->in_c, out_c = p->out_c;
    const uint32_t tail = lt_tail_word(input, k);
    int32_t oc = 0;
    for (; oc + 4 <= out_c; oc += 4) {
        int32_t acc[4] = {bias[oc], bias[oc + 1], bias[oc + 2], bias[oc + 3]};
        filter = lt_dot_rows4_s8(input, k, tail, filter, acc);
        output[oc] = (int8_t)lt_requantize_s8(acc[0], &rq[oc], p, flags);
        output[oc + 1] = (int8_t)lt_requantize_s8(acc[1], &rq[oc + 1], p, flags);
        output[oc + 2] = (int8_t)lt_requantize_s8(acc[2], &rq[oc + 2], p, flags);
        output[oc + 3] = (int8_t)lt_requantize_s8(acc[3], &rq[oc + 3], p, flags);
    }
    for (; oc < out_c; ++oc) {
        int32_t acc = bias[oc];
        filter = lt_dot_row_s8(input, k, tail, filter, &acc);
        output[oc] = (int8_t)lt_requantize_s8(acc, &rq[oc], p, flags);
    }
}

/* ---- DEPTHWISE_CONV_2D (depth multiplier 1) ------------------------------------------------------------------- */

/* One row of a channel's plane: channel `c` of input row `src`, or all padding where `src` is NULL (a padding
 * row). Inline: the row kernels copy a few rows per channel and output row, with the layer's constants folded. */
LT_ALWAYS_INLINE void lt_plane_row_s8(const lt_conv_params *p, const int8_t *src, int32_t c, int32_t plane_w,
                                      int16_t *plane) {
#ifdef LT_MVE
    if (lt_mve_plane_row_s8(p, src, c, plane_w, plane)) return;
#endif
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
        const int32_t v0 = src[0], v1 = src[channels], v2 = src[2 * channels], v3 = src[3 * channels];
        LT_LOADS_THEN_STORES();
#ifdef LT_DSP
        /* two values a word (one PKHBT; GCC merges four halfword stores with four BFI and two MOV) */
        const uint32_t v01 = (uint16_t)v0 | (uint32_t)v1 << 16, v23 = (uint16_t)v2 | (uint32_t)v3 << 16;
        memcpy(plane + px, &v01, 4);
        memcpy(plane + px + 2, &v23, 4);
#else
        plane[px] = (int16_t)v0;
        plane[px + 1] = (int16_t)v1;
        plane[px + 2] = (int16_t)v2;
        plane[px + 3] = (int16_t)v3;
#endif
    }
    for (; px < right; ++px, src += channels) plane[px] = src[0];
    for (; px < plane_w; ++px) plane[px] = (int16_t)zero_point;
}

/* Channel `c` of the input as an int16 plane of plane_h x plane_w (the padded window area), padding at the input
 * zero point. Inline: with the layer's shape folded the row copies unroll (a call of a generic copy cost kws_dscnn
 * more cycles than its depthwise products). */
LT_ALWAYS_INLINE void lt_depthwise_plane_s8(const lt_conv_params *p, const int8_t *input, int32_t c, int32_t plane_h,
                                            int32_t plane_w, int16_t *plane) {
    for (int32_t py = 0; py < plane_h; ++py, plane += plane_w) {
        const int32_t y = py - p->pad_h;
        lt_plane_row_s8(p, y < 0 || y >= p->in_h ? NULL : input + y * p->in_w * p->in_c, c, plane_w, plane);
    }
}

/* One channel's output row from its int16 plane rows: `row` is the plane row under the window's top, plane rows
 * `plane_w` values apart; writes out_w outputs `c_count` bytes apart from `out`. */
LT_ALWAYS_INLINE void lt_depthwise_row_s8(const lt_conv_params *p, const int16_t *row, const int32_t plane_w,
                                          const uint32_t *wc, const lt_requant q, const int32_t acc0, int8_t *out,
                                          const int32_t c_count, const unsigned flags) {
#ifdef LT_MVE
    lt_mve_depthwise_row_s8(p, row, plane_w, wc, q, acc0, out, c_count, flags);
    return;
#endif
    const int32_t kh = p->filter_h, kw = p->filter_w, pairs = (kw + 1) / 2;
    int32_t ox = 0;
    if ((p->stride_w == 1 || p->stride_w == 2) && kw == 3) {
        /* four neighbouring outputs share their weights and their input pairs per row: 5 loads and
         * 8 multiply-adds a row for the four (x01, x23, x45 and at stride 1 the odd pairs x12, x34;
         * at stride 2 x67, x89) */
        for (; ox + 4 <= p->out_w; ox += 4, row += 4 * p->stride_w) {
            int32_t acc_0 = acc0, acc_1 = acc0, acc_2 = acc0, acc_3 = acc0;
            LT_UNROLL for (int32_t fy = 0; fy < kh; ++fy) {
                const int16_t *r = row + fy * plane_w;
                const uint32_t w01 = wc[fy * 2], w2 = wc[fy * 2 + 1];
                const uint32_t x01 = lt_read32(r), x23 = lt_read32(r + 2), x45 = lt_read32(r + 4);
                acc_0 = lt_smlad(x01, w01, acc_0);
                acc_0 = lt_smlabb(x23, w2, acc_0);
                if (p->stride_w == 1) {
                    const uint32_t x12 = lt_read32(r + 1), x34 = lt_read32(r + 3);
                    acc_1 = lt_smlad(x12, w01, acc_1);
                    acc_1 = lt_smlatb(x23, w2, acc_1);
                    acc_2 = lt_smlad(x23, w01, acc_2);
                    acc_2 = lt_smlabb(x45, w2, acc_2);
                    acc_3 = lt_smlad(x34, w01, acc_3);
                    acc_3 = lt_smlatb(x45, w2, acc_3);
                } else {
                    const uint32_t x67 = lt_read32(r + 6), x89 = lt_read32(r + 8);
                    acc_1 = lt_smlad(x23, w01, acc_1);
                    acc_1 = lt_smlabb(x45, w2, acc_1);
                    acc_2 = lt_smlad(x45, w01, acc_2);
                    acc_2 = lt_smlabb(x67, w2, acc_2);
                    acc_3 = lt_smlad(x67, w01, acc_3);
                    acc_3 = lt_smlabb(x89, w2, acc_3);
                }
            }
            const int8_t y0 = (int8_t)lt_requantize_s8(acc_0, &q, p, flags);
            const int8_t y1 = (int8_t)lt_requantize_s8(acc_1, &q, p, flags);
            const int8_t y2 = (int8_t)lt_requantize_s8(acc_2, &q, p, flags);
            const int8_t y3 = (int8_t)lt_requantize_s8(acc_3, &q, p, flags);
            out[0] = y0;
            out[c_count] = y1;
            out[2 * c_count] = y2;
            out[3 * c_count] = y3;
            out += 4 * c_count;
        }
        /* two neighbouring outputs share their weights and some of their input pairs per row */
        const int32_t step = 2 * p->stride_w;
        for (; ox + 2 <= p->out_w; ox += 2, row += step) {
            int32_t acc_a = acc0, acc_b = acc0;
            LT_UNROLL for (int32_t fy = 0; fy < kh; ++fy) {
                const int16_t *r = row + fy * plane_w;
                const uint32_t w01 = wc[fy * 2], w2 = wc[fy * 2 + 1];
                const uint32_t x01 = lt_read32(r), x23 = lt_read32(r + 2);
                acc_a = lt_smlad(x01, w01, acc_a);
                acc_a = lt_smlabb(x23, w2, acc_a);
                if (p->stride_w == 1) {
                    acc_b = lt_smlad(lt_read32(r + 1), w01, acc_b);
                    acc_b = lt_smlabb(x23 >> 16, w2, acc_b);
                } else {
                    acc_b = lt_smlad(x23, w01, acc_b);
                    acc_b = lt_smlabb(lt_read32(r + 4), w2, acc_b);
                }
            }
            out[0] = (int8_t)lt_requantize_s8(acc_a, &q, p, flags);
            out[c_count] = (int8_t)lt_requantize_s8(acc_b, &q, p, flags);
            out += 2 * c_count;
        }
    }
    for (; ox < p->out_w; ++ox, row += p->stride_w) {
        int32_t acc = acc0;
        LT_UNROLL for (int32_t fy = 0; fy < kh; ++fy) {
            const int16_t *r = row + fy * plane_w;
            LT_UNROLL for (int32_t j = 0; j < kw / 2; ++j) acc = lt_smlad(lt_read32(r + 2 * j), wc[fy * pairs + j], acc);
            if (kw & 1) acc = lt_smlabb((uint16_t)r[kw - 1], wc[fy * pairs + pairs - 1], acc);
        }
        *out = (int8_t)lt_requantize_s8(acc, &q, p, flags);
        out += c_count;
    }
}

/* One channel at a time: its input is copied into `scratch` (an int16 plane), then its outputs are written. So
 * `output` may be `input` itself (in place): output channel c only overwrites input channel c, already copied.
 * scratch: ((out_h - 1) * stride_h + filter_h) * ((out_w - 1) * stride_w + filter_w) int16 values. */
LT_ALWAYS_INLINE void lt_depthwise_s8_fast(const lt_conv_params *p, const int8_t *input, const uint32_t *filter,
                                           const int32_t *bias, const lt_requant *rq,
                                           int8_t *output, int16_t *scratch, const unsigned flags) {
#ifdef LT_MVE
    if (lt_mve_depthwise_s8(p, input, filter, bias, rq, output, scratch, flags)) return;
#endif
    const int32_t kh = p->filter_h, kw = p->filter_w, pairs = (kw + 1) / 2, c_count = p->out_c;
    const int32_t plane_h = (p->out_h - 1) * p->stride_h + kh, plane_w = (p->out_w - 1) * p->stride_w + kw;
    for (int32_t b = 0; b < p->batches; ++b) {
        const int8_t *in_b = input + b * p->in_h * p->in_w * c_count;
        int8_t *out_b = output + b * p->out_h * p->out_w * c_count;
        for (int32_t c = 0; c < c_count; ++c) {
            lt_depthwise_plane_s8(p, in_b, c, plane_h, plane_w, scratch);
            const uint32_t *wc = filter + c * kh * pairs;
            const lt_requant q = rq[c];
            const int32_t acc0 = bias[c];
            int8_t *out = out_b + c;
            for (int32_t oy = 0; oy < p->out_h; ++oy, out += p->out_w * c_count)
                lt_depthwise_row_s8(p, scratch + oy * p->stride_h * plane_w, plane_w, wc, q, acc0, out, c_count, flags);
        }
    }
}

/* One output pixel whose window is the whole input (streaming wake-word models: a window of every past frame):
 * channels four at a time, tap after tap, the input's and the filter's words sign-extended in pairs and each
 * channel's product by SMLABB/SMLATT (per 4 products 2 loads, 4 SXTB16, 4 multiply-adds) instead of a plane copy
 * per channel. filter: TFLite's own [tap][channel] order. Output channel c is written after every tap of it was
 * read, and lands on input channel c of tap 0: the layer may run in place. */
LT_ALWAYS_INLINE void lt_depthwise_vector_s8_fast(const lt_conv_params *p, const int8_t *input, const int8_t *filter,
                                                  const int32_t *bias, const lt_requant *rq, int8_t *output,
                                                  const unsigned flags) {
    const int32_t taps = p->filter_h * p->filter_w, channels = p->out_c;
    int32_t c = 0;
    for (; c + 4 <= channels; c += 4) {
        int32_t a0 = bias[c], a1 = bias[c + 1], a2 = bias[c + 2], a3 = bias[c + 3];
        const int8_t *x = input + c, *w = filter + c;
        for (int32_t t = 0; t < taps; ++t, x += channels, w += channels) {
            const uint32_t xv = lt_read32(x), wv = lt_read32(w);
            const uint32_t x02 = lt_sxtb16(xv), x13 = lt_sxtb16_ror8(xv);
            const uint32_t w02 = lt_sxtb16(wv), w13 = lt_sxtb16_ror8(wv);
            a0 = lt_smlabb(x02, w02, a0);
            a2 = lt_smlatt(x02, w02, a2);
            a1 = lt_smlabb(x13, w13, a1);
            a3 = lt_smlatt(x13, w13, a3);
        }
        output[c] = (int8_t)lt_requantize_s8(a0, &rq[c], p, flags);
        output[c + 1] = (int8_t)lt_requantize_s8(a1, &rq[c + 1], p, flags);
        output[c + 2] = (int8_t)lt_requantize_s8(a2, &rq[c + 2], p, flags);
        output[c + 3] = (int8_t)lt_requantize_s8(a3, &rq[c + 3], p, flags);
    }
    for (; c < channels; ++c) {
        int32_t acc = bias[c];
        for (int32_t t = 0; t < taps; ++t) acc += input[t * channels + c] * filter[t * channels + c];
        output[c] = (int8_t)lt_requantize_s8(acc, &rq[c], p, flags);
    }
}

#endif /* LT_CONV_DSP_H */
