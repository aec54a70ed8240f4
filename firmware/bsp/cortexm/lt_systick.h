/* SysTick as a free-running 64-bit tick counter, for boards whose only working timer is SysTick: the MPS2 images
 * and an ST image running under QEMU, where DWT CYCCNT reads 0. */
#ifndef LT_SYSTICK_H
#define LT_SYSTICK_H

#include <stdint.h>

/* Runs SysTick from the CPU clock over its whole 24-bit range, with its interrupt on. */
void lt_systick_start(void);
/* The SysTick interrupt handler's work: counts one period. */
void lt_systick_count_wrap(void);
/* Ticks since lt_systick_start() (plus a constant). */
uint64_t lt_systick_ticks(void);
/* Restarts the tick phase (lt_board_cycles_align()), and moves the count on to a multiple of `granule`: a board
 * converting ticks to instructions by a fraction n / granule then truncates every invocation's start alike.
 * lt_systick_ticks() stays monotonic across it. */
void lt_systick_align(uint32_t granule);

#endif
