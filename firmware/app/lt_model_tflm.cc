/* lt_model.h for TensorFlow Lite Micro's interpreter: thin glue for real boards (custom_lowtide_runtime = tflm).
 * NOT BUILT in this repository's CI: TFLM is not vendored; lowtide_model.py adds a local TFLM tree named by
 * LOWTIDE_TFLM_DIR (exported with TFLM's create_tflm_tree.py), or the env's lib_deps provides it.
 *
 * lowtide_model.py embeds the .tflite bytes (lt_model_tflite[]) and writes lt_model_ops.inc, one
 * `resolver.AddXxx();` per operator type the model uses. The arena is painted once, before AllocateTensors: TFLM
 * keeps persistent structures in it (the tail, from the top) for the life of the interpreter, so it cannot be
 * painted again between invocations. The high-water mark is the arena less the largest run still painted, the
 * gap between the planned head (from the bottom) and the tail. */
#ifdef LT_RUNTIME_TFLM

#include <string.h>

#include <new>

#include "lt_arena.h"
#include "lt_model.h"
#include "tensorflow/lite/micro/micro_interpreter.h"
#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"
#include "tensorflow/lite/schema/schema_generated.h"

#ifndef LT_TFLM_ARENA_BYTES
#define LT_TFLM_ARENA_BYTES (128u * 1024u)
#endif
#ifndef LT_TFLM_MAX_OP_TYPES
#define LT_TFLM_MAX_OP_TYPES 32
#endif

extern "C" const uint8_t lt_model_tflite[];

namespace {

alignas(16) uint8_t arena[LT_TFLM_ARENA_BYTES];
uint8_t staging[LT_MODEL_INPUT_BYTES_TOTAL > 0 ? LT_MODEL_INPUT_BYTES_TOTAL : 1];
uint32_t staging_offset[256];
tflite::MicroMutableOpResolver<LT_TFLM_MAX_OP_TYPES> resolver;
alignas(tflite::MicroInterpreter) uint8_t interpreter_storage[sizeof(tflite::MicroInterpreter)];
tflite::MicroInterpreter *interpreter;
lt_model_info info;

int hex_digit(char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

}  // namespace

extern "C" {

const lt_model_info *lt_model_setup(void) {
  static const char sha256_hex[] = LT_MODEL_SHA256;
  for (int i = 0; i < 32; i++) {
    info.model_sha256[i] = (uint8_t)(hex_digit(sha256_hex[2 * i]) << 4 | hex_digit(sha256_hex[2 * i + 1]));
  }
  info.runtime = "tflite-micro";
  info.model_size_bytes = LT_MODEL_SIZE;
  info.arena_capacity_bytes = LT_TFLM_ARENA_BYTES;
  info.planned_bytes = LT_UNKNOWN_U32; /* TFLM exposes the head only through its recording allocator */
  info.used_bytes = LT_UNKNOWN_U32;
#include "lt_model_ops.inc"
  lt_arena_paint(arena, sizeof arena, LT_ARENA_PATTERN_A);
  const tflite::Model *model = tflite::GetModel(lt_model_tflite);
  interpreter = new (interpreter_storage) tflite::MicroInterpreter(model, resolver, arena, sizeof arena);
  if (interpreter->AllocateTensors() != kTfLiteOk) {
    info.status = "AllocateTensors failed: the arena is too small (raise LT_TFLM_ARENA_BYTES) or an op is missing";
    return &info;
  }
  uint32_t offset = 0;
  for (size_t i = 0; i < interpreter->inputs_size() && i < 256; i++) {
    staging_offset[i] = offset;
    offset += (uint32_t)interpreter->input(i)->bytes;
  }
  if (offset != LT_MODEL_INPUT_BYTES_TOTAL) {
    info.status = "input sizes disagree with LT_MODEL_INPUT_BYTES_TOTAL: rebuild the firmware";
    return &info;
  }
  info.input_count = (uint8_t)interpreter->inputs_size();
  info.output_count = (uint8_t)interpreter->outputs_size();
  info.used_bytes = (uint32_t)interpreter->arena_used_bytes();
  info.ready = 1;
  return &info;
}

uint32_t lt_model_input_bytes(int index) { return (uint32_t)interpreter->input(index)->bytes; }

uint8_t *lt_model_input_staging(int index) { return staging + staging_offset[index]; }

uint32_t lt_model_output_bytes(int index) { return (uint32_t)interpreter->output(index)->bytes; }

const uint8_t *lt_model_output(int index) { return interpreter->output(index)->data.uint8; }

void lt_model_prepare(uint8_t pattern) {
  (void)pattern; /* painted once, before AllocateTensors */
  interpreter->Reset();
  for (int i = 0; i < info.input_count; i++) {
    memcpy(interpreter->input(i)->data.uint8, staging + staging_offset[i], interpreter->input(i)->bytes);
  }
}

int lt_model_invoke(lt_model_op_hook hook, void *user) {
  (void)hook, (void)user; /* per-operator cycles: TFLM's MicroProfiler would be the place; not wired */
  return interpreter->Invoke() == kTfLiteOk ? 0 : 1;
}

uint32_t lt_model_arena_high_water(void) {
  return lt_arena_used_around_gap(arena, sizeof arena, LT_ARENA_PATTERN_A);
}

}  // extern "C"

#endif /* LT_RUNTIME_TFLM */
