/* UNIDIRECTIONAL_SEQUENCE_LSTM, integer (TFLM's lstm_eval.h EvalLstm<int8_t, int8_t, int16_t, int32_t>).
 *
 * One step per time step (time-major: all batches at once; batch-major: one batch row at a time, each with its
 * own slice of the state): the four gates from the input and the previous hidden state (dot products over
 * weights lowtide packs four rows by four, SMLAD on the DSP cores: lt_conv_dsp.h), the cell update, then
 * hidden = tanh(cell) * output gate, copied to the output. The int16 sigmoid and tanh are lt_activation.c's
 * (reference_integer_ops' LUT interpolations). int32 sums wrap as TFLM's do on its targets. */
#include <string.h>

#include "lt_conv_dsp.h"
#include "lt_fixedpoint.h"
#include "lt_runtime.h"

/* reference_integer_ops::Tanh (multiplier 0: the power-of-two case) and Logistic for int16, in place allowed. */
static void lt_lstm_tanh(const int16_t *input, int16_t *output, int32_t count, int32_t multiplier, int32_t shift) {
    const lt_activation_params p = {.count = count, .multiplier = multiplier, .shift = shift};
    lt_tanh_s16(&p, input, output);
}

/* One gate for `rows` rows: FC(input) with the gate's bias and FC(hidden), each requantized to Q3.12 and saturated
 * to int16 as reference_integer_ops::FullyConnected does, their saturating sum, then sigmoid (the cell gate: tanh).
 * The weights are packed four rows by four and both zero points are folded offline into the biases
 * (bias - zero_point * row sum), so the dot products multiply raw int8 values with SMLAD. */
static void lt_lstm_gate(const lt_lstm_params *p, const lt_lstm_weights *w, int32_t gate, const int8_t *input,
                         const int8_t *hidden, int32_t rows, int16_t *out) {
    const int32_t units = p->state_size, in_k = p->input_size;
    const int32_t in_m = p->input_multiplier[gate], in_s = p->input_shift[gate], in_r = p->input_round[gate];
    const int32_t rec_m = p->recurrent_multiplier[gate], rec_s = p->recurrent_shift[gate];
    const int32_t rec_r = p->recurrent_round[gate];
    for (int32_t r = 0; r < rows; ++r) {
        const int8_t *x = input + r * in_k, *h = hidden + r * units;
        const uint32_t x_tail = lt_tail_word(x, in_k), h_tail = lt_tail_word(h, units);
        const uint32_t *wi = w->input_weights[gate], *wr = w->recurrent_weights[gate];
        const int32_t *bi = w->input_bias[gate], *br = w->recurrent_bias[gate];
        int16_t *o = out + r * units;
        int32_t u = 0;
        for (; u + 4 <= units; u += 4) {
            int32_t acc_in[4] = {bi[u], bi[u + 1], bi[u + 2], bi[u + 3]};
            int32_t acc_rec[4] = {br[u], br[u + 1], br[u + 2], br[u + 3]};
            wi = lt_dot_rows4_s8(x, in_k, x_tail, wi, acc_in);
            wr = lt_dot_rows4_s8(h, units, h_tail, wr, acc_rec);
            for (int32_t j = 0; j < 4; ++j) {
                const int32_t a = lt_ssat16(lt_scale_short_or_full(acc_in[j], in_m, in_s, in_r));
                const int32_t b = lt_ssat16(lt_scale_short_or_full(acc_rec[j], rec_m, rec_s, rec_r));
                o[u + j] = (int16_t)lt_ssat16(a + b);
            }
        }
        for (; u < units; ++u) {
            int32_t acc_in[1] = {bi[u]}, acc_rec[1] = {br[u]};
            wi = lt_dot_row_s8(x, in_k, x_tail, wi, acc_in);
            wr = lt_dot_row_s8(h, units, h_tail, wr, acc_rec);
            const int32_t a = lt_ssat16(lt_scale_short_or_full(acc_in[0], in_m, in_s, in_r));
            const int32_t b = lt_ssat16(lt_scale_short_or_full(acc_rec[0], rec_m, rec_s, rec_r));
            o[u] = (int16_t)lt_ssat16(a + b);
        }
    }
    /* Q3.12 input: the power-of-two case with no shift */
    const lt_activation_params q312 = {.count = rows * units, .multiplier = 0, .shift = 0};
    if (gate == 2) lt_tanh_s16(&q312, out, out);
    else lt_logistic_s16(&q312, out, out);
}

/* AddElementWise: saturating int16 sum, in place into `a`. */
static void lt_add_sat_s16(int16_t *a, const int16_t *b, int32_t count) {
    for (int32_t i = 0; i < count; ++i) a[i] = (int16_t)lt_clamp(a[i] + b[i], INT16_MIN, INT16_MAX);
}

/* MulElementwise on symmetric int16 inputs: the product requantized, plus the output zero point, clamped. */
static int32_t lt_lstm_mul(int32_t a, int32_t b, int32_t multiplier, int32_t shift, int32_t offset, int32_t lo,
                          int32_t hi) {
    return lt_clamp(offset + lt_scale_by_quantized_multiplier(a * b, multiplier, shift), lo, hi);
}

/* Every gate reads only the input and the previous hidden state, so all four run before the state changes. */
static void lt_lstm_step(const lt_lstm_params *p, const lt_lstm_weights *w, const int8_t *input, int8_t *hidden,
                         int16_t *cell, int32_t rows, int16_t *forget_gate, int16_t *input_gate, int16_t *cell_gate,
                         int16_t *output_gate, int8_t *output) {
    const int32_t n = rows * p->state_size;
    lt_lstm_gate(p, w, 1, input, hidden, rows, forget_gate);
    lt_lstm_gate(p, w, 0, input, hidden, rows, input_gate);
    lt_lstm_gate(p, w, 2, input, hidden, rows, cell_gate);
    lt_lstm_gate(p, w, 3, input, hidden, rows, output_gate);

    /* cell = forget * cell + input * cell_gate, saturated, then clipped */
    for (int32_t i = 0; i < n; ++i) {
        cell[i] = (int16_t)lt_lstm_mul(forget_gate[i], cell[i], p->forget_multiplier, p->forget_shift, 0, INT16_MIN,
                                      INT16_MAX);
        input_gate[i] = (int16_t)lt_lstm_mul(input_gate[i], cell_gate[i], p->update_multiplier, p->update_shift, 0,
                                            INT16_MIN, INT16_MAX);
    }
    lt_add_sat_s16(cell, input_gate, n);
    if (p->cell_clip > 0)
        for (int32_t i = 0; i < n; ++i) cell[i] = (int16_t)lt_clamp(cell[i], -p->cell_clip, p->cell_clip);

    /* hidden = tanh(cell) * output gate */
    int16_t *cell_tanh = forget_gate;
    lt_lstm_tanh(cell, cell_tanh, n, p->cell_tanh_multiplier, p->cell_tanh_shift);
    for (int32_t i = 0; i < n; ++i)
        hidden[i] = (int8_t)lt_lstm_mul(cell_tanh[i], output_gate[i], p->hidden_multiplier, p->hidden_shift,
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
