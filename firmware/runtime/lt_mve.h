/* Helium (MVE): what the runtime's vector kernels share. LT_MVE is defined on Armv8.1-M cores with the M-profile
 * Vector Extension's integer instructions (Cortex-M55: __ARM_FEATURE_MVE), where the kernels of lt_mve_*.h and
 * lt_mve_*.c replace the scalar and DSP ones; elsewhere this header declares nothing. Internal to the runtime. */
#ifndef LT_MVE_H
#define LT_MVE_H

#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1)
#include <arm_mve.h>

#include "lt_runtime.h"

#define LT_MVE 1

/* int8 ADD without broadcasting (both inputs `count` elements in order): reference_ops::AddElementwise, four
 * lanes at a time (lt_mve_elementwise.c). */
void lt_mve_add_s8(const lt_binary_params *p, const int8_t *input1, const int8_t *input2, int8_t *output,
                   int32_t count);
#endif

#endif /* LT_MVE_H */
