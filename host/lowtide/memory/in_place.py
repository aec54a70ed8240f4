"""Outputs that may share their input's bytes: operators whose kernels can run in place, because each output byte
is written only after every input byte stored there was read. Which operators those are depends on the kernels
that run the plan (`Executor`).

TFLM's own planner never shares bytes between an operator's inputs and outputs (their lifetimes touch). An
offline plan can: TFLM honours its offsets and checks nothing. So lowtide may put such an output inside its
input when that input dies at the operator (it has no other reader and is no subgraph output).

TFLM's kernels (reference and CMSIS-NN), and so every plan written into a model's OfflineMemoryAllocation (their
rows of `lowtide.model.operators.SEMANTICS`, `TflmInPlace`):
- SPLIT / SPLIT_V along an axis with only size-1 dimensions before it: each output is one contiguous block of
  the input, copied element by element onto itself (output j at the input's offset + the bytes before it);
- QUANTIZE with an output element no wider than the input's: element i is written at byte offset
  i * out_size <= i * in_size, which only holds input elements already read by the sequential loop.

The other way round, an input inside its output (`concatenation_inputs`): CONCATENATION along an axis with only
size-1 dimensions before it writes its output as the inputs' blocks one after the other, each by one memcpy of
that input (reference_ops::Concatenation, which TFLM runs for every type once Prepare has checked that int8
inputs have the output's scale and zero point: no requantizing loop). An input already sitting at its block's
offset is copied onto itself, and no input is read after the copy of another has written its block. So an input
read only by the CONCATENATION may live inside its output from its producer on, and the concatenation holds its
bytes once; it is only a plan's option, weighed against the plan without it (`lowtide.memory.placed_plan`).

lowtide's compiled runtime (firmware/runtime), whose plan only the generated code uses, also:
- int8 DEPTHWISE_CONV_2D with depth multiplier 1, more than one channel and no dilation, with an output no
  larger than its input: the fast kernel (lt_depthwise_s8_fast) copies channel c's whole input plane to its
  scratch before writing any output of channel c, and in NHWC output channel c's bytes only ever land on input
  channel c's bytes at or below the same pixel index, so at any stride they overwrite only copied values.
  TFLM's depthwise kernels read the input while they write: not for TFLM plans;
- the element-wise ADD, SUB, MUL (`LT_BINARY_LOOP`) and RELU, RELU6, LEAKY_RELU, HARD_SWISH writing over an
  input of the output's type and shape: element i is read and then written at the same index, and no later
  element reads index i of that input.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

from lowtide.model.attributes import Activation, ConcatenationAttributes, DepthwiseConv2DAttributes, attributes_as
from lowtide.model.ir import Graph, Operator, Subgraph, TensorKind
from lowtide.model.operators import TflmInPlace, semantics
from lowtide.model.schema import ELEMENT_BYTES


class Executor(enum.Enum):
    """The kernels that will run a plan: they decide which operators may write over their input."""

    TFLM = "tflm"  # TFLM's reference or CMSIS-NN kernels: any plan in a model's OfflineMemoryAllocation
    COMPILED = "compiled"  # lowtide's compiled runtime: the plan of the generated code only


# Element-wise kernels of the compiled runtime that read element i before writing element i, and nothing else there.
COMPILED_ELEMENTWISE = frozenset({"ADD", "SUB", "MUL", "RELU", "RELU6", "LEAKY_RELU", "HARD_SWISH"})


def tflm_runs_in_place(op: Operator, a: int, b: int) -> bool:
    """Whether a model's own plan may put tensors `a` and `b`, one read and the other written by `op` and live
    together only while it runs, on the same bytes: an in-place plan (a SPLIT_V output inside its input, a
    CONCATENATION input inside its output, a model input quantized in place), which TFLM runs as the model's
    author planned it. Never for the operators only the compiled runtime runs in place: TFLM's depthwise and
    element-wise kernels read the input while they write. Lowtide's own plans share bytes only as
    `in_place_outputs` allows."""
    return semantics(op.opcode).tflm_in_place is not TflmInPlace.NEVER and bool(
        {a, b} & set(op.inputs) and {a, b} & set(op.outputs)
    )


@dataclass(frozen=True)
class InPlace:
    """`output` may be placed `offset` bytes into `input`, which dies at `op`."""

    op: int
    input: int
    output: int
    offset: int


@dataclass(frozen=True)
class InsideOutput:
    """`input`, read only by `op`, may be placed `offset` bytes into `op`'s `output`, which `op` assembles."""

    op: int
    input: int
    output: int
    offset: int


