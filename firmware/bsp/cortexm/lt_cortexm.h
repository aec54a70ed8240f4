/* The few Armv7-M system registers lowtide touches (ARM DDI 0403, "System Control Space"), so the BSP needs no CMSIS
 * package. */
#ifndef LT_CORTEXM_H
#define LT_CORTEXM_H

#include <stdint.h>

#define LT_REG(addr) (*(volatile uint32_t *)(addr))

#define LT_SCB_ICSR LT_REG(0xE000ED04u)
#define LT_SCB_ICSR_PENDSTSET (1u << 26)
#define LT_SCB_CPACR LT_REG(0xE000ED88u)
#define LT_SYST_CSR LT_REG(0xE000E010u)
#define LT_SYST_RVR LT_REG(0xE000E014u)
#define LT_SYST_CVR LT_REG(0xE000E018u)
#define LT_SYST_CSR_ENABLE_TICKINT_CPUCLK 0x7u
#define LT_SYST_MAX_RELOAD 0x00FFFFFFu
#define LT_DEMCR LT_REG(0xE000EDFCu)
#define LT_DEMCR_TRCENA (1u << 24)
#define LT_DWT_CTRL LT_REG(0xE0001000u)
#define LT_DWT_CTRL_CYCCNTENA 1u
#define LT_DWT_CYCCNT LT_REG(0xE0001004u)
#define LT_DWT_LAR LT_REG(0xE0001FB0u)
#define LT_DWT_LAR_UNLOCK 0xC5ACCE55u

static inline uint32_t lt_irq_save(void) {
  uint32_t primask;
  __asm__ volatile("mrs %0, primask\n cpsid i" : "=r"(primask)::"memory");
  return primask;
}

static inline void lt_irq_restore(uint32_t primask) { __asm__ volatile("msr primask, %0" ::"r"(primask) : "memory"); }

#endif
