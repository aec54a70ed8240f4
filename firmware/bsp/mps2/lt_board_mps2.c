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
#include "lt_systick.h"

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

void lt_systick_handler(void) { lt_systick_count_wrap(); }

void lt_board_init(void) {
  UART_BAUDDIV = MPS2_SYSCLK_HZ / UART_BAUD;
  UART_CTRL = UART_CTRL_TX_RX_ENABLE;
  lt_systick_start();
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

void lt_board_cycles_align(void) { lt_systick_align(); }

uint64_t lt_board_cycles(void) { return lt_systick_ticks() * INSTRUCTIONS_PER_TICK; }

uint32_t lt_board_cycle_hz(void) { return 1000000000u >> LT_QEMU_ICOUNT_SHIFT; }

uint8_t lt_board_counter(void) { return LT_COUNTER_INSTRUCTIONS; }

uint32_t lt_board_clock_hz(void) { return MPS2_SYSCLK_HZ; }

uint64_t lt_board_micros(void) { return lt_systick_ticks() / (MPS2_SYSCLK_HZ / 1000000u); }

void lt_board_exit(int code) { lt_semihosting_exit(code); }
