/* The firmware's two entry points, for boards whose framework owns main() (Arduino: setup() and loop()). */
#ifndef LT_APP_H
#define LT_APP_H

#ifdef __cplusplus
extern "C" {
#endif

void lt_app_start(void);
void lt_app_poll(void);

#ifdef __cplusplus
}
#endif

#endif
