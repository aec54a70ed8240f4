/* The board side of MLPerf Tiny's serial grammar (MLCommons' runner, benchmark/runner/main.py; the reference DUT is
 * benchmark/api/internally_implemented.cpp): an alternative to the lowtide protocol, chosen at build time
 * (LT_PROTOCOL_MLPERF, which lowtide's host puts in lowtide_project.json; docs/mlperf.md).
 *
 * Commands are ASCII, space-separated and end with '%'; every reply line ends "\r\n" and every command ends with
 * "m-ready". name, profile, help, db load N, db HEX, infer N [W], results; anything else, or anything malformed,
 * gets one "e-[...]" line and the board stays ready. Board- and runtime-independent like lt_server.c: bytes go out
 * through the `send` function, the model runs through lt_model.h, time comes from lt_board.h.
 *
 * What the host defines (lowtide.mlperf.firmware_defines):
 *   LT_MLPERF_MODEL_ID          the benchmark's id in m-model-[ID]: kws01, vww01, ic01, ad01, sww01, or the user's
 *   LT_MLPERF_DB_BYTES          bytes of one input as the runner sends it
 *   LT_MLPERF_INPUT             how those bytes become the model's input 0 (LT_MLPERF_INPUT_*)
 *   LT_MLPERF_INPUT_SCALE, LT_MLPERF_INPUT_ZERO_POINT    the input's quantization (LT_MLPERF_INPUT_FLOAT32_QUANTIZED)
 *   LT_MLPERF_RESULT            what m-results-[...] holds (LT_MLPERF_RESULT_*)
 *   LT_MLPERF_OUTPUT_FLOAT32    1 if output 0 is float32, 0 if int8
 *   LT_MLPERF_OUTPUT_SCALE, LT_MLPERF_OUTPUT_ZERO_POINT  output 0's quantization (int8)
 */
#ifndef LT_MLPERF_H
#define LT_MLPERF_H

#include <stddef.h>
#include <stdint.h>

#include "lt_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The runner's command buffer (EE_CMD_SIZE): a longer command is refused whole. */
#define LT_MLPERF_COMMAND_CHARS 80u

#define LT_MLPERF_INPUT_BYTES 0             /* copied as they are (kws01: int8 features) */
#define LT_MLPERF_INPUT_UINT8_AS_INT8 1     /* uint8 pixels into an int8 input, less 128 (ic01, vww01) */
#define LT_MLPERF_INPUT_FLOAT32_QUANTIZED 2 /* little-endian fp32 into an int8 input: x / scale + zero point (ad01) */

#define LT_MLPERF_RESULT_SCORES 0           /* output 0, dequantized: one score per class */
#define LT_MLPERF_RESULT_RECONSTRUCTION 1   /* mean squared error of output 0 against the fp32 input (ad01) */

typedef void (*lt_mlperf_send_fn)(const uint8_t *data, size_t length);

/* Takes the model's info (from lt_model_setup) and says it is ready ("m-init-done", "m-ready"). */
void lt_mlperf_init(const lt_model_info *model, lt_mlperf_send_fn send);

/* Feed one received byte; a completed command is answered before this returns (an infer runs to its end). */
void lt_mlperf_push_byte(uint8_t byte);

#ifdef __cplusplus
}
#endif

#endif /* LT_MLPERF_H */
