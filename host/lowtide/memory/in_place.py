"""Outputs that may share their input's bytes: operators that TFLM's reference kernels (and lowtide's compiled
runtime) can run in place, because each output byte is written only after every input byte stored there was read.

TFLM's own planner never shares bytes between an operator's inputs and outputs (their lifetimes touch). An
offline plan can: TFLM honours its offsets and checks nothing. So lowtide may put such an output inside its
input when that input dies at the operator (it has no other reader and is no subgraph output):
- SPLIT / SPLIT_V along an axis with only size-1 dimensions before it: each output is one contiguous block of
  the input, copied element by element onto itself (output j at the input's offset + the bytes before it);
- QUANTIZE with an output element no wider than the input's: element i is written at byte offset
  i * out_size <= i * in_size, which only holds input elements already read by the sequential loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lowtide.model.ir import Graph, Operator, Subgraph, TensorKind
from lowtide.model.schema import ELEMENT_BYTES


@dataclass(frozen=True)
class InPlace:
    """`output` may be placed `offset` bytes into `input`, which dies at `op`."""

    op: int
    input: int
    output: int
    offset: int


def in_place_outputs(graph: Graph, alignment: int) -> dict[int, InPlace]:
    """Main-subgraph outputs that may share their input's bytes, by output tensor index. Offsets inside the
    input are multiples of `alignment`, as every offset of an offline plan must be."""
    sg = graph.main
    consumers = sg.consumers()
    found: dict[int, InPlace] = {}
    for op in sg.operators:
        for output, source, offset in _shared_blocks(graph, sg, op, alignment):
            if _dies_at(sg, consumers, source, op) and _placeable(sg, consumers, output, op):
                found[output] = InPlace(op.index, source, output, offset)
    return found


def _shared_blocks(graph: Graph, sg: Subgraph, op: Operator, alignment: int) -> list[tuple[int, int, int]]:
    """(output, input, byte offset of the output inside the input) the kernel allows."""
    if op.opcode in ("SPLIT", "SPLIT_V"):
        data, axis_input = (op.inputs[1], op.inputs[0]) if op.opcode == "SPLIT" else (op.inputs[0], op.inputs[2])
        axis = graph.constant_array(axis_input)
        shape = sg.tensors[data].shape
        if axis is None or axis.size != 1 or not shape:
            return []
        axis = int(axis.reshape(-1)[0]) % len(shape)
        if math.prod(shape[:axis]) != 1:
            return []  # the outputs interleave in the input
        blocks, offset = [], 0
        for output in op.outputs:
            if offset % alignment:
                return []
            blocks.append((output, data, offset))
            offset += sg.tensors[output].nbytes
        return blocks if _aligned(offset, alignment) <= _aligned(sg.tensors[data].nbytes, alignment) else []
    if op.opcode == "QUANTIZE":
        source, output = op.inputs[0], op.outputs[0]
        a, b = sg.tensors[source], sg.tensors[output]
        if ELEMENT_BYTES[b.dtype] <= ELEMENT_BYTES[a.dtype] and math.prod(a.shape) == math.prod(b.shape) \
                and _aligned(b.nbytes, alignment) <= _aligned(a.nbytes, alignment):
            return [(output, source, 0)]
    return []


def _dies_at(sg: Subgraph, consumers: dict[int, list[int]], tensor: int, op: Operator) -> bool:
    t = sg.tensors[tensor]
    return (t.kind is TensorKind.ACTIVATION and t.planned and tensor not in sg.outputs
            and consumers.get(tensor, []) == [op.index] and list(op.inputs).count(tensor) == 1)


def _placeable(sg: Subgraph, consumers: dict[int, list[int]], tensor: int, op: Operator) -> bool:
    t = sg.tensors[tensor]
    # An output nobody reads would live in its producer's scope only, where its bytes are the input's anyway.
    return (t.kind is TensorKind.ACTIVATION and t.planned and tensor not in sg.inputs and tensor not in op.inputs
            and (bool(consumers.get(tensor)) or tensor in sg.outputs))


def _aligned(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment
