/* DWT CYCCNT, the Cortex-M3/M4/M7/M33 cycle counter, widened to 64 bits. Real boards only: QEMU reads it as 0. */
#ifndef LT_DWT_H
#define LT_DWT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void lt_dwt_start(void);
/* Must be called at least once per 2^32 cycles (about 20 s at 216 MHz) to see every wrap: lowtide reads it around
 * each invocation. */
uint64_t lt_dwt_cycles(void);

#ifdef __cplusplus
}
#endif

#endif
