/* lt_board.h for the MPS2 images under QEMU: CMSDK APB UART0 for the host link, SysTick as the clock.
 *
 * Timing: QEMU implements no DWT cycle counter (CYCCNT reads 0), and without `-icount` SysTick follows the host's
 * wall clock. The launcher starts QEMU with `-icount shift=LT_QEMU_ICOUNT_SHIFT` (0): every instruction advances
 * virtual time by 2^shift ns, so the 25 MHz SysTick counts instructions, deterministically, one tick per
 * 40 << shift of them. lt_board_cycles() returns instructions (ticks * 40 << shift) at a virtual 1 GHz >> shift: a
 * QEMU "cycle" is an instruction, with no pipeline, cache or wait-state costs, so it is a regression figure, not a
 * real-hardware latency. */
#include <stdint.h>

#include "lt_board.h"
#include "lt_cortexm.h"
#include "lt_protocol.h"
#include "lt_semihosting.h"

#ifndef LT_QEMU_ICOUNT_SHIFT
#define LT_QEMU_ICOUNT_SHIFT 0
#endif
#ifndef LT_QEMU_MACHINE
#define LT_QEMU_MACHINE "mps2"
#endif

#define MPS2_SYSCLK_HZ 25000000u
#define INSTRUCTIONS_PER_TICK ((1000000000u / MPS2_SYSCLK_HZ) << LT_QEMU_ICOUNT_SHIFT)

/* CMSDK APB UART0 */
#define UART0_BASE 0x40004000u
#define UART_DATA LT_REG(UART0_BASE + 0x00u)
#define UART_STATE LT_REG(UART0_BASE + 0x04u)
#define UART_CTRL LT_REG(UART0_BASE + 0x08u)
#define UART_BAUDDIV LT_REG(UART0_BASE + 0x10u)
#define UART_STATE_TX_FULL 0x1u
#define UART_STATE_RX_FULL 0x2u
#define UART_CTRL_TX_RX_ENABLE 0x3u
#define UART_BAUD 115200u

#define LT_SCB_ICSR_PENDSTCLR (1u << 25)

static volatile uint32_t systick_wraps;
static uint64_t ticks_before_align; /* ticks counted up to the last lt_board_cycles_align() */

void lt_systick_handler(void) { systick_wraps++; }

void lt_board_init(void) {
  UART_BAUDDIV = MPS2_SYSCLK_HZ / UART_BAUD;
  UART_CTRL = UART_CTRL_TX_RX_ENABLE;
  systick_wraps = 0;
  LT_SYST_RVR = LT_SYST_MAX_RELOAD;
  LT_SYST_CVR = 0;
  LT_SYST_CSR = LT_SYST_CSR_ENABLE_TICKINT_CPUCLK;
}

const char *lt_board_name(void) { return "qemu-" LT_QEMU_MACHINE; }

void lt_board_write(const uint8_t *data, size_t length) {
  for (size_t i = 0; i < length; i++) {
    while (UART_STATE & UART_STATE_TX_FULL) {
    }
    UART_DATA = data[i];
  }
}

int lt_board_read_byte(void) { return (UART_STATE & UART_STATE_RX_FULL) ? (int)(UART_DATA & 0xFFu) : -1; }

/* SysTick ticks since init (plus a constant). The counter runs RVR..1, 0, RVR..; the handler counts arrivals at 0,
 * so (RVR - value + 1) & RVR is the position within the current period. With interrupts masked, a wrap that has
 * happened but not yet been counted shows as a pending SysTick: then the counter is read again, after the wrap,
 * and the wrap is counted here. */
static uint64_t systick_ticks(void) {
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
 * 40-instruction tick and measure one tick more or less from run to run. Restarting SysTick here (a write to CVR
 * clears it; the next tick comes a full period later) puts every invocation at the same phase. */
void lt_board_cycles_align(void) {
  uint32_t primask = lt_irq_save();
  ticks_before_align = systick_ticks();
  LT_SYST_CVR = 0;
  LT_SCB_ICSR = LT_SCB_ICSR_PENDSTCLR;
  systick_wraps = 0;
  lt_irq_restore(primask);
}

uint64_t lt_board_cycles(void) { return systick_ticks() * INSTRUCTIONS_PER_TICK; }

uint32_t lt_board_cycle_hz(void) { return 1000000000u >> LT_QEMU_ICOUNT_SHIFT; }

uint8_t lt_board_counter(void) { return LT_COUNTER_INSTRUCTIONS; }

uint32_t lt_board_clock_hz(void) { return MPS2_SYSCLK_HZ; }

uint64_t lt_board_micros(void) { return systick_ticks() / (MPS2_SYSCLK_HZ / 1000000u); }

void lt_board_exit(int code) { lt_semihosting_exit(code); }
