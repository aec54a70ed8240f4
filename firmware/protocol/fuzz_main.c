/* Drives fuzz_frame.c without libFuzzer: reads records (u32 LE length, then that many bytes) from stdin until end of
 * file and runs the fuzz target on each. The tests feed it hypothesis-generated inputs; a failed check aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(void) {
  static uint8_t record[1u << 20];
  uint8_t header[4];
  unsigned long count = 0;
  while (fread(header, 1, 4, stdin) == 4) {
    uint32_t length = (uint32_t)header[0] | ((uint32_t)header[1] << 8) | ((uint32_t)header[2] << 16) |
                      ((uint32_t)header[3] << 24);
    if (length > sizeof record || fread(record, 1, length, stdin) != length) {
      fprintf(stderr, "fuzz_main: truncated or oversized record %lu\n", count);
      return 2;
    }
    LLVMFuzzerTestOneInput(record, length);
    count++;
  }
  printf("%lu inputs ok\n", count);
  return 0;
}
