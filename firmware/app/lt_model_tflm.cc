/* lt_model.h for TensorFlow Lite Micro's interpreter (the `tflm` and `tflm-cmsis-nn` runtimes).
 *
 * lowtide_model.py embeds the .tflite bytes (lt_model_tflite[]), writes lt_model_ops.inc (one `resolver.AddXxx();`
 * per operator type the model uses), links the TFLM library built for the core and kernel set (lowtide.tflm), and
 * sizes the arena from lowtide's 32-bit prediction (LT_TFLM_ARENA_BYTES: the smallest arena AllocateTensors
 * accepts, never found by trial on the board).
 *
 * With LT_TFLM_PERSISTENT_ARENA_BYTES, TFLM gets its two arenas instead, as MicroAllocator::Create(persistent, size,
 * non_persistent, size) sets them up: LT_TFLM_ARENA_BYTES is then the non-persistent one (the head), and each is
 * sized by lowtide's prediction of its part. LT_TFLM_ARENA_SECTION and LT_TFLM_PERSISTENT_ARENA_SECTION put an
 * arena in a section of its own, which the project's linker fragment places in a memory of the board
 * (lowtide.tflm.regions); without them it is in .bss.
 *
 * Figures: used = MicroInterpreter::arena_used_bytes(); planned = the arena allocator's non-persistent (head) bytes,
 * so the tail is used - planned. The arena is painted once, before AllocateTensors: TFLM keeps its persistent
 * structures in it (the tail, from the top) for the life of the interpreter, so it cannot be painted again between
 * invocations. The high-water mark is the arena less the longest run still painted (of each arena, summed). Per-operator cycles come from
 * TFLM's profiler interface: the interpreter opens and closes one event around each operator. */
#ifdef LT_RUNTIME_TFLM

#include <string.h>

#include <new>

#include "lt_arena.h"
#include "lt_model.h"
#include "lt_tflm.h"
#include "lt_tflm_create.h"
#include "tensorflow/lite/micro/compatibility.h"
#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"

#ifndef LT_TFLM_ARENA_BYTES
#error "LT_TFLM_ARENA_BYTES: set by lowtide_model.py from lowtide's arena prediction"
#endif

extern "C" const uint8_t lt_model_tflite[];

namespace {

/* Hands the interpreter's per-operator events to the server's op hook. Events of operators inside called subgraphs
 * (CALL_ONCE, IF, WHILE) are counted in their caller's. */
class OperatorProfiler : public tflite::MicroProfilerInterface {
 public:
  void Start(lt_model_op_hook hook, void *user) {
    hook_ = hook;
    user_ = user;
    next_operator_ = 0;
    depth_ = 0;
  }
  uint32_t BeginEvent(const char *tag) override {
    (void)tag;
    if (depth_++ == 0 && hook_) hook_(next_operator_, 0, user_);
    return 0;
  }
  void EndEvent(uint32_t event_handle) override {
    (void)event_handle;
    if (--depth_ == 0) {
      if (hook_) hook_(next_operator_, 1, user_);
      next_operator_++;
    }
  }

