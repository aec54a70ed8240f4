/* Stack painting for Cortex-M images whose linker script gives the main stack a fixed region
 * [__stack_limit, __stack_top) (firmware/platform/ldscripts/mps2.ld does). The stack grows down from __stack_top,
 * so the lowest word that no longer holds the pattern marks the deepest the stack has been since the last paint. */
#include "lt_board.h"

#include <stdint.h>

#define LT_STACK_PATTERN 0xC5A3C5A3u
/* Words just below the painter's own frame that it leaves alone: its callee's frame lives there. */
#define LT_STACK_GUARD_WORDS 16u

extern uint32_t __stack_limit[];
extern uint32_t __stack_top[];

static inline uintptr_t current_sp(void) {
  uintptr_t sp;
  __asm__ volatile("mov %0, sp" : "=r"(sp));
  return sp;
}

void lt_stack_paint(void) {
  volatile uint32_t *word = __stack_limit;
  volatile uint32_t *end = (volatile uint32_t *)(current_sp() & ~(uintptr_t)3u) - LT_STACK_GUARD_WORDS;
  while (word < end) *word++ = LT_STACK_PATTERN;
}

uint32_t lt_stack_used_bytes(void) {
  const volatile uint32_t *word = __stack_limit;
  while (word < __stack_top && *word == LT_STACK_PATTERN) word++;
  return (uint32_t)((uintptr_t)__stack_top - (uintptr_t)word);
}

uint32_t lt_stack_size_bytes(void) { return (uint32_t)((uintptr_t)__stack_top - (uintptr_t)__stack_limit); }
