/* The measurement firmware: announce the board, then serve the lowtide protocol on the board's host link forever.
 * Bare-metal boards run main(); Arduino boards call lt_app_start() from setup() and lt_app_poll() from loop()
 * (firmware/bsp/arduino). Unit-test images (PIO_UNIT_TESTING) bring their own main(). */
#include "lt_app.h"

#include "lt_board.h"
#include "lt_model.h"
#include "lt_server.h"

void lt_app_start(void) {
  lt_board_init();
  lt_server_init(lt_model_setup(), lt_board_write);
}

void lt_app_poll(void) {
  int byte = lt_board_read_byte();
  if (byte >= 0) lt_server_push_byte((uint8_t)byte);
}

#if !defined(PIO_UNIT_TESTING) && !defined(ARDUINO)
int main(void) {
  lt_app_start();
  for (;;) lt_app_poll();
}
#endif
