#include "lt_dwt.h"

#include "lt_cortexm.h"

static uint32_t last_count;
static uint64_t wrapped; /* 2^32 times the number of wraps seen */

void lt_dwt_start(void) {
  LT_DEMCR |= LT_DEMCR_TRCENA;
  LT_DWT_LAR = LT_DWT_LAR_UNLOCK; /* the Cortex-M7 (STM32F7, H7) ignores CTRL writes until its DWT is unlocked */
  LT_DWT_CYCCNT = 0;
  LT_DWT_CTRL |= LT_DWT_CTRL_CYCCNTENA;
  last_count = 0;
  wrapped = 0;
}

uint64_t lt_dwt_cycles(void) {
  uint32_t primask = lt_irq_save();
  uint32_t now = LT_DWT_CYCCNT;
  if (now < last_count) wrapped += (uint64_t)1 << 32;
  last_count = now;
  uint64_t cycles = wrapped | now;
  lt_irq_restore(primask);
  return cycles;
}
