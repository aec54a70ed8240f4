"""What every lowering shares: the `ModelEmitter` that collects one model's C declarations, the C spelling of
values, and the checks that raise `Unsupported` with the reason an operator cannot be lowered."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypedDict

import numpy as np
from numpy.typing import ArrayLike

from lowtide.compile import quantization as q
from lowtide.compile.kernel_params import KernelParams, c_members
from lowtide.model import attributes
from lowtide.model.attributes import A
from lowtide.model.ir import Graph, Operator, Quantization, Tensor, TensorKind, first_assignments, variable_handles

# TFLite's bool is one byte holding 0 or 1
C_TYPES = {
    "int8": "int8_t",
    "uint8": "uint8_t",
    "int16": "int16_t",
    "int32": "int32_t",
    "int64": "int64_t",
    "float32": "float",
    "bool": "uint8_t",
}
NUMPY_TYPES = {
    "bool": np.bool_,
    "int8": np.int8,
    "uint8": np.uint8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "float32": np.float32,
}


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


@dataclass(frozen=True)
class PadFusion:
    """A spatial PAD whose only reader is a fast convolution: the convolution reads the PAD's input
    directly, with the PAD's rows and columns added to its own padding (its plane copy fills padding with the
    zero point, which is what the PAD writes), and the PAD runs no code and has no place in the arena."""

    pad_op: int
    source: int  # the PAD's input tensor
    top: int  # rows of padding the PAD adds above
    left: int  # columns of padding the PAD adds on the left


class Unsupported(Exception):
    """The runtime has no kernel for this operator as the model uses it."""


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


def strides(shape: Sequence[int]) -> list[int]:
    out = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        out[d] = out[d + 1] * shape[d + 1]
    return out


@dataclass(frozen=True)
class RingGuest:
    """A tensor made and read inside a row chain (`lowtide.compile.rows`) that has no ring of its own (vMCU,
    TinyEngine in place): its writer writes each of its rows over an input row no reader needs any more, so row
    y lies in slot (scale * y + shift) % (the host's rows) of the host ring, at the start of the slot (slots a
    host row apart). Its readers read one row of it per output row."""

    tensor: int
    host: int  # a ring of the chain with rows of its own
    scale: int
    shift: int  # 0 <= shift < the host's rows


class ModelEmitter:
    """Collects the C declarations of one model while its operators are lowered."""

    def __init__(
        self,
        graph: Graph,
        offsets: dict[int, int],
        scratch: dict[int, list[int]] | None = None,
        fused_pads: dict[int, PadFusion] | None = None,
        fast_scratch: dict[int, int] | None = None,
        wide_weights: frozenset[int] = frozenset(),
        row_ops: frozenset[int] = frozenset(),
        ring_rows: dict[int, int] | None = None,
        one_row_ops: frozenset[int] = frozenset(),
        ring_guests: dict[int, RingGuest] | None = None,
        fused_transposes: dict[int, int] | None = None,
        region_arenas: tuple[tuple[int, str], ...] = (),
    ):
        self.graph = graph
        # (base offset, C array) of each arena after the first in another memory region (lowtide.compile.banks)
        self.region_arenas = region_arenas
        self.sg = graph.main
        self.offsets = offsets  # activation tensor index -> arena offset
        self.scratch = scratch or {}  # operator index -> arena offsets of its kernel scratch buffers, in request order
        self.declarations: list[str] = []
        self.variables: dict[int, Tensor] = {}  # variable tensors the operators use: static state, not arena
        self.call_once_flags: list[str] = []  # one per CALL_ONCE: set once its init subgraph has run
        self._constants: dict[int, str] = {}
        # operator -> arena offset of its fast kernel's int16 scratch (im2col rows, a depthwise plane), as planned
        self.fast_scratch = fast_scratch or {}
        self.fast_scratch_bytes: dict[int, int] = {}  # operator -> bytes of that scratch its fast kernel needs
        self.fused_pads = fused_pads or {}  # depthwise operator index -> the PAD it absorbs
        # Operators lowered to a kernel that may write over its input (lowtide.memory.in_place, compiled runtime)
        self.in_place_safe: set[int] = set()
        # Fast layers whose one window is their whole input, unpadded: a PAD before one cannot be absorbed
        self.whole_input: set[int] = set()
        # CONV_2D matrix layers (lt_conv_s8_fast) -> (output pixels, int8 filter bytes), for choosing `wide_weights`
        self.matrix_layers: dict[int, tuple[int, int]] = {}
        self.wide_weights = wide_weights  # matrix layers whose filter is int16 (`pack_wide_weights`), as planned
        # Operators of row chains (`lowtide.compile.rows`): lowered to a function writing one output row, and the
        # tensors held as rings of rows -> the rows each ring holds
        self.row_ops = row_ops
        self.ring_rows = ring_rows or {}
        self.one_row_ops = one_row_ops  # pointwise row layers run as one row of all their pixels (`RowChain.one_row`)
        self.ring_guests = ring_guests or {}  # tensors whose rows lie in another ring's slots (`RingGuest`)
        # TRANSPOSEs from NCHW that run no code -> the row-chain convolution that reads their input's planes
        self.fused_transposes = fused_transposes or {}
        # Fast convolutions a row kernel can run (lt_rows.h), found while lowering
        self.fast_rows: set[int] = set()
        self.resources, self._handles = self._resource_variables()

    # ---- resource variables ------------------------------------------------------------------------------
    def _resource_variables(
        self,
    ) -> tuple[dict[tuple[bytes, bytes], ResourceVariable], dict[tuple[int, int], tuple[bytes, bytes]]]:
        resources: dict[tuple[bytes, bytes], ResourceVariable] = {}
        for key, (subgraph, index) in first_assignments(self.graph).items():
            value = self.graph.subgraphs[subgraph].tensors[index]
            qp = value.quantization
            zero = qp.zero_point if value.dtype == "int8" and qp is not None else 0
            resources[key] = ResourceVariable(f"resource{len(resources)}", value.nbytes, zero)
        return resources, variable_handles(self.graph)

    def resource(self, subgraph: int, handle: int, nbytes: int) -> str:
        """The state member behind a resource tensor; every read and assignment must move the same bytes."""
        key = self._handles.get((subgraph, handle))
        if key is None:
            raise Unsupported(f"resource tensor {handle} does not come from a VAR_HANDLE")
        variable = self.resources.get(key)
        if variable is None:
            raise Unsupported(f"resource variable {key[1].decode(errors='replace')} is never assigned")
        require(
            variable.nbytes == nbytes,
            f"resource variable {variable.member} holds {variable.nbytes} bytes, not {nbytes}",
        )
        return f"{STATE_OBJECT}.{variable.member}"

    def state_members(self) -> list[StateMember]:
        """Everything the generated code keeps between invocations. TFLM resets int8 variable tensors to their
        zero point and every other type to zero bytes; resource variables to their reset byte."""
        members = []
        for index, t in self.variables.items():
            size = element_size(t)
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
        qp = self.tensor(index).quantization
        if qp is None or not any(s > 0 for s in qp.scales):
            if required:
                raise Unsupported(f"tensor {index} '{self.tensor(index).name}' has no quantization parameters")
            return Quantization((), ())
        # Per tensor and channel alike (the axis is the caller's to judge): only scales and zero points compare.
        return Quantization(qp.scales, qp.zero_points or (0,) * len(qp.scales))

    def constant_values(self, index: int) -> np.ndarray:
        t = self.tensor(index)
        if t.kind is not TensorKind.CONSTANT:
            raise Unsupported(f"tensor {index} '{t.name}' must be a constant")
        if t.dtype not in NUMPY_TYPES:
            raise Unsupported(f"constant tensor {index} has type {t.dtype}")
        data = self.graph.buffer_data(t.buffer)
        return np.frombuffer(data, dtype=NUMPY_TYPES[t.dtype]).reshape(t.shape)

    def row_function(self, name: str, body: str) -> str:
        """Declare `{name}_row`, which runs `body` for output row `oy` of a row chain (`lowtide.compile.rows`), and
        return the chain loop's call of it."""
        self.declarations.append(f"static LT_NOINLINE void {name}_row(uint8_t *arena, int32_t oy) {{\n    {body}\n}}")
        return f"{name}_row(arena, oy);"

    def arena_at(self, offset: int) -> str:
        """C expression for the byte at a planned offset: in the arena the caller passes, or in the arena of the
        memory region whose bytes start at or below it."""
        base, name = max(((b, n) for b, n in self.region_arenas if b <= offset), default=(0, "arena"))
        return f"{name} + {offset - base}u"

    def pointer(self, index: int, writable: bool = False) -> str:
        """C expression for a tensor's data: a place in the arena, or a const array in flash."""
        t = self.tensor(index)
        ctype = C_TYPES.get(t.dtype)
        if ctype is None:
            raise Unsupported(f"tensor {index} '{t.name}' has type {t.dtype}")
        if t.kind is TensorKind.ACTIVATION:
            if index not in self.offsets:
                raise Unsupported(f"tensor {index} '{t.name}' has no place in the arena (empty or unused)")
            return f"(({ctype} *)({self.arena_at(self.offsets[index])}))"
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

    def slots(self, index: int) -> int:
        """The rows a tensor's buffer holds: its ring's, or all of them (NHWC)."""
        return self.ring_rows.get(index, self.tensor(index).shape[1])

    def row_pointer(self, index: int, row: str, writable: bool = False) -> str:
        """C expression for row `row` (a C expression) of an NHWC tensor in the arena, ring, guest of a ring
        (`RingGuest`: at its host's offset) or whole."""
        guest = self.ring_guests.get(index)
        if guest is not None:
            host = self.tensor(guest.host)
            place = f"(({guest.scale} * {row} + {guest.shift}) % {self.slots(guest.host)})"
            return f"({self.pointer(index, writable)} + {place} * {host.nbytes // host.shape[1]})"
        t = self.tensor(index)
        row_bytes = t.nbytes // t.shape[1]
        slots = self.slots(index)
        place = row if slots == t.shape[1] else f"({row} % {slots})"
        return f"({self.pointer(index, writable)} + {place} * {row_bytes})"

    def ring_argument(self, index: int, first_row: str) -> tuple[str, int]:
        """A row kernel's input (lt_rows.h) and its slots: the tensor's buffer and rows, or for a guest of a ring
        (read one row at a time, `first_row` for output row oy) that row alone."""
        if index in self.ring_guests:
            return self.row_pointer(index, first_row), 1
        return self.pointer(index), self.slots(index)

    def scratch_pointer(self, op: Operator, k: int, ctype: str = "int32_t") -> str:
        """Kernel scratch buffer k of `op`, where the memory plan put it in the arena."""
        buffers = self.scratch.get(op.index, [])
        require(k < len(buffers), f"the memory plan has no scratch buffer {k} for this operator")
        return f"(({ctype} *)({self.arena_at(buffers[k])}))"

    def fast_scratch_pointer(self, op: Operator, count: int) -> str:
        """The int16 scratch of `count` values that `op`'s fast kernel uses while it runs. A plan is made from
        these needs (`fast_scratch_bytes`, collected by lowering with any offsets), so an emitter without a plan
        yet points at offset 0; `compile_model` checks that every need has its place."""
        self.fast_scratch_bytes[op.index] = 2 * count
        return f"((int16_t *)({self.arena_at(self.fast_scratch.get(op.index, 0))}))"

    # ---- declarations ------------------------------------------------------------------------------------
    def array(self, name: str, ctype: str, values: ArrayLike, aligned: bool = False) -> str:
        """A const array in flash; `aligned`: on a 4-byte boundary, for kernels reading it a word at a time."""
        values = np.asarray(values).reshape(-1)
        if ctype == "float":
            items = [c_float(v) for v in values.tolist()]
        else:  # map(str) for speed: weight arrays run to millions of elements
            items = list(map(str, values.tolist()))
            if values.size and values.min() == -(1 << 31):
                items = [c_int(int(v)) for v in items]
        if not items:
            items = ["0"]
        lines = [", ".join(items[i : i + 24]) for i in range(0, len(items), 24)]
        body = ",\n    ".join(lines)
        attribute = " __attribute__((aligned(4)))" if aligned else ""
        self.declarations.append(f"static const {ctype} {name}[{len(items)}]{attribute} = {{\n    {body}\n}};")
        return name

    def struct(self, name: str, params: KernelParams) -> str:
        """A const parameter struct in flash, every member named in the struct's order; its address."""
        parts = []
        for m in c_members(type(params)):
            value = getattr(params, m.name)
            if m.length:  # zero-padded: a MAX_DIMS array holds as many values as the tensor has dimensions
                padded = [*value, *[0] * (m.length - len(value))]
                parts.append(f".{m.name} = {{{', '.join(c_int(v) for v in padded)}}}")
            elif m.ctype == "float":
                parts.append(f".{m.name} = {c_float(value)}")
            else:
                parts.append(f".{m.name} = {c_int(value)}")
        self.declarations.append(f"static const {params.C_NAME} {name} = {{{', '.join(parts)}}};")
        return f"&{name}"


