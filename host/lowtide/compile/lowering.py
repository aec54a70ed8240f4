"""Lowering of each TFLite operator to one call into the lowtide runtime (firmware/runtime/lt_runtime.h).

Every operator is turned into a C statement plus the const data it needs (weights, per-channel multipliers and
a parameter struct), all computed the way the matching TFLM kernel's Prepare computes them. An operator or
type combination the runtime does not implement raises `Unsupported` with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from lowtide.compile import quantization as q
from lowtide.model.ir import Graph, Operator, Tensor, TensorKind
from lowtide.model.reader import buffer_bytes

MAX_DIMS = 6
C_TYPES = {"int8": "int8_t", "uint8": "uint8_t", "int16": "int16_t", "int32": "int32_t", "float32": "float"}
NUMPY_TYPES = {"int8": np.int8, "uint8": np.uint8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
               "float32": np.float32}
PADDING_SAME = 0  # TFLite Padding enum; VALID is 1


STATE_OBJECT = "state"  # the generated code's static struct of variable tensors and resource variables


def variable_member(index: int) -> str:
    return f"tensor{index}"


@dataclass(frozen=True)
class StateMember:
    """One member of the generated `state` struct: an array that persists across invocations, or a flag."""

    name: str
    ctype: str
    count: int  # elements; 0 for a scalar flag
    element_bytes: int
    reset_byte: int | None  # the byte `reset` fills the array with; None: `reset` leaves it alone

    @property
    def nbytes(self) -> int:
        return max(self.count, 1) * self.element_bytes


@dataclass(frozen=True)
class ResourceVariable:
    """A resource variable (VAR_HANDLE container/shared_name) held as bytes in the state struct. As in TFLM's
    MicroResourceVariables, its size and the byte Reset() fills it with (the int8 zero point, else 0) come from
    the first ASSIGN_VARIABLE value tensor in Prepare order (subgraph 0 first)."""

    member: str
    nbytes: int
    reset_byte: int


def _resource_key(op: Operator) -> tuple[bytes, bytes]:
    return bytes(op.options.container or b""), bytes(op.options.sharedName or b"")


class Unsupported(Exception):
    """The runtime has no kernel for this operator as the model uses it."""


@dataclass(frozen=True)
class Quantization:
    scales: tuple[float, ...]
    zero_points: tuple[int, ...]

    @property
    def scale(self) -> float:
        return self.scales[0] if self.scales else 0.0

    @property
    def zero_point(self) -> int:
        return self.zero_points[0] if self.zero_points else 0


def c_float(value: float) -> str:
    """A float32 literal; 9 significant digits round-trip every float32 exactly."""
    value = float(np.float32(value))
    if math.isinf(value):
        return "FLT_MAX" if value > 0 else "-FLT_MAX"
    if math.isnan(value):
        raise Unsupported("a NaN constant")
    text = f"{value:.9g}"
    return text + ("f" if any(c in text for c in ".e") else ".0f")


def c_int(value: int) -> str:
    value = int(value)
    return "(-2147483647 - 1)" if value == -(1 << 31) else str(value)


def strides(shape: tuple[int, ...]) -> list[int]:
    out = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        out[d] = out[d + 1] * shape[d + 1]
    return out


class ModelEmitter:
    """Collects the C declarations of one model while its operators are lowered."""

    def __init__(self, graph: Graph, model_data: bytes, offsets: dict[int, int],
                 scratch: dict[int, list[int]] | None = None):
        self.graph = graph
        self.sg = graph.main
        self.raw_tensors = graph.raw.subgraphs[0].tensors
        self.model_data = model_data
        self.offsets = offsets  # activation tensor index -> arena offset
        self.scratch = scratch or {}  # operator index -> arena offsets of its kernel scratch buffers, in request order
        self.declarations: list[str] = []
        self.variables: dict[int, Tensor] = {}  # variable tensors the operators use: static state, not arena
        self.call_once_flags: list[str] = []  # one per CALL_ONCE: set once its init subgraph has run
        self._constants: dict[int, str] = {}
        self.resources, self._handles = self._resource_variables()

    # ---- resource variables ------------------------------------------------------------------------------
    def _resource_variables(self) -> tuple[dict[tuple[bytes, bytes], ResourceVariable], dict[tuple[int, int], tuple]]:
        handles = {(sg.index, op.outputs[0]): _resource_key(op) for sg in self.graph.subgraphs
                   for op in sg.operators if op.opcode == "VAR_HANDLE"}
        resources: dict[tuple[bytes, bytes], ResourceVariable] = {}
        for sg in self.graph.subgraphs:
            raw = self.graph.raw.subgraphs[sg.index].tensors
            for op in sg.operators:
                key = handles.get((sg.index, op.inputs[0])) if op.opcode == "ASSIGN_VARIABLE" else None
                if key is None or key in resources:
                    continue
                value = sg.tensors[op.inputs[1]]
                qp = raw[op.inputs[1]].quantization
                zero = int(qp.zeroPoint[0]) if value.dtype == "int8" and qp is not None and qp.zeroPoint is not None \
                    and len(qp.zeroPoint) else 0
                resources[key] = ResourceVariable(f"resource{len(resources)}", value.nbytes, zero)
        return resources, handles

    def resource(self, subgraph: int, handle: int, nbytes: int) -> str:
        """The state member behind a resource tensor; every read and assignment must move the same bytes."""
        key = self._handles.get((subgraph, handle))
        _require(key is not None, f"resource tensor {handle} does not come from a VAR_HANDLE")
        variable = self.resources.get(key)
        _require(variable is not None, f"resource variable {key[1].decode(errors='replace')} is never assigned")
        _require(variable.nbytes == nbytes, f"resource variable {variable.member} holds {variable.nbytes} bytes, "
                                            f"not {nbytes}")
        return f"{STATE_OBJECT}.{variable.member}"

    def state_members(self) -> list[StateMember]:
        """Everything the generated code keeps between invocations. TFLM resets int8 variable tensors to their
        zero point and every other type to zero bytes; resource variables to their reset byte."""
        members = []
        for index, t in self.variables.items():
            size = _elem_size(t)
            reset = self.quantization(index, required=False).zero_point if t.dtype == "int8" else 0
            members.append(StateMember(variable_member(index), C_TYPES[t.dtype], t.nbytes // size, size, reset))
        members += [StateMember(r.member, "uint8_t", r.nbytes, 1, r.reset_byte) for r in self.resources.values()]
        members += [StateMember(flag, "uint8_t", 0, 1, None) for flag in self.call_once_flags]
        return members

    # ---- tensors -----------------------------------------------------------------------------------------
    def tensor(self, index: int) -> Tensor:
        return self.sg.tensors[index]

    def quantization(self, index: int, required: bool = True) -> Quantization:
        """A tensor's scales and zero points; quantized kernels require them to be there."""
        qp = self.raw_tensors[index].quantization
        if qp is None or qp.scale is None or len(qp.scale) == 0 or not any(float(s) > 0 for s in qp.scale):
            if required:
                raise Unsupported(f"tensor {index} '{self.tensor(index).name}' has no quantization parameters")
            return Quantization((), ())
        zps = qp.zeroPoint if qp.zeroPoint is not None else [0] * len(qp.scale)
        return Quantization(tuple(float(s) for s in qp.scale), tuple(int(z) for z in zps))

    def constant_values(self, index: int) -> np.ndarray:
        t = self.tensor(index)
        if t.kind is not TensorKind.CONSTANT:
            raise Unsupported(f"tensor {index} '{t.name}' must be a constant")
        if t.dtype not in NUMPY_TYPES:
            raise Unsupported(f"constant tensor {index} has type {t.dtype}")
        data = buffer_bytes(self.graph.raw.buffers[t.buffer], self.model_data, self.graph.path)
        return np.frombuffer(data, dtype=NUMPY_TYPES[t.dtype]).reshape(t.shape)

    def pointer(self, index: int, writable: bool = False) -> str:
        """C expression for a tensor's data: a place in the arena, or a const array in flash."""
        t = self.tensor(index)
        ctype = C_TYPES.get(t.dtype)
        if ctype is None:
            raise Unsupported(f"tensor {index} '{t.name}' has type {t.dtype}")
        if t.kind is TensorKind.ACTIVATION:
            if index not in self.offsets:
                raise Unsupported(f"tensor {index} '{t.name}' has no place in the arena (empty or unused)")
            return f"(({ctype} *)(arena + {self.offsets[index]}u))"
        if t.kind is TensorKind.VARIABLE:
            self.variables[index] = t
            return f"{STATE_OBJECT}.{variable_member(index)}"
        if writable:
            raise Unsupported(f"tensor {index} '{t.name}' is written but is not an activation")
        if index not in self._constants:
            name = f"tensor{index}"
            self.array(name, ctype, self.constant_values(index).reshape(-1))
            self._constants[index] = name
        return self._constants[index]

    def scratch_pointer(self, op: Operator, k: int, ctype: str = "int32_t") -> str:
        """Kernel scratch buffer k of `op`, where the memory plan put it in the arena."""
        buffers = self.scratch.get(op.index, [])
        _require(k < len(buffers), f"the memory plan has no scratch buffer {k} for this operator")
        return f"(({ctype} *)(arena + {buffers[k]}u))"

    # ---- declarations ------------------------------------------------------------------------------------
    def array(self, name: str, ctype: str, values) -> str:
        values = np.asarray(values).reshape(-1)
        if ctype == "float":
            items = [c_float(v) for v in values.tolist()]
        else:  # map(str) for speed: weight arrays run to millions of elements
            items = list(map(str, values.tolist()))
            if values.size and values.min() == -(1 << 31):
                items = [c_int(int(v)) for v in items]
        if not items:
            items = ["0"]
        lines = [", ".join(items[i:i + 24]) for i in range(0, len(items), 24)]
        body = ",\n    ".join(lines)
        self.declarations.append(f"static const {ctype} {name}[{len(items)}] = {{\n    {body}\n}};")
        return name

    def struct(self, name: str, ctype: str, fields: dict[str, object]) -> str:
        parts = []
        for key, value in fields.items():
            if isinstance(value, (list, tuple)):
                # a list fills an LT_MAX_DIMS array (zero-padded); a tuple is a fixed-size array given in full
                padded = list(value) + [0] * (MAX_DIMS - len(value)) if isinstance(value, list) else list(value)
                parts.append(f".{key} = {{{', '.join(c_int(v) for v in padded)}}}")
            elif isinstance(value, float):
                parts.append(f".{key} = {c_float(value)}")
            else:
                parts.append(f".{key} = {c_int(value)}")
        self.declarations.append(f"static const {ctype} {name} = {{{', '.join(parts)}}};")
        return f"&{name}"


