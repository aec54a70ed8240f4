/* The two hooks TFLM leaves to the platform (the tree's debug_log.cc and micro_time.cc are not built):
 *   DebugLog/DebugVsnprintf  MicroPrintf's output, handed line by line to lt_tflm_log(), which the application
 *                            defines (the measurement firmware keeps the last line as its status; the sizer prints
 *                            it);
 *   GetCurrentTimeTicks      the board's cycle counter (instructions under QEMU), which MicroProfiler reads around
 *                            each operator. */
#include <stdarg.h>
#include <stdio.h>

#include "lt_board.h"
#include "lt_tflm.h"
#include "tensorflow/lite/micro/debug_log.h"
#include "tensorflow/lite/micro/micro_time.h"

/* MicroPrintf writes its message, then a line break in a call of its own: only text is passed on. */
extern "C" void DebugLog(const char *format, va_list args) {
  static char line[160];
  int length = vsnprintf(line, sizeof line, format, args);
  if (length >= (int)sizeof line) length = (int)sizeof line - 1;
  while (length > 0 && (line[length - 1] == '\n' || line[length - 1] == '\r')) line[--length] = '\0';
  if (length > 0) lt_tflm_log(line);
}

extern "C" int DebugVsnprintf(char *buffer, size_t buf_size, const char *format, va_list vlist) {
  return vsnprintf(buffer, buf_size, format, vlist);
}

namespace tflite {

uint32_t ticks_per_second() { return lt_board_cycle_hz(); }

uint32_t GetCurrentTimeTicks() { return (uint32_t)lt_board_cycles(); }

}  // namespace tflite
