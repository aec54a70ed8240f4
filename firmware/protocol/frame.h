/* lowtide protocol framing (docs/protocol.md): COBS(type | seq | payload | CRC32 LE) followed by 0x00.
 *
 * Plain C99, no allocation, no hardware: the encoder writes into a caller's buffer, the decoder is fed one byte at a
 * time (from a UART interrupt or a polling loop) and keeps at most one encoded frame. The host's Python codec
 * (host/lowtide/device/protocol.py) produces and accepts exactly the same bytes.
 */
#ifndef LOWTIDE_FRAME_H
#define LOWTIDE_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "lt_protocol.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The frame's sizes (LT_FRAME_HEADER_BYTES, LT_FRAME_CRC_BYTES, LT_FRAME_MAX_RAW, LT_FRAME_MAX_ENCODED: fits a 1 KB
 * buffer) come from the protocol's definition, in lt_protocol.h. */
#define LT_FRAME_MAX_PAYLOAD LT_PROTOCOL_MAX_PAYLOAD

typedef struct {
  uint8_t type;
  uint8_t seq;
  uint16_t payload_len;
  uint8_t payload[LT_FRAME_MAX_PAYLOAD];
} lt_frame;

typedef enum {
  LT_FRAME_NONE = 0, /* byte consumed, no frame complete yet (or an empty frame: a bare delimiter) */
  LT_FRAME_OK = 1,   /* a frame with a good CRC is in *out */
  LT_FRAME_BAD = 2,  /* a frame ended but was damaged (bad COBS, size, or CRC, or longer than the buffer) */
} lt_frame_status;

typedef struct {
  uint8_t encoded[LT_FRAME_MAX_ENCODED - 1u]; /* bytes since the last delimiter */
  size_t length;
  int overflowed; /* more bytes than any frame has: drop them all until the next delimiter */
} lt_frame_decoder;

/* IEEE 802.3 CRC32 (as zlib.crc32): start with crc = 0, feed pieces in order. */
uint32_t lt_crc32(uint32_t crc, const uint8_t *data, size_t length);

/* COBS-encode `length` bytes into `out` (capacity `out_capacity`). Returns the encoded length, 0 if it does not fit. */
size_t lt_cobs_encode(const uint8_t *data, size_t length, uint8_t *out, size_t out_capacity);

/* Decode COBS bytes (no delimiter) into `out`. Returns the decoded length, or (size_t)-1 on bad encoding or overflow. */
size_t lt_cobs_decode(const uint8_t *encoded, size_t length, uint8_t *out, size_t out_capacity);

/* Encode one frame, delimiter included, into `out`. Returns its length, 0 if the payload is too long or `out` too
 * small (LT_FRAME_MAX_ENCODED always suffices). */
size_t lt_frame_encode(uint8_t type, uint8_t seq, const uint8_t *payload, size_t payload_length, uint8_t *out,
                       size_t out_capacity);

void lt_frame_decoder_init(lt_frame_decoder *decoder);

/* Feed one received byte. On LT_FRAME_OK the frame is in *out (untouched otherwise). */
lt_frame_status lt_frame_decoder_push(lt_frame_decoder *decoder, uint8_t byte, lt_frame *out);

#ifdef __cplusplus
}
#endif

#endif /* LOWTIDE_FRAME_H */
