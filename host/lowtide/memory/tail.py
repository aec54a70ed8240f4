"""TFLM's persistent arena tail on a 32-bit core, from the graph alone: what TFLM's allocator puts at the top of the
arena for its own structs, each operator's node and parameters, and each kernel's per-operator data.

The tail is what a rewrite pays for every operator and tensor it adds, so the rewrite search and `optimize` weigh
it beside the head (the arena a user declares is head + tail). The exact figure comes from TFLM's allocator run
in QEMU (`lowtide.tflm.sizer`), which takes a build and a second per model; this replays the same allocations
in the order TFLM makes them (`MicroAllocator`, `MicroInterpreter::AllocateTensors`, each kernel's Init and
Prepare), each rounded as TFLM's persistent allocator rounds it (down from the arena's end, to its alignment):

1. the arena allocator, the greedy planner and the `MicroAllocator` (lowtide's interpreter set-up), and the
   resource-variable slots where the model has VAR_HANDLE operators;
2. per subgraph a `TfLiteEvalTensor` per tensor and a `NodeAndRegistration` per operator;
3. per operator the builtin parameters its parser allocates (`TfLiteConvParams`, ...);
4. per operator its kernel's Init data (`OpDataConv`, ...), then what Prepare allocates: the per-channel output
   multipliers and shifts of convolutions (and per-channel fully connected layers), resource variables' buffers;
5. the scratch-buffer handles, variable tensors TFLM allocates itself, and a persistent `TfLiteTensor` (with its
   quantization) per model input and output.

Sizes are `sizeof` of TFLM's structs compiled for a 32-bit Arm core (arm-none-eabi-g++, the pinned TFLM commit,
TFLM's own flags); every Cortex-M core lowtide builds for has the same layout. The figure is exact for operators
whose kernels are in the tables (checked against the sizer on the shared models, tests/test_tail.py); for others
`TailEstimate.unmodelled` names them, and their per-operator data is not counted.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from lowtide.memory.scratch import scratch_sizes
from lowtide.model.ir import Graph, Operator, Subgraph, TensorKind, first_assignments
from lowtide.model.offline_memory import ONLINE

REFERENCE_KERNELS = "reference"  # lowtide.tflm.tree.KernelSet.REFERENCE (memory comes before tflm)
_WORD = 4  # alignof of every struct below, and of TfLiteIntArray
_KERNEL_ALIGNMENT = 16  # MicroArenaBufferAlignment(): every kernel and interpreter persistent buffer
# lt_tflm_create (firmware/tflm/lt_tflm_create.h): SingleArenaBufferAllocator, GreedyMemoryPlanner, MicroAllocator
_SET_UP_BYTES = (36, 44, 36)
_RESOURCE_VARIABLES_BYTES = 12  # MicroResourceVariables
_RESOURCE_VARIABLE_BYTES = 20  # MicroResourceVariables::MicroResourceVariable, one slot per VAR_HANDLE
_BUILTIN_DATA_ALLOCATOR_BYTES = 8  # MicroBuiltinDataAllocator
_SUBGRAPH_ALLOCATIONS_BYTES = 8
EVAL_TENSOR_BYTES = 12  # TfLiteEvalTensor: what each tensor of a subgraph adds
_NODE_BYTES = 32  # NodeAndRegistration: TfLiteNode and a registration pointer
_TENSOR_BYTES = 32  # TfLiteTensor under TF_LITE_STATIC_MEMORY
_AFFINE_QUANTIZATION_BYTES = 12  # TfLiteAffineQuantization
_SCRATCH_HANDLE_BYTES = 4  # ScratchBufferHandle

# (size, alignment) of the builtin parameters each operator's parser allocates (flatbuffer_conversions.cc); an
# operator missing here allocates none.
_BUILTIN_DATA = {
    "ADD": (2, 1),
    "ARG_MAX": (1, 1),
    "ARG_MIN": (1, 1),
    "AVERAGE_POOL_2D": (40, 4),
    "BATCH_MATMUL": (3, 1),
    "CALL_ONCE": (4, 4),
    "CAST": (2, 1),
    "CONCATENATION": (8, 4),
    "CONV_2D": (28, 4),
    "CUMSUM": (2, 1),
    "DEPTH_TO_SPACE": (4, 4),
    "DEPTHWISE_CONV_2D": (28, 4),
    "DIV": (1, 1),
    "FULLY_CONNECTED": (5, 1),
    "GATHER": (8, 4),
    "IF": (8, 4),
    "L2_NORMALIZATION": (1, 1),
    "L2_POOL_2D": (40, 4),
    "LEAKY_RELU": (4, 4),
    "MAX_POOL_2D": (40, 4),
    "MEAN": (1, 1),
    "MIRROR_PAD": (1, 1),
    "MUL": (1, 1),
    "PACK": (8, 4),
    "REDUCE_ALL": (1, 1),
    "REDUCE_MAX": (1, 1),
    "REDUCE_MIN": (1, 1),
    "RESHAPE": (36, 4),
    "RESIZE_BILINEAR": (2, 1),
    "RESIZE_NEAREST_NEIGHBOR": (2, 1),
    "SHAPE": (1, 1),
    "SOFTMAX": (4, 4),
    "SPACE_TO_DEPTH": (4, 4),
    "SPLIT": (4, 4),
    "SPLIT_V": (4, 4),
    "SQUEEZE": (36, 4),
    "STRIDED_SLICE": (24, 4),
    "SUB": (2, 1),
    "SUM": (1, 1),
    "SVDF": (8, 4),
    "TRANSPOSE_CONV": (16, 4),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": (16, 4),
    "UNPACK": (8, 4),
    "VAR_HANDLE": (8, 4),
    "WHILE": (8, 4),
}

# Bytes each reference kernel's Init allocates (sizeof its op data); a kernel without Init allocates none.
_REFERENCE_INIT = {
    "ABS": 28,
    "ADD": 60,
    "AVERAGE_POOL_2D": 32,
    "CALL_ONCE": 8,
    "CONCATENATION": 24,
    "CONV_2D": 56,
    "DEPTHWISE_CONV_2D": 56,
    "DEQUANTIZE": 32,
    "DIV": 28,
    "ELU": 256,
    "EQUAL": 32,
    "FULLY_CONNECTED": 48,
    "GREATER": 32,
    "GREATER_EQUAL": 32,
    "HARD_SWISH": 20,
    "IF": 8,
    "L2_NORMALIZATION": 4,
    "LEAKY_RELU": 24,
    "LESS": 32,
    "LESS_EQUAL": 32,
    "LOGISTIC": 16,
    "MAX_POOL_2D": 32,
    "MEAN": 44,
    "MIRROR_PAD": 20,
    "MUL": 36,
    "NOT_EQUAL": 32,
    "PAD": 56,
    "PADV2": 56,
    "PRELU": 28,
    "QUANTIZE": 32,
    "REDUCE_ALL": 44,
    "REDUCE_MAX": 44,
    "REDUCE_MIN": 44,
    "RELU": 28,
    "RELU6": 8,
    "RSQRT": 28,
    "SELECT_V2": 1,
    "SOFTMAX": 56,
    "SPACE_TO_BATCH_ND": 4,
    "SQUARED_DIFFERENCE": 112,
    "STRIDED_SLICE": 84,
    "SUB": 52,
    "SUM": 44,
    "SVDF": 36,
    "TANH": 16,
    "TRANSPOSE_CONV": 72,
    "UNIDIRECTIONAL_SEQUENCE_LSTM": 688,
    "VAR_HANDLE": 4,
    "WHILE": 8,
}
# Reference kernels that allocate nothing persistent (no Init, and nothing in Prepare).
_REFERENCE_NONE = frozenset(
    {
        "ADD_N",
        "ARG_MAX",
        "ARG_MIN",
        "ASSIGN_VARIABLE",  # its Prepare allocates the variable's buffer: counted per variable
        "BATCH_TO_SPACE_ND",
        "BROADCAST_ARGS",
        "BROADCAST_TO",
        "CAST",
        "CEIL",
        "COS",
        "CUMSUM",
        "DEPTH_TO_SPACE",
        "EMBEDDING_LOOKUP",
        "EXP",
        "EXPAND_DIMS",
        "FILL",
        "FLOOR",
        "FLOOR_DIV",
        "FLOOR_MOD",
        "GATHER",
        "GATHER_ND",
        "L2_POOL_2D",
        "LOG",
        "LOG_SOFTMAX",
        "LOGICAL_AND",
        "LOGICAL_NOT",
        "LOGICAL_OR",
        "MAXIMUM",
        "MINIMUM",
        "NEG",
        "PACK",
        "READ_VARIABLE",
        "RESHAPE",
        "RESIZE_BILINEAR",
        "RESIZE_NEAREST_NEIGHBOR",
        "REVERSE_V2",
        "ROUND",
        "SHAPE",
        "SIN",
        "SLICE",
        "SPACE_TO_DEPTH",
        "SPLIT",
        "SPLIT_V",
        "SQRT",
        "SQUARE",
        "SQUEEZE",
        "TRANSPOSE",
        "UNPACK",
        "ZEROS_LIKE",
    }
)
# Prepare's per-channel output multipliers and shifts (two int32 arrays): the filter input and its channel axis.
_PER_CHANNEL = {"CONV_2D": (1, 0), "DEPTHWISE_CONV_2D": (1, 3), "TRANSPOSE_CONV": (1, 0)}
# Prepare allocations the tables do not hold (int16 softmax look-up tables, batch matmul's transposed operands).
_UNMODELLED_PREPARE = frozenset({"BATCH_MATMUL"})


@dataclass(frozen=True)
class TailEstimate:
    """TFLM's persistent tail for one model on a 32-bit core."""

    tail_bytes: int
    unmodelled: tuple[str, ...]  # operators whose persistent data is not counted; empty: the figure is exact

    @property
    def exact(self) -> bool:
        return not self.unmodelled


