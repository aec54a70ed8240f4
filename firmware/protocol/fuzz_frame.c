/* Fuzz target for the frame codec (libFuzzer's entry point; fuzz_main.c drives it without libFuzzer).
 * Checks, for any input: the decoder never reads or writes out of bounds (run it under ASan/UBSan), every frame it
 * accepts re-encodes to a frame it accepts again with the same contents, a frame encoded from the input decodes to
 * exactly that input, a damaged copy of it is never accepted with other contents, and COBS round-trips. */
#include <stdlib.h>
#include <string.h>

#include "frame.h"

#define CHECK(cond) \
  do {              \
    if (!(cond)) abort(); \
  } while (0)

static lt_frame_status decode_all(const uint8_t *data, size_t size, lt_frame *last_ok, int *ok_count) {
  lt_frame_decoder decoder;
  lt_frame frame;
  lt_frame_status last = LT_FRAME_NONE;
  lt_frame_decoder_init(&decoder);
  *ok_count = 0;
  for (size_t i = 0; i < size; i++) {
    lt_frame_status status = lt_frame_decoder_push(&decoder, data[i], &frame);
    if (status == LT_FRAME_OK) {
      *last_ok = frame;
      ++*ok_count;
    }
    if (status != LT_FRAME_NONE) last = status;
  }
  return last;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static uint8_t encoded[LT_FRAME_MAX_ENCODED];
  static uint8_t cobs[2 * 4096 + 2];
  static uint8_t back[4096];
  lt_frame frame, again;
  int count;

  /* 1. Arbitrary bytes as a received stream: every accepted frame survives a re-encode. */
  lt_frame_decoder decoder;
  lt_frame_decoder_init(&decoder);
  for (size_t i = 0; i < size; i++) {
    if (lt_frame_decoder_push(&decoder, data[i], &frame) == LT_FRAME_OK) {
      CHECK(frame.payload_len <= LT_FRAME_MAX_PAYLOAD);
      size_t n = lt_frame_encode(frame.type, frame.seq, frame.payload, frame.payload_len, encoded, sizeof encoded);
      CHECK(n > 0 && n <= LT_FRAME_MAX_ENCODED);
      CHECK(decode_all(encoded, n, &again, &count) == LT_FRAME_OK && count == 1);
      CHECK(again.type == frame.type && again.seq == frame.seq && again.payload_len == frame.payload_len);
      CHECK(memcmp(again.payload, frame.payload, frame.payload_len) == 0);
    }
  }

  /* 2. The input as a payload: encode, decode, then flip one bit chosen by the input. */
  if (size >= 2) {
    size_t payload_len = size - 2 > LT_FRAME_MAX_PAYLOAD ? LT_FRAME_MAX_PAYLOAD : size - 2;
    size_t n = lt_frame_encode(data[0], data[1], data + 2, payload_len, encoded, sizeof encoded);
    CHECK(n > 0 && n <= LT_FRAME_MAX_ENCODED && encoded[n - 1] == 0);
    for (size_t i = 0; i + 1 < n; i++) CHECK(encoded[i] != 0);
    CHECK(decode_all(encoded, n, &again, &count) == LT_FRAME_OK && count == 1);
    CHECK(again.type == data[0] && again.seq == data[1] && again.payload_len == payload_len);
    CHECK(memcmp(again.payload, data + 2, payload_len) == 0);
    size_t bit = (size_t)data[0] * 256u + data[1];
    size_t flipped = (bit / 8u) % (n - 1u);
    encoded[flipped] ^= (uint8_t)(1u << (bit % 8u));
    decode_all(encoded, n, &again, &count);
    /* only the undamaged frame may come out, never a different one; unless the flip made a 0x00: that ends the
       frame there, and the rest is a new stream, which may hold a whole frame the payload carried (the fuzzer
       forges one, CRC and all) */
    if (count && encoded[flipped] != 0) {
      CHECK(again.type == data[0] && again.seq == data[1] && again.payload_len == payload_len);
      CHECK(memcmp(again.payload, data + 2, payload_len) == 0);
    }
  }

  /* 3. COBS round trip of up to 4 KB. */
  size_t cobs_len = size > sizeof back ? sizeof back : size;
  size_t n = lt_cobs_encode(data, cobs_len, cobs, sizeof cobs);
  CHECK(n > 0 && n <= cobs_len + cobs_len / 254u + 1u);
  CHECK(lt_cobs_decode(cobs, n, back, sizeof back) == cobs_len);
  CHECK(memcmp(back, data, cobs_len) == 0);
  return 0;
}