# ---- operator lowerings ----------------------------------------------------------------------------------

def _types(e: ModelEmitter, op: Operator) -> tuple[list[str], list[str]]:
    return ([e.tensor(t).dtype if t >= 0 else "-" for t in op.inputs], [e.tensor(t).dtype for t in op.outputs])


def _require(condition: bool, reason: str) -> None:
    if not condition:
        raise Unsupported(reason)


def _activation(op: Operator) -> int:
    return int(getattr(op.options, "fusedActivationFunction", 0) or 0)


def _quantized_activation(e: ModelEmitter, op: Operator, output: int) -> dict[str, object]:
    out_q = e.quantization(output)
    try:
        lo, hi = q.activation_range_int8(_activation(op), out_q.scale, out_q.zero_point)
    except ValueError as exc:
        raise Unsupported(str(exc)) from None
    return {"act_min": lo, "act_max": hi}


def _float_activation(op: Operator) -> dict[str, object]:
    try:
        lo, hi = q.activation_range_float(_activation(op))
    except ValueError as exc:
        raise Unsupported(str(exc)) from None
    return {"act_min_f": lo, "act_max_f": hi}


def _out_size(padding: int, image: int, filt: int, stride: int, dilation: int) -> int:
    effective = (filt - 1) * dilation + 1
    return (image + stride - 1) // stride if padding == PADDING_SAME else (image + stride - effective) // stride


def _padding(stride: int, dilation: int, in_size: int, filt: int, out_size: int) -> int:
    effective = (filt - 1) * dilation + 1
    return max(0, (out_size - 1) * stride + effective - in_size) // 2