def in_place_outputs(
    graph: Graph, alignment: int, executor: Executor = Executor.TFLM, read_before: bool = False
) -> dict[int, InPlace]:
    """Main-subgraph outputs that may share their input's bytes when `executor`'s kernels run the plan, by output
    tensor index. Offsets inside the input are multiples of `alignment`, as every offset of an offline plan must
    be. `read_before`: the input may have other readers too, which holds for an order that runs them all before
    this operator (the caller checks that, as `lifetimes.buffer_lifetimes` does: the input's lifetime must end
    at it); a SPLIT_V of a squeeze-and-excitation block's input, whose MEAN read it first."""
    sg = graph.main
    consumers = sg.consumers()
    found: dict[int, InPlace] = {}
    for op in sg.operators:
        blocks = _shared_blocks(graph, sg, op, alignment)
        if executor is Executor.COMPILED and not blocks:
            blocks = _compiled_blocks(sg, op)
        for output, source, offset in blocks:
            if (
                output not in found
                and _dies_at(sg, consumers, source, op, read_before)
                and _placeable(sg, consumers, output, op)
            ):
                found[output] = InPlace(op.index, source, output, offset)
    return found


def concatenation_inputs(graph: Graph, alignment: int) -> dict[int, InsideOutput]:
    """Main-subgraph CONCATENATION inputs that may sit inside their output under TFLM's kernel (module
    docstring), by input tensor index: along an axis with only size-1 dimensions before it (each input one
    contiguous block of the output), no fused activation, each input an activation of the output's type and
    quantization read by this operator alone and once, neither a subgraph input nor output nor an output sharing
    another tensor's bytes (`in_place_outputs`), at an offset that is a multiple of `alignment` as every offset of
    an offline plan must be, and its aligned bytes ending where the next input's block begins (or the output's
    aligned end)."""
    sg = graph.main
    consumers = sg.consumers()
    sharing = set(in_place_outputs(graph, alignment, read_before=True))
    found: dict[int, InsideOutput] = {}
    for op in sg.operators:
        if semantics(op.opcode).tflm_in_place is not TflmInPlace.ASSEMBLES or len(op.outputs) != 1:
            continue
        attributes = attributes_as(op.attributes, ConcatenationAttributes)
        output = sg.tensors[op.outputs[0]]
        if attributes.fused_activation is not Activation.NONE or not output.planned or not output.shape:
            continue
        axis = attributes.axis % len(output.shape)
        if math.prod(output.shape[:axis]) != 1:
            continue  # the inputs interleave in the output
        quantization = _quantization(graph, output.index)
        offsets = aligned_blocks([sg.tensors[t].nbytes for t in op.inputs], alignment)
        for tensor, offset in zip(op.inputs, offsets):
            t = sg.tensors[tensor]
            if (
                offset is not None
                and t.dtype == output.dtype
                and _quantization(graph, tensor) == quantization
                and _dies_at(sg, consumers, tensor, op)
                and tensor not in sg.inputs
                and tensor not in sharing
            ):
                found[tensor] = InsideOutput(op.index, tensor, output.index, offset)
    return found


def aligned_blocks(sizes: Sequence[int], alignment: int) -> list[int | None]:
    """Where blocks of `sizes` bytes laid end to end may each be planned as a buffer of their own: the block's
    offset when it is a multiple of `alignment` and the block's aligned bytes end where the next block begins (or
    it is the last), else None."""
    offsets: list[int | None] = []
    offset = 0
    for position, size in enumerate(sizes):
        last = position == len(sizes) - 1
        offsets.append(offset if offset % alignment == 0 and (last or size % alignment == 0) else None)
        offset += size
    return offsets


