/* UNIDIRECTIONAL_SEQUENCE_LSTM, integer (TFLM's lstm_eval.h EvalLstm<int8_t, int8_t, int16_t, int32_t>).
 *
 * One step per time step (time-major: all batches at once; batch-major: one batch row at a time, each with its
 * own slice of the state): the forget, input and cell gates from the input and the previous hidden state, the cell
 * update, the output gate, then hidden = tanh(cell) * output gate, copied to the output. The int16 sigmoid and
 * tanh are reference_integer_ops' LUT interpolations. int32 sums wrap as TFLM's do on its targets. */
#include <string.h>

#include "lt_fixedpoint.h"
#include "lt_runtime.h"

/* sigmoid(i / 24) in 0.16 fixed point, the table TFLite's int16 Logistic and Tanh interpolate in. */
static const uint16_t lt_sigmoid_table[256] = {
    32768, 33451, 34133, 34813, 35493, 36169, 36843, 37513, 38180, 38841, 39498, 40149, 40794, 41432, 42064, 42688,
    43304, 43912, 44511, 45102, 45683, 46255, 46817, 47369, 47911, 48443, 48964, 49475, 49975, 50464, 50942, 51409,
    51865, 52311, 52745, 53169, 53581, 53983, 54374, 54755, 55125, 55485, 55834, 56174, 56503, 56823, 57133, 57433,
    57724, 58007, 58280, 58544, 58800, 59048, 59288, 59519, 59743, 59959, 60168, 60370, 60565, 60753, 60935, 61110,
    61279, 61441, 61599, 61750, 61896, 62036, 62172, 62302, 62428, 62549, 62666, 62778, 62886, 62990, 63090, 63186,
    63279, 63368, 63454, 63536, 63615, 63691, 63765, 63835, 63903, 63968, 64030, 64090, 64148, 64204, 64257, 64308,
    64357, 64405, 64450, 64494, 64536, 64576, 64614, 64652, 64687, 64721, 64754, 64786, 64816, 64845, 64873, 64900,
    64926, 64950, 64974, 64997, 65019, 65039, 65060, 65079, 65097, 65115, 65132, 65149, 65164, 65179, 65194, 65208,
    65221, 65234, 65246, 65258, 65269, 65280, 65291, 65301, 65310, 65319, 65328, 65337, 65345, 65352, 65360, 65367,
    65374, 65381, 65387, 65393, 65399, 65404, 65410, 65415, 65420, 65425, 65429, 65433, 65438, 65442, 65445, 65449,
    65453, 65456, 65459, 65462, 65465, 65468, 65471, 65474, 65476, 65479, 65481, 65483, 65485, 65488, 65489, 65491,
    65493, 65495, 65497, 65498, 65500, 65501, 65503, 65504, 65505, 65507, 65508, 65509, 65510, 65511, 65512, 65513,
    65514, 65515, 65516, 65517, 65517, 65518, 65519, 65520, 65520, 65521, 65522, 65522, 65523, 65523, 65524, 65524,
    65525, 65525, 65526, 65526, 65526, 65527, 65527, 65528, 65528, 65528, 65529, 65529, 65529, 65529, 65530, 65530,
    65530, 65530, 65531, 65531, 65531, 65531, 65531, 65532, 65532, 65532, 65532, 65532, 65532, 65533, 65533, 65533,
    65533, 65533, 65533, 65533, 65533, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65535};

/* The input scaling both LUT functions start with: x * multiplier, then a rounding right shift. */
static int32_t lt_lut_input(int32_t x, int32_t multiplier, int32_t shift) {
    const int32_t round = shift > 0 ? (1 << (shift - 1)) : 0;
    return (x * multiplier + round) >> shift;
}

