/* See lt_server.h. Layouts come from lt_protocol.h (generated from the host's protocol definition); error rules
 * follow docs/protocol.md section 3. */
#include "lt_server.h"

#include <string.h>

#include "lt_arena.h"
#include "lt_board.h"
#include "lt_timing.h"

#define PROGRESS_INTERVAL_US 250000u

static const lt_model_info *model;
static lt_send_fn send_bytes;
static lt_frame_decoder decoder;
static lt_frame request;

/* The reply cache: the last request acted on and the encoded reply sent for it. */
static struct {
  int valid;
  uint8_t type, seq;
  uint16_t payload_len;
  uint8_t payload[LT_FRAME_MAX_PAYLOAD];
  size_t reply_len;
  uint8_t reply[LT_FRAME_MAX_ENCODED];
} cache;

static uint8_t scratch_frame[LT_FRAME_MAX_ENCODED]; /* PROGRESS, LOG, BAD_FRAME: never cached */
static uint8_t reply_payload[LT_FRAME_MAX_PAYLOAD];

/* What the last RUN left for READ. */
static int have_result;
static uint16_t op_cycles_count;
static uint64_t op_cycles[LT_MAX_PROFILED_OPS];
static uint64_t sample_cycles[LT_MAX_SAMPLES];
static uint32_t sample_us[LT_MAX_SAMPLES];

/* Per-operator profiling state, filled by the op hook. */
static uint64_t op_started_at;

static void put_u16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static uint32_t get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static void send_uncached(uint8_t type, uint8_t seq, const uint8_t *payload, size_t length) {
  size_t n = lt_frame_encode(type, seq, payload, length, scratch_frame, sizeof scratch_frame);
  if (n) send_bytes(scratch_frame, n);
}

/* The reply to `request`: remembered with it, so a re-sent copy of the request gets the same bytes again. */
static void reply(uint8_t type, const uint8_t *payload, size_t length) {
  cache.reply_len = lt_frame_encode(type, request.seq, payload, length, cache.reply, sizeof cache.reply);
  cache.valid = cache.reply_len != 0;
  cache.type = request.type;
  cache.seq = request.seq;
  cache.payload_len = request.payload_len;
  memcpy(cache.payload, request.payload, request.payload_len);
  if (cache.valid) send_bytes(cache.reply, cache.reply_len);
}

static void reply_error(uint16_t code, const char *text) {
  size_t text_len = strlen(text);
  if (text_len > LT_ERROR_MAX_TEXT_BYTES) text_len = LT_ERROR_MAX_TEXT_BYTES;
  put_u16(reply_payload + LT_ERROR_CODE_AT, code);
  reply_payload[LT_ERROR_REQUEST_TYPE_AT] = request.type;
  memcpy(reply_payload + LT_ERROR_FIXED_BYTES, text, text_len);
  reply(LT_MSG_ERROR, reply_payload, LT_ERROR_FIXED_BYTES + text_len);
}

void lt_server_log(uint8_t level, const char *text) {
  uint8_t payload[LT_FRAME_MAX_PAYLOAD];
  size_t text_len = strlen(text);
  if (text_len > LT_LOG_MAX_TEXT_BYTES) text_len = LT_LOG_MAX_TEXT_BYTES;
  payload[LT_LOG_LEVEL_AT] = level;
  memcpy(payload + LT_LOG_FIXED_BYTES, text, text_len);
  send_uncached(LT_MSG_LOG, 0, payload, LT_LOG_FIXED_BYTES + text_len);
}

