/* The arena sizer: TFLM's own allocator, built for the target core, run on a model to read what it allocates.
 *
 * lowtide predicts TFLM's 32-bit arena by running this image under QEMU (host/lowtide/tflm/sizer.py): the model is
 * loaded at LT_SIZER_RAM_BASE by QEMU's loader device, the arena is the 8 MiB above it, and one line of figures goes
 * out on UART0. The figures are those of the firmware that runs the model (same sources, flags, interpreter set-up
 * in lt_tflm_create.h), so they hold for any model and kernel set, scratch buffers and per-operator data included.
 *
 * It also finds the smallest arena AllocateTensors accepts, without trying arenas (TFLM can crash on a too-small
 * one): a tracking allocator, the size of the stock one, records the most bytes in use after every allocation. The
 * memory planner's own call takes all that is left, so for it the allocator records where the planner starts and the
 * persistent bytes at that time, and the planner's real need (per_buffer_size() bytes per planned buffer) is added
 * afterwards.
 *
 * Then the same model again on TFLM's two arenas (lt_tflm_create_split: the persistent one in the upper part of the
 * window, the non-persistent one below it), for the figures of each: the persistent arena's need is what it holds;
 * the non-persistent one's is its most bytes in use, the planner's scratch counted as above. A model whose parts do
 * not fit that split prints no split figures. */
#include <string.h>

#include "lt_board.h"
#include "lt_tflm.h"
#include "lt_tflm_create.h"
#include "tensorflow/lite/micro/arena_allocator/non_persistent_arena_buffer_allocator.h"
#include "tensorflow/lite/micro/arena_allocator/persistent_arena_buffer_allocator.h"
#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"

#ifndef LT_SIZER_RAM_BASE
#error "LT_SIZER_RAM_BASE: the emulated board's 16 MiB RAM window"
#endif
#define LT_SIZER_MODEL ((const uint8_t *)(LT_SIZER_RAM_BASE))
/* The last word below the arena: the resource-variable slots to create, written there by QEMU's loader. */
#define LT_SIZER_RESOURCE_VARIABLES (*(const volatile int32_t *)(LT_SIZER_RAM_BASE + 0x7FFFFCu))
#define LT_SIZER_ARENA ((uint8_t *)(LT_SIZER_RAM_BASE + 0x800000u))
#define LT_SIZER_ARENA_BYTES 0x800000u
/* The two-arena run: the non-persistent arena below, the persistent one in the window's top quarter. */
#define LT_SIZER_NON_PERSISTENT_BYTES 0x600000u

namespace {

size_t peak_used_bytes;       /* the most bytes in use after any allocation but the planner's */
size_t planner_start_bytes;   /* where the planner's scratch began, from the arena's start */
size_t planner_tail_bytes;    /* persistent bytes while the planner ran */
const char *last_log = "";
char log_copy[160];

class TrackingAllocator : public tflite::SingleArenaBufferAllocator {
 public:
  using tflite::SingleArenaBufferAllocator::SingleArenaBufferAllocator;

  uint8_t *AllocatePersistentBuffer(size_t size, size_t alignment) override {
    uint8_t *result = SingleArenaBufferAllocator::AllocatePersistentBuffer(size, alignment);
    Record();
    return result;
  }
  TfLiteStatus ResizeBuffer(uint8_t *resizable_buf, size_t size, size_t alignment) override {
    TfLiteStatus status = SingleArenaBufferAllocator::ResizeBuffer(resizable_buf, size, alignment);
    Record();
    return status;
  }
  uint8_t *AllocateTemp(size_t size, size_t alignment) override {
    if (size != 0 && size == GetAvailableMemory(alignment)) { /* the memory planner's scratch: all that is left */
      uint8_t *start = tflite::AlignPointerUp(GetOverlayMemoryAddress() + GetNonPersistentUsedBytes(), alignment);
      planner_start_bytes = (size_t)(start - GetOverlayMemoryAddress());
      planner_tail_bytes = GetPersistentUsedBytes();
      return SingleArenaBufferAllocator::AllocateTemp(size, alignment);
    }
    uint8_t *result = SingleArenaBufferAllocator::AllocateTemp(size, alignment);
    Record();
    return result;
  }

 private:
  void Record() {
    size_t used = GetUsedBytes();
    if (used > peak_used_bytes) peak_used_bytes = used;
  }
};

/* The two-arena run's non-persistent allocator, tracked the same way. */
size_t split_peak_bytes;
size_t split_planner_start_bytes;

class TrackingNonPersistent : public tflite::NonPersistentArenaBufferAllocator {
 public:
  using tflite::NonPersistentArenaBufferAllocator::NonPersistentArenaBufferAllocator;

