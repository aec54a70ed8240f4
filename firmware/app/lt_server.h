/* The board side of the lowtide protocol (docs/protocol.md): decodes requests, runs the model through lt_model.h,
 * answers, and keeps the one-frame reply cache that makes every request safe to re-send. Board-independent: bytes
 * go out through the `send` function given to lt_server_init, time and cycles come from lt_board.h. */
#ifndef LT_SERVER_H
#define LT_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "lt_model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LT_PROTOCOL_VERSION 1u
/* Measured invocations one RUN may ask for: their cycle and microsecond figures are kept to find the median. */
#define LT_MAX_SAMPLES 256u
/* Operators whose cycles a profiling RUN can keep; larger models run without a per-operator profile. */
#define LT_MAX_PROFILED_OPS 512u

enum {
  LT_MSG_HELLO_REQUEST = 0x01,
  LT_MSG_SET_INPUT = 0x02,
  LT_MSG_RUN = 0x03,
  LT_MSG_READ = 0x04,
  LT_MSG_HELLO = 0x81,
  LT_MSG_INPUT_ACK = 0x82,
  LT_MSG_PROGRESS = 0x83,
  LT_MSG_RESULT = 0x84,
  LT_MSG_DATA = 0x85,
  LT_MSG_LOG = 0x86,
  LT_MSG_ERROR = 0x87,
};

enum {
  LT_ERR_BAD_FRAME = 1,
  LT_ERR_BAD_MESSAGE = 2,
  LT_ERR_BAD_INDEX = 3,
  LT_ERR_BAD_RANGE = 4,
  LT_ERR_MODEL_NOT_READY = 5,
  LT_ERR_INVOKE_FAILED = 6,
  LT_ERR_NO_RESULT = 7,
  LT_ERR_BAD_ARGUMENT = 8,
  LT_ERR_INTERNAL = 9,
};

enum { LT_LOG_DEBUG = 0, LT_LOG_INFO = 1, LT_LOG_WARNING = 2, LT_LOG_ERROR = 3 };
enum { LT_REGION_OUTPUT = 1, LT_REGION_OP_CYCLES = 2 };

typedef void (*lt_send_fn)(const uint8_t *data, size_t length);

/* Takes the model's info (from lt_model_setup) and announces the board: HELLO with sequence number 0, and a LOG
 * saying why if the model is not ready. */
void lt_server_init(const lt_model_info *model, lt_send_fn send);

/* Feed one received byte; a completed frame is handled before this returns (a RUN runs to its end). */
void lt_server_push_byte(uint8_t byte);

/* Send a LOG message now. */
void lt_server_log(uint8_t level, const char *text);

/* Stack high-water (bytes) of the last RUN, for the board's LOG and the unit tests. */
uint32_t lt_server_last_stack_bytes(void);

#ifdef __cplusplus
}
#endif

#endif /* LT_SERVER_H */