static size_t hello_payload(uint8_t *p) {
  const char *board = lt_board_name();
  size_t board_len = strlen(board), runtime_len = strlen(model->runtime);
  if (board_len > LT_STRING_MAX_BYTES) board_len = LT_STRING_MAX_BYTES;
  if (runtime_len > LT_STRING_MAX_BYTES) runtime_len = LT_STRING_MAX_BYTES;
  put_u16(p + LT_HELLO_PROTOCOL_VERSION_AT, LT_PROTOCOL_VERSION);
  p[LT_HELLO_FLAGS_AT] = model->ready ? LT_HELLO_FLAG_MODEL_READY : 0u;
  p[LT_HELLO_INPUT_COUNT_AT] = model->input_count;
  p[LT_HELLO_OUTPUT_COUNT_AT] = model->output_count;
  put_u32(p + LT_HELLO_CLOCK_HZ_AT, lt_board_clock_hz());
  p[LT_HELLO_COUNTER_AT] = lt_board_counter();
  put_u32(p + LT_HELLO_MAX_ITERATIONS_AT, LT_MAX_SAMPLES);
  put_u16(p + LT_HELLO_MAX_PAYLOAD_AT, LT_FRAME_MAX_PAYLOAD);
  put_u32(p + LT_HELLO_ARENA_CAPACITY_BYTES_AT, model->arena_capacity_bytes);
  put_u32(p + LT_HELLO_MODEL_SIZE_BYTES_AT, model->model_size_bytes);
  memcpy(p + LT_HELLO_MODEL_SHA256_AT, model->model_sha256, LT_HELLO_MODEL_SHA256_BYTES);
  size_t at = LT_HELLO_FIXED_BYTES;
  p[at++] = (uint8_t)board_len;
  memcpy(p + at, board, board_len);
  at += board_len;
  p[at++] = (uint8_t)runtime_len;
  memcpy(p + at, model->runtime, runtime_len);
  return at + runtime_len;
}

static void handle_set_input(void) {
  if (request.payload_len < LT_SET_INPUT_FIXED_BYTES) {
    reply_error(LT_ERR_BAD_MESSAGE, "SET_INPUT payload too short");
    return;
  }
  uint8_t index = request.payload[LT_SET_INPUT_INDEX_AT];
  uint32_t total = get_u32(request.payload + LT_SET_INPUT_TOTAL_BYTES_AT);
  uint32_t offset = get_u32(request.payload + LT_SET_INPUT_OFFSET_AT);
  uint32_t length = request.payload_len - LT_SET_INPUT_FIXED_BYTES;
  if (!model->ready) { reply_error(LT_ERR_MODEL_NOT_READY, "model not ready"); return; }
  if (index >= model->input_count) { reply_error(LT_ERR_BAD_INDEX, "no such input"); return; }
  if (total != lt_model_input_bytes(index)) { reply_error(LT_ERR_BAD_RANGE, "wrong input size"); return; }
  if (offset > total || length > total - offset) {
    reply_error(LT_ERR_BAD_RANGE, "chunk runs past the input");
    return;
  }
  memcpy(lt_model_input_staging(index) + offset, request.payload + LT_SET_INPUT_FIXED_BYTES, length);
  reply_payload[LT_INPUT_ACK_INDEX_AT] = index;
  put_u32(reply_payload + LT_INPUT_ACK_OFFSET_AT, offset);
  put_u16(reply_payload + LT_INPUT_ACK_LENGTH_AT, (uint16_t)length);
  reply(LT_MSG_INPUT_ACK, reply_payload, LT_INPUT_ACK_FIXED_BYTES);
}

static void profile_hook(int op_index, int after, void *user) {
  (void)user;
  uint64_t now = lt_board_cycles();
  if (!after) {
    op_started_at = now;
  } else if (op_index >= 0 && (unsigned)op_index < op_cycles_count) {
    op_cycles[op_index] += now - op_started_at;
  }
}

static void sort_u64(uint64_t *v, uint32_t n) {
  for (uint32_t i = 1; i < n; i++) {
    uint64_t x = v[i];
    uint32_t j = i;
    for (; j > 0 && v[j - 1] > x; j--) v[j] = v[j - 1];
    v[j] = x;
  }
}

