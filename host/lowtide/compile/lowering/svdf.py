"""SVDF: calls into firmware/runtime/lt_svdf.c, with its weights packed and its zero points folded offline."""

from __future__ import annotations

import numpy as np

from lowtide.compile import quantization as q
from lowtide.compile.kernel_params import SvdfParams
from lowtide.compile.lowering.emitter import (
    Kernel,
    ModelEmitter,
    attributes_of,
    folded_bias,
    pack_rows_by_four,
    require,
    tensor_types,
    wrapped_int32,
)
from lowtide.model.attributes import SvdfAttributes
from lowtide.model.ir import Operator, TensorKind


def lower_svdf(e: ModelEmitter, op: Operator, name: str) -> str:
    """Integer SVDF as svdf_common.cc's PrepareSvdf / EvalIntegerSvdfReference; the state is a variable tensor."""
    ins, outs = tensor_types(e, op)
    require(len(op.inputs) == 5, "SVDF needs 5 inputs")
    data, features, times, bias, state = op.inputs
    require(ins[0] == "int8" and ins[1] == "int8" and outs == ["int8"], f"types {ins} -> {outs}")
    require(ins[2] in ("int16", "int8") and ins[4] == ins[2], f"time weights {ins[2]} with state {ins[4]}")
    require(bias < 0 or ins[3] == "int32", "integer SVDF needs an int32 bias")
    require(e.tensor(state).kind is TensorKind.VARIABLE, "the activation state must be a variable tensor")
    batches, input_size = e.tensor(data).shape
    num_filters = e.tensor(features).shape[0]
    memory = e.tensor(times).shape[1]
    rank = attributes_of(op, SvdfAttributes).rank
    require(rank > 0 and num_filters % rank == 0, f"{num_filters} filters do not divide into rank {rank}")
    require(e.tensor(state).shape == (batches, memory * num_filters), "state shape does not match")
    in_q, f_q, t_q, s_q, out_q = (e.quantization(t) for t in (data, features, times, state, op.outputs[0]))
    f32 = np.float32
    # Prepare multiplies and divides the float32 scales in float32, then widens to double
    m1, s1 = q.quantize_multiplier(float(f32(in_q.scale) * f32(f_q.scale) / f32(s_q.scale)))
    m2, s2 = q.quantize_multiplier(float(f32(s_q.scale) * f32(t_q.scale) / f32(out_q.scale)))
    p = e.struct(
        f"{name}_params",
        SvdfParams(
            batches=batches,
            input_size=input_size,
            num_filters=num_filters,
            num_units=num_filters // rank,
            rank=rank,
            memory_size=memory,
            input_zero_point=in_q.zero_point,
            output_zero_point=out_q.zero_point,
            state_zero_point=s_q.zero_point,
            feature_multiplier=m1,
            feature_shift=s1,
            output_multiplier=m2,
            output_shift=s2,
        ),
    )
    rows, time_rows = e.constant_values(features), e.constant_values(times)
    packed = e.array(f"{name}_feature_weights", "uint32_t", pack_rows_by_four(rows), aligned=True)
    feature_bias = e.array(f"{name}_feature_bias", "int32_t", wrapped_int32(folded_bias(None, in_q.zero_point, rows)))
    time_offset = e.array(f"{name}_time_offset", "int32_t", wrapped_int32(folded_bias(None, s_q.zero_point, time_rows)))
    e.declarations.append(
        f"static const lt_svdf_weights {name}_weights = {{{packed}, {feature_bias}, {e.pointer(times)}, "
        f"{time_offset}, {e.pointer(bias) if bias >= 0 else 'NULL'}}};"
    )
    args = [
        p,
        f"&{name}_weights",
        e.pointer(data),
        e.pointer(state, True),
        e.scratch_pointer(op, 0),
        e.scratch_pointer(op, 1),
        e.pointer(op.outputs[0], True),
    ]
    return f"lt_svdf_s8_{'s16' if ins[2] == 'int16' else 's8'}({', '.join(args)});"


KERNELS = (Kernel("SVDF", lower_svdf, ("int8",), "int16 or int8 time weights and state"),)
