/* The protocol framing as the board runs it: CRC32 check value, COBS edge cases, damage detection. */
#include <stdint.h>
#include <string.h>

#include "frame.h"
#include "lt_board.h"
#include "lt_test.h"

static uint8_t encoded[LT_FRAME_MAX_ENCODED];
static uint8_t payload[LT_FRAME_MAX_PAYLOAD];
static lt_frame frame;

static lt_frame_status feed(const uint8_t *bytes, size_t length) {
  lt_frame_decoder decoder;
  lt_frame_status last = LT_FRAME_NONE;
  lt_frame_decoder_init(&decoder);
  for (size_t i = 0; i < length; i++) {
    lt_frame_status status = lt_frame_decoder_push(&decoder, bytes[i], &frame);
    if (status != LT_FRAME_NONE) last = status;
  }
  return last;
}

static void test_crc32_check_value(void) {
  /* The CRC-32/ISO-HDLC check value, the same as zlib.crc32(b"123456789"). */
  LT_CHECK(lt_crc32(0, (const uint8_t *)"123456789", 9) == 0xCBF43926u);
  LT_CHECK(lt_crc32(lt_crc32(0, (const uint8_t *)"1234", 4), (const uint8_t *)"56789", 5) == 0xCBF43926u);
}

static void test_round_trip_every_block_edge(void) {
  static const size_t lengths[] = {0, 1, 247, 248, 252, 253, 254, 255, 508, 1000};
  for (size_t k = 0; k < sizeof lengths / sizeof lengths[0]; k++) {
    for (int zeros = 0; zeros < 2; zeros++) {
      /* non-zero bytes, or every seventh byte zero: runs that end on and off COBS's 254-byte block edge */
      for (size_t i = 0; i < lengths[k]; i++) payload[i] = zeros && i % 7 == 3 ? 0 : (uint8_t)(i % 255 + 1);
      size_t n = lt_frame_encode(0x84, (uint8_t)k, payload, lengths[k], encoded, sizeof encoded);
      LT_CHECK(n > 0 && n <= LT_FRAME_MAX_ENCODED);
      LT_CHECK(encoded[n - 1] == 0);
      LT_CHECK(memchr(encoded, 0, n - 1) == NULL);
      LT_CHECK(feed(encoded, n) == LT_FRAME_OK);
      LT_CHECK(frame.type == 0x84 && frame.seq == (uint8_t)k && frame.payload_len == lengths[k]);
      LT_CHECK(memcmp(frame.payload, payload, lengths[k]) == 0);
    }
  }
}

static void test_damage_is_detected(void) {
  memset(payload, 0x42, 100);
  size_t n = lt_frame_encode(0x02, 9, payload, 100, encoded, sizeof encoded);
  encoded[50] ^= 0x01; /* one flipped bit: the CRC must catch it */
  LT_CHECK(feed(encoded, n) == LT_FRAME_BAD);
}

static void test_too_long_payload_is_refused(void) {
  LT_CHECK(lt_frame_encode(0x02, 1, payload, LT_FRAME_MAX_PAYLOAD + 1u, encoded, sizeof encoded) == 0);
}

int main(void) {
  lt_board_init();
  LT_RUN(test_crc32_check_value);
  LT_RUN(test_round_trip_every_block_edge);
  LT_RUN(test_damage_is_detected);
  LT_RUN(test_too_long_payload_is_refused);
  return lt_test_finish();
}