static void sort_u32(uint32_t *v, uint32_t n) {
  for (uint32_t i = 1; i < n; i++) {
    uint32_t x = v[i];
    uint32_t j = i;
    for (; j > 0 && v[j - 1] > x; j--) v[j] = v[j - 1];
    v[j] = x;
  }
}

static void send_progress(uint32_t done, uint32_t total) {
  uint8_t payload[LT_PROGRESS_FIXED_BYTES];
  put_u32(payload + LT_PROGRESS_DONE_AT, done);
  put_u32(payload + LT_PROGRESS_TOTAL_AT, total);
  send_uncached(LT_MSG_PROGRESS, request.seq, payload, sizeof payload);
}

static void handle_run(void) {
  if (request.payload_len != LT_RUN_FIXED_BYTES) {
    reply_error(LT_ERR_BAD_MESSAGE, "RUN payload has the wrong size");
    return;
  }
  uint32_t warmup = get_u32(request.payload + LT_RUN_WARMUP_AT);
  uint32_t iterations = get_u32(request.payload + LT_RUN_ITERATIONS_AT);
  uint8_t counter = lt_board_counter();
  int profile = (request.payload[LT_RUN_FLAGS_AT] & LT_RUN_FLAG_PROFILE_OPS) && counter != LT_COUNTER_NONE &&
                model->operator_count <= LT_MAX_PROFILED_OPS;
  if (!model->ready) {
    reply_error(LT_ERR_MODEL_NOT_READY, model->status ? model->status : "model not ready");
    return;
  }
  if (iterations == 0) { reply_error(LT_ERR_BAD_ARGUMENT, "RUN needs at least 1 measured invocation"); return; }
  if (iterations > LT_MAX_SAMPLES) {
    reply_error(LT_ERR_BAD_ARGUMENT, "RUN takes at most HELLO's max_iterations measured invocations");
    return;
  }
  if (warmup > UINT32_MAX - iterations) { reply_error(LT_ERR_BAD_ARGUMENT, "too many invocations"); return; }
  uint32_t total = warmup + iterations;

  have_result = 0;
  op_cycles_count = profile ? model->operator_count : 0;
  memset(op_cycles, 0, sizeof op_cycles);
  send_progress(0, total);
  uint64_t last_progress_us = lt_board_micros();
  uint32_t high_water = 0, stack_high_water = 0;
  for (uint32_t k = 0; k < total; k++) {
    int measured = k >= warmup;
    lt_model_prepare((k & 1u) ? LT_ARENA_PATTERN_B : LT_ARENA_PATTERN_A);
    lt_stack_paint();
    lt_board_cycles_align();
    uint64_t us0 = lt_board_micros(), c0 = lt_board_cycles();
    lt_timing_begin(); /* an emulated board's cycle model times the invocation between these marks */
    int status = lt_model_invoke(profile && measured ? profile_hook : NULL, NULL);
    lt_timing_end();
    uint64_t c1 = lt_board_cycles(), us1 = lt_board_micros();
    uint32_t stack = lt_stack_used_bytes();
    if (stack > stack_high_water) stack_high_water = stack;
    if (status != 0) { reply_error(LT_ERR_INVOKE_FAILED, "model invoke failed"); return; }
    uint32_t arena_hw = lt_model_arena_high_water();
    if (arena_hw > high_water) high_water = arena_hw; /* LT_UNKNOWN_U32, the largest u32, stays unknown */
    if (measured) {
      /* Real cycles are the finer clock: microseconds follow from them at the CPU clock. */
      sample_cycles[k - warmup] = c1 - c0;
      sample_us[k - warmup] = counter == LT_COUNTER_CYCLES ? (uint32_t)((c1 - c0) * 1000000u / lt_board_cycle_hz())
                                                           : (uint32_t)(us1 - us0);
    }
    if (k + 1 < total && us1 - last_progress_us >= PROGRESS_INTERVAL_US) {
      send_progress(k + 1, total);
      last_progress_us = us1;
    }
  }
  for (uint32_t i = 0; i < op_cycles_count; i++) op_cycles[i] /= iterations;

  int has_counter = counter != LT_COUNTER_NONE;
  int real_time = counter != LT_COUNTER_INSTRUCTIONS; /* an emulator's time is not real time */
  int has_stack = lt_stack_size_bytes() != 0;
  sort_u64(sample_cycles, iterations);
  sort_u32(sample_us, iterations);
  uint32_t mid = (iterations - 1u) / 2u;
  uint8_t outputs = model->output_count > LT_RESULT_MAX_OUTPUTS ? LT_RESULT_MAX_OUTPUTS : model->output_count;
  uint8_t *p = reply_payload;
  put_u32(p + LT_RESULT_WARMUP_AT, warmup);
  put_u32(p + LT_RESULT_ITERATIONS_AT, iterations);
  put_u32(p + LT_RESULT_ARENA_PLANNED_BYTES_AT, model->planned_bytes);
  put_u32(p + LT_RESULT_ARENA_USED_BYTES_AT, model->used_bytes);
  put_u32(p + LT_RESULT_ARENA_HIGH_WATER_BYTES_AT, high_water);
  put_u32(p + LT_RESULT_STACK_HIGH_WATER_BYTES_AT, has_stack ? stack_high_water : LT_UNKNOWN_U32);
  put_u32(p + LT_RESULT_STACK_SIZE_BYTES_AT, has_stack ? lt_stack_size_bytes() : LT_UNKNOWN_U32);
  put_u64(p + LT_RESULT_COUNTER_MIN_AT, has_counter ? sample_cycles[0] : LT_UNKNOWN_U64);
  put_u64(p + LT_RESULT_COUNTER_MEDIAN_AT, has_counter ? sample_cycles[mid] : LT_UNKNOWN_U64);
  put_u64(p + LT_RESULT_COUNTER_MAX_AT, has_counter ? sample_cycles[iterations - 1u] : LT_UNKNOWN_U64);
  put_u32(p + LT_RESULT_US_MIN_AT, real_time ? sample_us[0] : LT_UNKNOWN_U32);
  put_u32(p + LT_RESULT_US_MEDIAN_AT, real_time ? sample_us[mid] : LT_UNKNOWN_U32);
  put_u32(p + LT_RESULT_US_MAX_AT, real_time ? sample_us[iterations - 1u] : LT_UNKNOWN_U32);
  put_u16(p + LT_RESULT_OP_CYCLES_COUNT_AT, op_cycles_count);
  p[LT_RESULT_OUTPUT_COUNT_AT] = outputs;
  for (uint8_t i = 0; i < outputs; i++) {
    uint8_t *entry = p + LT_RESULT_FIXED_BYTES + LT_RESULT_OUTPUT_FIXED_BYTES * i;
    uint32_t nbytes = lt_model_output_bytes(i);
    put_u32(entry + LT_RESULT_OUTPUT_NBYTES_AT, nbytes);
    put_u32(entry + LT_RESULT_OUTPUT_CRC32_AT, lt_crc32(0, lt_model_output(i), nbytes));
  }
  have_result = 1;
  reply(LT_MSG_RESULT, p, LT_RESULT_FIXED_BYTES + LT_RESULT_OUTPUT_FIXED_BYTES * outputs);
}