 private:
  lt_model_op_hook hook_ = nullptr;
  void *user_ = nullptr;
  int next_operator_ = 0;
  int depth_ = 0;
  TF_LITE_REMOVE_VIRTUAL_DELETE  // no heap: nothing may reference operator delete
};

using Resolver = tflite::MicroMutableOpResolver<LT_TFLM_OP_TYPES>;

/* Static storage, objects built in lt_model_setup(): a static object would register its destructor with atexit. */
#ifdef LT_TFLM_ARENA_SECTION
#define LT_ARENA_PLACE __attribute__((section(LT_TFLM_ARENA_SECTION)))
#else
#define LT_ARENA_PLACE
#endif
#ifdef LT_TFLM_PERSISTENT_ARENA_SECTION
#define LT_PERSISTENT_ARENA_PLACE __attribute__((section(LT_TFLM_PERSISTENT_ARENA_SECTION)))
#else
#define LT_PERSISTENT_ARENA_PLACE
#endif

alignas(16) uint8_t arena[LT_TFLM_ARENA_BYTES] LT_ARENA_PLACE;
#ifdef LT_TFLM_PERSISTENT_ARENA_BYTES
alignas(16) uint8_t persistent_arena[LT_TFLM_PERSISTENT_ARENA_BYTES] LT_PERSISTENT_ARENA_PLACE;
#define LT_ARENAS_BYTES (LT_TFLM_ARENA_BYTES + LT_TFLM_PERSISTENT_ARENA_BYTES)
#else
#define LT_ARENAS_BYTES LT_TFLM_ARENA_BYTES
#endif
uint8_t staging[LT_MODEL_INPUT_BYTES_TOTAL > 0 ? LT_MODEL_INPUT_BYTES_TOTAL : 1];
uint32_t staging_offset[256];
alignas(Resolver) uint8_t resolver_storage[sizeof(Resolver)];
alignas(OperatorProfiler) uint8_t profiler_storage[sizeof(OperatorProfiler)];
alignas(tflite::MicroInterpreter) uint8_t interpreter_storage[sizeof(tflite::MicroInterpreter)];
OperatorProfiler *profiler;
lt_tflm tflm;
lt_model_info info;
char last_log[96];

int hex_digit(char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

}  // namespace

extern "C" {

void lt_tflm_log(const char *line) {
  strncpy(last_log, line, sizeof last_log - 1);
}

const lt_model_info *lt_model_setup(void) {
  static const char sha256_hex[] = LT_MODEL_SHA256;
  for (int i = 0; i < 32; i++) {
    info.model_sha256[i] = (uint8_t)(hex_digit(sha256_hex[2 * i]) << 4 | hex_digit(sha256_hex[2 * i + 1]));
  }
  info.runtime = LT_TFLM_RUNTIME_NAME;
  info.model_size_bytes = LT_MODEL_SIZE;
  info.arena_capacity_bytes = LT_ARENAS_BYTES;
  info.operator_count = LT_MODEL_OPERATOR_COUNT;
  info.planned_bytes = LT_UNKNOWN_U32;
  info.used_bytes = LT_UNKNOWN_U32;
  Resolver &resolver = *new (resolver_storage) Resolver();
#include "lt_model_ops.inc"
  profiler = new (profiler_storage) OperatorProfiler();
  lt_arena_paint(arena, sizeof arena, LT_ARENA_PATTERN_A);
#ifdef LT_TFLM_PERSISTENT_ARENA_BYTES
  lt_arena_paint(persistent_arena, sizeof persistent_arena, LT_ARENA_PATTERN_A);
  tflm = lt_tflm_create_split<tflite::PersistentArenaBufferAllocator, tflite::NonPersistentArenaBufferAllocator>(
      lt_model_tflite, resolver, persistent_arena, sizeof persistent_arena, arena, sizeof arena,
      LT_TFLM_RESOURCE_VARIABLES, interpreter_storage, profiler);
#else
  tflm = lt_tflm_create<tflite::SingleArenaBufferAllocator>(lt_model_tflite, resolver, arena, sizeof arena,
                                                           LT_TFLM_RESOURCE_VARIABLES, interpreter_storage, profiler);
#endif
  if (tflm.interpreter->AllocateTensors() != kTfLiteOk) {
    info.status = last_log[0] ? last_log : "AllocateTensors failed";
    return &info;
  }
  uint32_t offset = 0;
  for (size_t i = 0; i < tflm.interpreter->inputs_size() && i < 256; i++) {
    staging_offset[i] = offset;
    offset += (uint32_t)tflm.interpreter->input(i)->bytes;
  }
  if (offset != LT_MODEL_INPUT_BYTES_TOTAL) {
    info.status = "input sizes disagree with LT_MODEL_INPUT_BYTES_TOTAL: rebuild the firmware";
    return &info;
  }
  info.input_count = (uint8_t)tflm.interpreter->inputs_size();
  info.output_count = (uint8_t)tflm.interpreter->outputs_size();
  info.used_bytes = (uint32_t)tflm.interpreter->arena_used_bytes();
  info.planned_bytes = (uint32_t)tflm.non_persistent->GetNonPersistentUsedBytes();
  info.ready = 1;
  return &info;
}

uint32_t lt_model_input_bytes(int index) { return (uint32_t)tflm.interpreter->input(index)->bytes; }

uint8_t *lt_model_input_staging(int index) { return staging + staging_offset[index]; }

uint32_t lt_model_output_bytes(int index) { return (uint32_t)tflm.interpreter->output(index)->bytes; }

const uint8_t *lt_model_output(int index) { return tflm.interpreter->output(index)->data.uint8; }

void lt_model_prepare(int pattern) {
  (void)pattern; /* painted once, before AllocateTensors */
  tflm.interpreter->Reset();
  for (int i = 0; i < info.input_count; i++) {
    memcpy(tflm.interpreter->input(i)->data.uint8, staging + staging_offset[i], tflm.interpreter->input(i)->bytes);
  }
}

int lt_model_invoke(lt_model_op_hook hook, void *user) {
  profiler->Start(hook, user);
  return tflm.interpreter->Invoke() == kTfLiteOk ? 0 : 1;
}

uint32_t lt_model_arena_high_water(void) {
  uint32_t used = lt_arena_used_around_gap(arena, sizeof arena, LT_ARENA_PATTERN_A);
#ifdef LT_TFLM_PERSISTENT_ARENA_BYTES
  used += lt_arena_used_around_gap(persistent_arena, sizeof persistent_arena, LT_ARENA_PATTERN_A);
#endif
  return used;
}

}  // extern "C"

#endif /* LT_RUNTIME_TFLM */
