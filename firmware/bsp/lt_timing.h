/* Timing marks for lowtide's cycle model (firmware/timing/lt_cycles_plugin.c, a QEMU plugin): the cycles between
 * lt_timing_begin() and lt_timing_end() are what the model reports for a window, one window per timed invocation.
 *
 * A mark is the hint instruction DBG #option, which the Cortex-M cores and QEMU execute as a NOP and no compiler
 * emits, so the plugin can recognise it by its encoding; on a real core it costs at most a cycle. Elsewhere (a host
 * build, a core other than Arm's M profile) the marks are empty. The options are the plugin's MARK_BEGIN/MARK_END. */
#ifndef LT_TIMING_H
#define LT_TIMING_H

#if defined(__arm__) && defined(__thumb2__)
#define LT_TIMING_MARK(option) __asm volatile("dbg #" #option ::: "memory")
#else
#define LT_TIMING_MARK(option) ((void)0)
#endif

static inline void lt_timing_begin(void) { LT_TIMING_MARK(1); }
static inline void lt_timing_end(void) { LT_TIMING_MARK(2); }

#endif /* LT_TIMING_H */
