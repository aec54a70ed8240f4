/* A minimal on-target test harness (Unity would come from the registry, which the offline build cannot reach).
 *
 *   static void test_something(void) { LT_CHECK(1 + 1 == 2); }
 *   int main(void) { lt_board_init(); LT_RUN(test_something); return lt_test_finish(); }
 *
 * Each case prints `PASS name` or `FAIL name: file:line: expression` on the board's link; main() returns the number
 * of failures, which the startup code hands to QEMU as its exit status (firmware/test/test_custom_runner.py). */
#ifndef LT_TEST_H
#define LT_TEST_H

#include <string.h>

#include "lt_board.h"

static int lt_test_failures;
static int lt_test_passes;
static const char *lt_test_failed_at;

static inline void lt_test_print(const char *text) { lt_board_write((const uint8_t *)text, strlen(text)); }

static inline void lt_test_print_int(long value) {
  char digits[24];
  int n = 0;
  unsigned long v = value < 0 ? (unsigned long)-value : (unsigned long)value;
  if (value < 0) lt_test_print("-");
  do {
    digits[n++] = (char)('0' + v % 10u);
    v /= 10u;
  } while (v);
  while (n) lt_board_write((const uint8_t *)&digits[--n], 1);
}

#define LT_STRINGIFY_(x) #x
#define LT_STRINGIFY(x) LT_STRINGIFY_(x)

/* Records the first failed check of the running case and leaves the case. */
#define LT_CHECK(expr)                                                                 \
  do {                                                                                 \
    if (!(expr)) {                                                                     \
      lt_test_failed_at = __FILE__ ":" LT_STRINGIFY(__LINE__) ": " #expr;               \
      return;                                                                          \
    }                                                                                  \
  } while (0)

#define LT_RUN(test_fn)                    \
  do {                                     \
    lt_test_failed_at = 0;                 \
    test_fn();                             \
    lt_test_report(#test_fn);              \
  } while (0)

static inline void lt_test_report(const char *name) {
  if (lt_test_failed_at) {
    lt_test_failures++;
    lt_test_print("FAIL ");
    lt_test_print(name);
    lt_test_print(": ");
    lt_test_print(lt_test_failed_at);
  } else {
    lt_test_passes++;
    lt_test_print("PASS ");
    lt_test_print(name);
  }
  lt_test_print("\n");
}

static inline int lt_test_finish(void) {
  lt_test_print_int(lt_test_passes);
  lt_test_print(" passed, ");
  lt_test_print_int(lt_test_failures);
  lt_test_print(" failed\n");
  return lt_test_failures;
}

#endif
