/* See lt_mlperf.h. Built only into an MLPerf image (LT_PROTOCOL_MLPERF); the reply texts are the reference DUT's. */
#ifdef LT_PROTOCOL_MLPERF

#include "lt_mlperf.h"

#include <string.h>

#include "lt_board.h"
#include "lt_timing.h"
#include "lt_protocol.h"

#ifndef LT_MLPERF_MODEL_ID
#error "LT_MLPERF_MODEL_ID: the benchmark id m-model-[ID] reports (kws01, vww01, ic01, ad01, ...)"
#endif
#ifndef LT_MLPERF_DB_BYTES
#error "LT_MLPERF_DB_BYTES: the bytes of one input as the runner sends it"
#endif
#ifndef LT_MLPERF_INPUT
#define LT_MLPERF_INPUT LT_MLPERF_INPUT_BYTES
#endif
#ifndef LT_MLPERF_RESULT
#define LT_MLPERF_RESULT LT_MLPERF_RESULT_SCORES
#endif
#ifndef LT_MLPERF_OUTPUT_FLOAT32
#define LT_MLPERF_OUTPUT_FLOAT32 0
#endif
#ifndef LT_MLPERF_INPUT_SCALE
#define LT_MLPERF_INPUT_SCALE 1.0f
#define LT_MLPERF_INPUT_ZERO_POINT 0
#endif
#ifndef LT_MLPERF_OUTPUT_SCALE
#define LT_MLPERF_OUTPUT_SCALE 1.0f
#define LT_MLPERF_OUTPUT_ZERO_POINT 0
#endif

#define LT_STRINGIFY_(x) #x
#define LT_STRINGIFY(x) LT_STRINGIFY_(x)
#define LT_MLPERF_DB_BYTES_TEXT LT_STRINGIFY(LT_MLPERF_DB_BYTES)
#define PROFILE_NAME "ULPMark for tinyML Firmware V0.0.1" /* the reference's EE_FW_VERSION, which the runner reads */
#define INFER_DEFAULT_WARMUP 10u                           /* the reference's, for "infer N" without W */
#define RESULT_DECIMALS 1000000                            /* scores to 6 decimals */

static const lt_model_info *model;
static lt_mlperf_send_fn send_bytes;

static char command[LT_MLPERF_COMMAND_CHARS + 1];
static uint32_t command_length;
static int command_too_long;

static uint8_t db[LT_MLPERF_DB_BYTES];
static uint32_t db_expected; /* bytes the last "db load" announced; 0: none */
static uint32_t db_loaded;
static int have_result;

static void send_text(const char *text) { send_bytes((const uint8_t *)text, strlen(text)); }

static void send_u32(uint32_t v) {
  char digits[10];
  int n = 0;
  do {
    digits[n++] = (char)('0' + v % 10u);
    v /= 10u;
  } while (v);
  char out[10];
  for (int i = 0; i < n; i++) out[i] = digits[n - 1 - i];
  send_bytes((const uint8_t *)out, (size_t)n);
}

/* A score as the runner's float() reads it, to RESULT_DECIMALS; no printf, whose float support newlib-nano drops. */
static void send_decimal(float v) {
  if (v != v) { send_text("nan"); return; }
  if (v < 0) { send_text("-"); v = -v; }
  if (v > 4.0e9f) { send_text("inf"); return; }
  double scaled = (double)v * RESULT_DECIMALS + 0.5;
  uint64_t fixed = (uint64_t)scaled;
  send_u32((uint32_t)(fixed / RESULT_DECIMALS));
  char frac[7] = "";
  uint32_t rest = (uint32_t)(fixed % RESULT_DECIMALS);
  for (int i = 5; i >= 0; i--) {
    frac[i] = (char)('0' + rest % 10u);
    rest /= 10u;
  }
  send_text(".");
  send_bytes((const uint8_t *)frac, 6);
}

static void error_line(const char *what, const char *detail) {
  send_text("e-[");
  send_text(what);
  if (detail) send_text(detail);
  send_text("]\r\n");
}

/* The board's time in microseconds for m-lap-us-: real cycles at the counter's rate; on an emulator (retired
 * instructions) one instruction per cycle at the board's stated clock; else the board's microseconds. 32 bits, as
 * the runner expects: a window across a wrap gives a negative time, which the runner reports as 0 throughput. */
static uint32_t lap_us(void) {
  uint8_t counter = lt_board_counter();
  uint32_t hz = counter == LT_COUNTER_INSTRUCTIONS ? lt_board_clock_hz()
                : counter == LT_COUNTER_CYCLES     ? lt_board_cycle_hz()
                                                   : 0u;
  if (hz == 0u) return (uint32_t)lt_board_micros();
  return (uint32_t)(lt_board_cycles() * 1000000u / hz);
}

static void send_lap(void) {
  send_text("m-lap-us-");
  send_u32(lap_us());
  send_text("\r\n");
}