/* reference_integer_ops::Logistic for int16 in Q3.12 (multiplier 3, no shift), in place; Q0.15 out. */
static void lt_sigmoid_s16(int16_t *data, int32_t count) {
    for (int32_t i = 0; i < count; ++i) {
        const int32_t x = lt_lut_input(data[i], 3, 0);
        const uint32_t magnitude = (uint32_t)(x < 0 ? -x : x);
        const uint32_t index = magnitude >> 9;
        uint32_t result;
        if (index >= 255) {
            result = 0x7FFFu << 10;
        } else {
            const uint32_t a = lt_sigmoid_table[index], b = lt_sigmoid_table[index + 1];
            result = (a << 9) + (magnitude & 0x1FFu) * (b - a);
        }
        result = x >= 0 ? result + (1u << 9) : (1u << 25) - result + (1u << 9) - 1u;
        data[i] = (int16_t)(result >> 10);
    }
}

/* reference_integer_ops::Tanh for int16 (tanh(x) = 2 sigmoid(2x) - 1 on the same table); Q0.15 out. */
static void lt_tanh_s16(const int16_t *input, int16_t *output, int32_t count, int32_t multiplier, int32_t shift) {
    for (int32_t i = 0; i < count; ++i) {
        const int32_t x = lt_lut_input(input[i], multiplier, shift);
        const uint32_t magnitude = (uint32_t)(x < 0 ? -x : x);
        const uint32_t index = magnitude >> 8;
        int32_t result;
        if (index >= 255) {
            result = 0xFFFF << 8;
        } else {
            const uint32_t a = lt_sigmoid_table[index], b = lt_sigmoid_table[index + 1];
            result = (int32_t)((a << 8) + (magnitude & 0xFFu) * (b - a));
        }
        result = x >= 0 ? result - (1 << 23) + (1 << 7) : -result + (1 << 23) + (1 << 7) - 1;
        output[i] = (int16_t)(result >> 8); /* arithmetic shift, as TFLM's targets do */
    }
}

/* reference_integer_ops::FullyConnected, int8 x int8 -> int16 with zero output offset and the full int16 range. */
static void lt_gate_fc(const int8_t *input, int32_t input_offset, const int8_t *weights, const int32_t *bias,
                       int32_t rows, int32_t depth, int32_t units, int32_t multiplier, int32_t shift,
                       int16_t *output) {
    for (int32_t r = 0; r < rows; ++r) {
        for (int32_t u = 0; u < units; ++u) {
            const int8_t *w = weights + u * depth;
            const int8_t *in = input + r * depth;
            int32_t acc = 0;
            for (int32_t d = 0; d < depth; ++d) acc = lt_wrap_add(acc, w[d] * (in[d] + input_offset));
            if (bias) acc = lt_wrap_add(acc, bias[u]);
            const int32_t scaled = lt_multiply_by_quantized_multiplier(acc, multiplier, shift);
            output[r * units + u] = (int16_t)lt_clamp(scaled, INT16_MIN, INT16_MAX);
        }
    }
}

/* AddElementWise: saturating int16 sum, in place into `a`. */
static void lt_add_sat_s16(int16_t *a, const int16_t *b, int32_t count) {
    for (int32_t i = 0; i < count; ++i) a[i] = (int16_t)lt_clamp(a[i] + b[i], INT16_MIN, INT16_MAX);
}

/* MulElementwise on symmetric int16 inputs: the product requantized, plus the output zero point, clamped. */
static int32_t lt_mul_s16(int32_t a, int32_t b, int32_t multiplier, int32_t shift, int32_t offset, int32_t lo,
                          int32_t hi) {
    return lt_clamp(offset + lt_multiply_by_quantized_multiplier(a * b, multiplier, shift), lo, hi);
}

/* One gate: FC(input) with the gate's bias, plus FC(hidden) without bias, saturated, then sigmoid (the cell gate:
 * tanh). */
