/* The board support the measurements rest on: instruction counting, its determinism, stack and arena painting. */
#include <stdint.h>

#include "lt_arena.h"
#include "lt_board.h"
#include "lt_protocol.h"
#include "lt_test.h"

/* Exactly 2 * n instructions (subs, bne) plus a fixed entry and exit. */
static void __attribute__((noinline)) spin(uint32_t n) {
  __asm__ volatile("1: subs %0, %0, #1\n bne 1b" : "+r"(n)::"cc");
}

static uint64_t timed_spin(uint32_t n) {
  lt_board_cycles_align();
  uint64_t start = lt_board_cycles();
  spin(n);
  return lt_board_cycles() - start;
}

static void test_cycles_count_instructions(void) {
  uint64_t short_run = timed_spin(10000), long_run = timed_spin(30000);
  /* 40000 more instructions, at the counter's 40-instruction resolution */
  LT_CHECK(long_run - short_run >= 40000u - 40u && long_run - short_run <= 40000u + 40u);
  LT_CHECK(short_run >= 20000u && short_run <= 20000u + 400u);
  LT_CHECK(lt_board_cycle_hz() == 1000000000u);
  LT_CHECK(lt_board_counter() == LT_COUNTER_INSTRUCTIONS && lt_board_clock_hz() == 25000000u);
}

static void test_cycles_are_deterministic_at_any_phase(void) {
  uint64_t reference = timed_spin(12345);
  for (uint32_t offset = 1; offset < 60; offset += 7) {
    spin(offset); /* start the measurement at another phase of the 40-instruction tick */
    LT_CHECK(timed_spin(12345) == reference);
  }
}

static void test_cycles_monotonic_across_align(void) {
  uint64_t before = lt_board_cycles();
  spin(1000);
  lt_board_cycles_align();
  uint64_t after = lt_board_cycles();
  LT_CHECK(after >= before + 2000u);
  LT_CHECK(lt_board_micros() >= before / 1000u);
}

static uint32_t __attribute__((noinline)) use_stack(uint32_t bytes) {
  volatile uint8_t buffer[4096];
  for (uint32_t i = 0; i < bytes && i < sizeof buffer; i++) buffer[i] = (uint8_t)i;
  return buffer[bytes / 2];
}

static void test_stack_high_water_sees_a_deep_call(void) {
  lt_stack_paint();
  uint32_t idle = lt_stack_used_bytes();
  use_stack(4096);
  uint32_t deep = lt_stack_used_bytes();
  LT_CHECK(deep + 128u >= idle + 4096u); /* the painter's own frame and guard sit below `idle` */
  LT_CHECK(deep < lt_stack_size_bytes());
  lt_stack_paint();
  LT_CHECK(lt_stack_used_bytes() < deep); /* painting again forgets the deep call */
}

static void test_arena_top_changed(void) {
  static uint8_t arena[256];
  lt_arena_paint(arena, sizeof arena, LT_ARENA_PATTERN_A);
  LT_CHECK(lt_arena_top_changed(arena, sizeof arena, LT_ARENA_PATTERN_A) == 0);
  arena[10] = 0;
  arena[99] = 1;
  LT_CHECK(lt_arena_top_changed(arena, sizeof arena, LT_ARENA_PATTERN_A) == 100);
  arena[255] = 0;
  LT_CHECK(lt_arena_top_changed(arena, sizeof arena, LT_ARENA_PATTERN_A) == 256);
}

static void test_arena_used_around_gap(void) {
  static uint8_t arena[256];
  lt_arena_paint(arena, sizeof arena, LT_ARENA_PATTERN_B);
  arena[0] = arena[31] = 0;   /* head: 32 bytes */
  arena[240] = arena[255] = 0; /* tail: 16 bytes */
  LT_CHECK(lt_arena_used_around_gap(arena, sizeof arena, LT_ARENA_PATTERN_B) == 48);
}

int main(void) {
  lt_board_init();
  LT_RUN(test_cycles_count_instructions);
  LT_RUN(test_cycles_are_deterministic_at_any_phase);
  LT_RUN(test_cycles_monotonic_across_align);
  LT_RUN(test_stack_high_water_sees_a_deep_call);
  LT_RUN(test_arena_top_changed);
  LT_RUN(test_arena_used_around_gap);
  return lt_test_finish();
}