def tensor_types(e: ModelEmitter, op: Operator) -> tuple[list[str], list[str]]:
    return ([e.tensor(t).dtype if t >= 0 else "-" for t in op.inputs], [e.tensor(t).dtype for t in op.outputs])


def require(condition: bool, reason: str) -> None:
    if not condition:
        raise Unsupported(reason)


def fused_activation(op: Operator) -> int:
    return int(attributes.fused_activation(op.attributes))


def attributes_of(op: Operator, cls: type[A]) -> A:
    """The operator's attributes as its lowering reads them: Unsupported when it stores no `cls`."""
    if not isinstance(op.attributes, cls):
        raise Unsupported(f"no {cls.schema}")
    return op.attributes


class QuantizedActivation(TypedDict):
    """A fused activation as the clamp of quantized outputs (act_min, act_max)."""

    act_min: int
    act_max: int


class FloatActivation(TypedDict):
    """A fused activation as the clamp of float outputs (act_min_f, act_max_f)."""

    act_min_f: float
    act_max_f: float


NO_QUANTIZED_ACTIVATION = QuantizedActivation(act_min=0, act_max=0)  # a float kernel, which reads act_*_f
NO_FLOAT_ACTIVATION = FloatActivation(act_min_f=0.0, act_max_f=0.0)  # a quantized kernel, which reads act_min/max


