/* Reset for the CoreMark port: the FPU enabled, .data copied, .bss cleared, main() run, the emulator ended. */
#include <stdint.h>

extern uint32_t _sidata, _sdata, _edata, _sbss, _ebss, _estack;
int main(void);

static void start(void);

/* SP set here: QEMU 7.2 starts the AN505's Cortex-M33 with SP = 0 (it reads the Secure vector table through the
 * Non-secure address space) and the loader device sets PC to the ELF's entry. */
__attribute__((naked)) void reset_handler(void) { __asm volatile("ldr r0, =_estack\n mov sp, r0\n b start"); }

__attribute__((used)) static void start(void) {
  *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20; /* CPACR: CP10 and CP11 full access */
  __asm volatile("dsb\n isb");
  for (uint32_t *src = &_sidata, *dst = &_sdata; dst < &_edata;) *dst++ = *src++;
  for (uint32_t *dst = &_sbss; dst < &_ebss;) *dst++ = 0;
  main();
  for (;;) {
  }
}

void _exit(int status) {
  (void)status;
  for (;;) {
  }
}

__attribute__((section(".vectors"), used)) const void *const vectors[2] = {&_estack, (const void *)reset_handler};
