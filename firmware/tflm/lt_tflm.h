/* TFLM set up the way a user's application sets it up (MicroInterpreter on one arena, or on TFLM's two arenas, a
 * persistent and a non-persistent one; greedy planner), with the arena allocators kept in reach so that the head
 * (non-persistent) and tail (persistent) use can be read. Shared by the measurement firmware
 * (firmware/app/lt_model_tflm.cc) and the arena sizer (lt_tflm_sizer.cc). */
#ifndef LT_TFLM_H
#define LT_TFLM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One line of TFLM's log (MicroPrintf), without its newline. Defined by the application. */
void lt_tflm_log(const char *line);

#ifdef __cplusplus
}

#include "tensorflow/lite/micro/arena_allocator/ibuffer_allocator.h"
#include "tensorflow/lite/micro/memory_planner/greedy_memory_planner.h"
#include "tensorflow/lite/micro/micro_interpreter.h"
#include "tensorflow/lite/micro/micro_op_resolver.h"
#include "tensorflow/lite/micro/micro_profiler_interface.h"

struct lt_tflm {
  tflite::INonPersistentBufferAllocator *non_persistent; /* the head: planned tensors, scratch, temporaries */
  tflite::IPersistentBufferAllocator *persistent;        /* the tail: TFLM's and the kernels' structs */
  tflite::GreedyMemoryPlanner *planner;
  tflite::MicroInterpreter *interpreter;
};

/* Builds the interpreter in `interpreter_storage` exactly as MicroInterpreter(model, resolver, arena, bytes) does
 * (same allocations, same arena use), but through the public pieces, so the arena allocator stays visible.
 * `Allocator` may be a subclass of SingleArenaBufferAllocator of the same size (the sizer's tracker).
 * `resource_variables`: slots of MicroResourceVariables to create (one per VAR_HANDLE operator; 0 for none). */
template <typename Allocator>
lt_tflm lt_tflm_create(const uint8_t *model_bytes, const tflite::MicroOpResolver &resolver, uint8_t *arena,
                       size_t bytes, int resource_variables, void *interpreter_storage,
                       tflite::MicroProfilerInterface *profiler);

/* The same on two arenas, exactly as MicroAllocator::Create(persistent, persistent_bytes, non_persistent,
 * non_persistent_bytes) sets them up (its allocators in the persistent arena, then the planner, then the
 * MicroAllocator), the allocators kept visible. `Persistent` and `NonPersistent` may be subclasses of TFLM's
 * PersistentArenaBufferAllocator and NonPersistentArenaBufferAllocator of the same size (the sizer's trackers). */
template <typename Persistent, typename NonPersistent>
lt_tflm lt_tflm_create_split(const uint8_t *model_bytes, const tflite::MicroOpResolver &resolver,
                             uint8_t *persistent, size_t persistent_bytes, uint8_t *non_persistent,
                             size_t non_persistent_bytes, int resource_variables, void *interpreter_storage,
                             tflite::MicroProfilerInterface *profiler);

#endif /* __cplusplus */

#endif /* LT_TFLM_H */
