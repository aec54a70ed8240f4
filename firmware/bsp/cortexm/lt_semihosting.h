/* Arm semihosting, only as much as lowtide uses: SYS_EXIT_EXTENDED, which QEMU turns into its own exit status when
 * started with `-semihosting-config enable=on,target=native`. Without that flag `bkpt 0xAB` faults, so only images
 * meant for QEMU call it. */
#ifndef LT_SEMIHOSTING_H
#define LT_SEMIHOSTING_H

void lt_semihosting_exit(int code) __attribute__((noreturn));

#endif
