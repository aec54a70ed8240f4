/* The board side of the lowtide protocol (docs/protocol.md): decodes requests, runs the model through lt_model.h,
 * answers, and keeps the one-frame reply cache that makes every request safe to re-send. Board-independent: bytes
 * go out through the `send` function given to lt_server_init, time and cycles come from lt_board.h. */
#ifndef LT_SERVER_H
#define LT_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "lt_model.h"
#include "lt_protocol.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Measured invocations one RUN may ask for: their counter and microsecond figures are kept to find the median.
 * HELLO states it (max_iterations), so the host refuses a larger RUN before sending it. */
#define LT_MAX_SAMPLES 256u
/* Operators whose cycles a profiling RUN can keep; larger models run without a per-operator profile. */
#define LT_MAX_PROFILED_OPS 512u

typedef void (*lt_send_fn)(const uint8_t *data, size_t length);

/* Takes the model's info (from lt_model_setup) and announces the board: HELLO with sequence number 0, and a LOG
 * saying why if the model is not ready. */
void lt_server_init(const lt_model_info *model, lt_send_fn send);

/* Feed one received byte; a completed frame is handled before this returns (a RUN runs to its end). */
void lt_server_push_byte(uint8_t byte);

/* Send a LOG message now. */
void lt_server_log(uint8_t level, const char *text);

#ifdef __cplusplus
}
#endif

#endif /* LT_SERVER_H */
