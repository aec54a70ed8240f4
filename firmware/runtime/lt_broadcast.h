/* The broadcasting loop of the binary element-wise kernels (ADD, MUL, PRELU, ...): NumPy-style broadcasting
 * over up to LT_MAX_DIMS dimensions, output elements in order. Internal to the runtime. */
#ifndef LT_BROADCAST_H
#define LT_BROADCAST_H

#include "lt_runtime.h"

/* Visits every output element in order; i1 and i2 are the matching (possibly broadcast) input elements. */
#define LT_BINARY_LOOP(...)                                           \
    do {                                                              \
        int32_t idx[LT_MAX_DIMS] = {0};                               \
        int32_t i1 = 0, i2 = 0, total = 1;                            \
        for (int32_t d = 0; d < p->ndim; ++d) total *= p->dims[d];    \
        for (int32_t o = 0; o < total; ++o) {                         \
            __VA_ARGS__;                                                   \
            for (int32_t d = p->ndim - 1; d >= 0; --d) {              \
                i1 += p->step1[d];                                    \
                i2 += p->step2[d];                                    \
                if (++idx[d] < p->dims[d]) break;                     \
                i1 -= p->step1[d] * p->dims[d];                       \
                i2 -= p->step2[d] * p->dims[d];                       \
                idx[d] = 0;                                           \
            }                                                         \
        }                                                             \
    } while (0)

#endif /* LT_BROADCAST_H */
