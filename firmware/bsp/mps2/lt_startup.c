/* Vector table and reset for the MPS images QEMU emulates (AN386 Cortex-M4F, AN500 Cortex-M7, AN505 Cortex-M33,
 * AN547 Cortex-M55; the Armv8-M ones stay in the Secure state they reset into).
 * Reset: enable the FPU (and with it the M55's Helium; the model code is built hard-float), copy .data, zero .bss,
 * call main(), exit with its status through semihosting. Any fault exits QEMU with LT_EXIT_FAULT so a crash never looks like a hang. */
#include <stdint.h>
#include <string.h>

#include "lt_board.h"
#include "lt_cortexm.h"

#define LT_EXIT_FAULT 0xFA
#define LT_EXTERNAL_IRQS 32

extern uint32_t __data_start[], __data_end[], __data_load[], __bss_start[], __bss_end[], __stack_top[];
typedef void (*lt_constructor)(void);
extern lt_constructor __init_array_start[], __init_array_end[];
extern int main(void);
void lt_systick_handler(void);

void lt_reset_handler(void) __attribute__((naked, noreturn));
static void lt_start(void) __attribute__((noreturn, used));
static void lt_fault_handler(void) __attribute__((noreturn));

static void lt_fault_handler(void) { lt_board_exit(LT_EXIT_FAULT); }

typedef void (*lt_vector)(void);

__attribute__((section(".vectors"), used)) const lt_vector lt_vectors[16 + LT_EXTERNAL_IRQS] = {
    (lt_vector)(uintptr_t)__stack_top,
    lt_reset_handler,
    lt_fault_handler, /* NMI */
    lt_fault_handler, /* HardFault */
    lt_fault_handler, /* MemManage */
    lt_fault_handler, /* BusFault */
    lt_fault_handler, /* UsageFault */
    0, 0, 0, 0,
    lt_fault_handler, /* SVCall */
    lt_fault_handler, /* DebugMonitor */
    0,
    lt_fault_handler, /* PendSV */
    lt_systick_handler,
    /* external interrupts: none enabled; the fault handler catches a stray one */
    lt_fault_handler, lt_fault_handler, lt_fault_handler, lt_fault_handler, lt_fault_handler, lt_fault_handler,
    lt_fault_handler, lt_fault_handler, lt_fault_handler, lt_fault_handler, lt_fault_handler, lt_fault_handler,
    lt_fault_handler, lt_fault_handler, lt_fault_handler, lt_fault_handler, lt_fault_handler, lt_fault_handler,
    lt_fault_handler, lt_fault_handler, lt_fault_handler, lt_fault_handler, lt_fault_handler, lt_fault_handler,
    lt_fault_handler, lt_fault_handler, lt_fault_handler, lt_fault_handler, lt_fault_handler, lt_fault_handler,
    lt_fault_handler, lt_fault_handler,
};

/* QEMU 7.2 reads an Armv8-M core's initial SP and PC through the Non-secure address space, where the AN505's Secure
 * vector table (0x10000000) is not mapped: there the core starts with SP = 0 and the loader device sets PC to this
 * entry point. So the reset handler sets SP itself; on the other machines it is what the core already did. */
void lt_reset_handler(void) { __asm__ volatile("ldr r0, =__stack_top\n mov sp, r0\n b lt_start"); }

static void lt_start(void) {
  /* CP10 and CP11 full access, before any code that may touch a floating-point register. */
  LT_SCB_CPACR |= 0xFu << 20;
  __asm__ volatile("dsb\n isb" ::: "memory");
  memcpy(__data_start, __data_load, (size_t)((uintptr_t)__data_end - (uintptr_t)__data_start));
  memset(__bss_start, 0, (size_t)((uintptr_t)__bss_end - (uintptr_t)__bss_start));
  for (lt_constructor *constructor = __init_array_start; constructor < __init_array_end; constructor++) {
    (*constructor)();
  }
  lt_board_exit(main());
}