def _quantization(graph: Graph, tensor: int) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """A main-subgraph tensor's scales and zero points (empty: none)."""
    q = graph.main.tensors[tensor].quantization
    return (q.scales, q.zero_points) if q is not None else ((), ())


def _shared_blocks(graph: Graph, sg: Subgraph, op: Operator, alignment: int) -> list[tuple[int, int, int]]:
    """(output, input, byte offset of the output inside the input) the kernel allows."""
    capability = semantics(op.opcode).tflm_in_place
    if capability is TflmInPlace.BLOCKS:
        data, axis_input = (op.inputs[1], op.inputs[0]) if op.opcode == "SPLIT" else (op.inputs[0], op.inputs[2])
        axis_value = graph.constant_array(axis_input)
        shape = sg.tensors[data].shape
        if axis_value is None or axis_value.size != 1 or not shape:
            return []
        axis = int(axis_value.reshape(-1)[0]) % len(shape)
        if math.prod(shape[:axis]) != 1:
            return []  # the outputs interleave in the input
        blocks, offset = [], 0
        for output in op.outputs:
            if offset % alignment:
                return []
            blocks.append((output, data, offset))
            offset += sg.tensors[output].nbytes
        return blocks if _aligned(offset, alignment) <= _aligned(sg.tensors[data].nbytes, alignment) else []
    if capability is TflmInPlace.NARROWING:
        source, output = op.inputs[0], op.outputs[0]
        a, b = sg.tensors[source], sg.tensors[output]
        if (
            ELEMENT_BYTES[b.dtype] <= ELEMENT_BYTES[a.dtype]
            and math.prod(a.shape) == math.prod(b.shape)
            and _aligned(b.nbytes, alignment) <= _aligned(a.nbytes, alignment)
        ):
            return [(output, source, 0)]
    return []


def _compiled_blocks(sg: Subgraph, op: Operator) -> list[tuple[int, int, int]]:
    """The compiled runtime's own in-place cases (module docstring): each output at its input's offset."""
    if not op.outputs or op.outputs[0] < 0:
        return []
    out = sg.tensors[op.outputs[0]]
    if op.opcode == "DEPTHWISE_CONV_2D":
        source = sg.tensors[op.inputs[0]]
        weights = sg.tensors[op.inputs[1]]
        dilated = any((d or 1) != 1 for d in attributes_as(op.attributes, DepthwiseConv2DAttributes).dilation)
        if (
            (source.dtype, weights.dtype, out.dtype) == ("int8",) * 3
            and len(source.shape) == len(out.shape) == 4
            and source.shape[3] == out.shape[3] > 1
            and not dilated
            and out.nbytes <= source.nbytes
        ):
            return [(op.outputs[0], op.inputs[0], 0)]
        return []
    if op.opcode in COMPILED_ELEMENTWISE:
        return [
            (op.outputs[0], t, 0)
            for t in dict.fromkeys(op.inputs)
            if t >= 0 and sg.tensors[t].shape == out.shape and sg.tensors[t].dtype == out.dtype
        ]
    return []


def _dies_at(
    sg: Subgraph, consumers: dict[int, list[int]], tensor: int, op: Operator, read_before: bool = False
) -> bool:
    """Whether `op` is the only reader of `tensor` (with `read_before`: one of them, the last in the caller's
    order), reading it once."""
    t = sg.tensors[tensor]
    readers = consumers.get(tensor, [])
    return (
        t.kind is TensorKind.ACTIVATION
        and t.planned
        and tensor not in sg.outputs
        and (op.index in readers if read_before else readers == [op.index])
        and list(op.inputs).count(tensor) == 1
    )


def _placeable(sg: Subgraph, consumers: dict[int, list[int]], tensor: int, op: Operator) -> bool:
    t = sg.tensors[tensor]
    # An output nobody reads would live in its producer's scope only, where its bytes are the input's anyway.
    return (
        t.kind is TensorKind.ACTIVATION
        and t.planned
        and tensor not in sg.inputs
        and tensor not in op.inputs
        and (bool(consumers.get(tensor)) or tensor in sg.outputs)
    )


def _aligned(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment
