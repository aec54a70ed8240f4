"""UNIDIRECTIONAL_SEQUENCE_LSTM: calls into firmware/runtime/lt_lstm.c."""

from __future__ import annotations

import math

from lowtide.compile import quantization as q
from lowtide.compile.kernel_params import LstmParams
from lowtide.compile.lowering.emitter import (
    Kernel,
    ModelEmitter,
    Unsupported,
    attributes_of,
    folded_bias,
    fused_activation,
    pack_rows_by_four,
    require,
    short_round,
    tensor_types,
    wrapped_int32,
)
from lowtide.model.attributes import SequenceLstmAttributes
from lowtide.model.ir import Operator, TensorKind

# UNIDIRECTIONAL_SEQUENCE_LSTM inputs (lstm_shared.h): weights per gate in the order input, forget, cell, output
_LSTM_INPUT_WEIGHTS, _LSTM_RECURRENT_WEIGHTS, _LSTM_BIASES = range(1, 5), range(5, 9), range(12, 16)
_LSTM_VARIANT_INPUTS = {"peephole weights": range(9, 12), "projection": range(16, 18), "layer norm": range(20, 24)}
_LSTM_HIDDEN, _LSTM_CELL = 18, 19
_ACT_TANH = 4  # the cell gate's activation; a flatbuffer has no code for the sigmoid TFLM's kernel also knows


def lower_unidirectional_sequence_lstm(e: ModelEmitter, op: Operator, name: str) -> str:
    """Integer LSTM (int8 activations and weights, int16 cell state) as TFLM's UnidirectionalSequenceLstmPrepare
    and EvalLstm<int8_t, int8_t, int16_t, int32_t>: the standard LSTM only, hidden and cell state variable tensors."""
    ins, outs = tensor_types(e, op)
    require(len(op.inputs) == 24 and len(op.outputs) == 1, "LSTM needs 24 inputs and 1 output")
    for variant, indices in _LSTM_VARIANT_INPUTS.items():
        require(all(op.inputs[i] < 0 for i in indices), f"LSTM with {variant} is not supported")
    data, hidden, cell = op.inputs[0], op.inputs[_LSTM_HIDDEN], op.inputs[_LSTM_CELL]
    weights = [op.inputs[i] for i in (*_LSTM_INPUT_WEIGHTS, *_LSTM_RECURRENT_WEIGHTS)]
    biases = [op.inputs[i] for i in _LSTM_BIASES]
    require(all(t >= 0 for t in weights + biases), "LSTM without input gate (CIFG) or without biases")
    require(
        ins[0] == "int8"
        and outs == ["int8"]
        and ins[_LSTM_HIDDEN] == "int8"
        and ins[_LSTM_CELL] == "int16"
        and all(e.tensor(t).dtype == "int8" for t in weights)
        and all(e.tensor(t).dtype == "int32" for t in biases),
        f"types {ins} -> {outs}",
    )
    require(
        all(e.tensor(t).kind is TensorKind.VARIABLE for t in (hidden, cell)),
        "the hidden and cell states must be variable tensors",
    )
    o = attributes_of(op, SequenceLstmAttributes)
    activation = fused_activation(op)
    require(activation == _ACT_TANH, f"cell gate activation {activation} (only TANH)")
    time_major = o.time_major
    shape = e.tensor(data).shape
    require(len(shape) == 3, "the input must be 3-D")
    time_steps, batches = (shape[0], shape[1]) if time_major else (shape[1], shape[0])
    input_size = shape[2]
    state_size = e.tensor(hidden).shape[-1]
    require(
        all(e.tensor(t).shape == (state_size, input_size) for t in weights[:4])
        and all(e.tensor(t).shape == (state_size, state_size) for t in weights[4:])
        and all(e.tensor(t).shape == (state_size,) for t in biases),
        "weight shapes do not match the state",
    )
    require(
        all(math.prod(e.tensor(t).shape) == batches * state_size for t in (hidden, cell))
        and e.tensor(op.outputs[0]).shape == shape[:2] + (state_size,),
        "state or output shape does not match",
    )
    in_q, hidden_q, cell_q = e.quantization(data), e.quantization(hidden), e.quantization(cell)
    weight_q = [e.quantization(t) for t in weights]
    require(
        all(len(w.scales) == 1 and w.zero_point == 0 for w in weight_q), "LSTM weights must be per-tensor and symmetric"
    )
    try:
        power = q.lstm_cell_scale_power(cell_q.scale)
    except ValueError as exc:
        raise Unsupported(str(exc)) from None
    gate_in = [q.quantize_multiplier(float(in_q.scale) * w.scale / q.LSTM_GATE_INPUT_SCALE) for w in weight_q[:4]]
    gate_rec = [q.quantize_multiplier(float(hidden_q.scale) * w.scale / q.LSTM_GATE_INPUT_SCALE) for w in weight_q[4:]]
    gate_out = q.LSTM_GATE_OUTPUT_SCALE
    forget = q.lstm_mul_multiplier(gate_out, cell_q.scale, cell_q.scale)
    update = q.lstm_mul_multiplier(gate_out, gate_out, cell_q.scale)
    hidden_mul = q.lstm_mul_multiplier(gate_out, gate_out, hidden_q.scale)
    tanh_multiplier, tanh_shift = q.lstm_tanh_input_scaling(power)
    packed, folded, rounds = [], [], []
    for gate in range(4):
        for side, zero_point, bias, (_, shift) in (
            ("input", in_q.zero_point, biases[gate], gate_in[gate]),
            ("recurrent", hidden_q.zero_point, None, gate_rec[gate]),
        ):
            rows = e.constant_values(weights[gate if side == "input" else 4 + gate])
            total = folded_bias(e.constant_values(bias) if bias is not None else None, zero_point, rows)
            packed.append(e.array(f"{name}_{side}_weights{gate}", "uint32_t", pack_rows_by_four(rows), aligned=True))
            folded.append(e.array(f"{name}_{side}_bias{gate}", "int32_t", wrapped_int32(total)))
            rounds.append(short_round(total, rows, shift))
    e.declarations.append(
        f"static const lt_lstm_weights {name}_weights = {{{{{', '.join(packed[0::2])}}}, "
        f"{{{', '.join(packed[1::2])}}}, {{{', '.join(folded[0::2])}}}, {{{', '.join(folded[1::2])}}}}};"
    )
    p = e.struct(
        f"{name}_params",
        LstmParams(
            batches=batches,
            time_steps=time_steps,
            input_size=input_size,
            state_size=state_size,
            time_major=int(time_major),
            input_zero_point=in_q.zero_point,
            hidden_zero_point=hidden_q.zero_point,
            input_multiplier=[m for m, _ in gate_in],
            input_shift=[s for _, s in gate_in],
            recurrent_multiplier=[m for m, _ in gate_rec],
            recurrent_shift=[s for _, s in gate_rec],
            input_round=rounds[0::2],
            recurrent_round=rounds[1::2],
            forget_multiplier=forget[0],
            forget_shift=forget[1],
            update_multiplier=update[0],
            update_shift=update[1],
            hidden_multiplier=hidden_mul[0],
            hidden_shift=hidden_mul[1],
            cell_clip=q.lstm_cell_clip(o.cell_clip, cell_q.scale),
            cell_tanh_multiplier=tanh_multiplier,
            cell_tanh_shift=tanh_shift,
        ),
    )
    scratch = [e.scratch_pointer(op, k, "int16_t") for k in range(4)]
    args = [
        p,
        f"&{name}_weights",
        e.pointer(data),
        e.pointer(hidden, True),
        e.pointer(cell, True),
        *scratch,
        e.pointer(op.outputs[0], True),
    ]
    return f"lt_lstm_s8_s16({', '.join(args)});"


KERNELS = (
    Kernel(
        "UNIDIRECTIONAL_SEQUENCE_LSTM",
        lower_unidirectional_sequence_lstm,
        ("int8",),
        "int16 cell state; no CIFG, peephole, projection or layer norm",
    ),
)
