/* The board side of the protocol, driven frame by frame with the board's own codec. The requests and the expected
 * replies are those of docs/protocol.md. Built without a model (the default `pio test`), RUN must answer
 * MODEL_NOT_READY; built with one (LOWTIDE_MODEL=... pio test), a real RUN and READ are checked as well. */
#include <stdint.h>
#include <string.h>

#include "frame.h"
#include "lt_board.h"
#include "lt_model.h"
#include "lt_server.h"
#include "lt_test.h"

static uint8_t sent[8192];
static size_t sent_length;
static const lt_model_info *model;
static lt_frame reply;

static void capture(const uint8_t *data, size_t length) {
  if (sent_length + length <= sizeof sent) {
    memcpy(sent + sent_length, data, length);
    sent_length += length;
  }
}

static void request(uint8_t type, uint8_t seq, const uint8_t *payload, size_t length) {
  static uint8_t encoded[LT_FRAME_MAX_ENCODED];
  size_t n = lt_frame_encode(type, seq, payload, length, encoded, sizeof encoded);
  sent_length = 0;
  lt_server_push_byte(0); /* the host's leading delimiter */
  for (size_t i = 0; i < n; i++) lt_server_push_byte(encoded[i]);
}

/* The last frame the server sent that is not PROGRESS or LOG. */
static int last_reply(void) {
  lt_frame_decoder decoder;
  lt_frame frame;
  int found = 0;
  lt_frame_decoder_init(&decoder);
  for (size_t i = 0; i < sent_length; i++) {
    if (lt_frame_decoder_push(&decoder, sent[i], &frame) == LT_FRAME_OK && frame.type != LT_MSG_PROGRESS &&
        frame.type != LT_MSG_LOG) {
      reply = frame;
      found = 1;
    }
  }
  return found;
}