def quantized_activation(e: ModelEmitter, op: Operator, output: int) -> QuantizedActivation:
    out_q = e.quantization(output)
    try:
        lo, hi = q.activation_range_quantized(
            fused_activation(op), out_q.scale, out_q.zero_point, e.tensor(output).dtype
        )
    except ValueError as exc:
        raise Unsupported(str(exc)) from None
    return QuantizedActivation(act_min=lo, act_max=hi)


def float_activation(op: Operator) -> FloatActivation:
    try:
        lo, hi = q.activation_range_float(fused_activation(op))
    except ValueError as exc:
        raise Unsupported(str(exc)) from None
    return FloatActivation(act_min_f=lo, act_max_f=hi)


def same_types(e: ModelEmitter, op: Operator, count: int = 1) -> str:
    ins, outs = tensor_types(e, op)
    require(ins[0] in C_TYPES and all(t == ins[0] for t in ins[:count]) and outs == [ins[0]], f"types {ins} -> {outs}")
    return ins[0]


def element_size(t: Tensor) -> int:
    return np.dtype(NUMPY_TYPES[t.dtype]).itemsize


def pack_rows_by_four(rows: np.ndarray) -> np.ndarray:
    """int8 weight rows [R][K] as the little-endian words `lt_dot_rows4_s8` (lt_conv_dsp.h) reads: each row
    zero-padded to whole words, each block of four rows interleaved word by word, the last R % 4 rows one after
    another."""
    count, depth = rows.shape
    words = -(-depth // 4)
    padded = np.zeros((count, words * 4), dtype=np.int8)
    padded[:, :depth] = rows
    blocks = count // 4 * 4
    interleaved = padded[:blocks].reshape(-1, 4, words, 4).transpose(0, 2, 1, 3)
    return np.concatenate([interleaved.reshape(-1), padded[blocks:].reshape(-1)]).view("<u4")


def pack_row_pairs(rows: np.ndarray, k4: int, wide: bool) -> np.ndarray:
    """Weight rows [R][K] as the words `lt_matmul_2_s8` or, `wide`, `lt_matmul_2_w16` (lt_conv_dsp.h) reads:
    each row zero-padded to k4 values, each pair of rows interleaved by 4 values (row r's, then row r + 1's), a
    last odd row alone. Plain: the int8 values, a word per 4. Wide: the values (int8, or twice them where the layer
    doubles its sums) as int16 in SXTB16 order, two words per 4 (values 0 and 2, then 1 and 3, the first in the
    low half)."""
    count, depth = rows.shape
    padded = np.zeros((count, k4), dtype=np.int16 if wide else np.int8)
    padded[:, :depth] = rows
    groups = padded.reshape(count, k4 // 4, 4)
    if wide:
        groups = groups[:, :, [0, 2, 1, 3]]
    pairs = count // 2 * 2
    interleaved = groups[:pairs].reshape(-1, 2, k4 // 4, 4).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(np.concatenate([interleaved.reshape(-1), groups[pairs:].reshape(-1)])).view("<u4")


def folded_bias(bias: np.ndarray | None, zero_point: int, rows: np.ndarray) -> np.ndarray:
    """bias - zero_point * row sums (int64, not wrapped): a dot product of raw values plus this equals the
    reference kernel's sum over (value - zero_point) plus bias."""
    total: np.ndarray = -zero_point * rows.astype(np.int64).sum(axis=1)
    return total if bias is None else total + bias.astype(np.int64)


def wrapped_int32(values: np.ndarray) -> np.ndarray:
    """int64 values modulo 2^32 as int32: what the kernels' wrapping int32 sums see."""
    return ((values.astype(np.int64) + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)


def short_round(folded: np.ndarray, rows: np.ndarray, shift: int) -> int:
    """2^(-shift - 1) when every sum of raw int8 values times `rows` plus `folded` stays below 2^30 and the shift
    is to the right (`lt_scale_short_or_full`'s SMMULR path), else 0."""
    bound = int((np.abs(folded) + 128 * np.abs(rows.astype(np.int64)).sum(axis=1)).max()) if rows.size else 0
    return 1 << (-shift - 1) if bound < (1 << 30) and -31 < shift < 0 else 0


Lowering = Callable[[ModelEmitter, Operator, str], str]


@dataclass(frozen=True)
class Kernel:
    """One operator the runtime runs: its lowering and the type signatures it accepts, each `T` (input 0 and
    output 0 of type T) or `A->B`; `*` matches any input type. No signatures: the operator has no typed data
    (CALL_ONCE, VAR_HANDLE). The signatures are both the check made before lowering and the docs' table."""

    opcode: str
    lower: Lowering
    types: tuple[str, ...]
    notes: str = ""


def signature(e: ModelEmitter, op: Operator) -> str:
    """The type signature of `op` as `Kernel.types` spells it."""
    source = e.tensor(op.inputs[0]).dtype if op.inputs and op.inputs[0] >= 0 else "-"
    target = e.tensor(op.outputs[0]).dtype if op.outputs else "-"
    return source if source == target else f"{source}->{target}"


def accepts(kernel: Kernel, sig: str) -> bool:
    if not kernel.types:
        return True
    return sig in kernel.types or f"*->{sig.split('->')[-1]}" in kernel.types


def elementwise_count(e: ModelEmitter, op: Operator) -> int:
    """Elements of input 0, which must have the output's shape (unary element-wise kernels)."""
    shape = e.tensor(op.inputs[0]).shape
    require(
        shape == e.tensor(op.outputs[0]).shape,
        f"output shape {e.tensor(op.outputs[0]).shape} differs from the input's {shape}",
    )
    return math.prod(shape)
