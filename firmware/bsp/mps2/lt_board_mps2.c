/* lt_board.h for the MPS2/MPS3 images under QEMU (AN386, AN500, AN505, AN547): CMSDK APB UART0 for the host link,
 * SysTick as the clock.
 *
 * Timing: QEMU implements no DWT cycle counter (CYCCNT reads 0), and without `-icount` SysTick follows the host's
 * wall clock. The launcher starts QEMU with `-icount shift=LT_QEMU_ICOUNT_SHIFT` (0): every instruction advances
 * virtual time by 2^shift ns, so SysTick, at SYSCLK, counts instructions, deterministically, one tick per
 * (1e9 / SYSCLK) << shift of them (40 at 25 MHz). lt_board_cycles() returns instructions at a virtual 1 GHz >> shift: a
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
/* The machine's, from its board JSON (firmware/platform/boards): the CMSDK APB UART0 and SYSCLK, which clocks
 * SysTick: 25 MHz on AN386/AN500, 20 MHz on AN505, 32 MHz on AN547. */
#if !defined(LT_MPS_UART0_BASE) || !defined(LT_MPS_SYSCLK_HZ)
#error "define LT_MPS_UART0_BASE and LT_MPS_SYSCLK_HZ (the dev-platform's board JSON does)"
#endif

#define INSTRUCTIONS_HZ (1000000000u >> LT_QEMU_ICOUNT_SHIFT)
/* Instructions per SysTick tick, 1e9 / SYSCLK << shift, as TICK_NUMERATOR / TICK_DENOMINATOR with a power-of-two
 * denominator: lt_board_cycles() runs inside the timed window, so it multiplies and shifts, never divides. */
#define SYSCLK_MHZ (LT_MPS_SYSCLK_HZ / 1000000u)
#if 1000u % SYSCLK_MHZ == 0
#define TICK_NUMERATOR ((1000u / SYSCLK_MHZ) << LT_QEMU_ICOUNT_SHIFT)
#define TICK_DENOMINATOR 1u
#elif 4000u % SYSCLK_MHZ == 0
#define TICK_NUMERATOR ((4000u / SYSCLK_MHZ) << LT_QEMU_ICOUNT_SHIFT)
#define TICK_DENOMINATOR 4u
#else
#error "SYSCLK: 1e9 / LT_MPS_SYSCLK_HZ instructions per tick is not n or n / 4"
#endif

#define UART0_BASE LT_MPS_UART0_BASE
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
  UART_BAUDDIV = LT_MPS_SYSCLK_HZ / UART_BAUD;
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

void lt_board_cycles_align(void) { lt_systick_align(TICK_DENOMINATOR); }

uint64_t lt_board_cycles(void) { return lt_systick_ticks() * TICK_NUMERATOR / TICK_DENOMINATOR; }

uint32_t lt_board_cycle_hz(void) { return INSTRUCTIONS_HZ; }

uint8_t lt_board_counter(void) { return LT_COUNTER_INSTRUCTIONS; }

uint32_t lt_board_clock_hz(void) { return LT_MPS_SYSCLK_HZ; }

uint64_t lt_board_micros(void) { return lt_systick_ticks() / (LT_MPS_SYSCLK_HZ / 1000000u); }

void lt_board_exit(int code) { lt_semihosting_exit(code); }
