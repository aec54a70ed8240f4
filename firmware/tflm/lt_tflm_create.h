/* lt_tflm_create()'s and lt_tflm_create_split()'s definitions (templates: the sizer instantiates them with its
 * tracking allocators). */
#ifndef LT_TFLM_CREATE_H
#define LT_TFLM_CREATE_H

#include <new>

#include "lt_tflm.h"
#include "tensorflow/lite/micro/arena_allocator/non_persistent_arena_buffer_allocator.h"
#include "tensorflow/lite/micro/arena_allocator/persistent_arena_buffer_allocator.h"
#include "tensorflow/lite/micro/arena_allocator/single_arena_buffer_allocator.h"
#include "tensorflow/lite/micro/compatibility.h"
#include "tensorflow/lite/micro/memory_helpers.h"
#include "tensorflow/lite/micro/memory_planner/greedy_memory_planner.h"
#include "tensorflow/lite/micro/micro_allocator.h"
#include "tensorflow/lite/micro/micro_arena_constants.h"
#include "tensorflow/lite/micro/micro_resource_variable.h"
#include "tensorflow/lite/schema/schema_generated.h"

/* The interpreter on `allocator`, as MicroInterpreter(model, resolver, allocator, variables, profiler). */
inline lt_tflm lt_tflm_interpreter(const uint8_t *model_bytes, const tflite::MicroOpResolver &resolver,
                                   tflite::MicroAllocator *allocator, int resource_variables,
                                   void *interpreter_storage, tflite::MicroProfilerInterface *profiler,
                                   tflite::INonPersistentBufferAllocator *non_persistent,
                                   tflite::IPersistentBufferAllocator *persistent,
                                   tflite::GreedyMemoryPlanner *planner) {
  /* Models with VAR_HANDLE need resource variables, which the application creates in the (persistent) arena. */
  tflite::MicroResourceVariables *variables =
      resource_variables > 0 ? tflite::MicroResourceVariables::Create(allocator, resource_variables) : nullptr;
  const tflite::Model *model = tflite::GetModel(model_bytes);
  tflite::MicroInterpreter *interpreter = new (interpreter_storage)
      tflite::MicroInterpreter(model, resolver, allocator, variables, profiler);
  return lt_tflm{non_persistent, persistent, planner, interpreter};
}

template <typename Allocator>
lt_tflm lt_tflm_create(const uint8_t *model_bytes, const tflite::MicroOpResolver &resolver, uint8_t *arena,
                       size_t bytes, int resource_variables, void *interpreter_storage,
                       tflite::MicroProfilerInterface *profiler) {
  static_assert(sizeof(Allocator) == sizeof(tflite::SingleArenaBufferAllocator),
                "a tracking allocator must take the arena bytes the stock one takes");
  /* MicroAllocator::Create(arena, bytes): align the arena, put the arena allocator, then the greedy planner, then
   * the MicroAllocator at its top, in that order. */
  uint8_t *aligned = tflite::AlignPointerUp(arena, tflite::MicroArenaBufferAlignment());
  size_t aligned_bytes = arena + bytes - aligned;
  Allocator staging(aligned, aligned_bytes);
  uint8_t *allocator_place = staging.AllocatePersistentBuffer(sizeof(Allocator), alignof(Allocator));
  Allocator *arena_allocator = new (allocator_place) Allocator(staging);
  uint8_t *planner_place = arena_allocator->AllocatePersistentBuffer(sizeof(tflite::GreedyMemoryPlanner),
                                                                     alignof(tflite::GreedyMemoryPlanner));
  tflite::GreedyMemoryPlanner *planner = new (planner_place) tflite::GreedyMemoryPlanner();
  tflite::MicroAllocator *allocator = tflite::MicroAllocator::Create(arena_allocator, planner);
  return lt_tflm_interpreter(model_bytes, resolver, allocator, resource_variables, interpreter_storage, profiler,
                             arena_allocator, arena_allocator, planner);
}

/* MicroAllocator's two-arena constructor is protected: MicroAllocator::Create(persistent, ..., non_persistent, ...)
 * calls it with allocators it keeps to itself; this subclass (no state of its own) calls it with ours. */
class LtSplitMicroAllocator : public tflite::MicroAllocator {
 public:
  LtSplitMicroAllocator(tflite::IPersistentBufferAllocator *persistent,
                        tflite::INonPersistentBufferAllocator *non_persistent, tflite::MicroMemoryPlanner *planner)
      : tflite::MicroAllocator(persistent, non_persistent, planner) {}

 private:
  TF_LITE_REMOVE_VIRTUAL_DELETE
};

template <typename Persistent, typename NonPersistent>
lt_tflm lt_tflm_create_split(const uint8_t *model_bytes, const tflite::MicroOpResolver &resolver,
                             uint8_t *persistent, size_t persistent_bytes, uint8_t *non_persistent,
                             size_t non_persistent_bytes, int resource_variables, void *interpreter_storage,
                             tflite::MicroProfilerInterface *profiler) {
  static_assert(sizeof(Persistent) == sizeof(tflite::PersistentArenaBufferAllocator) &&
                    sizeof(NonPersistent) == sizeof(tflite::NonPersistentArenaBufferAllocator) &&
                    sizeof(LtSplitMicroAllocator) == sizeof(tflite::MicroAllocator),
                "the allocators must take the arena bytes the stock ones take");
  /* The persistent arena is used from its top, aligned down; the non-persistent one from its start, aligned up. */
  uint8_t *persistent_top = tflite::AlignPointerDown(persistent + persistent_bytes, tflite::MicroArenaBufferAlignment());
  Persistent staging(persistent, persistent_top - persistent);
  Persistent *persistent_allocator =
      new (staging.AllocatePersistentBuffer(sizeof(Persistent), alignof(Persistent))) Persistent(staging);
  uint8_t *non_persistent_place =
      persistent_allocator->AllocatePersistentBuffer(sizeof(NonPersistent), alignof(NonPersistent));
  uint8_t *head = tflite::AlignPointerUp(non_persistent, tflite::MicroArenaBufferAlignment());
  NonPersistent *non_persistent_allocator =
      new (non_persistent_place) NonPersistent(head, non_persistent + non_persistent_bytes - head);
  tflite::GreedyMemoryPlanner *planner = new (persistent_allocator->AllocatePersistentBuffer(
      sizeof(tflite::GreedyMemoryPlanner), alignof(tflite::GreedyMemoryPlanner))) tflite::GreedyMemoryPlanner();
  tflite::MicroAllocator *allocator = new (persistent_allocator->AllocatePersistentBuffer(
      sizeof(tflite::MicroAllocator), alignof(tflite::MicroAllocator)))
      LtSplitMicroAllocator(persistent_allocator, non_persistent_allocator, planner);
  return lt_tflm_interpreter(model_bytes, resolver, allocator, resource_variables, interpreter_storage, profiler,
                             non_persistent_allocator, persistent_allocator, planner);
}

#endif /* LT_TFLM_CREATE_H */