class _Tail:
    """TFLM's persistent allocator: it grows down from the arena's (16-byte aligned) end."""

    def __init__(self) -> None:
        self.used = 0

    def allocate(self, size: int, alignment: int = _WORD) -> None:
        self.used = _align(self.used + size, alignment)


def persistent_tail(graph: Graph, kernels: str = REFERENCE_KERNELS) -> TailEstimate:
    """TFLM's persistent tail for `graph` with `kernels` (a `lowtide.tflm.tree.KernelSet` value) on a 32-bit core;
    only the reference kernels are tabled: with others every kernel's data is unmodelled."""
    tail = _Tail()
    unmodelled: set[str] = set()
    for size in _SET_UP_BYTES:
        tail.allocate(size)
    variables = sum(op.opcode == "VAR_HANDLE" for sg in graph.subgraphs for op in sg.operators)
    if variables:
        tail.allocate(_RESOURCE_VARIABLES_BYTES, _KERNEL_ALIGNMENT)
        tail.allocate(_RESOURCE_VARIABLE_BYTES * variables, _KERNEL_ALIGNMENT)
    # MicroInterpreter::AllocateTensors -> MicroAllocator::StartModelAllocation
    tail.allocate(_BUILTIN_DATA_ALLOCATOR_BYTES)
    tail.allocate(_SUBGRAPH_ALLOCATIONS_BYTES * len(graph.subgraphs))
    for sg in graph.subgraphs:
        tail.allocate(EVAL_TENSOR_BYTES * len(sg.tensors))
    for sg in graph.subgraphs:
        tail.allocate(_NODE_BYTES * len(sg.operators))
    for sg in graph.subgraphs:
        for op in sg.operators:
            if op.opcode in _BUILTIN_DATA:
                tail.allocate(*_BUILTIN_DATA[op.opcode])
    # InitSubgraphs, then PrepareSubgraphs
    reference = kernels == REFERENCE_KERNELS
    for sg in graph.subgraphs:
        for op in sg.operators:
            if reference and op.opcode in _REFERENCE_INIT:
                tail.allocate(_REFERENCE_INIT[op.opcode], _KERNEL_ALIGNMENT)
            elif not reference or op.opcode not in _REFERENCE_NONE:
                unmodelled.add(op.opcode)
    assigned = set(first_assignments(graph).values())  # (subgraph, value tensor) that sizes each variable
    for sg in graph.subgraphs:
        for op in sg.operators:
            for size in _prepared(graph, sg, op, assigned):
                tail.allocate(size, _KERNEL_ALIGNMENT)
            if op.opcode in _UNMODELLED_PREPARE or (op.opcode == "SOFTMAX" and _input_type(sg, op) == "int16"):
                unmodelled.add(op.opcode)
    # FinishModelAllocation: scratch-buffer handles, then variable tensors not in the offline plan
    requests = sum(len(scratch_sizes(graph, sg.index, op.index)) for sg in graph.subgraphs for op in sg.operators)
    if requests:
        tail.allocate(_SCRATCH_HANDLE_BYTES * requests)
    plan = graph.offline_plan
    for sg in graph.subgraphs:
        for t in sg.tensors:
            if t.kind is TensorKind.VARIABLE:
                # TFLM reads every subgraph's variables against the plan's first offsets (AllocateVariables)
                offline = plan is not None and t.index < len(plan.offsets) and plan.offsets[t.index] != ONLINE
                if not offline:
                    tail.allocate(t.nbytes, _KERNEL_ALIGNMENT)
    # The interpreter's persistent TfLiteTensors of the model's inputs and outputs
    for ends in (graph.main.inputs, graph.main.outputs):
        tail.allocate(_WORD * len(ends), _KERNEL_ALIGNMENT)
        for tensor in ends:
            tail.allocate(_TENSOR_BYTES)
            channels = _quantization_channels(graph, tensor)
            if channels:
                tail.allocate(_AFFINE_QUANTIZATION_BYTES)
                tail.allocate(_WORD * (1 + channels))  # the zero points, as a TfLiteIntArray
    return TailEstimate(tail.used, tuple(sorted(unmodelled)))


