/* lowtide protocol framing: see frame.h and docs/protocol.md. */
#include "frame.h"

#include <string.h>

uint32_t lt_crc32(uint32_t crc, const uint8_t *data, size_t length) {
  /* Bitwise, reflected polynomial 0xEDB88320: no 1 KB table in a small MCU's flash; a 1000-byte frame costs ~8k
   * shift/xor steps, far below the time the bytes take to arrive over a UART. */
  crc = ~crc;
  for (size_t i = 0; i < length; i++) {
    crc ^= data[i];
    for (int bit = 0; bit < 8; bit++) {
      crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
  }
  return ~crc;
}

size_t lt_cobs_encode(const uint8_t *data, size_t length, uint8_t *out, size_t out_capacity) {
  size_t code_at = 0; /* where the current block's code byte goes */
  size_t written = 1;
  uint8_t code = 1;
  if (out_capacity < 1) return 0;
  for (size_t i = 0; i < length; i++) {
    if (data[i] != 0) {
      if (written >= out_capacity) return 0;
      out[written++] = data[i];
      code++;
    }
    if (data[i] == 0 || code == 0xFF) {
      out[code_at] = code;
      code = 1;
      /* A full block at the very end gets no code byte after it (the same bytes as the Python `cobs` package). */
      if (data[i] == 0 || i + 1 < length) {
        if (written >= out_capacity) return 0;
        code_at = written++;
      } else {
        return written;
      }
    }
  }
  out[code_at] = code;
  return written;
}

size_t lt_cobs_decode(const uint8_t *encoded, size_t length, uint8_t *out, size_t out_capacity) {
  size_t read = 0;
  size_t written = 0;
  while (read < length) {
    uint8_t code = encoded[read++];
    if (code == 0) return (size_t)-1;
    size_t run = (size_t)code - 1u;
    if (run > length - read || run > out_capacity - written) return (size_t)-1;
    for (size_t i = 0; i < run; i++) {
      if (encoded[read] == 0) return (size_t)-1;
      out[written++] = encoded[read++];
    }
    if (code != 0xFF && read < length) {
      if (written >= out_capacity) return (size_t)-1;
      out[written++] = 0;
    }
  }
  return written;
}

static void put_u32_le(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_u32_le(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

size_t lt_frame_encode(uint8_t type, uint8_t seq, const uint8_t *payload, size_t payload_length, uint8_t *out,
                       size_t out_capacity) {
  uint8_t raw[LT_FRAME_MAX_RAW];
  if (payload_length > LT_FRAME_MAX_PAYLOAD || out_capacity < 1) return 0;
  raw[0] = type;
  raw[1] = seq;
  if (payload_length) memcpy(raw + LT_FRAME_HEADER_BYTES, payload, payload_length);
  size_t body = LT_FRAME_HEADER_BYTES + payload_length;
  put_u32_le(raw + body, lt_crc32(0, raw, body));
  size_t encoded = lt_cobs_encode(raw, body + LT_FRAME_CRC_BYTES, out, out_capacity - 1u);
  if (encoded == 0) return 0;
  out[encoded] = 0;
  return encoded + 1u;
}

void lt_frame_decoder_init(lt_frame_decoder *decoder) {
  decoder->length = 0;
  decoder->overflowed = 0;
}

static lt_frame_status finish_frame(lt_frame_decoder *decoder, lt_frame *out) {
  uint8_t raw[LT_FRAME_MAX_RAW];
  size_t length = lt_cobs_decode(decoder->encoded, decoder->length, raw, sizeof raw);
  if (length == (size_t)-1 || length < LT_FRAME_HEADER_BYTES + LT_FRAME_CRC_BYTES) return LT_FRAME_BAD;
  size_t body = length - LT_FRAME_CRC_BYTES;
  if (lt_crc32(0, raw, body) != get_u32_le(raw + body)) return LT_FRAME_BAD;
  out->type = raw[0];
  out->seq = raw[1];
  out->payload_len = (uint16_t)(body - LT_FRAME_HEADER_BYTES);
  memcpy(out->payload, raw + LT_FRAME_HEADER_BYTES, out->payload_len);
  return LT_FRAME_OK;
}

lt_frame_status lt_frame_decoder_push(lt_frame_decoder *decoder, uint8_t byte, lt_frame *out) {
  if (byte != 0) {
    if (decoder->overflowed) return LT_FRAME_NONE;
    if (decoder->length >= sizeof decoder->encoded) {
      decoder->overflowed = 1;
      return LT_FRAME_NONE;
    }
    decoder->encoded[decoder->length++] = byte;
    return LT_FRAME_NONE;
  }
  lt_frame_status status;
  if (decoder->overflowed) {
    status = LT_FRAME_BAD;
  } else if (decoder->length == 0) {
    status = LT_FRAME_NONE; /* a bare delimiter: the sender flushing our buffer */
  } else {
    status = finish_frame(decoder, out);
  }
  lt_frame_decoder_init(decoder);
  return status;
}