def _spatial(e: ModelEmitter, op: Operator, filter_h: int, filter_w: int) -> dict[str, int]:
    """Window geometry shared by convolutions and pools (ComputePaddingHeightWidth)."""
    in_shape, out_shape = e.tensor(op.inputs[0]).shape, e.tensor(op.outputs[0]).shape
    _require(len(in_shape) == 4 and len(out_shape) == 4, "only 4-D NHWC tensors are supported")
    o = op.options
    stride_h, stride_w = int(o.strideH), int(o.strideW)
    dil_h, dil_w = int(getattr(o, "dilationHFactor", 1) or 1), int(getattr(o, "dilationWFactor", 1) or 1)
    padding = int(o.padding)
    out_h = _out_size(padding, in_shape[1], filter_h, stride_h, dil_h)
    out_w = _out_size(padding, in_shape[2], filter_w, stride_w, dil_w)
    _require((out_h, out_w) == tuple(out_shape[1:3]), f"output shape {out_shape} does not match the padding")
    return {"batches": in_shape[0], "in_h": in_shape[1], "in_w": in_shape[2], "in_c": in_shape[3],
            "out_h": out_h, "out_w": out_w, "out_c": out_shape[3], "filter_h": filter_h, "filter_w": filter_w,
            "stride_h": stride_h, "stride_w": stride_w, "dilation_h": dil_h, "dilation_w": dil_w,
            "pad_h": _padding(stride_h, dil_h, in_shape[1], filter_h, out_h),
            "pad_w": _padding(stride_w, dil_w, in_shape[2], filter_w, out_w)}