def opcode_tail_bytes(opcode: str, kernels: str = REFERENCE_KERNELS) -> int:
    """What one operator of `opcode` adds to the tail but for its Prepare allocations and alignment within
    the builtin parameters: its node, its parameters and its kernel's Init data."""
    builtin = _BUILTIN_DATA.get(opcode, (0, _WORD))[0]
    init = _REFERENCE_INIT.get(opcode, 0) if kernels == REFERENCE_KERNELS else 0
    return _NODE_BYTES + _align(builtin, _WORD) + _align(init, _KERNEL_ALIGNMENT)


def operator_tail_bytes(graph: Graph, subgraph: int, op: int, kernels: str = REFERENCE_KERNELS) -> int:
    """What operator `op` of `subgraph` adds to the tail (alignment within the builtin parameters aside), as it
    is or run on windows with the same weights: `opcode_tail_bytes` and what its kernel allocates in Prepare."""
    sg = graph.subgraphs[subgraph]
    operator = sg.operators[op]
    assigned = set(first_assignments(graph).values()) if operator.opcode == "ASSIGN_VARIABLE" else set()
    prepared = _prepared(graph, sg, operator, assigned)
    return opcode_tail_bytes(operator.opcode, kernels) + sum(_align(size, _KERNEL_ALIGNMENT) for size in prepared)


