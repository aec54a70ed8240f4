#include "lt_systick.h"

#include "lt_cortexm.h"

#define LT_SCB_ICSR_PENDSTCLR (1u << 25)

static volatile uint32_t systick_wraps;
static uint64_t ticks_before_align; /* ticks counted up to the last lt_systick_align() */

void lt_systick_start(void) {
  systick_wraps = 0;
  ticks_before_align = 0;
  LT_SYST_RVR = LT_SYST_MAX_RELOAD;
  LT_SYST_CVR = 0;
  LT_SYST_CSR = LT_SYST_CSR_ENABLE_TICKINT_CPUCLK;
}

void lt_systick_count_wrap(void) { systick_wraps++; }

/* The counter runs RVR..1, 0, RVR..; the handler counts arrivals at 0, so (RVR - value + 1) & RVR is the position
 * within the current period. With interrupts masked, a wrap that has happened but not yet been counted shows as a
 * pending SysTick: then the counter is read again, after the wrap, and the wrap is counted here. */
uint64_t lt_systick_ticks(void) {
  uint32_t primask = lt_irq_save();
  uint32_t wraps = systick_wraps;
  uint32_t value = LT_SYST_CVR;
  if (LT_SCB_ICSR & LT_SCB_ICSR_PENDSTSET) {
    wraps++;
    value = LT_SYST_CVR;
  }
  lt_irq_restore(primask);
  return ticks_before_align + (uint64_t)wraps * (LT_SYST_MAX_RELOAD + 1u) +
         ((LT_SYST_MAX_RELOAD - value + 1u) & LT_SYST_MAX_RELOAD);
}

/* The host's bytes arrive at arbitrary instruction counts, so an invocation would start at a random phase of the
 * tick and measure one tick more or less from run to run. Restarting SysTick here (a write to CVR clears it; the
 * next tick comes a full period later) puts every invocation at the same phase. */
void lt_systick_align(uint32_t granule) {
  uint32_t primask = lt_irq_save();
  uint64_t ticks = lt_systick_ticks();
  ticks_before_align = (ticks + granule - 1u) / granule * granule;
  LT_SYST_CVR = 0;
  LT_SCB_ICSR = LT_SCB_ICSR_PENDSTCLR;
  systick_wraps = 0;
  lt_irq_restore(primask);
}
