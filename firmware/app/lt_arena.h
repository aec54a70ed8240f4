/* Arena painting: fill with a pattern, run, and see which bytes changed. Two patterns alternate between runs, so a
 * byte that one run happens to write with the pattern's own value is still caught by the next. */
#ifndef LT_ARENA_H
#define LT_ARENA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LT_ARENA_PATTERN_A 0xA5u
#define LT_ARENA_PATTERN_B 0x5Au

void lt_arena_paint(uint8_t *arena, uint32_t bytes, uint8_t pattern);

/* One past the highest byte that no longer holds `pattern` (0 if none changed): the high-water mark of an arena
 * that is used from its start upwards. */
uint32_t lt_arena_top_changed(const uint8_t *arena, uint32_t bytes, uint8_t pattern);

/* Bytes minus the longest run still holding `pattern`: the high-water mark of an arena used from both ends, as
 * TFLM's is (planned head from the bottom, persistent tail from the top). */
uint32_t lt_arena_used_around_gap(const uint8_t *arena, uint32_t bytes, uint8_t pattern);

#ifdef __cplusplus
}
#endif

#endif /* LT_ARENA_H */
