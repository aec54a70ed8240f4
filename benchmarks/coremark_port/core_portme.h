/* lowtide's CoreMark port for the emulated Cortex-M boards (benchmarks/coremark_bench.py): bare metal, timed by the
 * cycle model's marks (firmware/bsp/lt_timing.h), output through semihosting. CoreMark itself is built unmodified
 * from ../shared/coremark; only this port is lowtide's. */
#ifndef CORE_PORTME_H
#define CORE_PORTME_H

#include <stddef.h>
#include <stdint.h>

#define HAS_FLOAT 0 /* the time CoreMark computes is not used: the cycle model's window is the figure */
#define HAS_TIME_H 0
#define USE_CLOCK 0
#define HAS_STDIO 0
#define HAS_PRINTF 0
#define MAIN_HAS_NOARGC 1
#define MAIN_HAS_NORETURN 0
#define MEM_METHOD MEM_STATIC
#define MEM_LOCATION "STATIC"
#define SEED_METHOD SEED_VOLATILE
#define MULTITHREAD 1
#define USE_PTHREAD 0
#define USE_FORK 0
#define USE_SOCKET 0

#ifndef COMPILER_VERSION
#define COMPILER_VERSION "GCC " __VERSION__
#endif
#ifndef COMPILER_FLAGS
#define COMPILER_FLAGS "see benchmarks/coremark_bench.py"
#endif

typedef signed short ee_s16;
typedef unsigned short ee_u16;
typedef signed int ee_s32;
typedef double ee_f32;
typedef unsigned char ee_u8;
typedef unsigned int ee_u32;
typedef uintptr_t ee_ptr_int;
typedef size_t ee_size_t;
typedef ee_u32 CORE_TICKS;
#define align_mem(x) (void *)(4 + (((ee_ptr_int)(x)-1) & ~3))
#define NULL_PTR ((void *)0)

typedef struct CORE_PORTABLE_S {
  ee_u8 portable_id;
} core_portable;

extern ee_u32 default_num_contexts;
void portable_init(core_portable *p, int *argc, char *argv[]);
void portable_fini(core_portable *p);
int ee_printf(const char *fmt, ...);

#if !defined(PROFILE_RUN) && !defined(PERFORMANCE_RUN) && !defined(VALIDATION_RUN)
#if (TOTAL_DATA_SIZE == 1200)
#define PROFILE_RUN 1
#elif (TOTAL_DATA_SIZE == 2000)
#define PERFORMANCE_RUN 1
#else
#define VALIDATION_RUN 1
#endif
#endif

#endif /* CORE_PORTME_H */
