#include "lt_arena.h"

#include <string.h>

void lt_arena_paint(uint8_t *arena, uint32_t bytes, uint8_t pattern) { memset(arena, pattern, bytes); }

uint32_t lt_arena_top_changed(const uint8_t *arena, uint32_t bytes, uint8_t pattern) {
  uint32_t top = bytes;
  while (top > 0 && arena[top - 1] == pattern) top--;
  return top;
}

uint32_t lt_arena_used_around_gap(const uint8_t *arena, uint32_t bytes, uint8_t pattern) {
  uint32_t longest = 0, run = 0;
  for (uint32_t i = 0; i < bytes; i++) {
    run = arena[i] == pattern ? run + 1 : 0;
    if (run > longest) longest = run;
  }
  return bytes - longest;
}
