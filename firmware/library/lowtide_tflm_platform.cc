/* The hooks TFLM leaves to the platform, for the TFLM library `lowtide tflm-library` writes (its tree's
 * debug_log.cc and micro_time.cc are not in the static library lowtide builds). Each is weak: an application that
 * wants TFLM's log lines (MicroPrintf: why AllocateTensors failed, a kernel's complaint) or its profiler's clock
 * defines its own, and the linker takes that one.
 *   DebugLog            MicroPrintf's output: dropped here
 *   DebugVsnprintf      MicroSnprintf's formatting: vsnprintf
 *   GetCurrentTimeTicks the profiler's clock: 0 here (no profiler runs unless the application adds one)
 *   ticks_per_second    0: TFLM's way of saying there is no clock */
#include <stdarg.h>
#include <stdio.h>

#include "tensorflow/lite/micro/debug_log.h"
#include "tensorflow/lite/micro/micro_time.h"

extern "C" __attribute__((weak)) void DebugLog(const char *format, va_list args) {
  (void)format;
  (void)args;
}

extern "C" __attribute__((weak)) int DebugVsnprintf(char *buffer, size_t buf_size, const char *format,
                                                    va_list vlist) {
  return vsnprintf(buffer, buf_size, format, vlist);
}

namespace tflite {

__attribute__((weak)) uint32_t ticks_per_second() { return 0; }

__attribute__((weak)) uint32_t GetCurrentTimeTicks() { return 0; }

}  // namespace tflite
