/* The measurement firmware: announce the board, then serve the lowtide protocol on the board's host link forever
 * (or MLPerf Tiny's grammar, in an image built with LT_PROTOCOL_MLPERF: lt_mlperf.h).
 * Bare-metal boards run main(); Arduino boards call lt_app_start() from setup() and lt_app_poll() from loop()
 * (firmware/bsp/arduino). Unit-test images (PIO_UNIT_TESTING) bring their own main(). */
#include "lt_app.h"

#include "lt_board.h"
#include "lt_model.h"
#include "lt_mlperf.h"
#include "lt_server.h"

#ifdef LT_PROTOCOL_MLPERF
#define SERVE_INIT lt_mlperf_init
#define SERVE_BYTE lt_mlperf_push_byte
#else
#define SERVE_INIT lt_server_init
#define SERVE_BYTE lt_server_push_byte
#endif

void lt_app_start(void) {
  lt_board_init();
  SERVE_INIT(lt_model_setup(), lt_board_write);
}

void lt_app_poll(void) {
  int byte = lt_board_read_byte();
  if (byte >= 0) SERVE_BYTE((uint8_t)byte);
}

#if !defined(PIO_UNIT_TESTING) && !defined(ARDUINO)
int main(void) {
  lt_app_start();
  for (;;) lt_app_poll();
}
#endif