static void handle_read(void) {
  if (request.payload_len != LT_READ_FIXED_BYTES) {
    reply_error(LT_ERR_BAD_MESSAGE, "READ payload has the wrong size");
    return;
  }
  uint8_t region = request.payload[LT_READ_REGION_AT];
  uint16_t index = get_u16(request.payload + LT_READ_INDEX_AT);
  uint32_t offset = get_u32(request.payload + LT_READ_OFFSET_AT);
  uint32_t wanted = get_u16(request.payload + LT_READ_MAX_LENGTH_AT);
  if (!have_result) { reply_error(LT_ERR_NO_RESULT, "no RUN has completed"); return; }
  const uint8_t *bytes;
  uint32_t total;
  if (region == LT_REGION_OUTPUT) {
    if (index >= model->output_count) { reply_error(LT_ERR_BAD_INDEX, "no such output"); return; }
    bytes = lt_model_output(index);
    total = lt_model_output_bytes(index);
  } else if (region == LT_REGION_OP_CYCLES && op_cycles_count) {
    if (index != 0) { reply_error(LT_ERR_BAD_INDEX, "region OP_CYCLES has only index 0"); return; }
    bytes = (const uint8_t *)op_cycles; /* Cortex-M and Xtensa are little-endian: the u64s are already LE */
    total = (uint32_t)sizeof op_cycles[0] * op_cycles_count;
  } else {
    reply_error(LT_ERR_BAD_RANGE, "this board holds no such region");
    return;
  }
  if (offset > total) { reply_error(LT_ERR_BAD_RANGE, "offset past the end of the region"); return; }
  uint32_t length = total - offset;
  if (length > wanted) length = wanted;
  if (length > LT_DATA_MAX_CHUNK) length = LT_DATA_MAX_CHUNK;
  reply_payload[LT_DATA_REGION_AT] = region;
  put_u16(reply_payload + LT_DATA_INDEX_AT, index);
  put_u32(reply_payload + LT_DATA_OFFSET_AT, offset);
  put_u32(reply_payload + LT_DATA_TOTAL_BYTES_AT, total);
  memcpy(reply_payload + LT_DATA_FIXED_BYTES, bytes + offset, length);
  reply(LT_MSG_DATA, reply_payload, LT_DATA_FIXED_BYTES + length);
}