/* Strict decimal: digits only, at most UINT32_MAX; 0 if `text` is not one. */
static int parse_u32(const char *text, uint32_t *value) {
  uint64_t v = 0;
  if (!text || !*text) return 0;
  for (; *text; text++) {
    if (*text < '0' || *text > '9') return 0;
    v = v * 10u + (uint64_t)(*text - '0');
    if (v > UINT32_MAX) return 0;
  }
  *value = (uint32_t)v;
  return 1;
}

static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

#if LT_MLPERF_INPUT == LT_MLPERF_INPUT_FLOAT32_QUANTIZED || LT_MLPERF_RESULT == LT_MLPERF_RESULT_RECONSTRUCTION
static float db_float(uint32_t index) {
  float f;
  memcpy(&f, db + 4u * index, sizeof f); /* the runner sends little-endian fp32, as Cortex-M stores it */
  return f;
}
#endif

/* The reference's th_load_tensor: the db buffer into the model's input 0. */
static void load_input(void) {
  uint8_t *input = lt_model_input_staging(0);
  uint32_t bytes = lt_model_input_bytes(0);
#if LT_MLPERF_INPUT == LT_MLPERF_INPUT_UINT8_AS_INT8
  for (uint32_t i = 0; i < bytes; i++) input[i] = (uint8_t)(db[i] - 128u);
#elif LT_MLPERF_INPUT == LT_MLPERF_INPUT_FLOAT32_QUANTIZED
  for (uint32_t i = 0; i < bytes; i++) {
    float q = db_float(i) / LT_MLPERF_INPUT_SCALE;
    int32_t v = (int32_t)(q + (q >= 0 ? 0.5f : -0.5f)) + LT_MLPERF_INPUT_ZERO_POINT; /* round half away from 0 */
    input[i] = (uint8_t)(int8_t)(v < -128 ? -128 : v > 127 ? 127 : v);
  }
#else
  memcpy(input, db, bytes);
#endif
}

static float output_value(uint32_t index) {
#if LT_MLPERF_OUTPUT_FLOAT32
  float f;
  memcpy(&f, lt_model_output(0) + 4u * index, sizeof f);
  return f;
#else
  return (float)((int32_t)(int8_t)lt_model_output(0)[index] - LT_MLPERF_OUTPUT_ZERO_POINT) * LT_MLPERF_OUTPUT_SCALE;
#endif
}

static uint32_t output_count(void) { return lt_model_output_bytes(0) / (LT_MLPERF_OUTPUT_FLOAT32 ? 4u : 1u); }

/* The reference's th_results. */
static void send_results(void) {
  send_text("m-results-[");
#if LT_MLPERF_RESULT == LT_MLPERF_RESULT_RECONSTRUCTION
  float sum = 0.0f;
  uint32_t n = output_count();
  for (uint32_t i = 0; i < n; i++) {
    float diff = output_value(i) - db_float(i);
    sum += diff * diff;
  }
  send_decimal(n ? sum / (float)n : 0.0f);
#else
  for (uint32_t i = 0, n = output_count(); i < n; i++) {
    if (i) send_text(",");
    send_decimal(output_value(i));
  }
#endif
  send_text("]\r\n");
}

/* One inference from the loaded input. The input is copied in each time, inside the timed window: the compiled
 * runtime writes over its input tensor in place, so a second invocation would otherwise see something else. The
 * counter is read after it: DWT's CYCCNT is 32 bits wide (2^32 cycles: 20 s at 216 MHz, 51 s at 84 MHz) and
 * lt_board_cycles() sees each wrap only if read once per period, but a window of N inferences can last longer. */
static int infer_once(void) {
  lt_timing_begin(); /* an emulated board's cycle model times each inference, input copy included */
  lt_model_prepare(LT_MODEL_NO_PAINT);
  int status = lt_model_invoke(NULL, NULL);
  lt_timing_end();
  (void)lt_board_cycles();
  return status;
}

static void handle_infer(const char *count_text, const char *warmup_text, const char *extra) {
  uint32_t count = 1u, warmup = INFER_DEFAULT_WARMUP;
  if (extra || (count_text && (!parse_u32(count_text, &count) || count == 0u))) {
    error_line("Inference iterations must be >0", NULL);
    return;
  }
  if (warmup_text && !parse_u32(warmup_text, &warmup)) {
    error_line("Inference warmup must be >=0", NULL);
    return;
  }
  if (!model->ready) { error_line("Model not ready: ", model->status ? model->status : "no model"); return; }
  if (db_expected != LT_MLPERF_DB_BYTES || db_loaded != db_expected) {
    error_line("Load the input first: db load " LT_MLPERF_DB_BYTES_TEXT ", then its bytes", NULL);
    return;
  }
  load_input();
  send_text("m-warmup-start-");
  send_u32(warmup);
  send_text("\r\n");
  for (uint32_t i = 0; i < warmup; i++) {
    if (infer_once() != 0) { error_line("Model invoke failed", NULL); return; }
  }
  send_text("m-warmup-done\r\nm-infer-start-");
  send_u32(count);
  send_text("\r\n");
  have_result = 0;
  send_lap();
  for (uint32_t i = 0; i < count; i++) {
    if (infer_once() != 0) { send_lap(); error_line("Model invoke failed", NULL); return; }
  }
  send_lap();
  have_result = 1;
  send_text("m-infer-done\r\n");
  send_results();
}

