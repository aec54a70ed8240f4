/* lowtide's CoreMark port (see core_portme.h): the timed portion is one cycle-model window; CoreMark's own clock
 * is SysTick-free and reads a constant, so CoreMark's "ticks" line is meaningless here and the bench ignores it. */
#include <stdarg.h>
#include <stdio.h>

#include "coremark.h"
#include "lt_timing.h"

#if VALIDATION_RUN
volatile ee_s32 seed1_volatile = 0x3415;
volatile ee_s32 seed2_volatile = 0x3415;
volatile ee_s32 seed3_volatile = 0x66;
#endif
#if PERFORMANCE_RUN
volatile ee_s32 seed1_volatile = 0x0;
volatile ee_s32 seed2_volatile = 0x0;
volatile ee_s32 seed3_volatile = 0x66;
#endif
#if PROFILE_RUN
volatile ee_s32 seed1_volatile = 0x8;
volatile ee_s32 seed2_volatile = 0x8;
volatile ee_s32 seed3_volatile = 0x8;
#endif
volatile ee_s32 seed4_volatile = ITERATIONS;
volatile ee_s32 seed5_volatile = 0;
ee_u32 default_num_contexts = 1;

void start_time(void) { lt_timing_begin(); }
void stop_time(void) { lt_timing_end(); }
CORE_TICKS get_time(void) { return 1u; } /* nonzero: CoreMark divides by it when it reports */
secs_ret time_in_secs(CORE_TICKS ticks) { return (secs_ret)ticks; }

static void semihosting(unsigned op, const void *arg) {
  register unsigned r0 __asm("r0") = op;
  register const void *r1 __asm("r1") = arg;
  __asm volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
}

int ee_printf(const char *fmt, ...) {
  char line[256];
  va_list args;
  va_start(args, fmt);
  int n = vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  semihosting(0x04u, line); /* SYS_WRITE0 */
  return n;
}

void portable_init(core_portable *p, int *argc, char *argv[]) {
  (void)argc;
  (void)argv;
  p->portable_id = 1;
}

void portable_fini(core_portable *p) {
  static const unsigned exit_block[2] = {0x20026u, 0u}; /* ADP_Stopped_ApplicationExit, status 0 */
  p->portable_id = 0;
  semihosting(0x20u, exit_block); /* SYS_EXIT_EXTENDED */
}