static int is_cached(void) {
  return cache.valid && cache.type == request.type && cache.seq == request.seq &&
         cache.payload_len == request.payload_len && memcmp(cache.payload, request.payload, request.payload_len) == 0;
}

static void handle_request(void) {
  if (is_cached()) {
    send_bytes(cache.reply, cache.reply_len);
    return;
  }
  switch (request.type) {
    case LT_MSG_HELLO_REQUEST:
      if (request.payload_len != 0) { reply_error(LT_ERR_BAD_MESSAGE, "HELLO_REQUEST has no payload"); return; }
      reply(LT_MSG_HELLO, reply_payload, hello_payload(reply_payload));
      return;
    case LT_MSG_SET_INPUT:
      handle_set_input();
      return;
    case LT_MSG_RUN:
      handle_run();
      return;
    case LT_MSG_READ:
      handle_read();
      return;
    default:
      reply_error(LT_ERR_BAD_MESSAGE, "unknown or board-to-host message type");
      return;
  }
}

void lt_server_init(const lt_model_info *model_info, lt_send_fn send) {
  model = model_info;
  send_bytes = send;
  lt_frame_decoder_init(&decoder);
  cache.valid = 0;
  have_result = 0;
  op_cycles_count = 0;
  send_uncached(LT_MSG_HELLO, 0, reply_payload, hello_payload(reply_payload));
  if (!model->ready) lt_server_log(LT_LOG_WARNING, model->status ? model->status : "model not ready");
}

void lt_server_push_byte(uint8_t byte) {
  lt_frame_status status = lt_frame_decoder_push(&decoder, byte, &request);
  if (status == LT_FRAME_OK) {
    handle_request();
  } else if (status == LT_FRAME_BAD) {
    uint8_t payload[LT_ERROR_FIXED_BYTES];
    put_u16(payload + LT_ERROR_CODE_AT, LT_ERR_BAD_FRAME);
    payload[LT_ERROR_REQUEST_TYPE_AT] = 0; /* no request: the frame was damaged */
    send_uncached(LT_MSG_ERROR, 0, payload, sizeof payload);
  }
}