def _weighted(e: ModelEmitter, op: Operator, name: str, kind: str) -> str:
    """CONV_2D, DEPTHWISE_CONV_2D: int8 per-channel or float32."""
    ins, outs = _types(e, op)
    filter_shape = e.tensor(op.inputs[1]).shape
    _require(len(filter_shape) == 4, "filter must be 4-D")
    geometry = _spatial(e, op, filter_shape[1], filter_shape[2])
    params = dict(geometry, filter_in_c=filter_shape[3] if kind == "conv2d" else 1,
                  depth_multiplier=geometry["out_c"] // geometry["in_c"] if kind == "depthwise_conv2d" else 1)
    if kind == "conv2d":
        _require(params["in_c"] % params["filter_in_c"] == 0, "input channels are not a multiple of the filter's")
    bias = op.inputs[2] if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
    if ins[:2] == ["int8", "int8"] and outs == ["int8"]:
        _require(bias is None or ins[2] == "int32", "int8 convolution needs an int32 bias")
        in_q, f_q, out_q = e.quantization(op.inputs[0]), e.quantization(op.inputs[1]), e.quantization(op.outputs[0])
        multipliers, shifts = q.per_channel_multipliers(in_q.scale, list(f_q.scales), out_q.scale, params["out_c"])
        params.update(input_offset=-in_q.zero_point, output_offset=out_q.zero_point,
                      **_quantized_activation(e, op, op.outputs[0]))
        return _weighted_call(e, op, name, f"lt_{kind}_s8", "lt_conv_params", params, bias, (multipliers, shifts))
    if ins[:2] == ["float32", "float32"] and outs == ["float32"]:
        params.update(_float_activation(op))
        return _weighted_call(e, op, name, f"lt_{kind}_f32", "lt_conv_params", params, bias)
    raise Unsupported(f"types {ins} -> {outs}")


def _weighted_call(e, op, name, function, struct_type, params, bias, requantization=None) -> str:
    """The C call of a kernel with weights: (params, input, filter, bias[, multipliers, shifts], output)."""
    params_ref = e.struct(f"{name}_params", struct_type, params)
    requant_refs = []
    if requantization:
        multipliers, shifts = requantization
        requant_refs = [e.array(f"{name}_multiplier", "int32_t", multipliers),
                        e.array(f"{name}_shift", "int32_t", shifts)]
    args = [params_ref, e.pointer(op.inputs[0]), e.pointer(op.inputs[1]),
            e.pointer(bias) if bias is not None else "NULL", *requant_refs, e.pointer(op.outputs[0], True)]
    return f"{function}({', '.join(args)});"


def lower_conv_2d(e, op, name):
    return _weighted(e, op, name, "conv2d")


def lower_depthwise_conv_2d(e, op, name):
    return _weighted(e, op, name, "depthwise_conv2d")


def lower_fully_connected(e, op, name):
    ins, outs = _types(e, op)
    _require(getattr(op.options, "weightsFormat", 0) == 0, "shuffled weights are not supported")
    filter_shape = e.tensor(op.inputs[1]).shape
    _require(len(filter_shape) == 2, "filter must be 2-D")
    out_depth, accum_depth = filter_shape
    input_elements = math.prod(e.tensor(op.inputs[0]).shape)
    _require(input_elements % accum_depth == 0, "input size is not a multiple of the filter depth")
    params = {"batches": input_elements // accum_depth, "accum_depth": accum_depth, "out_depth": out_depth}
    bias = op.inputs[2] if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
    if ins[:2] == ["int8", "int8"] and outs == ["int8"]:
        _require(bias is None or ins[2] == "int32", "int8 fully connected needs an int32 bias")
        in_q, f_q, out_q = e.quantization(op.inputs[0]), e.quantization(op.inputs[1]), e.quantization(op.outputs[0])
        multipliers, shifts = q.per_channel_multipliers(in_q.scale, list(f_q.scales), out_q.scale, out_depth)
        params.update(input_offset=-in_q.zero_point, filter_offset=-f_q.zero_point if len(f_q.scales) == 1 else 0,
                      output_offset=out_q.zero_point, **_quantized_activation(e, op, op.outputs[0]))
        return _weighted_call(e, op, name, "lt_fully_connected_s8", "lt_fc_params", params, bias,
                              (multipliers, shifts))
    if ins[:2] == ["float32", "float32"] and outs == ["float32"]:
        params.update(_float_activation(op))
        return _weighted_call(e, op, name, "lt_fully_connected_f32", "lt_fc_params", params, bias)
    raise Unsupported(f"types {ins} -> {outs}")


def _pool(e, op, name, kind):
    ins, outs = _types(e, op)
    params = _spatial(e, op, int(op.options.filterHeight), int(op.options.filterWidth))
    params.update(filter_in_c=1, depth_multiplier=1)
    if ins == ["int8"] and outs == ["int8"]:
        in_q, out_q = e.quantization(op.inputs[0]), e.quantization(op.outputs[0])
        _require(in_q == out_q, "int8 pooling needs equal input and output quantization")
        params.update(_quantized_activation(e, op, op.outputs[0]))
        suffix = "s8"
    elif ins == ["float32"] and outs == ["float32"]:
        params.update(_float_activation(op))
        suffix = "f32"
    else:
        raise Unsupported(f"types {ins} -> {outs}")
    p = e.struct(f"{name}_params", "lt_conv_params", params)
    return f"lt_{kind}_{suffix}({p}, {e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)});"


def lower_average_pool_2d(e, op, name):
    return _pool(e, op, name, "average_pool")


def lower_max_pool_2d(e, op, name):
    return _pool(e, op, name, "max_pool")


def _broadcast(e: ModelEmitter, op: Operator) -> dict[str, object]:
    out_shape = e.tensor(op.outputs[0]).shape or (1,)
    _require(len(out_shape) <= MAX_DIMS, f"more than {MAX_DIMS} dimensions")
    steps = []
    for t in op.inputs[:2]:
        shape = e.tensor(t).shape
        shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
        _require(all(s in (1, o) for s, o in zip(shape, out_shape)), "inputs do not broadcast to the output")
        steps.append([st if s > 1 else 0 for s, st in zip(shape, strides(shape))])
    return {"ndim": len(out_shape), "dims": list(out_shape), "step1": steps[0], "step2": steps[1]}


def _binary(e, op, name, kind):
    ins, outs = _types(e, op)
    params = _broadcast(e, op)
    if ins == ["int8", "int8"] and outs == ["int8"]:
        q1, q2, qo = (e.quantization(t) for t in (op.inputs[0], op.inputs[1], op.outputs[0]))
        params.update(input1_offset=-q1.zero_point, input2_offset=-q2.zero_point, output_offset=qo.zero_point)
        if kind == "add":
            params.update(q.add_params_int8(q1.scale, q2.scale, qo.scale))
        else:
            m, s = q.quantize_multiplier(float(q1.scale) * float(q2.scale) / float(qo.scale))
            params.update(output_multiplier=m, output_shift=s)
        params.update(_quantized_activation(e, op, op.outputs[0]))
        suffix = "s8"
    elif ins == ["float32", "float32"] and outs == ["float32"]:
        params.update(_float_activation(op))
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


def lower_softmax(e, op, name):
    ins, outs = _types(e, op)
    shape = e.tensor(op.inputs[0]).shape or (1,)
    depth = shape[-1]
    params: dict[str, object] = {"outer": math.prod(shape) // depth, "depth": depth, "beta": float(op.options.beta)}
    if ins == ["int8"] and outs == ["int8"]:
        out_q = e.quantization(op.outputs[0])
        _require(out_q.zero_point == -128 and np.float32(out_q.scale) == np.float32(1 / 256),
                 "int8 softmax output must have scale 1/256 and zero point -128")
        params.update(q.softmax_params_int8(op.options.beta, e.quantization(op.inputs[0]).scale))
        suffix = "s8"
    elif ins == ["int8"] and outs == ["int16"]:
        out_q = e.quantization(op.outputs[0])
        # SoftmaxPrepare's TF_LITE_ENSURE_NEAR: within 0.1% of 1/65536
        _require(out_q.zero_point == -32768 and abs(out_q.scale - 1 / 65536) <= 0.001 / 65536,
                 "int8 -> int16 softmax output must have scale 1/65536 and zero point -32768")
        params.update(q.softmax_params_int8(op.options.beta, e.quantization(op.inputs[0]).scale))
        suffix = "s8_s16"
    elif ins == ["float32"] and outs == ["float32"]:
        suffix = "f32"
    else:
        raise Unsupported(f"types {ins} -> {outs}")
    p = e.struct(f"{name}_params", "lt_softmax_params", params)
    return f"lt_softmax_{suffix}({p}, {e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)});"


def lower_logistic(e, op, name):
    ins, outs = _types(e, op)
    count = math.prod(e.tensor(op.inputs[0]).shape)
    if ins == ["int8"] and outs == ["int8"]:
        out_q = e.quantization(op.outputs[0])
        _require(out_q.zero_point == -128 and np.float32(out_q.scale) == np.float32(1 / 256),
                 "int8 logistic output must have scale 1/256 and zero point -128")
        in_q = e.quantization(op.inputs[0])
        lp = q.logistic_params_int8(in_q.scale)
        return (f"lt_logistic_s8({e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)}, {count}, "
                f"{in_q.zero_point}, {lp['input_range_radius']}, {lp['input_multiplier']}, {lp['input_left_shift']});")
    if ins == ["float32"] and outs == ["float32"]:
        return f"lt_logistic_f32({e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)}, {count});"
    raise Unsupported(f"types {ins} -> {outs}")


def lower_svdf(e, op, name):
    """Integer SVDF as svdf_common.cc's PrepareSvdf / EvalIntegerSvdfReference; the state is a variable tensor."""
    ins, outs = _types(e, op)
    _require(len(op.inputs) == 5, "SVDF needs 5 inputs")
    data, features, times, bias, state = op.inputs
    _require(ins[0] == "int8" and ins[1] == "int8" and outs == ["int8"], f"types {ins} -> {outs}")
    _require(ins[2] in ("int16", "int8") and ins[4] == ins[2], f"time weights {ins[2]} with state {ins[4]}")
    _require(bias < 0 or ins[3] == "int32", "integer SVDF needs an int32 bias")
    _require(e.tensor(state).kind is TensorKind.VARIABLE, "the activation state must be a variable tensor")
    batches, input_size = e.tensor(data).shape
    num_filters = e.tensor(features).shape[0]
    memory = e.tensor(times).shape[1]
    rank = int(op.options.rank)
    _require(rank > 0 and num_filters % rank == 0, f"{num_filters} filters do not divide into rank {rank}")
    _require(e.tensor(state).shape == (batches, memory * num_filters), "state shape does not match")
    in_q, f_q, t_q, s_q, out_q = (e.quantization(t) for t in (data, features, times, state, op.outputs[0]))
    f32 = np.float32
    # Prepare multiplies and divides the float32 scales in float32, then widens to double
    m1, s1 = q.quantize_multiplier(float(f32(in_q.scale) * f32(f_q.scale) / f32(s_q.scale)))
    m2, s2 = q.quantize_multiplier(float(f32(s_q.scale) * f32(t_q.scale) / f32(out_q.scale)))
    p = e.struct(f"{name}_params", "lt_svdf_params", {
        "batches": batches, "input_size": input_size, "num_filters": num_filters, "num_units": num_filters // rank,
        "rank": rank, "memory_size": memory, "input_zero_point": in_q.zero_point,
        "output_zero_point": out_q.zero_point, "state_zero_point": s_q.zero_point, "feature_multiplier": m1,
        "feature_shift": s1, "output_multiplier": m2, "output_shift": s2})
    args = [p, e.pointer(data), e.pointer(features), e.pointer(times), e.pointer(bias) if bias >= 0 else "NULL",
            e.pointer(state, True), e.scratch_pointer(op, 0), e.scratch_pointer(op, 1), e.pointer(op.outputs[0], True)]
    return f"lt_svdf_s8_{'s16' if ins[2] == 'int16' else 's8'}({', '.join(args)});"


# UNIDIRECTIONAL_SEQUENCE_LSTM inputs (lstm_shared.h): weights per gate in the order input, forget, cell, output
_LSTM_INPUT_WEIGHTS, _LSTM_RECURRENT_WEIGHTS, _LSTM_BIASES = range(1, 5), range(5, 9), range(12, 16)
_LSTM_VARIANT_INPUTS = {"peephole weights": range(9, 12), "projection": range(16, 18), "layer norm": range(20, 24)}
_LSTM_HIDDEN, _LSTM_CELL = 18, 19
_ACT_TANH = 4  # the cell gate's activation; a flatbuffer has no code for the sigmoid TFLM's kernel also knows


def lower_unidirectional_sequence_lstm(e, op, name):
    """Integer LSTM (int8 activations and weights, int16 cell state) as TFLM's UnidirectionalSequenceLstmPrepare
    and EvalLstm<int8_t, int8_t, int16_t, int32_t>: the standard LSTM only, hidden and cell state variable tensors."""
    ins, outs = _types(e, op)
    _require(len(op.inputs) == 24 and len(op.outputs) == 1, "LSTM needs 24 inputs and 1 output")
    for variant, indices in _LSTM_VARIANT_INPUTS.items():
        _require(all(op.inputs[i] < 0 for i in indices), f"LSTM with {variant} is not supported")
    data, hidden, cell = op.inputs[0], op.inputs[_LSTM_HIDDEN], op.inputs[_LSTM_CELL]
    weights = [op.inputs[i] for i in (*_LSTM_INPUT_WEIGHTS, *_LSTM_RECURRENT_WEIGHTS)]
    biases = [op.inputs[i] for i in _LSTM_BIASES]
    _require(all(t >= 0 for t in weights + biases), "LSTM without input gate (CIFG) or without biases")
    _require(ins[0] == "int8" and outs == ["int8"] and ins[_LSTM_HIDDEN] == "int8" and ins[_LSTM_CELL] == "int16"
             and all(e.tensor(t).dtype == "int8" for t in weights)
             and all(e.tensor(t).dtype == "int32" for t in biases), f"types {ins} -> {outs}")
    _require(all(e.tensor(t).kind is TensorKind.VARIABLE for t in (hidden, cell)),
             "the hidden and cell states must be variable tensors")
    o = op.options
    activation = _activation(op)
    _require(activation == _ACT_TANH, f"cell gate activation {activation} (only TANH)")
    time_major = bool(o.timeMajor)
    shape = e.tensor(data).shape
    _require(len(shape) == 3, "the input must be 3-D")
    time_steps, batches = (shape[0], shape[1]) if time_major else (shape[1], shape[0])
    input_size = shape[2]
    state_size = e.tensor(hidden).shape[-1]
    _require(all(e.tensor(t).shape == (state_size, input_size) for t in weights[:4])
             and all(e.tensor(t).shape == (state_size, state_size) for t in weights[4:])
             and all(e.tensor(t).shape == (state_size,) for t in biases), "weight shapes do not match the state")
    _require(all(math.prod(e.tensor(t).shape) == batches * state_size for t in (hidden, cell))
             and e.tensor(op.outputs[0]).shape == shape[:2] + (state_size,), "state or output shape does not match")
    in_q, hidden_q, cell_q = e.quantization(data), e.quantization(hidden), e.quantization(cell)
    weight_q = [e.quantization(t) for t in weights]
    _require(all(len(w.scales) == 1 and w.zero_point == 0 for w in weight_q),
             "LSTM weights must be per-tensor and symmetric")
    try:
        power = q.lstm_cell_scale_power(cell_q.scale)
    except ValueError as exc:
        raise Unsupported(str(exc)) from None
    gate_in = [q.quantize_multiplier(float(in_q.scale) * w.scale / q.LSTM_GATE_INPUT_SCALE) for w in weight_q[:4]]
    gate_rec = [q.quantize_multiplier(float(hidden_q.scale) * w.scale / q.LSTM_GATE_INPUT_SCALE)
                for w in weight_q[4:]]
    gate_out = q.LSTM_GATE_OUTPUT_SCALE
    forget = q.lstm_mul_multiplier(gate_out, cell_q.scale, cell_q.scale)
    update = q.lstm_mul_multiplier(gate_out, gate_out, cell_q.scale)
    hidden_mul = q.lstm_mul_multiplier(gate_out, gate_out, hidden_q.scale)
    tanh_multiplier, tanh_shift = q.lstm_tanh_input_scaling(power)
    p = e.struct(f"{name}_params", "lt_lstm_params", {
        "batches": batches, "time_steps": time_steps, "input_size": input_size, "state_size": state_size,
        "time_major": int(time_major), "input_zero_point": in_q.zero_point, "hidden_zero_point": hidden_q.zero_point,
        "input_multiplier": tuple(m for m, _ in gate_in), "input_shift": tuple(s for _, s in gate_in),
        "recurrent_multiplier": tuple(m for m, _ in gate_rec), "recurrent_shift": tuple(s for _, s in gate_rec),
        "forget_multiplier": forget[0], "forget_shift": forget[1], "update_multiplier": update[0],
        "update_shift": update[1], "hidden_multiplier": hidden_mul[0], "hidden_shift": hidden_mul[1],
        "cell_clip": q.lstm_cell_clip(o.cellClip, cell_q.scale), "cell_tanh_multiplier": tanh_multiplier,
        "cell_tanh_shift": tanh_shift})
    pointers = [e.pointer(t) for t in weights + biases]
    e.declarations.append(
        f"static const lt_lstm_weights {name}_weights = {{{{{', '.join(pointers[:4])}}}, "
        f"{{{', '.join(pointers[4:8])}}}, {{{', '.join(pointers[8:])}}}}};")
    scratch = [e.scratch_pointer(op, k, "int16_t") for k in range(4)]
    args = [p, f"&{name}_weights", e.pointer(data), e.pointer(hidden, True), e.pointer(cell, True), *scratch,
            e.pointer(op.outputs[0], True)]
    return f"lt_lstm_s8_s16({', '.join(args)});"


def lower_var_handle(e, op, name):
    """Handles are resolved at compile time: READ_VARIABLE and ASSIGN_VARIABLE name the state member."""
    variable = e.resources.get(_resource_key(op))
    _require(variable is not None, f"resource variable {_resource_key(op)[1].decode(errors='replace')} is never "
                                   f"assigned")
    return f"/* handle of {STATE_OBJECT}.{variable.member} */"


def lower_read_variable(e, op, name):
    t = e.tensor(op.outputs[0])
    return f"lt_copy({e.resource(0, op.inputs[0], t.nbytes)}, {e.pointer(op.outputs[0], True)}, {t.nbytes}u);"


def lower_assign_variable(e, op, name):
    t = e.tensor(op.inputs[1])
    return f"lt_copy({e.pointer(op.inputs[1])}, {e.resource(0, op.inputs[0], t.nbytes)}, {t.nbytes}u);"


def lower_call_once(e, op, name):
    """CALL_ONCE runs its init subgraph on the first invocation only (TFLM's has_run flag, which Reset() leaves
    set). The init subgraphs these models carry only assign constants to resource variables."""
    init = e.graph.subgraphs[int(op.options.initSubgraphIndex)]
    _require(not init.inputs and not init.outputs, "the init subgraph has inputs or outputs")
    statements = []
    for init_op in init.operators:
        if init_op.opcode == "VAR_HANDLE":
            continue
        _require(init_op.opcode == "ASSIGN_VARIABLE", f"init subgraph operator {init_op.opcode}")
        value = init.tensors[init_op.inputs[1]]
        data = e.graph.constant_array(init_op.inputs[1], subgraph=init.index)
        _require(data is not None and value.dtype in C_TYPES, "init subgraph assigns a non-constant value")
        source = e.array(f"{name}_value{len(statements)}", C_TYPES[value.dtype], data.reshape(-1))
        statements.append(f"lt_copy({source}, {e.resource(init.index, init_op.inputs[0], value.nbytes)}, "
                          f"{value.nbytes}u);")
    flag = f"call_once{op.index}"
    e.call_once_flags.append(flag)
    return f"if (!{STATE_OBJECT}.{flag}) {{ {' '.join(statements)} {STATE_OBJECT}.{flag} = 1; }}"


def lower_mean(e, op, name):
    ins, outs = _types(e, op)
    shape = e.tensor(op.inputs[0]).shape
    _require(len(shape) <= MAX_DIMS, f"more than {MAX_DIMS} dimensions")
    axes = sorted({int(a) % len(shape) for a in e.constant_values(op.inputs[1]).reshape(-1)})
    kept = [d for d in range(len(shape)) if d not in axes]
    st = strides(shape)
    params: dict[str, object] = {
        "kept_ndim": len(kept), "kept_dims": [shape[d] for d in kept], "kept_steps": [st[d] for d in kept],
        "reduced_ndim": len(axes), "reduced_dims": [shape[d] for d in axes], "reduced_steps": [st[d] for d in axes],
        "count": math.prod(shape[d] for d in axes)}
    if ins[0] == "int8" and outs == ["int8"]:
        in_q, out_q = e.quantization(op.inputs[0]), e.quantization(op.outputs[0])
        m, s = q.mean_multiplier(*q.quantize_multiplier(float(in_q.scale) / float(out_q.scale)), params["count"])
        params.update(input_zero_point=in_q.zero_point, output_zero_point=out_q.zero_point, multiplier=m, shift=s)
        suffix = "s8"
    elif ins[0] == "float32" and outs == ["float32"]:
        suffix = "f32"
    else:
        raise Unsupported(f"types {ins} -> {outs}")
    p = e.struct(f"{name}_params", "lt_mean_params", params)
    return f"lt_mean_{suffix}({p}, {e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)});"


def lower_quantize(e, op, name):
    ins, outs = _types(e, op)
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
    ins, outs = _types(e, op)
    _require(ins == ["int8"] and outs == ["float32"], f"types {ins} -> {outs}")
    in_q = e.quantization(op.inputs[0])
    count = math.prod(e.tensor(op.inputs[0]).shape)
    return (f"lt_dequantize_s8_f32({e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)}, {count}, "
            f"{float(in_q.scale)!r}, {in_q.zero_point});")


def _same_types(e: ModelEmitter, op: Operator, count: int = 1) -> str:
    ins, outs = _types(e, op)
    _require(ins[0] in C_TYPES and all(t == ins[0] for t in ins[:count]) and outs == [ins[0]],
             f"types {ins} -> {outs}")
    return ins[0]


def lower_reshape(e, op, name):
    _same_types(e, op)
    t = e.tensor(op.outputs[0])
    return f"lt_copy({e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)}, {t.nbytes}u);"


def _copy(e: ModelEmitter, name: str, dims, src_steps, dst_steps, elem_size: int) -> str:
    _require(len(dims) <= MAX_DIMS, f"more than {MAX_DIMS} dimensions")
    return e.struct(name, "lt_copy_params", {"ndim": len(dims), "dims": list(dims), "src_steps": list(src_steps),
                                                  "dst_steps": list(dst_steps), "elem_size": elem_size})


def _elem_size(t: Tensor) -> int:
    return np.dtype(NUMPY_TYPES[t.dtype]).itemsize


@dataclass(frozen=True)
class View:
    """The elements of one tensor that a box copy visits: from element `start`, `steps[d]` elements apart along
    each copy dimension d."""

    tensor: int
    start: int
    steps: tuple[int, ...]


def _arena_bytes(e: ModelEmitter, view: View, dims, elem_size: int) -> tuple[int, int] | None:
    """[first, end) arena bytes a view touches; None when it is not in the arena."""
    if e.tensor(view.tensor).kind is not TensorKind.ACTIVATION or view.tensor not in e.offsets:
        return None
    lo = hi = view.start
    for n, step in zip(dims, view.steps):
        lo, hi = lo + min(0, step * (n - 1)), hi + max(0, step * (n - 1))
    base = e.offsets[view.tensor]
    return base + lo * elem_size, base + (hi + 1) * elem_size


def _copy_strided(e: ModelEmitter, name: str, dims, source: View, target: View) -> str:
    """One lt_copy_strided call from `source` to `target`. A memory plan may put the two on the same bytes only
    as the very same view (an in-place SPLIT or CONCATENATION), which the runtime then skips; any other overlap
    would read bytes the copy has already overwritten, so it is refused."""
    size = _elem_size(e.tensor(source.tensor))
    if math.prod(dims):
        a, b = _arena_bytes(e, source, dims, size), _arena_bytes(e, target, dims, size)
        same_view = a is not None and b is not None and a[0] == b[0] and all(
            n <= 1 or s == t for n, s, t in zip(dims, source.steps, target.steps))
        _require(a is None or b is None or a[1] <= b[0] or b[1] <= a[0] or same_view,
                 f"the memory plan overlaps tensors {source.tensor} and {target.tensor} in a way no copy can run "
                 f"in place")
    p = _copy(e, name, dims, source.steps, target.steps, size)
    src, dst = e.pointer(source.tensor), e.pointer(target.tensor, True)
    return (f"lt_copy_strided({p}, {f'{src} + {source.start}' if source.start else src}, "
            f"{f'{dst} + {target.start}' if target.start else dst});")


def lower_shape(e, op, name):
    """SHAPE: shapes are static here, so the output is a constant written into the arena when the operator runs
    (the tensor is planned like any activation and later operators read it there)."""
    _, outs = _types(e, op)
    _require(outs == ["int32"], f"output type {outs[0]}")
    shape = e.tensor(op.inputs[0]).shape
    _require(e.tensor(op.outputs[0]).shape == (len(shape),), "output shape does not match the input rank")
    values = e.array(f"{name}_shape", "int32_t", list(shape))
    return f"lt_copy({values}, {e.pointer(op.outputs[0], True)}, {4 * len(shape)}u);"


def lower_pack(e, op, name):
    """PACK: input k becomes index k along the new axis `axis` of the output; the kernel copies bytes."""
    dtype = _same_types(e, op, len(op.inputs))
    _require(len(op.inputs) == int(op.options.valuesCount), "the input count differs from values_count")
    t_out = e.tensor(op.outputs[0])
    axis = int(op.options.axis) % len(t_out.shape)
    shape = e.tensor(op.inputs[0]).shape
    _require(dtype in C_TYPES and all(e.tensor(t).shape == shape for t in op.inputs)
             and t_out.shape == shape[:axis] + (len(op.inputs),) + shape[axis:],
             f"inputs of shape {shape} do not stack to {t_out.shape}")
    out_st = strides(t_out.shape)
    steps = tuple(out_st[:axis] + out_st[axis + 1:])
    return " ".join(_copy_strided(e, f"{name}_params{k}", shape, View(t, 0, tuple(strides(shape))),
                                  View(op.outputs[0], k * out_st[axis], steps))
                    for k, t in enumerate(op.inputs))


def lower_transpose(e, op, name):
    _same_types(e, op)
    t_in, t_out = e.tensor(op.inputs[0]), e.tensor(op.outputs[0])
    perm = [int(p) for p in e.constant_values(op.inputs[1]).reshape(-1)]
    in_st = strides(t_in.shape)
    dims = [t_in.shape[p] for p in perm]
    _require(tuple(dims) == t_out.shape, "output shape does not match the permutation")
    return _copy_strided(e, f"{name}_params", dims, View(op.inputs[0], 0, tuple(in_st[p] for p in perm)),
                         View(op.outputs[0], 0, tuple(strides(t_out.shape))))


def lower_pad(e, op, name):
    _same_types(e, op)
    t_in, t_out = e.tensor(op.inputs[0]), e.tensor(op.outputs[0])
    paddings = e.constant_values(op.inputs[1]).reshape(-1, 2)
    before = [int(b) for b in paddings[:, 0]]
    _require(all(int(x) >= 0 for x in paddings.reshape(-1)), "negative padding")
    ctype = C_TYPES[t_in.dtype]
    if len(op.inputs) > 2 and op.inputs[2] >= 0:
        pad_value = e.constant_values(op.inputs[2]).reshape(-1)[0]
    elif t_in.dtype == "int8":
        pad_value = e.quantization(op.outputs[0]).zero_point
    else:
        pad_value = 0
    value = e.array(f"{name}_value", ctype, [pad_value])
    out_st = strides(t_out.shape)
    start = sum(b * s for b, s in zip(before, out_st))
    size = _elem_size(t_in)
    p = _copy(e, f"{name}_params", t_in.shape, strides(t_in.shape), out_st, size)
    out = e.pointer(op.outputs[0], True)
    return (f"lt_fill({out}, {math.prod(t_out.shape)}u, {value}, {size}); "
            f"lt_copy_strided({p}, {e.pointer(op.inputs[0])}, {out} + {start});")


def lower_concatenation(e, op, name):
    count = len(op.inputs)
    dtype = _same_types(e, op, count)
    t_out = e.tensor(op.outputs[0])
    if dtype == "int8":
        out_q = e.quantization(op.outputs[0])
        _require(all(e.quantization(t) == out_q for t in op.inputs),
                 "int8 concatenation needs equal input and output quantization")
    _require(_activation(op) == 0, "fused activation on concatenation")
    axis = int(op.options.axis) % len(t_out.shape)
    out_st = tuple(strides(t_out.shape))
    statements, position = [], 0
    for k, t in enumerate(op.inputs):
        shape = e.tensor(t).shape
        statements.append(_copy_strided(e, f"{name}_params{k}", shape, View(t, 0, tuple(strides(shape))),
                                        View(op.outputs[0], position * out_st[axis], out_st)))
        position += shape[axis]
    return " ".join(statements)


def _split_axis(e: ModelEmitter, axis_tensor: int, rank: int) -> int:
    values = e.constant_values(axis_tensor).reshape(-1)
    _require(values.size == 1, "the axis must be one value")
    axis = int(values[0])
    _require(-rank <= axis < rank, f"axis {axis} is out of range")
    return axis % rank


def _split(e: ModelEmitter, op: Operator, name: str, data: int, axis: int) -> str:
    """SPLIT and SPLIT_V: output k is the input's block along `axis` after outputs 0..k-1. Like TFLM's kernels,
    the outputs' shapes say where the cuts are; the kernels copy bytes, so int8 outputs keep the input's values
    whatever their quantization says."""
    shape, dtype = e.tensor(data).shape, e.tensor(data).dtype
    outs = [e.tensor(t) for t in op.outputs]
    _require(dtype in C_TYPES and all(t.dtype == dtype for t in outs), f"types {dtype} -> {[t.dtype for t in outs]}")

    def others(s: tuple[int, ...]) -> tuple[int, ...]:
        return s[:axis] + s[axis + 1:]

    _require(all(len(t.shape) == len(shape) and others(t.shape) == others(shape) for t in outs)
             and sum(t.shape[axis] for t in outs) == shape[axis],
             f"output shapes {[t.shape for t in outs]} do not cut {shape} along axis {axis}")
    in_st = tuple(strides(shape))
    statements, position = [], 0
    for k, out in enumerate(outs):
        statements.append(_copy_strided(e, f"{name}_params{k}", out.shape, View(data, position * in_st[axis], in_st),
                                        View(out.index, 0, tuple(strides(out.shape)))))
        position += out.shape[axis]
    return " ".join(statements)


def lower_split(e, op, name):
    _require(len(op.outputs) == int(op.options.numSplits), "the output count differs from num_splits")
    data = op.inputs[1]
    return _split(e, op, name, data, _split_axis(e, op.inputs[0], len(e.tensor(data).shape)))


def lower_split_v(e, op, name):
    data = op.inputs[0]
    shape = e.tensor(data).shape
    axis = _split_axis(e, op.inputs[2], len(shape))
    code = _split(e, op, name, data, axis)
    # size_splits may hold one -1 (the rest of the axis); the kernel follows the output shapes, which must agree.
    sizes = [int(v) for v in e.constant_values(op.inputs[1]).reshape(-1)]
    rest = shape[axis] - sum(n for n in sizes if n != -1)
    cut = [e.tensor(t).shape[axis] for t in op.outputs]
    _require(sizes.count(-1) <= 1 and [rest if n == -1 else n for n in sizes] == cut,
             f"size_splits {sizes} does not match the output shapes")
    return code


def lower_strided_slice(e, op, name):
    _same_types(e, op)
    t_in, t_out = e.tensor(op.inputs[0]), e.tensor(op.outputs[0])
    o = op.options
    _require(not o.ellipsisMask and not o.newAxisMask, "ellipsis and new-axis masks are not supported")
    begin = [int(v) for v in e.constant_values(op.inputs[1]).reshape(-1)]
    end = [int(v) for v in e.constant_values(op.inputs[2]).reshape(-1)]
    step = [int(v) for v in e.constant_values(op.inputs[3]).reshape(-1)]
    shape = t_in.shape
    _require(len(begin) == len(shape), "begin/end/strides must cover every dimension")
    big = 1 << 31
    dims, src_start, src_steps = [], 0, []
    in_st = strides(shape)
    for axis, size in enumerate(shape):
        # StartForAxis / StopForAxis of strided_slice_logic.h
        stride = step[axis]
        _require(stride != 0, "zero stride")
        start = begin[axis]
        if o.beginMask & (1 << axis):
            start = -big if stride > 0 else big - 1
        if start < 0:
            start += size
        start = min(max(start, 0), size) if stride > 0 else min(max(start, -1), size - 1)
        if o.shrinkAxisMask & (1 << axis):
            stop = start + 1
        else:
            stop = begin[axis] + end[axis] if getattr(o, "offset", False) else end[axis]
            if o.endMask & (1 << axis):
                stop = big - 1 if stride > 0 else -big
            if stop < 0:
                stop += size
            stop = min(max(stop, 0), size) if stride > 0 else min(max(stop, -1), size - 1)
        n = len(range(start, stop, stride))
        dims.append(n)
        src_start += start * in_st[axis] if n else 0
        src_steps.append(stride * in_st[axis])
    _require(math.prod(dims) == math.prod(t_out.shape), "output size does not match the slice")
    return _copy_strided(e, f"{name}_params", dims, View(op.inputs[0], src_start, tuple(src_steps)),
                         View(op.outputs[0], 0, tuple(strides(tuple(dims)))))


def lower_resize_nearest_neighbor(e, op, name):
    _same_types(e, op)
    t_in, t_out = e.tensor(op.inputs[0]), e.tensor(op.outputs[0])
    _require(len(t_in.shape) == 4, "only 4-D NHWC tensors are supported")
    out_h, out_w = (int(v) for v in e.constant_values(op.inputs[1]).reshape(-1))
    _require((out_h, out_w) == tuple(t_out.shape[1:3]), "output size does not match the size input")
    align, half = bool(op.options.alignCorners), bool(op.options.halfPixelCenters)
    y_map = e.array(f"{name}_y", "int32_t", q.nearest_neighbor_map(out_h, t_in.shape[1], align, half))
    x_map = e.array(f"{name}_x", "int32_t", q.nearest_neighbor_map(out_w, t_in.shape[2], align, half))
    p = e.struct(f"{name}_params", "lt_resize_params",
                 {"batches": t_in.shape[0], "in_h": t_in.shape[1], "in_w": t_in.shape[2], "channels": t_in.shape[3],
                      "out_h": out_h, "out_w": out_w, "elem_size": _elem_size(t_in)})
    return f"lt_resize_nearest({p}, {y_map}, {x_map}, {e.pointer(op.inputs[0])}, {e.pointer(op.outputs[0], True)});"


LOWERINGS: dict[str, Callable[[ModelEmitter, Operator, str], str]] = {
    "CONV_2D": lower_conv_2d,
    "DEPTHWISE_CONV_2D": lower_depthwise_conv_2d,
    "FULLY_CONNECTED": lower_fully_connected,
    "ADD": lower_add,
    "MUL": lower_mul,
    "CONCATENATION": lower_concatenation,
    "AVERAGE_POOL_2D": lower_average_pool_2d,
    "MAX_POOL_2D": lower_max_pool_2d,
    "RESHAPE": lower_reshape,
    "SOFTMAX": lower_softmax,
    "QUANTIZE": lower_quantize,
    "DEQUANTIZE": lower_dequantize,
    "PAD": lower_pad,
    "MEAN": lower_mean,
    "STRIDED_SLICE": lower_strided_slice,
    "SPLIT": lower_split,
    "SPLIT_V": lower_split_v,
    "TRANSPOSE": lower_transpose,
    "SHAPE": lower_shape,
    "SVDF": lower_svdf,
    "UNIDIRECTIONAL_SEQUENCE_LSTM": lower_unidirectional_sequence_lstm,
    "CALL_ONCE": lower_call_once,
    "VAR_HANDLE": lower_var_handle,
    "READ_VARIABLE": lower_read_variable,
    "ASSIGN_VARIABLE": lower_assign_variable,
    "PACK": lower_pack,
    "LOGISTIC": lower_logistic,
    "RESIZE_NEAREST_NEIGHBOR": lower_resize_nearest_neighbor,
}
