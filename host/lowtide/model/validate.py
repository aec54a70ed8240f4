"""Everything a well-formed flatbuffer can still say wrong, checked before anything runs the model.

TFLite Micro trusts its model: a bad stride divides by zero, a subgraph calling itself recurses until the stack
overflows, a bad offline-plan offset writes outside the arena. lowtide's own stages would raise tracebacks on the
same models. So every model a user gives is checked here first, and so is every model lowtide writes
(`lowtide.validation`, which adds the memory stage's one check: an offline plan's offsets must not overlap
tensors live at the same time).

The checks are a table, in the shape of Arm Vela's supported-operator constraints: each is a function whose
docstring is the reason given to the user, registered for the kind of thing it looks at (the model, a subgraph, a
tensor, an operator), yielding one detail per problem found. `graph_problems` runs them all and returns every
problem, each one line naming where it is; the memory stage's check, which needs a sound structure, runs only on
a model these pass.

Most checks guard every command: TFLM itself would crash or misread the model. A few guard only the stages that
rely on what they check (`Reliance`, given where the check is registered): where TFLM's kernel runs on the output
shape a model declares (SPACE_TO_BATCH_ND and BATCH_TO_SPACE_ND: `TFLM_KEEPS_DECLARED_OUTPUT`), a declared shape
other than the one the operator computes breaks only the stages that compute with that shape (the compiler's
lowering, the rewrite's tiling). The commands that do not rely on it (`inspect`, `measure` with TFLM, `optimize`)
take the model with a warning (`Problem.warning`), and the rest refuse it (`lowtide.validation.load_model`).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lowtide.errors import ModelError
from lowtide.model import shapes
from lowtide.model.attributes import SoftmaxAttributes, SvdfAttributes, schema_fields, table_name
from lowtide.model.ir import Graph, Operator, Subgraph, Tensor, TensorKind
from lowtide.model.offline_memory import NAME as OFFLINE_PLAN_NAME
from lowtide.model.offline_memory import VERSION, OfflinePlan, PlanFormatError
from lowtide.model.operators import NO_OUTPUT_OPCODES, TFLM_KEEPS_DECLARED_OUTPUT
from lowtide.model.schema import fb
from lowtide.settings import MAX_TENSOR_BYTES_ENV

# RuntimeShape's inline storage in TFLM (kMaxSmallSize): kernels index at most this many dimensions.
MAX_RANK = 6

# Integer ranges of zero points, by tensor type.
_ZERO_POINT_RANGE = {
    "int8": (-128, 127),
    "uint8": (0, 255),
    "int16": (-32768, 32767),
    "uint16": (0, 65535),
    "int4": (-8, 7),
    "int32": (-(1 << 31), (1 << 31) - 1),
}
# Types the buffer-size check cannot judge: packed sub-byte types may store two or four values per byte.
_PACKED_TYPES = frozenset({"int4", "uint4", "int2"})
# Types TFLM has no kernels or tensor support for.
_UNSUPPORTED_TYPES = frozenset({"string", "complex64", "complex128", "float64", "variant"})

# Types an input or output of the model may have: numpy arrays of them cross to TFLM and to boards.
_ARRAY_TYPES = frozenset(
    {"float32", "float16", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "bool"}
)
# Builtin options class each operator's kernel reads (TFLM's flatbuffer_conversions.cc), and whether it must be
# present: those whose fields lowtide and TFLM need (strides, axes, ranks) are required.
_OPTIONS: dict[str, tuple[str, bool]] = {
    "CONV_2D": ("Conv2DOptions", True),
    "DEPTHWISE_CONV_2D": ("DepthwiseConv2DOptions", True),
    "TRANSPOSE_CONV": ("TransposeConvOptions", True),
    "AVERAGE_POOL_2D": ("Pool2DOptions", True),
    "MAX_POOL_2D": ("Pool2DOptions", True),
    "L2_POOL_2D": ("Pool2DOptions", True),
    "FULLY_CONNECTED": ("FullyConnectedOptions", False),
    "SOFTMAX": ("SoftmaxOptions", True),
    "CONCATENATION": ("ConcatenationOptions", True),
    "ADD": ("AddOptions", False),
    "SUB": ("SubOptions", False),
    "MUL": ("MulOptions", False),
    "SVDF": ("SVDFOptions", True),
    "PACK": ("PackOptions", True),
    "UNPACK": ("UnpackOptions", True),
    "GATHER": ("GatherOptions", False),
    "RESHAPE": ("ReshapeOptions", False),
    "STRIDED_SLICE": ("StridedSliceOptions", False),
    "MEAN": ("ReducerOptions", False),
    "SPLIT": ("SplitOptions", False),
    "SPLIT_V": ("SplitVOptions", False),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": ("UnidirectionalSequenceLSTMOptions", True),
    "CALL_ONCE": ("CallOnceOptions", True),
    "IF": ("IfOptions", True),
    "WHILE": ("WhileOptions", True),
    "VAR_HANDLE": ("VarHandleOptions", False),
}
# Input positions each kernel reads without checking for an omitted (-1) or missing input.
_REQUIRED_INPUTS: dict[str, tuple[int, ...]] = {
    "CONV_2D": (0, 1),
    "DEPTHWISE_CONV_2D": (0, 1),
    "FULLY_CONNECTED": (0, 1),
    "TRANSPOSE_CONV": (0, 1, 2),
    "ADD": (0, 1),
    "SUB": (0, 1),
    "MUL": (0, 1),
    "SOFTMAX": (0,),
    "AVERAGE_POOL_2D": (0,),
    "MAX_POOL_2D": (0,),
    "L2_POOL_2D": (0,),
    "RESHAPE": (0,),
    "CONCATENATION": (0,),
    "QUANTIZE": (0,),
    "DEQUANTIZE": (0,),
    "LOGISTIC": (0,),
    "TANH": (0,),
    "RELU": (0,),
    "RELU6": (0,),
    "PAD": (0, 1),
    "MEAN": (0, 1),
    "STRIDED_SLICE": (0, 1, 2, 3),
    "TRANSPOSE": (0, 1),
    "SPLIT": (0, 1),
    "SPLIT_V": (0, 1, 2),
    "SVDF": (0, 1, 2, 4),
    "PACK": (0,),
    "UNPACK": (0,),
    "GATHER": (0, 1),
    "SHAPE": (0,),
    "RESIZE_NEAREST_NEIGHBOR": (0, 1),
    "ASSIGN_VARIABLE": (0, 1),
    "READ_VARIABLE": (0,),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": (0, 2, 3, 4, 6, 7, 8, 12, 13, 14, 15, 18, 19),
}
# Ranks the kernels index without checking (TFLM checks them in Prepare, but lowtide's own stages read the shapes
# first): opcode -> {input position: rank}, and the rank of output 0.
_INPUT_RANKS: dict[str, dict[int, int]] = {
    "CONV_2D": {0: 4, 1: 4, 2: 1},
    "DEPTHWISE_CONV_2D": {0: 4, 1: 4, 2: 1},
    "TRANSPOSE_CONV": {1: 4, 2: 4},
    "AVERAGE_POOL_2D": {0: 4},
    "MAX_POOL_2D": {0: 4},
    "L2_POOL_2D": {0: 4},
    "FULLY_CONNECTED": {1: 2, 2: 1},
    "SVDF": {0: 2, 1: 2, 2: 2, 3: 1, 4: 2},
    "UNIDIRECTIONAL_SEQUENCE_LSTM": {0: 3, 18: 2, 19: 2},
}
_OUTPUT_RANKS = {
    "CONV_2D": 4,
    "DEPTHWISE_CONV_2D": 4,
    "TRANSPOSE_CONV": 4,
    "AVERAGE_POOL_2D": 4,
    "MAX_POOL_2D": 4,
    "L2_POOL_2D": 4,
}
# The schema's union fields (each `field` with its tag `fieldType`) and the union each tag names a member of.
_UNIONS = {
    "builtinOptions": fb.BuiltinOptions,
    "builtinOptions2": fb.BuiltinOptions2,
    "details": fb.QuantizationDetails,
    "arraySegments": fb.SparseIndexVector,
    "arrayIndices": fb.SparseIndexVector,
}


class Reliance(enum.Enum):
    """What only some stages rely on: a problem of a check registered with one is refused by the commands that
    rely on it, and a warning, with its consequence under TFLM, to the others."""

    COMPUTED_SHAPES = (
        "TFLM allocates the declared shape and runs the kernel on it: output bytes it does not compute there are "
        "left unwritten, stale memory (`lowtide inspect --check-stale`, docs/stale-memory.md), and what it "
        "computes beyond the declared shape is dropped"
    )

    @property
    def consequence(self) -> str:
        return self.value


# What every stage relies on: the default of the commands that compute with everything the model says.
EVERY_RELIANCE = frozenset(Reliance)


@dataclass(frozen=True)
class Problem:
    where: str  # "subgraph 0 operator 3 (CONV_2D)", "model", ...
    reason: str  # the check's reason, with the detail of this case
    relied_on: Reliance | None = None  # None: every command relies on the check; else only those relying on this

    @property
    def message(self) -> str:
        return f"{self.where}: {self.reason}"

    @property
    def warning(self) -> str:
        """The message and, for a problem only some commands refuse, what happens under TFLM to those that go on."""
        return f"{self.message}; {self.relied_on.consequence}" if self.relied_on else self.message

    def refused_by(self, relies_on: frozenset[Reliance]) -> bool:
        """Whether a command relying on `relies_on` refuses the model for this problem."""
        return self.relied_on is None or self.relied_on in relies_on


@dataclass(frozen=True)
class _Model:
    """What the checks look at: the typed graph, its flatbuffer object tree and the limit in force."""

    graph: Graph
    max_bytes: int

    @property
    def raw(self) -> fb.ModelT:
        return self.graph.raw


Check = Callable[..., Iterator[str]]
MODEL_CHECKS: list[Check] = []  # (model) -> details
SUBGRAPH_CHECKS: list[Check] = []  # (model, subgraph) -> details
TENSOR_CHECKS: list[Check] = []  # (model, subgraph, tensor) -> details
OPERATOR_CHECKS: list[Check] = []  # (model, subgraph, operator) -> details
PLAN_CHECKS: list[Check] = []  # (model, plan) -> details


# The checks only some stages rely on, and what they rely on (every other check: all of them).
_RELIED_ON: dict[Check, Reliance] = {}


def _check(table: list[Check], relied_on: Reliance | None = None) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        table.append(fn)
        if relied_on is not None:
            _RELIED_ON[fn] = relied_on
        return fn

    return register


def _problem(where: str, check: Check, detail: str) -> Problem:
    summary = (check.__doc__ or "").strip()  # every registered check has its reason as its docstring
    return Problem(where, f"{summary}: {detail}" if detail else summary, _RELIED_ON.get(check))


# ---- structure ---------------------------------------------------------------------------------------------------


@_check(MODEL_CHECKS)
def _calls_acyclic(m: _Model) -> Iterator[str]:
    """subgraph calls must not form a cycle (TFLM would recurse until its stack overflows)"""
    calls = {sg.index: sorted({s for op in sg.operators for s in op.called_subgraphs}) for sg in m.graph.subgraphs}
    state: dict[int, int] = {}  # 1 = on the current path, 2 = done
    for root in calls:
        if state.get(root):
            continue
        path, stack = [root], [iter(calls[root])]
        state[root] = 1
        while stack:  # iterative depth-first search: a deep call chain cannot exhaust Python's stack either
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                cycle = path[path.index(nxt) :] + [nxt]
                yield " -> ".join(f"subgraph {s}" for s in cycle)
                return
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(calls[nxt]))


@_check(MODEL_CHECKS)
def _main_has_inputs_and_outputs(m: _Model) -> Iterator[str]:
    """the main subgraph needs at least one input and one output (TFLM's interpreter crashes without)"""
    main = m.graph.main
    if not main.inputs:
        yield "it has no inputs"
    if not main.outputs:
        yield "it has no outputs"


@_check(MODEL_CHECKS)
def _io_types(m: _Model) -> Iterator[str]:
    """the main subgraph's inputs and outputs must be plain numbers (lowtide feeds and reads them as arrays)"""
    main = m.graph.main
    for kind, tensors in (("input", main.inputs), ("output", main.outputs)):
        for t in tensors:
            if main.tensors[t].dtype not in _ARRAY_TYPES:
                yield f"{kind} tensor {t} '{main.tensors[t].name}' is {main.tensors[t].dtype}"


@_check(MODEL_CHECKS)
def _buffers_inside_file(m: _Model) -> Iterator[str]:
    """a buffer lies past the end of the file"""
    for i, buffer in enumerate(m.raw.buffers or []):
        offset, size = getattr(buffer, "offset", 0), getattr(buffer, "size", 0)
        if offset > 1 and offset + size > m.graph.size_bytes:
            yield f"buffer {i} spans bytes {offset}..{offset + size} of a {m.graph.size_bytes}-byte file"


@_check(SUBGRAPH_CHECKS)
def _has_operators(m: _Model, sg: Subgraph) -> Iterator[str]:
    """subgraph has no operators (TFLM crashes on an empty subgraph)"""
    if not sg.operators:
        yield ""


@_check(SUBGRAPH_CHECKS)
def _written_once(m: _Model, sg: Subgraph) -> Iterator[str]:
    """a tensor must be written at most once"""
    writer: dict[int, str] = {t: "the subgraph's inputs" for t in sg.inputs}
    for op in sg.operators:
        for t in op.outputs:
            if t in writer:
                yield f"tensor {t} '{sg.tensors[t].name}' is written by {writer[t]} and by operator {op.index}"
            else:
                writer[t] = f"operator {op.index}"


@_check(SUBGRAPH_CHECKS)
def _read_after_written(m: _Model, sg: Subgraph) -> Iterator[str]:
    """a tensor is read before anything writes it"""
    ready = set(sg.inputs) | {t.index for t in sg.tensors if t.kind is not TensorKind.ACTIVATION or t.nbytes == 0}
    for op in sg.operators:
        for t in op.inputs:
            if t >= 0 and t not in ready:
                own = " (its own output)" if t in op.outputs else ""
                yield f"operator {op.index} ({op.opcode}) reads tensor {t} '{sg.tensors[t].name}'{own}"
        ready.update(op.outputs)
    for t in sg.outputs:
        if t not in ready:
            yield f"subgraph output tensor {t} '{sg.tensors[t].name}' is never written"


def _union_mismatches(tables: Sequence[object]) -> Iterator[str]:
    """Union fields of the object-API `tables` whose tag and table disagree. The reader builds a union's table
    from its tag; a tag that names a table where the bytes hold none (or a tag no member has) leaves the tag
    without its table, and TFLM's flatbuffer aligner, which writes every model lowtide writes, follows that tag
    into memory that is not there (a segmentation fault in lowtide's own process)."""
    for table in tables:
        for field, union in _UNIONS.items():
            tag = getattr(table, f"{field}Type", None)
            if not tag:
                continue
            members = {v: k for k, v in vars(union).items() if not k.startswith("_")}
            if tag not in members:
                yield f"{field} type {tag} is no {union.__name__} member"
            elif getattr(table, field) is None:
                yield f"{field} type {tag} ({members[tag]}) without its table"


@_check(TENSOR_CHECKS)
def _tensor_unions(m: _Model, sg: Subgraph, t: Tensor) -> Iterator[str]:
    """a union's type and table disagree"""
    raw = m.raw.subgraphs[sg.index].tensors[t.index]
    sparsity = (raw.sparsity.dimMetadata or []) if raw.sparsity is not None else []
    yield from _union_mismatches([raw.quantization, *sparsity] if raw.quantization is not None else sparsity)


@_check(OPERATOR_CHECKS)
def _operator_unions(m: _Model, sg: Subgraph, op: Operator) -> Iterator[str]:
    """a union's type and table disagree"""
    yield from _union_mismatches([m.raw.subgraphs[sg.index].operators[op.index]])


@_check(OPERATOR_CHECKS)
def _options_type(m: _Model, sg: Subgraph, op: Operator) -> Iterator[str]:
    """builtin options missing or of the wrong type"""
    found = table_name(op.attributes) if op.attributes is not None else None
    if m.raw.subgraphs[sg.index].operators[op.index].builtinOptionsType and found is None:
        return  # a tag without its table: _operator_unions says so
    expected, required = _OPTIONS.get(op.opcode, (None, False))
    if expected is None:
        return
    if found is None and required:
        yield f"expected {expected}, found none"
    elif found is not None and found != expected:
        yield f"expected {expected}, found {found}"


@_check(OPERATOR_CHECKS)
def _required_inputs(m: _Model, sg: Subgraph, op: Operator) -> Iterator[str]:
    """operator inputs missing"""
    missing = [i for i in _REQUIRED_INPUTS.get(op.opcode, ()) if i >= len(op.inputs) or op.inputs[i] < 0]
    if missing:
        yield f"{op.opcode} needs input {', '.join(map(str, missing))} (it has {len(op.inputs)} inputs)"
    if not op.outputs and op.opcode not in NO_OUTPUT_OPCODES:
        yield "it has no outputs"


@_check(OPERATOR_CHECKS)
def _ranks(m: _Model, sg: Subgraph, op: Operator) -> Iterator[str]:
    """tensor rank does not fit the operator"""
    for position, rank in _INPUT_RANKS.get(op.opcode, {}).items():
        if position < len(op.inputs) and op.inputs[position] >= 0:
            shape = sg.tensors[op.inputs[position]].shape
            if len(shape) != rank:
                yield f"input {position} has shape {list(shape)}, {op.opcode} needs rank {rank}"
    output_rank = _OUTPUT_RANKS.get(op.opcode)
    if output_rank is not None and op.outputs and len(sg.tensors[op.outputs[0]].shape) != output_rank:
        yield f"output has shape {list(sg.tensors[op.outputs[0]].shape)}, {op.opcode} needs rank {output_rank}"
    if op.opcode == "CONCATENATION" and op.outputs:
        ranks = {len(sg.tensors[t].shape) for t in (*op.inputs, op.outputs[0]) if t >= 0}
        if len(ranks) > 1:
            yield f"inputs and output of ranks {sorted(ranks)}"


# ---- values ------------------------------------------------------------------------------------------------------


def _intermediate_only(sg: Subgraph, t: Tensor) -> bool:
    """LSTM intermediates carry only quantization parameters: the converter gives them shape (0,)."""
    return any(t.index in op.intermediates for op in sg.operators) and not any(
        t.index in op.inputs or t.index in op.outputs for op in sg.operators
    )


@_check(TENSOR_CHECKS)
def _supported_type(m: _Model, sg: Subgraph, t: Tensor) -> Iterator[str]:
    """type not supported by TFLite Micro"""
    if t.dtype in _UNSUPPORTED_TYPES:
        yield t.dtype


@_check(TENSOR_CHECKS)
def _shape(m: _Model, sg: Subgraph, t: Tensor) -> Iterator[str]:
    """shape must have dimensions >= 1 and a rank TFLM supports"""
    if len(t.shape) > MAX_RANK:
        yield f"rank {len(t.shape)} in {list(t.shape)}, more than {MAX_RANK}"
    if any(d < 1 for d in t.shape) and not _intermediate_only(sg, t):
        yield f"{list(t.shape)}"


@_check(TENSOR_CHECKS)
def _size_bound(m: _Model, sg: Subgraph, t: Tensor) -> Iterator[str]:
    """tensor larger than any microcontroller can hold"""
    if t.nbytes > m.max_bytes:
        yield f"{t.nbytes:,} bytes, limit {m.max_bytes:,} (set {MAX_TENSOR_BYTES_ENV} to raise it)"


@_check(TENSOR_CHECKS)
def _buffer_matches_shape(m: _Model, sg: Subgraph, t: Tensor) -> Iterator[str]:
    """constant data does not match its shape and type"""
    if t.kind is not TensorKind.CONSTANT or t.dtype in _PACKED_TYPES:
        return
    buffer = m.raw.buffers[t.buffer]
    size = len(buffer.data) if buffer.data is not None and len(buffer.data) else getattr(buffer, "size", 0)
    if size != t.nbytes:
        yield f"buffer {t.buffer} holds {size} bytes, shape {list(t.shape)} of {t.dtype} needs {t.nbytes}"


@_check(TENSOR_CHECKS)
def _quantization(m: _Model, sg: Subgraph, t: Tensor) -> Iterator[str]:
    """quantization parameters inconsistent"""
    q = t.quantization
    if q is None or not q.scales:
        return
    scales = np.asarray(q.scales, dtype=np.float64)
    zeros = np.asarray(q.zero_points, dtype=np.int64)
    if len(zeros) not in (0, len(scales)):
        yield f"{len(scales)} scales but {len(zeros)} zero points"
    if len(scales) > 1:
        # Converters leave the weights' quantized dimension on their 1-D biases: a vector has only one.
        axis = q.axis if len(t.shape) != 1 else 0
        if not 0 <= axis < len(t.shape):
            yield f"quantized dimension {axis} outside rank {len(t.shape)}"
        elif len(scales) != t.shape[axis]:
            yield f"{len(scales)} scales for {t.shape[axis]} channels along dimension {axis}"
    if not (np.isfinite(scales).all() and (scales > 0).all()):
        yield f"scales must be finite and positive, found {scales[~(np.isfinite(scales) & (scales > 0))][0]}"
    low, high = _ZERO_POINT_RANGE.get(t.dtype, (-(1 << 63), (1 << 63) - 1))
    if len(zeros) and ((zeros < low) | (zeros > high)).any():
        yield f"zero point {zeros[(zeros < low) | (zeros > high)][0]} outside {t.dtype}'s range {low}..{high}"


def _option(op: Operator, name: str, default: object = None) -> Any:
    """A field of the operator's options table by its schema name: the name the messages give the user."""
    return schema_fields(op.attributes).get(name, default) if op.attributes is not None else default


@_check(OPERATOR_CHECKS)
def _windows(m: _Model, sg: Subgraph, op: Operator) -> Iterator[str]:
    """strides, filter sizes and dilations must be >= 1"""
    for name in ("strideW", "strideH", "filterWidth", "filterHeight", "dilationWFactor", "dilationHFactor"):
        value = _option(op, name)
        if value is not None and value < 1:
            yield f"{name} = {value}"


@_check(OPERATOR_CHECKS)
def _axis_in_range(m: _Model, sg: Subgraph, op: Operator) -> Iterator[str]:
    """axis out of range"""
    if op.opcode in ("CONCATENATION", "GATHER", "UNPACK") and op.inputs and op.inputs[0] >= 0:
        rank = len(sg.tensors[op.inputs[0]].shape)
        axis = _option(op, "axis", 0)
        if not -rank <= axis < max(rank, 1):
            yield f"axis {axis} for rank {rank}"
    elif op.opcode == "PACK" and op.outputs:
        rank = len(sg.tensors[op.outputs[0]].shape)
        axis = _option(op, "axis", 0)
        if not -rank <= axis < max(rank, 1):
            yield f"axis {axis} for output rank {rank}"
    elif op.opcode in ("SPLIT", "SPLIT_V") and len(op.inputs) > 1:
        axis_tensor, data_tensor = (
            (op.inputs[0], op.inputs[1]) if op.opcode == "SPLIT" else (op.inputs[2], op.inputs[0])
        )
        if axis_tensor < 0 or data_tensor < 0:
            return
        axis = m.graph.constant_array(axis_tensor, sg.index) if sg.tensors[axis_tensor].nbytes == 4 else None
        rank = len(sg.tensors[data_tensor].shape)
        if axis is not None and axis.size == 1 and not -rank <= int(axis.reshape(-1)[0]) < max(rank, 1):
            yield f"axis {int(axis.reshape(-1)[0])} for rank {rank}"


@_check(OPERATOR_CHECKS)
def _softmax_beta(m: _Model, sg: Subgraph, op: Operator) -> Iterator[str]:
    """SOFTMAX beta must be finite"""
    if (
        op.opcode == "SOFTMAX"
        and isinstance(op.attributes, SoftmaxAttributes)
        and not math.isfinite(op.attributes.beta)
    ):
        yield f"beta = {op.attributes.beta}"


@_check(OPERATOR_CHECKS)
def _svdf_rank(m: _Model, sg: Subgraph, op: Operator) -> Iterator[str]:
    """SVDF rank must be >= 1"""
    if op.opcode == "SVDF" and isinstance(op.attributes, SvdfAttributes) and op.attributes.rank < 1:
        yield f"rank = {op.attributes.rank}"


def _judged_options(op: Operator) -> bool:
    """The shape rules read the options only when they are of the class the kernel reads (_options_type says
    when they are not)."""
    expected = _OPTIONS.get(op.opcode, (None, False))[0]
    return op.attributes is None or expected is None or table_name(op.attributes) == expected


@_check(OPERATOR_CHECKS)
def _operand_shapes(m: _Model, sg: Subgraph, op: Operator) -> Iterator[str]:
    """operand shapes do not fit the operator"""
    if _judged_options(op):
        try:
            shapes.computed_outputs(m.graph, sg, op)
        except shapes.OperandShapes as exc:
            yield str(exc)


def _declared_mismatches(m: _Model, sg: Subgraph, op: Operator) -> Iterator[tuple[str, bool]]:
    """Each output `op` declares with a shape it does not compute, and whether TFLM runs it as declared: the
    kernel keeps any declared output (TFLM_KEEPS_DECLARED_OUTPUT) and it holds the computed rank and channels,
    which the kernel copies into each declared position."""
    if not _judged_options(op):
        return
    try:
        computed = shapes.computed_outputs(m.graph, sg, op)
    except shapes.OperandShapes:
        return  # _operand_shapes says so
    for t, expected in zip(op.outputs, computed):
        declared = sg.tensors[t].shape if t >= 0 else ()
        if expected is None or t < 0 or expected.matches(declared):
            continue
        x = sg.tensors[op.inputs[0]].shape  # a rule that computes a shape has its input
        runs = op.opcode in TFLM_KEEPS_DECLARED_OUTPUT and len(declared) == len(x) and declared[-1:] == x[-1:]
        yield f"output {t} is declared {list(declared)}, computed {expected}", runs


@_check(OPERATOR_CHECKS)
def _declared_shape(m: _Model, sg: Subgraph, op: Operator) -> Iterator[str]:
    """declared output shape is not the one the operator computes"""
    yield from (detail for detail, runs in _declared_mismatches(m, sg, op) if not runs)


@_check(OPERATOR_CHECKS, Reliance.COMPUTED_SHAPES)
def _declared_shape_tflm_runs(m: _Model, sg: Subgraph, op: Operator) -> Iterator[str]:
    """declared output shape is not the one the operator computes"""
    yield from (detail for detail, runs in _declared_mismatches(m, sg, op) if runs)


# ---- OfflineMemoryAllocation -------------------------------------------------------------------------------------


@_check(PLAN_CHECKS)
def _plan_header(m: _Model, plan: OfflinePlan) -> Iterator[str]:
    """OfflineMemoryAllocation header does not match the model"""
    if plan.version != VERSION:
        yield f"version {plan.version}, expected {VERSION}"
    if plan.subgraph_count != len(m.graph.subgraphs):
        yield f"{plan.subgraph_count} subgraphs, the model has {len(m.graph.subgraphs)}"
    if len(plan.offsets) != m.graph.tensor_count:
        yield f"{len(plan.offsets)} offsets, the model has {m.graph.tensor_count} tensors"


@_check(PLAN_CHECKS)
def _plan_offsets_in_range(m: _Model, plan: OfflinePlan) -> Iterator[str]:
    """OfflineMemoryAllocation offset out of range"""
    counts = m.graph.tensor_counts
    for sg in m.graph.subgraphs:
        for t in sg.tensors:
            offset = plan.offset(counts, sg.index, t.index)
            if offset is None:
                continue
            if offset < 0 or offset + t.nbytes > m.max_bytes:
                yield (
                    f"subgraph {sg.index} tensor {t.index} '{t.name}' at offset {offset} "
                    f"(-1 or 0..{m.max_bytes - t.nbytes:,})"
                )


# ---- running the table -------------------------------------------------------------------------------------------


def graph_problems(graph: Graph, max_tensor_bytes: int) -> list[Problem]:
    """Every problem the checks here find in `graph`, in model, subgraph, tensor, operator, plan order. Whether
    the plan's offsets overlap live tensors is the memory stage's check, run after these on a model they pass
    (`lowtide.validation.model_problems` runs both). No tensor or planned offset may reach past
    `max_tensor_bytes`."""
    m = _Model(graph, max_tensor_bytes)
    problems = [_problem("model", c, d) for c in MODEL_CHECKS for d in c(m)]
    for sg in graph.subgraphs:
        where = f"subgraph {sg.index}"
        problems += [_problem(where, c, d) for c in SUBGRAPH_CHECKS for d in c(m, sg)]
        for t in sg.tensors:
            at = f"{where} tensor {t.index} '{t.name}'"
            problems += [_problem(at, c, d) for c in TENSOR_CHECKS for d in c(m, sg, t)]
        for op in sg.operators:
            problems += _operator_problems(m, sg, op)
    data = graph.metadata.get(OFFLINE_PLAN_NAME)
    if data is not None:
        try:
            plan = OfflinePlan.decode(data)
        except PlanFormatError as exc:
            problems.append(Problem("OfflineMemoryAllocation", str(exc)))
        else:
            problems += [_problem("model", c, d) for c in PLAN_CHECKS for d in c(m, plan)]
    return problems


def _operator_problems(m: _Model, sg: Subgraph, op: Operator, relied_on: Reliance | None = None) -> list[Problem]:
    """The problems the operator checks find in `op`; only those of the checks `relied_on` names when it is given."""
    checks = [c for c in OPERATOR_CHECKS if relied_on is None or _RELIED_ON.get(c) is relied_on]
    return [
        _problem(f"subgraph {sg.index} operator {op.index} ({op.opcode})", c, d) for c in checks for d in c(m, sg, op)
    ]


def shape_problems(graph: Graph, sg: Subgraph, op: Operator) -> list[Problem]:
    """The problems of `op` with the checks of the shapes it computes: what a stage computing with those shapes
    (the rewrite's tiling, per operator it would tile) must refuse where the model was taken in with a warning."""
    return _operator_problems(_Model(graph, 0), sg, op, Reliance.COMPUTED_SHAPES)  # the shape checks read no limit


def reliances_passed(problems: Sequence[Problem]) -> frozenset[Reliance]:
    """What a model with `problems` passes every check of: what a model lowtide derives from it (a rewrite
    candidate) is refused for failing, since the original did not."""
    return EVERY_RELIANCE - {p.relied_on for p in problems if p.relied_on is not None}


def refuse_problems(path: str, problems: Sequence[Problem]) -> None:
    """ModelError naming the file at `path` and the first of `problems` found in its model (and how many more);
    nothing when there are none."""
    if problems:
        more = f" (and {len(problems) - 1} more problems: lowtide validate lists them)" if len(problems) > 1 else ""
        raise ModelError(f"{problems[0].message}{more}", path)
