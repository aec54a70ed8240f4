"""ADD, MUL, QUANTIZE and DEQUANTIZE: calls into firmware/runtime/lt_elementwise.c."""

from __future__ import annotations

import math

from lowtide.compile import quantization as q
from lowtide.compile.lowering.emitter import (
    MAX_DIMS,
    Kernel,
    ModelEmitter,
    Unsupported,
    c_float,
    float_activation,
    quantized_activation,
    require,
    strides,
    tensor_types,
)
from lowtide.model.ir import Operator


def broadcast_steps(e: ModelEmitter, op: Operator) -> dict[str, object]:
    """lt_binary_params' shape fields: the output's dims and each of the first two inputs' steps along them."""
    out_shape = e.tensor(op.outputs[0]).shape or (1,)
    require(len(out_shape) <= MAX_DIMS, f"more than {MAX_DIMS} dimensions")
    steps = []
    for t in op.inputs[:2]:
        shape = e.tensor(t).shape
        shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
        require(all(s in (1, o) for s, o in zip(shape, out_shape)), "inputs do not broadcast to the output")
        steps.append([st if s > 1 else 0 for s, st in zip(shape, strides(shape))])
    return {"ndim": len(out_shape), "dims": list(out_shape), "step1": steps[0], "step2": steps[1]}


def _binary(e, op, name, kind):
    ins, outs = tensor_types(e, op)
    params = broadcast_steps(e, op)
    if ins == ["int8", "int8"] and outs == ["int8"]:
        q1, q2, qo = (e.quantization(t) for t in (op.inputs[0], op.inputs[1], op.outputs[0]))
        params.update(input1_offset=-q1.zero_point, input2_offset=-q2.zero_point, output_offset=qo.zero_point)
        if kind == "add":
            params.update(q.add_params_int8(q1.scale, q2.scale, qo.scale))
        else:
            m, s = q.quantize_multiplier(float(q1.scale) * float(q2.scale) / float(qo.scale))
            params.update(output_multiplier=m, output_shift=s)
        params.update(quantized_activation(e, op, op.outputs[0]))
        suffix = "s8"
    elif ins == ["float32", "float32"] and outs == ["float32"]:
        params.update(float_activation(op))
        suffix = "f32"
    else:
        raise Unsupported(f"types {ins} -> {outs}")
    p = e.struct(f"{name}_params", "lt_binary_params", params)
    return (f"lt_{kind}_{suffix}({p}, {e.pointer(op.inputs[0])}, {e.pointer(op.inputs[1])}, "
            f"{e.pointer(op.outputs[0], True)});")


def lower_add(e, op, name):
    return _binary(e, op, name, "add")


def lower_mul(e, op, name):
    return _binary(e, op, name, "mul")


def lower_quantize(e, op, name):
    ins, outs = tensor_types(e, op)
    count = math.prod(e.tensor(op.inputs[0]).shape)
    out_q = e.quantization(op.outputs[0])
    if ins == ["float32"] and outs == ["int8"]:
        return (f"lt_quantize_f32_s8({e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)}, {count}, "
                f"{c_float(out_q.scale)}, {out_q.zero_point});")
    # Requantize (reference_ops::Requantize): the int8 -> int8 and int16 -> int8/int32 cases TFLM's QUANTIZE has.
    requantize = {("int8", "int8"): "lt_requantize_s8", ("int8", "uint8"): "lt_requantize_s8_u8",
                  ("int16", "int8"): "lt_requantize_s16_s8",
                  ("int16", "int32"): "lt_requantize_s16_s32"}.get((ins[0], outs[0]))
    if len(ins) == 1 and requantize:
        in_q = e.quantization(op.inputs[0])
        m, s = q.quantize_multiplier(float(in_q.scale) / float(out_q.scale))
        return (f"{requantize}({e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)}, {count}, "
                f"{in_q.zero_point}, {m}, {s}, {out_q.zero_point});")
    raise Unsupported(f"types {ins} -> {outs}")


def lower_dequantize(e, op, name):
    ins, outs = tensor_types(e, op)
    require(ins == ["int8"] and outs == ["float32"], f"types {ins} -> {outs}")
    in_q = e.quantization(op.inputs[0])
    count = math.prod(e.tensor(op.inputs[0]).shape)
    return (f"lt_dequantize_s8_f32({e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)}, {count}, "
            f"{float(in_q.scale)!r}, {in_q.zero_point});")



KERNELS = (
    Kernel("ADD", lower_add, ("int8", "float32"), "broadcasting up to 6-D"),
    Kernel("MUL", lower_mul, ("int8", "float32"), "broadcasting up to 6-D"),
    Kernel("QUANTIZE", lower_quantize, ("float32->int8", "int8", "int8->uint8", "int16->int8", "int16->int32")),
    Kernel("DEQUANTIZE", lower_dequantize, ("int8->float32",)),
)
