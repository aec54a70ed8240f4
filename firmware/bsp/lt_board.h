/* The board interface: everything the protocol core (firmware/app) needs from a board, and nothing more.
 *
 * One implementation per board family: mps2/ (the QEMU-emulated Arm MPS2 images: CMSDK UART, SysTick counting
 * instructions, semihosting exit) and arduino/ (real boards on PlatformIO's official platforms; not built here).
 * Plain C; an implementation may be C++ as long as it exports these with C linkage.
 */
#ifndef LT_BOARD_H
#define LT_BOARD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Clocks, UART, counters. Called once, first thing in main(). */
void lt_board_init(void);

/* What the board calls itself in HELLO, e.g. "qemu-mps2-an386". */
const char *lt_board_name(void);

/* Blocking write of `length` bytes to the host link. */
void lt_board_write(const uint8_t *data, size_t length);

/* One byte from the host link, or -1 if none is waiting. Never blocks. */
int lt_board_read_byte(void);

/* A monotonic 64-bit count of what lt_board_counter() says it counts, or 0 on boards without a counter. */
uint64_t lt_board_cycles(void);

/* Called right before each timed invocation. Where the counter ticks slower than instructions retire (SysTick
 * under QEMU), it restarts the tick phase here, so that an invocation measures the same on every run; elsewhere it
 * does nothing. lt_board_cycles() stays monotonic across it. */
void lt_board_cycles_align(void);

/* Rate of lt_board_cycles() in Hz; 0 = no counter. */
uint32_t lt_board_cycle_hz(void);

/* What lt_board_cycles() counts: LT_COUNTER_CYCLES (real CPU cycles), LT_COUNTER_INSTRUCTIONS (an emulator's
 * retired instructions: no real time) or LT_COUNTER_NONE (lt_protocol.h). HELLO reports it. */
uint8_t lt_board_counter(void);

/* The CPU clock in Hz, as HELLO reports it (and the board file states it); 0 if unknown. */
uint32_t lt_board_clock_hz(void);

/* Monotonic microseconds since lt_board_init(). */
uint64_t lt_board_micros(void);

/* End the program: QEMU exits with `code` (semihosting); a real board halts. */
void lt_board_exit(int code) __attribute__((noreturn));

/* Stack painting. lt_stack_paint() fills the unused stack below the caller's frame with a pattern;
 * lt_stack_used_bytes() returns how many bytes below the stack top have been written since the last paint. Boards
 * whose stack bounds are unknown return 0 from lt_stack_size_bytes() and lt_stack_used_bytes(). */
void lt_stack_paint(void);
uint32_t lt_stack_used_bytes(void);
uint32_t lt_stack_size_bytes(void);

#ifdef __cplusplus
}
#endif

#endif /* LT_BOARD_H */