static void handle_db(const char *sub, const char *arg, const char *extra) {
  if (!sub) { error_line("Command 'db' requires a subcommand", NULL); return; }
  if (strcmp(sub, "load") == 0) {
    uint32_t n;
    if (!arg || extra || !parse_u32(arg, &n) || n == 0u) {
      error_line("Command 'db load' requires the # of bytes, >0", NULL);
      return;
    }
    db_expected = 0;
    db_loaded = 0;
    if (n != LT_MLPERF_DB_BYTES) {
      error_line("This model takes " LT_MLPERF_DB_BYTES_TEXT " bytes, not ", arg);
      return;
    }
    db_expected = n;
    send_text("m-[Expecting ");
    send_u32(n);
    send_text(" bytes]\r\n");
    return;
  }
  if (arg) { error_line("Unknown db subcommand: ", sub); return; }
  size_t digits = strlen(sub);
  if (digits & 1u) { error_line("Insufficent number of hex digits", NULL); return; }
  for (size_t i = 0; i < digits; i++) {
    if (hex_value(sub[i]) < 0) { error_line("Invalid hex digit in ", sub); return; }
  }
  if (db_expected == 0u) { error_line("No db load in progress", NULL); return; }
  if (db_loaded + digits / 2u > db_expected) {
    error_line("More bytes than db load announced", NULL);
    db_expected = 0;
    db_loaded = 0;
    return;
  }
  for (size_t i = 0; i < digits; i += 2) db[db_loaded++] = (uint8_t)(hex_value(sub[i]) << 4 | hex_value(sub[i + 1]));
  if (db_loaded == db_expected) send_text("m-load-done\r\n");
}

static void send_help(void) {
  send_text(PROFILE_NAME "\r\n\r\n"
            "help         : Print this information\r\n"
            "name         : Print the name of the device\r\n"
            "db SUBCMD    : Manipulate a generic byte buffer\r\n"
            "  load N     : Allocate N bytes and set load counter\r\n"
            "  db HH[HH]* : Load 8-bit hex byte(s) until N bytes\r\n"
            "infer N [W=10]: Load input, execute N inferences after W warmup loops\r\n"
            "results      : Return the result fp32 vector\r\n");
}

static void handle_command(char *line) {
  char *words[5] = {0};
  int count = 0;
  for (char *p = line; *p && count < 5;) {
    while (*p == ' ') *p++ = '\0';
    if (!*p) break;
    words[count++] = p;
    while (*p && *p != ' ') p++;
  }
  const char *name = words[0];
  if (!name) {
    error_line("Empty command", NULL);
  } else if (strcmp(name, "name") == 0) {
    send_text("m-name-dut-[lowtide ");
    send_text(lt_board_name());
    send_text("]\r\n");
  } else if (strcmp(name, "profile") == 0) {
    send_text("m-profile-[" PROFILE_NAME "]\r\nm-model-[" LT_MLPERF_MODEL_ID "]\r\n");
  } else if (strcmp(name, "help") == 0) {
    send_help();
  } else if (strcmp(name, "timestamp") == 0) {
    send_lap();
  } else if (strcmp(name, "db") == 0) {
    handle_db(words[1], words[2], words[3]);
  } else if (strcmp(name, "infer") == 0) {
    handle_infer(words[1], words[2], words[3]);
  } else if (strcmp(name, "results") == 0) {
    if (have_result) send_results();
    else error_line("No inference has completed", NULL);
  } else {
    error_line("Unknown command: ", name);
  }
  send_text("m-ready\r\n");
}

void lt_mlperf_init(const lt_model_info *model_info, lt_mlperf_send_fn send) {
  model = model_info;
  send_bytes = send;
  command_length = 0;
  command_too_long = 0;
  db_expected = db_loaded = 0;
  have_result = 0;
  send_text("m-init-done\r\nm-ready\r\n");
}

void lt_mlperf_push_byte(uint8_t byte) {
  if (byte == '%') {
    command[command_length] = '\0';
    if (command_too_long) {
      error_line("Command longer than the 80-character buffer", NULL);
      send_text("m-ready\r\n");
    } else {
      handle_command(command);
    }
    command_length = 0;
    command_too_long = 0;
  } else if (byte == '\r' || byte == '\n' || byte == '\0') {
    /* a terminal's line ends: not part of any command */
  } else if (command_length < LT_MLPERF_COMMAND_CHARS) {
    command[command_length++] = (char)byte;
  } else {
    command_too_long = 1;
  }
}

#endif /* LT_PROTOCOL_MLPERF */
