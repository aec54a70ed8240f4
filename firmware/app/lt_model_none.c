/* lt_model.h when the firmware was built without a model (no LOWTIDE_MODEL): the board still boots and speaks the
 * protocol, and its HELLO says the model is not ready. */
#if !defined(LT_RUNTIME_COMPILED) && !defined(LT_RUNTIME_TFLM)

#include <stddef.h>

#include "lt_model.h"

static lt_model_info info;

const lt_model_info *lt_model_setup(void) {
  info.runtime = "none";
  info.status = "firmware built without a model: rebuild with LOWTIDE_MODEL=path/to/model.tflite";
  info.ready = 0;
  info.planned_bytes = LT_UNKNOWN_U32;
  info.used_bytes = LT_UNKNOWN_U32;
  return &info;
}

/* Unreachable: with no inputs, no outputs and ready == 0 the protocol core never calls these. */
uint32_t lt_model_input_bytes(int index) { return (void)index, 0; }
uint8_t *lt_model_input_staging(int index) { return (void)index, NULL; }
uint32_t lt_model_output_bytes(int index) { return (void)index, 0; }
const uint8_t *lt_model_output(int index) { return (void)index, NULL; }
void lt_model_prepare(int pattern) { (void)pattern; }
int lt_model_invoke(lt_model_op_hook hook, void *user) { return (void)hook, (void)user, -1; }
uint32_t lt_model_arena_high_water(void) { return LT_UNKNOWN_U32; }

#endif
