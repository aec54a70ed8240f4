/* lt_model.h for the C99 code `lowtide compile` generates (model.h / model.c, prefix "model").
 *
 * There is no allocator: every activation sits at the offset TFLM's planner would give it, inside one static arena,
 * so the planned head is MODEL_ARENA_SIZE and nothing else is used. The arena is LT_ARENA_SLACK_BYTES larger than
 * the plan, and the whole of it is painted before each invocation: a write outside the plan would push the
 * high-water mark above the planned size, where the host sees it.
 *
 * Compiled for a board's memory regions (lowtide.compile.banks), the model's arena is split: `arena` holds the
 * first region's part (in .bss, or in its memory's section where LT_COMPILED_ARENA_SECTION names one), and the
 * header's MODEL_REGION_ARENAS lists the others, each defined here in its memory's section (.lt_arena.<memory>,
 * placed by the project's linker fragment, lowtide.tflm.regions). Each is painted, and the high-water mark is the
 * sum of theirs.
 *
 * lowtide_model.py passes the model's identity (LT_MODEL_SHA256 as 64 hex digits, LT_MODEL_SIZE) and
 * LT_MODEL_INPUT_BYTES_TOTAL (the sum of the input sizes, for the staging buffer).
 */
#ifdef LT_RUNTIME_COMPILED

#include <string.h>

#include "lt_arena.h"
#include "lt_model.h"
#include "model.h"

#ifndef LT_ARENA_SLACK_BYTES
#define LT_ARENA_SLACK_BYTES 1024u
#endif
#define LT_ARENA_CAPACITY (MODEL_ARENA_SIZE + LT_ARENA_SLACK_BYTES)

#ifdef LT_COMPILED_ARENA_SECTION
#define LT_ARENA_PLACE __attribute__((section(LT_COMPILED_ARENA_SECTION)))
#else
#define LT_ARENA_PLACE
#endif
static uint8_t arena[LT_ARENA_CAPACITY] __attribute__((aligned(MODEL_ARENA_ALIGNMENT))) LT_ARENA_PLACE;

#ifdef MODEL_REGION_ARENAS
#define LT_DEFINE_REGION_ARENA(region, bytes) \
  uint8_t model_arena_##region[bytes] __attribute__((aligned(MODEL_ARENA_ALIGNMENT), section(".lt_arena." #region)));
MODEL_REGION_ARENAS(LT_DEFINE_REGION_ARENA)
#define LT_PAINT_REGION_ARENA(region, bytes) lt_arena_paint(model_arena_##region, bytes, (uint8_t)pattern);
#define LT_REGION_ARENA_HIGH_WATER(region, bytes) +lt_arena_top_changed(model_arena_##region, bytes, painted_with)
#define LT_ARENAS_PLANNED MODEL_ARENAS_TOTAL_SIZE
#define LT_ARENAS_CAPACITY (MODEL_ARENAS_TOTAL_SIZE + LT_ARENA_SLACK_BYTES)
#else
#define LT_ARENAS_PLANNED MODEL_ARENA_SIZE
#define LT_ARENAS_CAPACITY LT_ARENA_CAPACITY
#endif
static uint8_t staging[LT_MODEL_INPUT_BYTES_TOTAL > 0 ? LT_MODEL_INPUT_BYTES_TOTAL : 1];
static uint32_t staging_offset[MODEL_INPUT_COUNT];
static uint8_t painted_with;
static lt_model_info info;

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return c - 'A' + 10;
}

const lt_model_info *lt_model_setup(void) {
  static const char sha256_hex[] = LT_MODEL_SHA256;
  uint32_t offset = 0;
  for (int i = 0; i < MODEL_INPUT_COUNT; i++) {
    staging_offset[i] = offset;
    offset += model_inputs[i].bytes;
  }
  for (int i = 0; i < 32; i++) {
    info.model_sha256[i] = (uint8_t)(hex_digit(sha256_hex[2 * i]) << 4 | hex_digit(sha256_hex[2 * i + 1]));
  }
  info.runtime = "lowtide-compiled";
  info.status = NULL;
  info.ready = offset == LT_MODEL_INPUT_BYTES_TOTAL;
  if (!info.ready) info.status = "input sizes disagree with LT_MODEL_INPUT_BYTES_TOTAL: rebuild the firmware";
  info.input_count = MODEL_INPUT_COUNT;
  info.output_count = MODEL_OUTPUT_COUNT;
  info.operator_count = MODEL_OPERATOR_COUNT;
  info.arena_capacity_bytes = LT_ARENAS_CAPACITY;
  info.planned_bytes = LT_ARENAS_PLANNED;
  info.used_bytes = LT_ARENAS_PLANNED;
  info.model_size_bytes = LT_MODEL_SIZE;
  return &info;
}

uint32_t lt_model_input_bytes(int index) { return model_inputs[index].bytes; }

uint8_t *lt_model_input_staging(int index) { return staging + staging_offset[index]; }

uint32_t lt_model_output_bytes(int index) { return model_outputs[index].bytes; }

const uint8_t *lt_model_output(int index) { return (const uint8_t *)model_output(arena, index); }

void lt_model_prepare(int pattern) {
  /* The TFLM runtime resets its interpreter before every invocation (variables back to their initial values);
   * the compiled model's state does the same, so both compute what the host oracle computes from fresh state. */
  model_reset();
  if (pattern != LT_MODEL_NO_PAINT) {
    lt_arena_paint(arena, LT_ARENA_CAPACITY, (uint8_t)pattern);
#ifdef MODEL_REGION_ARENAS
    MODEL_REGION_ARENAS(LT_PAINT_REGION_ARENA)
#endif
    painted_with = (uint8_t)pattern;
  }
  for (int i = 0; i < MODEL_INPUT_COUNT; i++) {
    memcpy(model_input(arena, i), staging + staging_offset[i], model_inputs[i].bytes);
  }
}

int lt_model_invoke(lt_model_op_hook hook, void *user) { return model_invoke(arena, hook, user); }

uint32_t lt_model_arena_high_water(void) {
  return lt_arena_top_changed(arena, LT_ARENA_CAPACITY, painted_with)
#ifdef MODEL_REGION_ARENAS
      MODEL_REGION_ARENAS(LT_REGION_ARENA_HIGH_WATER)
#endif
      ;
}

#endif /* LT_RUNTIME_COMPILED */
