/* lt_tflm_create()'s definition (a template: the sizer instantiates it with its tracking allocator). */
#ifndef LT_TFLM_CREATE_H
#define LT_TFLM_CREATE_H

#include <new>

#include "lt_tflm.h"
#include "tensorflow/lite/micro/memory_helpers.h"
#include "tensorflow/lite/micro/memory_planner/greedy_memory_planner.h"
#include "tensorflow/lite/micro/micro_allocator.h"
#include "tensorflow/lite/micro/micro_arena_constants.h"
#include "tensorflow/lite/micro/micro_resource_variable.h"
#include "tensorflow/lite/schema/schema_generated.h"

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
  /* Models with VAR_HANDLE need resource variables, which the application creates in the arena. */
  tflite::MicroResourceVariables *variables =
      resource_variables > 0 ? tflite::MicroResourceVariables::Create(allocator, resource_variables) : nullptr;
  const tflite::Model *model = tflite::GetModel(model_bytes);
  tflite::MicroInterpreter *interpreter = new (interpreter_storage)
      tflite::MicroInterpreter(model, resolver, allocator, variables, profiler);
  return lt_tflm{arena_allocator, planner, interpreter};
}

#endif /* LT_TFLM_CREATE_H */