static void lt_lstm_gate(const lt_lstm_params *p, const lt_lstm_weights *w, int32_t gate, const int8_t *input,
                         const int8_t *hidden, int32_t rows, int16_t *out, int16_t *scratch) {
    const int32_t n = rows * p->state_size;
    lt_gate_fc(input, -p->input_zero_point, w->input_weights[gate], w->bias[gate], rows, p->input_size,
               p->state_size, p->input_multiplier[gate], p->input_shift[gate], out);
    lt_gate_fc(hidden, -p->hidden_zero_point, w->recurrent_weights[gate], NULL, rows, p->state_size, p->state_size,
               p->recurrent_multiplier[gate], p->recurrent_shift[gate], scratch);
    lt_add_sat_s16(out, scratch, n);
    if (gate == 2) lt_tanh_s16(out, out, n, 3, 0); /* Q3.12 input: the power-of-two case with no shift */
    else lt_sigmoid_s16(out, n);
}

static void lt_lstm_step(const lt_lstm_params *p, const lt_lstm_weights *w, const int8_t *input, int8_t *hidden,
                         int16_t *cell, int32_t rows, int16_t *forget_gate, int16_t *input_gate, int16_t *cell_gate,
                         int16_t *scratch, int8_t *output) {
    const int32_t n = rows * p->state_size;
    lt_lstm_gate(p, w, 1, input, hidden, rows, forget_gate, scratch);
    lt_lstm_gate(p, w, 0, input, hidden, rows, input_gate, scratch);
    lt_lstm_gate(p, w, 2, input, hidden, rows, cell_gate, scratch);

    /* cell = forget * cell + input * cell_gate, saturated, then clipped */
    for (int32_t i = 0; i < n; ++i) {
        cell[i] = (int16_t)lt_mul_s16(forget_gate[i], cell[i], p->forget_multiplier, p->forget_shift, 0, INT16_MIN,
                                      INT16_MAX);
        input_gate[i] = (int16_t)lt_mul_s16(input_gate[i], cell_gate[i], p->update_multiplier, p->update_shift, 0,
                                            INT16_MIN, INT16_MAX);
    }
    lt_add_sat_s16(cell, input_gate, n);
    if (p->cell_clip > 0)
        for (int32_t i = 0; i < n; ++i) cell[i] = (int16_t)lt_clamp(cell[i], -p->cell_clip, p->cell_clip);

    /* hidden = tanh(cell) * output gate; the output gate reuses the input gate's buffer as TFLM does */
    int16_t *output_gate = input_gate;
    lt_lstm_gate(p, w, 3, input, hidden, rows, output_gate, scratch);
    int16_t *cell_tanh = forget_gate;
    lt_tanh_s16(cell, cell_tanh, n, p->cell_tanh_multiplier, p->cell_tanh_shift);
    for (int32_t i = 0; i < n; ++i)
        hidden[i] = (int8_t)lt_mul_s16(cell_tanh[i], output_gate[i], p->hidden_multiplier, p->hidden_shift,
                                       p->hidden_zero_point, INT8_MIN, INT8_MAX);
    memcpy(output, hidden, (size_t)n);
}

void lt_lstm_s8_s16(const lt_lstm_params *p, const lt_lstm_weights *w, const int8_t *input, int8_t *hidden,
                    int16_t *cell, int16_t *scratch0, int16_t *scratch1, int16_t *scratch2, int16_t *scratch3,
                    int8_t *output) {
    if (p->time_major) {
        /* every batch row in one step; input [time, batch, input_size], output [time, batch, state_size] */
        const int32_t rows = p->batches;
        for (int32_t t = 0; t < p->time_steps; ++t)
            lt_lstm_step(p, w, input + t * rows * p->input_size, hidden, cell, rows, scratch0, scratch1, scratch2,
                         scratch3, output + t * rows * p->state_size);
        return;
    }
    /* batch-major: each batch runs its whole sequence on its own rows of the state */
    for (int32_t b = 0; b < p->batches; ++b) {
        for (int32_t t = 0; t < p->time_steps; ++t) {
            const int32_t step = b * p->time_steps + t;
            lt_lstm_step(p, w, input + step * p->input_size, hidden + b * p->state_size, cell + b * p->state_size,
                         1, scratch0, scratch1, scratch2, scratch3, output + step * p->state_size);
        }
    }
}