static uint16_t u16_at(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t u32_at(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t u64_at(const uint8_t *p) { return (uint64_t)u32_at(p) | (uint64_t)u32_at(p + 4) << 32; }

static void test_boot_hello_has_sequence_zero(void) {
  sent_length = 0;
  lt_server_init(model, capture);
  LT_CHECK(last_reply());
  LT_CHECK(reply.type == LT_MSG_HELLO && reply.seq == 0);
  LT_CHECK(u16_at(reply.payload + LT_HELLO_PROTOCOL_VERSION_AT) == LT_PROTOCOL_VERSION);
  LT_CHECK(!(reply.payload[LT_HELLO_FLAGS_AT] & LT_HELLO_FLAG_MODEL_READY) == !model->ready);
  LT_CHECK(memcmp(reply.payload + LT_HELLO_MODEL_SHA256_AT, model->model_sha256, LT_HELLO_MODEL_SHA256_BYTES) == 0);
  size_t board_len = reply.payload[LT_HELLO_FIXED_BYTES];
  LT_CHECK(board_len == strlen(lt_board_name()) &&
           memcmp(reply.payload + LT_HELLO_FIXED_BYTES + 1, lt_board_name(), board_len) == 0);
}

static void test_hello_request_answered_with_its_seq(void) {
  request(LT_MSG_HELLO_REQUEST, 7, NULL, 0);
  LT_CHECK(last_reply() && reply.type == LT_MSG_HELLO && reply.seq == 7);
  LT_CHECK(u32_at(reply.payload + LT_HELLO_CLOCK_HZ_AT) == lt_board_clock_hz());
  LT_CHECK(reply.payload[LT_HELLO_COUNTER_AT] == lt_board_counter());
  LT_CHECK(u32_at(reply.payload + LT_HELLO_MAX_ITERATIONS_AT) == LT_MAX_SAMPLES);
  LT_CHECK(u16_at(reply.payload + LT_HELLO_MAX_PAYLOAD_AT) == LT_FRAME_MAX_PAYLOAD);
  LT_CHECK(u32_at(reply.payload + LT_HELLO_ARENA_CAPACITY_BYTES_AT) == model->arena_capacity_bytes);
}

static void test_repeated_request_gets_cached_bytes(void) {
  static uint8_t first[LT_FRAME_MAX_ENCODED];
  request(LT_MSG_HELLO_REQUEST, 8, NULL, 0);
  size_t first_length = sent_length;
  memcpy(first, sent, sent_length);
  request(LT_MSG_HELLO_REQUEST, 8, NULL, 0);
  LT_CHECK(sent_length == first_length && memcmp(first, sent, sent_length) == 0);
}

static void test_damaged_frame_is_nacked(void) {
  static const uint8_t garbage[] = {0x05, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x00};
  sent_length = 0;
  for (size_t i = 0; i < sizeof garbage; i++) lt_server_push_byte(garbage[i]);
  LT_CHECK(last_reply());
  LT_CHECK(reply.type == LT_MSG_ERROR && reply.seq == 0);
  LT_CHECK(u16_at(reply.payload + LT_ERROR_CODE_AT) == LT_ERR_BAD_FRAME);
}

static void test_unknown_type_is_bad_message(void) {
  request(LT_MSG_RESULT, 9, NULL, 0);
  LT_CHECK(last_reply() && reply.type == LT_MSG_ERROR && reply.seq == 9);
  LT_CHECK(u16_at(reply.payload + LT_ERROR_CODE_AT) == LT_ERR_BAD_MESSAGE &&
           reply.payload[LT_ERROR_REQUEST_TYPE_AT] == LT_MSG_RESULT);
}

static void test_read_before_run_is_no_result(void) {
  uint8_t read[LT_READ_FIXED_BYTES] = {0};
  read[LT_READ_REGION_AT] = LT_REGION_OUTPUT;
  read[LT_READ_MAX_LENGTH_AT] = 100;
  request(LT_MSG_READ, 10, read, sizeof read);
  LT_CHECK(last_reply() && reply.type == LT_MSG_ERROR && u16_at(reply.payload + LT_ERROR_CODE_AT) == LT_ERR_NO_RESULT);
}

static void test_run_over_the_iteration_limit_is_refused(void) {
  uint8_t run[LT_RUN_FIXED_BYTES] = {0};
  uint32_t iterations = LT_MAX_SAMPLES + 1u;
  memcpy(run + LT_RUN_ITERATIONS_AT, &iterations, 4);
  request(LT_MSG_RUN, 13, run, sizeof run);
  LT_CHECK(last_reply() && reply.type == LT_MSG_ERROR);
  LT_CHECK(u16_at(reply.payload + LT_ERROR_CODE_AT) == (model->ready ? LT_ERR_BAD_ARGUMENT : LT_ERR_MODEL_NOT_READY));
}

static void test_run_with_zero_iterations_or_no_model_is_refused(void) {
  uint8_t run[LT_RUN_FIXED_BYTES] = {0};
  request(LT_MSG_RUN, 11, run, sizeof run);
  LT_CHECK(last_reply() && reply.type == LT_MSG_ERROR);
  LT_CHECK(u16_at(reply.payload + LT_ERROR_CODE_AT) == (model->ready ? LT_ERR_BAD_ARGUMENT : LT_ERR_MODEL_NOT_READY));
}

static void test_set_input_range_checks(void) {
  uint8_t chunk[LT_SET_INPUT_FIXED_BYTES + 4] = {0};
  chunk[LT_SET_INPUT_INDEX_AT] = model->input_count; /* one past the last input */
  request(LT_MSG_SET_INPUT, 12, chunk, sizeof chunk);
  LT_CHECK(last_reply() && reply.type == LT_MSG_ERROR);
  LT_CHECK(u16_at(reply.payload + LT_ERROR_CODE_AT) == (model->ready ? LT_ERR_BAD_INDEX : LT_ERR_MODEL_NOT_READY));
}

/* With a model: two RUNs give the same instruction counts, the digest matches the bytes READ returns, and the
 * painted high-water mark lies within the plan. */
static uint64_t run_once(uint8_t seq) {
  uint8_t run[LT_RUN_FIXED_BYTES] = {0};
  uint32_t warmup = 1u, iterations = 2u;
  memcpy(run + LT_RUN_WARMUP_AT, &warmup, 4); /* Cortex-M is little-endian, as the protocol */
  memcpy(run + LT_RUN_ITERATIONS_AT, &iterations, 4);
  request(LT_MSG_RUN, seq, run, sizeof run);
  if (!last_reply() || reply.type != LT_MSG_RESULT) return 0;
  return u64_at(reply.payload + LT_RESULT_COUNTER_MEDIAN_AT);
}

static void test_run_and_read_with_a_model(void) {
  if (!model->ready) return; /* nothing to run in a model-less image: covered by the refusal test */
  for (uint8_t i = 0; i < model->input_count; i++) {
    uint32_t bytes = lt_model_input_bytes(i);
    static uint8_t chunk[LT_SET_INPUT_FIXED_BYTES + 64];
    for (uint32_t offset = 0; offset < bytes; offset += 64) {
      uint32_t n = bytes - offset < 64 ? bytes - offset : 64;
      chunk[LT_SET_INPUT_INDEX_AT] = i;
      memcpy(chunk + LT_SET_INPUT_TOTAL_BYTES_AT, &bytes, 4);
      memcpy(chunk + LT_SET_INPUT_OFFSET_AT, &offset, 4);
      for (uint32_t k = 0; k < n; k++) chunk[LT_SET_INPUT_FIXED_BYTES + k] = (uint8_t)(offset + k);
      request(LT_MSG_SET_INPUT, (uint8_t)(20 + (offset / 64) % 2), chunk, LT_SET_INPUT_FIXED_BYTES + n);
      LT_CHECK(last_reply() && reply.type == LT_MSG_INPUT_ACK);
    }
  }
  uint64_t first = run_once(30);
  LT_CHECK(first != 0);
  uint32_t high_water = u32_at(reply.payload + LT_RESULT_ARENA_HIGH_WATER_BYTES_AT);
  LT_CHECK(high_water <= u32_at(reply.payload + LT_RESULT_ARENA_PLANNED_BYTES_AT) && high_water > 0);
  uint32_t stack = u32_at(reply.payload + LT_RESULT_STACK_HIGH_WATER_BYTES_AT);
  LT_CHECK(stack > 0 && stack <= u32_at(reply.payload + LT_RESULT_STACK_SIZE_BYTES_AT));
  LT_CHECK(u32_at(reply.payload + LT_RESULT_US_MEDIAN_AT) == LT_UNKNOWN_U32); /* instructions are not real time */
  const uint8_t *output0 = reply.payload + LT_RESULT_FIXED_BYTES;
  uint32_t digest = u32_at(output0 + LT_RESULT_OUTPUT_CRC32_AT), out_bytes = u32_at(output0 + LT_RESULT_OUTPUT_NBYTES_AT);
  LT_CHECK(lt_crc32(0, lt_model_output(0), out_bytes) == digest);
  LT_CHECK(run_once(31) == first);
}

int main(void) {
  lt_board_init();
  model = lt_model_setup();
  LT_RUN(test_boot_hello_has_sequence_zero);
  LT_RUN(test_hello_request_answered_with_its_seq);
  LT_RUN(test_repeated_request_gets_cached_bytes);
  LT_RUN(test_damaged_frame_is_nacked);
  LT_RUN(test_unknown_type_is_bad_message);
  LT_RUN(test_read_before_run_is_no_result);
  LT_RUN(test_run_with_zero_iterations_or_no_model_is_refused);
  LT_RUN(test_run_over_the_iteration_limit_is_refused);
  LT_RUN(test_set_input_range_checks);
  LT_RUN(test_run_and_read_with_a_model);
  return lt_test_finish();
}
