/* Command-line access to the frame codec, for the host tests (tests/test_frame_c.py):
 *   frame_tool encode TYPE SEQ   < payload  > frame      (delimiter included)
 *   frame_tool decode            < stream                 one line per frame end: "OK type seq hex" or "BAD"
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

static int encode(int type, int seq) {
  static uint8_t payload[LT_FRAME_MAX_PAYLOAD + 1];
  static uint8_t out[LT_FRAME_MAX_ENCODED];
  size_t length = fread(payload, 1, sizeof payload, stdin);
  size_t n = lt_frame_encode((uint8_t)type, (uint8_t)seq, payload, length, out, sizeof out);
  if (n == 0) {
    fprintf(stderr, "frame_tool: payload of %zu bytes does not fit a frame\n", length);
    return 1;
  }
  fwrite(out, 1, n, stdout);
  return 0;
}

static int decode(void) {
  lt_frame_decoder decoder;
  static lt_frame frame;
  int c;
  lt_frame_decoder_init(&decoder);
  while ((c = getchar()) != EOF) {
    lt_frame_status status = lt_frame_decoder_push(&decoder, (uint8_t)c, &frame);
    if (status == LT_FRAME_BAD) puts("BAD");
    if (status == LT_FRAME_OK) {
      printf("OK %u %u ", frame.type, frame.seq);
      for (size_t i = 0; i < frame.payload_len; i++) printf("%02x", frame.payload[i]);
      putchar('\n');
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "encode") == 0) return encode(atoi(argv[2]), atoi(argv[3]));
  if (argc == 2 && strcmp(argv[1], "decode") == 0) return decode();
  fprintf(stderr, "usage: frame_tool encode TYPE SEQ < payload | frame_tool decode < stream\n");
  return 2;
}
