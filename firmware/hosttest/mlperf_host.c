/* lt_mlperf.c on the host (tests/test_mlperf.py): a stand-in board whose counter counts instructions at 25 MHz, and
 * a stand-in model whose int8 output is its input, each invocation taking FAKE_INSTRUCTIONS. stdin's bytes are the
 * runner's, stdout gets the board's. */
#include <stdio.h>
#include <stdlib.h>

#include "lt_board.h"
#include "lt_mlperf.h"
#include "lt_model.h"
#include "lt_protocol.h"

#define FAKE_INSTRUCTIONS 250000u
#define FAKE_CLOCK_HZ 25000000u

static uint64_t instructions;
static uint8_t staging[FAKE_INPUT_BYTES], output[FAKE_INPUT_BYTES], input[FAKE_INPUT_BYTES];
static lt_model_info info = {.runtime = "fake", .ready = 1, .input_count = 1, .output_count = 1};

void lt_board_init(void) {}
const char *lt_board_name(void) { return "host"; }
void lt_board_write(const uint8_t *data, size_t length) { fwrite(data, 1, length, stdout); }
int lt_board_read_byte(void) { return -1; }
uint64_t lt_board_cycles(void) { return instructions; }
void lt_board_cycles_align(void) {}
uint32_t lt_board_cycle_hz(void) { return 1000000000u; }
uint8_t lt_board_counter(void) { return LT_COUNTER_INSTRUCTIONS; }
uint32_t lt_board_clock_hz(void) { return FAKE_CLOCK_HZ; }
uint64_t lt_board_micros(void) { return instructions / 1000u; }
void lt_board_exit(int code) { exit(code); }
void lt_stack_paint(void) {}
uint32_t lt_stack_used_bytes(void) { return 0; }
uint32_t lt_stack_size_bytes(void) { return 0; }

const lt_model_info *lt_model_setup(void) { return &info; }
uint32_t lt_model_input_bytes(int index) { return (void)index, FAKE_INPUT_BYTES; }
uint8_t *lt_model_input_staging(int index) { return (void)index, staging; }
uint32_t lt_model_output_bytes(int index) { return (void)index, FAKE_INPUT_BYTES; }
const uint8_t *lt_model_output(int index) { return (void)index, output; }
void lt_model_prepare(int pattern) {
  (void)pattern;
  for (int i = 0; i < FAKE_INPUT_BYTES; i++) input[i] = staging[i];
}
int lt_model_invoke(lt_model_op_hook hook, void *user) {
  (void)hook, (void)user;
  for (int i = 0; i < FAKE_INPUT_BYTES; i++) output[i] = input[i];
  instructions += FAKE_INSTRUCTIONS;
  return 0;
}
uint32_t lt_model_arena_high_water(void) { return LT_UNKNOWN_U32; }

int main(void) {
  lt_mlperf_init(lt_model_setup(), lt_board_write);
  for (int c; (c = getchar()) != EOF;) lt_mlperf_push_byte((uint8_t)c);
  return 0;
}
