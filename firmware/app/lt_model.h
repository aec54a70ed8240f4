/* The runtime interface: what the protocol core needs from whatever runs the model. One implementation is linked,
 * chosen at build time by firmware/app/lowtide_project.py:
 *   lt_model_compiled.c  the C99 code `lowtide compile` generates (LT_RUNTIME_COMPILED; the default)
 *   lt_model_tflm.cc     TensorFlow Lite Micro's MicroInterpreter, reference or CMSIS-NN kernels (LT_RUNTIME_TFLM)
 *   lt_model_none.c      no model configured: the board answers HELLO with "model not ready"
 */
#ifndef LT_MODEL_H
#define LT_MODEL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LT_UNKNOWN_U32 0xFFFFFFFFu

typedef struct {
  const char *runtime;      /* HELLO's runtime string */
  const char *status;       /* why the model is not ready (NULL when it is) */
  int ready;                /* tensors allocated, RUN possible */
  uint8_t input_count;
  uint8_t output_count;
  uint16_t operator_count;  /* operators the op hook reports, in execution order */
  uint32_t arena_capacity_bytes;
  uint32_t planned_bytes;   /* the planned non-persistent arena head; LT_UNKNOWN_U32 if unknown */
  uint32_t used_bytes;      /* the arena the runtime reports as used; LT_UNKNOWN_U32 if unknown */
  uint32_t model_size_bytes;
  uint8_t model_sha256[32]; /* of the .tflite file */
} lt_model_info;

/* Called before and after (after == 1) each operator; same type as lt_runtime.h's lt_op_hook. */
typedef void (*lt_model_op_hook)(int op_index, int after, void *user);

/* Once, at boot: allocate the model's tensors. Never fails loudly: a failure leaves info->ready at 0. */
const lt_model_info *lt_model_setup(void);

uint32_t lt_model_input_bytes(int index);
/* The buffer SET_INPUT fills for input `index`, kept apart from the arena (docs/protocol.md, RUN). */
uint8_t *lt_model_input_staging(int index);
uint32_t lt_model_output_bytes(int index);
const uint8_t *lt_model_output(int index);

/* lt_model_prepare's pattern for a timed benchmark (lt_mlperf.c): no painting, whose memset would be timed too. */
#define LT_MODEL_NO_PAINT (-1)

/* Before every invocation: reset the runtime's state, copy the staged inputs into the input tensors and, where the
 * runtime allows, paint the arena with `pattern` (a byte, or LT_MODEL_NO_PAINT) first. */
void lt_model_prepare(int pattern);
/* Runs the model once; 0 on success. `hook` may be NULL. */
int lt_model_invoke(lt_model_op_hook hook, void *user);
/* Bytes of the arena found written since it was last painted; LT_UNKNOWN_U32 if this runtime cannot paint. */
uint32_t lt_model_arena_high_water(void);

#ifdef __cplusplus
}
#endif

#endif /* LT_MODEL_H */