def _align(size: int, alignment: int) -> int:
    return -(-size // alignment) * alignment


def _prepared(graph: Graph, sg: Subgraph, op: Operator, assigned: Collection[tuple[int, int]]) -> list[int]:
    """The persistent buffers `op`'s kernel allocates in Prepare, in order."""
    if op.opcode in _PER_CHANNEL:
        position, axis = _PER_CHANNEL[op.opcode]
        channels = sg.tensors[op.inputs[position]].shape[axis]
        return [_WORD * channels] * 2
    if op.opcode == "FULLY_CONNECTED" and _input_type(sg, op) != "float32":
        channels = _quantization_channels(graph, op.inputs[1], sg.index)
        return [_WORD * channels] * 2 if channels > 1 else []
    if op.opcode == "ASSIGN_VARIABLE" and (sg.index, op.inputs[1]) in assigned:
        return [sg.tensors[op.inputs[1]].nbytes]  # the first assignment sizes the variable's buffer
    return []


def _input_type(sg: Subgraph, op: Operator) -> str:
    return sg.tensors[op.inputs[0]].dtype


def _quantization_channels(graph: Graph, tensor: int, subgraph: int = 0) -> int:
    """How many scales the tensor's quantization holds, where it has scales and zero points (0: none)."""
    quantization = graph.subgraphs[subgraph].tensors[tensor].quantization
    if quantization is None or not quantization.zero_points:
        return 0
    return len(quantization.scales)
