/* lt_board.h on real boards, through the Arduino core of each official PlatformIO platform (ststm32, nordicnrf52,
 * espressif32, raspberrypi). NOT BUILT in this repository's CI: those platforms come from the PlatformIO registry.
 *
 * C++ only because the Arduino API is: this file is the glue, the protocol core stays C. The host link is the
 * board's Serial (ST-LINK virtual COM port on the Nucleos, USB CDC on the Nano 33 BLE and the Pico, the UART bridge
 * on the ESP32-S3 DevKitC). Cycles: DWT CYCCNT on Cortex-M4/M7 (LT_CYCLES_DWT), CCOUNT on Xtensa (LT_CYCLES_XTENSA);
 * the Pico's Cortex-M0+ has no cycle counter, so it reports microseconds only. Stack bounds differ per core's linker
 * script, so these boards report no stack high-water mark. */
#include <Arduino.h>

#include "lt_app.h"
#include "lt_board.h"
#include "lt_protocol.h"

#if defined(LT_CYCLES_DWT)
#include "lt_dwt.h"
#endif

#ifndef LT_BOARD
#error "define LT_BOARD (the board's name in boards/*.toml) in the env's build_flags"
#endif
#define LT_STR_(x) #x
#define LT_STR(x) LT_STR_(x)

#define LT_BAUD 115200

void setup() { lt_app_start(); }

void loop() { lt_app_poll(); }

/* micros() is 32 bits: widen it, as lowtide reads it at least once per invocation (wraps every 71 minutes). */
static uint64_t widen(uint32_t now, uint32_t *last, uint64_t *high) {
  if (now < *last) *high += (uint64_t)1 << 32;
  *last = now;
  return *high | now;
}

extern "C" {

void lt_board_init(void) {
  Serial.begin(LT_BAUD);
  while (!Serial) {
    /* USB CDC boards: wait for the host to open the port, so the boot HELLO is not lost */
  }
#if defined(LT_CYCLES_DWT)
  lt_dwt_start();
#endif
}

const char *lt_board_name(void) { return LT_STR(LT_BOARD); }

void lt_board_write(const uint8_t *data, size_t length) { Serial.write(data, length); }

int lt_board_read_byte(void) { return Serial.available() > 0 ? Serial.read() : -1; }

uint64_t lt_board_cycles(void) {
#if defined(LT_CYCLES_DWT)
  return lt_dwt_cycles();
#elif defined(LT_CYCLES_XTENSA)
  static uint32_t last;
  static uint64_t high;
  return widen(ESP.getCycleCount(), &last, &high);
#else
  return 0;
#endif
}

uint32_t lt_board_cycle_hz(void) {
#if defined(LT_CYCLES_DWT)
  return SystemCoreClock;
#elif defined(LT_CYCLES_XTENSA)
  return getCpuFrequencyMhz() * 1000000u;
#else
  return 0;
#endif
}

uint8_t lt_board_counter(void) {
#if defined(LT_CYCLES_DWT) || defined(LT_CYCLES_XTENSA)
  return LT_COUNTER_CYCLES;
#else
  return LT_COUNTER_NONE;
#endif
}

/* F_CPU: the clock the platform's board definition builds for (PlatformIO's board_build.f_cpu). */
uint32_t lt_board_clock_hz(void) { return (uint32_t)F_CPU; }

void lt_board_cycles_align(void) {}

uint64_t lt_board_micros(void) {
  static uint32_t last;
  static uint64_t high;
  return widen(micros(), &last, &high);
}

void lt_board_exit(int code) {
  (void)code;
  for (;;) {
  }
}

void lt_stack_paint(void) {}
uint32_t lt_stack_used_bytes(void) { return 0; }
uint32_t lt_stack_size_bytes(void) { return 0; }

}  // extern "C"
