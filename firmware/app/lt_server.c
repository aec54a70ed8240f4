/* See lt_server.h. Layouts and error rules follow docs/protocol.md section 3 field by field. */
#include "lt_server.h"

#include <string.h>

#include "lt_arena.h"
#include "lt_board.h"

#define PROGRESS_INTERVAL_US 250000u
#define MAX_DATA_CHUNK 989u
#define MAX_RESULT_OUTPUTS 117u
#define RESULT_FIXED_BYTES 59u

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
static uint32_t last_stack_bytes;

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
  if (text_len > LT_FRAME_MAX_PAYLOAD - 3u) text_len = LT_FRAME_MAX_PAYLOAD - 3u;
  put_u16(reply_payload, code);
  reply_payload[2] = request.type;
  memcpy(reply_payload + 3, text, text_len);
  reply(LT_MSG_ERROR, reply_payload, 3u + text_len);
}

void lt_server_log(uint8_t level, const char *text) {
  uint8_t payload[LT_FRAME_MAX_PAYLOAD];
  size_t text_len = strlen(text);
  if (text_len > LT_FRAME_MAX_PAYLOAD - 1u) text_len = LT_FRAME_MAX_PAYLOAD - 1u;
  payload[0] = level;
  memcpy(payload + 1, text, text_len);
  send_uncached(LT_MSG_LOG, 0, payload, 1u + text_len);
}

static size_t hello_payload(uint8_t *p) {
  const char *board = lt_board_name();
  size_t board_len = strlen(board), runtime_len = strlen(model->runtime);
  if (board_len > 255) board_len = 255;
  if (runtime_len > 255) runtime_len = 255;
  put_u16(p, LT_PROTOCOL_VERSION);
  p[2] = model->ready ? 1u : 0u;
  p[3] = model->input_count;
  p[4] = model->output_count;
  put_u32(p + 5, lt_board_cycle_hz());
  put_u32(p + 9, model->arena_capacity_bytes);
  put_u32(p + 13, model->model_size_bytes);
  memcpy(p + 17, model->model_sha256, 32);
  size_t at = 49;
  p[at++] = (uint8_t)board_len;
  memcpy(p + at, board, board_len);
  at += board_len;
  p[at++] = (uint8_t)runtime_len;
  memcpy(p + at, model->runtime, runtime_len);
  return at + runtime_len;
}

static void handle_set_input(void) {
  if (request.payload_len < 9) { reply_error(LT_ERR_BAD_MESSAGE, "SET_INPUT payload too short"); return; }
  uint8_t index = request.payload[0];
  uint32_t total = get_u32(request.payload + 1), offset = get_u32(request.payload + 5);
  uint32_t length = request.payload_len - 9u;
  if (!model->ready) { reply_error(LT_ERR_MODEL_NOT_READY, "model not ready"); return; }
  if (index >= model->input_count) { reply_error(LT_ERR_BAD_INDEX, "no such input"); return; }
  if (total != lt_model_input_bytes(index)) { reply_error(LT_ERR_BAD_RANGE, "wrong input size"); return; }
  if (offset > total || length > total - offset) {
    reply_error(LT_ERR_BAD_RANGE, "chunk runs past the input");
    return;
  }
  memcpy(lt_model_input_staging(index) + offset, request.payload + 9, length);
  reply_payload[0] = index;
  put_u32(reply_payload + 1, offset);
  put_u16(reply_payload + 5, (uint16_t)length);
  reply(LT_MSG_INPUT_ACK, reply_payload, 7);
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
  uint8_t payload[8];
  put_u32(payload, done);
  put_u32(payload + 4, total);
  send_uncached(LT_MSG_PROGRESS, request.seq, payload, sizeof payload);
}

static void format_u32(char *out, uint32_t v) {
  char digits[10];
  int n = 0;
  do {
    digits[n++] = (char)('0' + v % 10u);
    v /= 10u;
  } while (v);
  while (n) *out++ = digits[--n];
  *out = '\0';
}

static void log_stack(void) {
  char text[80] = "stack high-water ";
  format_u32(text + strlen(text), last_stack_bytes);
  strcat(text, " of ");
  format_u32(text + strlen(text), lt_stack_size_bytes());
  strcat(text, " bytes");
  lt_server_log(LT_LOG_INFO, text);
}