  TfLiteStatus ResizeBuffer(uint8_t *resizable_buf, size_t size, size_t alignment) override {
    TfLiteStatus status = NonPersistentArenaBufferAllocator::ResizeBuffer(resizable_buf, size, alignment);
    Record();
    return status;
  }
  uint8_t *AllocateTemp(size_t size, size_t alignment) override {
    if (size != 0 && size == GetAvailableMemory(alignment)) { /* the memory planner's scratch: all that is left */
      uint8_t *start = tflite::AlignPointerUp(GetOverlayMemoryAddress() + GetNonPersistentUsedBytes(), alignment);
      split_planner_start_bytes = (size_t)(start - GetOverlayMemoryAddress());
      return NonPersistentArenaBufferAllocator::AllocateTemp(size, alignment);
    }
    uint8_t *result = NonPersistentArenaBufferAllocator::AllocateTemp(size, alignment);
    Record();
    return result;
  }

 private:
  void Record() {
    size_t used = GetNonPersistentUsedBytes();
    if (used > split_peak_bytes) split_peak_bytes = used;
  }
};

alignas(tflite::MicroInterpreter) uint8_t interpreter_storage[sizeof(tflite::MicroInterpreter)];
/* Built in main() into static storage: a static object would register its destructor with atexit. */
using Resolver = tflite::MicroMutableOpResolver<LT_TFLM_OP_TYPES>;
alignas(Resolver) uint8_t resolver_storage[sizeof(Resolver)];

void print(const char *text) { lt_board_write((const uint8_t *)text, strlen(text)); }

void print_u32(const char *name, uint32_t value) {
  char digits[11];
  int n = 0;
  do {
    digits[n++] = (char)('0' + value % 10);
    value /= 10;
  } while (value);
  print(" ");
  print(name);
  print("=");
  while (n) lt_board_write((const uint8_t *)&digits[--n], 1);
}

uint32_t planner_bytes(const lt_tflm &tflm) {
  return (uint32_t)(tflite::GreedyMemoryPlanner::per_buffer_size() * (size_t)tflm.planner->GetBufferCount());
}

}  // namespace

extern "C" void lt_tflm_log(const char *line) {
  strncpy(log_copy, line, sizeof log_copy - 1);
  last_log = log_copy;
}

int main(void) {
  lt_board_init();
  Resolver &resolver = *new (resolver_storage) Resolver();
#include "lt_model_ops.inc"
  lt_tflm tflm = lt_tflm_create<TrackingAllocator>(LT_SIZER_MODEL, resolver, LT_SIZER_ARENA, LT_SIZER_ARENA_BYTES,
                                                   LT_SIZER_RESOURCE_VARIABLES, interpreter_storage, nullptr);
  if (tflm.interpreter->AllocateTensors() != kTfLiteOk) {
    print("lowtide-sizer error ");
    print(last_log);
    print("\n");
    return 3;
  }
  print("lowtide-sizer");
  print_u32("used", (uint32_t)tflm.interpreter->arena_used_bytes());
  print_u32("head", (uint32_t)tflm.non_persistent->GetNonPersistentUsedBytes());
  print_u32("tail", (uint32_t)tflm.persistent->GetPersistentUsedBytes());
  print_u32("peak", (uint32_t)peak_used_bytes);
  print_u32("planner_start", (uint32_t)planner_start_bytes);
  print_u32("planner_tail", (uint32_t)planner_tail_bytes);
  print_u32("planner_bytes", planner_bytes(tflm));
  lt_tflm split = lt_tflm_create_split<tflite::PersistentArenaBufferAllocator, TrackingNonPersistent>(
      LT_SIZER_MODEL, resolver, LT_SIZER_ARENA + LT_SIZER_NON_PERSISTENT_BYTES,
      LT_SIZER_ARENA_BYTES - LT_SIZER_NON_PERSISTENT_BYTES, LT_SIZER_ARENA, LT_SIZER_NON_PERSISTENT_BYTES,
      LT_SIZER_RESOURCE_VARIABLES, interpreter_storage, nullptr);
  if (split.interpreter->AllocateTensors() == kTfLiteOk) {
    print_u32("split_head", (uint32_t)split.non_persistent->GetNonPersistentUsedBytes());
    print_u32("split_tail", (uint32_t)split.persistent->GetPersistentUsedBytes());
    print_u32("split_peak", (uint32_t)split_peak_bytes);
    print_u32("split_planner_start", (uint32_t)split_planner_start_bytes);
    print_u32("split_planner_bytes", planner_bytes(split));
  }
  print("\n");
  return 0;
}