static void handle_run(void) {
  if (request.payload_len != 9) { reply_error(LT_ERR_BAD_MESSAGE, "RUN payload must be 9 bytes"); return; }
  uint32_t warmup = get_u32(request.payload), iterations = get_u32(request.payload + 4);
  int profile = (request.payload[8] & 1u) && lt_board_cycle_hz() != 0 && model->operator_count <= LT_MAX_PROFILED_OPS;
  if (!model->ready) {
    reply_error(LT_ERR_MODEL_NOT_READY, model->status ? model->status : "model not ready");
    return;
  }
  if (iterations == 0) { reply_error(LT_ERR_BAD_ARGUMENT, "RUN needs at least 1 measured invocation"); return; }
  if (iterations > LT_MAX_SAMPLES) {
    reply_error(LT_ERR_BAD_ARGUMENT, "RUN takes at most 256 measured invocations");
    return;
  }
  if (warmup > UINT32_MAX - iterations) { reply_error(LT_ERR_BAD_ARGUMENT, "too many invocations"); return; }
  uint32_t total = warmup + iterations;

  have_result = 0;
  op_cycles_count = profile ? model->operator_count : 0;
  memset(op_cycles, 0, sizeof op_cycles);
  send_progress(0, total);
  uint64_t last_progress_us = lt_board_micros();
  uint32_t high_water = 0;
  last_stack_bytes = 0;
  for (uint32_t k = 0; k < total; k++) {
    int measured = k >= warmup;
    lt_model_prepare((k & 1u) ? LT_ARENA_PATTERN_B : LT_ARENA_PATTERN_A);
    lt_stack_paint();
    lt_board_cycles_align();
    uint64_t us0 = lt_board_micros(), c0 = lt_board_cycles();
    int status = lt_model_invoke(profile && measured ? profile_hook : NULL, NULL);
    uint64_t c1 = lt_board_cycles(), us1 = lt_board_micros();
    uint32_t stack = lt_stack_used_bytes();
    if (stack > last_stack_bytes) last_stack_bytes = stack;
    if (status != 0) { reply_error(LT_ERR_INVOKE_FAILED, "model invoke failed"); return; }
    uint32_t arena_hw = lt_model_arena_high_water();
    if (arena_hw > high_water) high_water = arena_hw; /* LT_UNKNOWN_U32, the largest u32, stays unknown */
    if (measured) {
      /* Where there is a cycle counter its count is the finer clock: microseconds follow from it. */
      uint32_t hz = lt_board_cycle_hz();
      sample_cycles[k - warmup] = c1 - c0;
      sample_us[k - warmup] = hz ? (uint32_t)((c1 - c0) * 1000000u / hz) : (uint32_t)(us1 - us0);
    }
    if (k + 1 < total && us1 - last_progress_us >= PROGRESS_INTERVAL_US) {
      send_progress(k + 1, total);
      last_progress_us = us1;
    }
  }
  for (uint32_t i = 0; i < op_cycles_count; i++) op_cycles[i] /= iterations;
  if (lt_stack_size_bytes()) log_stack();

  int cycles = lt_board_cycle_hz() != 0;
  sort_u64(sample_cycles, iterations);
  sort_u32(sample_us, iterations);
  uint32_t mid = (iterations - 1u) / 2u;
  uint8_t outputs = model->output_count > MAX_RESULT_OUTPUTS ? MAX_RESULT_OUTPUTS : model->output_count;
  uint8_t *p = reply_payload;
  put_u32(p + 0, warmup);
  put_u32(p + 4, iterations);
  put_u32(p + 8, model->planned_bytes);
  put_u32(p + 12, model->used_bytes);
  put_u32(p + 16, high_water);
  put_u64(p + 20, cycles ? sample_cycles[0] : UINT64_MAX);
  put_u64(p + 28, cycles ? sample_cycles[mid] : UINT64_MAX);
  put_u64(p + 36, cycles ? sample_cycles[iterations - 1u] : UINT64_MAX);
  put_u32(p + 44, sample_us[0]);
  put_u32(p + 48, sample_us[mid]);
  put_u32(p + 52, sample_us[iterations - 1u]);
  put_u16(p + 56, op_cycles_count);
  p[58] = outputs;
  for (uint8_t i = 0; i < outputs; i++) {
    uint32_t nbytes = lt_model_output_bytes(i);
    put_u32(p + RESULT_FIXED_BYTES + 8u * i, nbytes);
    put_u32(p + RESULT_FIXED_BYTES + 8u * i + 4u, lt_crc32(0, lt_model_output(i), nbytes));
  }
  have_result = 1;
  reply(LT_MSG_RESULT, p, RESULT_FIXED_BYTES + 8u * outputs);
}

static void handle_read(void) {
  if (request.payload_len != 9) { reply_error(LT_ERR_BAD_MESSAGE, "READ payload must be 9 bytes"); return; }
  uint8_t region = request.payload[0];
  uint16_t index = get_u16(request.payload + 1);
  uint32_t offset = get_u32(request.payload + 3);
  uint32_t wanted = get_u16(request.payload + 7);
  if (!have_result) { reply_error(LT_ERR_NO_RESULT, "no RUN has completed"); return; }
  const uint8_t *bytes;
  uint32_t total;
  if (region == LT_REGION_OUTPUT) {
    if (index >= model->output_count) { reply_error(LT_ERR_BAD_INDEX, "no such output"); return; }
    bytes = lt_model_output(index);
    total = lt_model_output_bytes(index);
  } else if (region == LT_REGION_OP_CYCLES && op_cycles_count) {
    if (index != 0) { reply_error(LT_ERR_BAD_INDEX, "region 2 has only index 0"); return; }
    bytes = (const uint8_t *)op_cycles; /* Cortex-M and Xtensa are little-endian: the u64s are already LE */
    total = 8u * op_cycles_count;
  } else {
    reply_error(LT_ERR_BAD_RANGE, "this board holds no such region");
    return;
  }
  if (offset > total) { reply_error(LT_ERR_BAD_RANGE, "offset past the end of the region"); return; }
  uint32_t length = total - offset;
  if (length > wanted) length = wanted;
  if (length > MAX_DATA_CHUNK) length = MAX_DATA_CHUNK;
  reply_payload[0] = region;
  put_u16(reply_payload + 1, index);
  put_u32(reply_payload + 3, offset);
  put_u32(reply_payload + 7, total);
  memcpy(reply_payload + 11, bytes + offset, length);
  reply(LT_MSG_DATA, reply_payload, 11u + length);
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
    uint8_t payload[3] = {LT_ERR_BAD_FRAME, 0, 0};
    send_uncached(LT_MSG_ERROR, 0, payload, sizeof payload);
  }
}

uint32_t lt_server_last_stack_bytes(void) { return last_stack_bytes; }
