"""Channel partitioning (SERENITY-style): a convolution that reads a channel concatenation runs as one partial
convolution per concatenated input, summed by ADD. The concatenated tensor is never materialised, and each
input can be freed as soon as its partial is computed, which the scheduler then arranges.

Unlike spatial tiling this is not bit-identical: each partial sum is requantized to int8 before the ADDs, so
outputs may move. With the partials on the output's scale (`partial_headroom` 1) two partials differ from the
original by at most 1 LSB, as long as no partial leaves the output's range; a larger headroom avoids that
clipping but rounds more coarsely (2 LSB at headroom 2, measured on a builder graph).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from lowtide.errors import LowtideError
from lowtide.memory import tflm_plan
from lowtide.model.ir import Graph
from lowtide.model.reader import read_model
from lowtide.model.schema import fb
from lowtide.model.writer import model_bytes
from lowtide.rewrite.emit import ModelWriter
from lowtide.schedule import apply_order, find_schedule


@dataclass(frozen=True)
class ChannelSplit:
    model: bytes  # the partitioned model, in the scheduler's best order
    parts: int
    head_bytes: int  # planned TFLM head of `model`
    original_head_bytes: int  # planned TFLM head of the original in its best order


def partition_concat_conv(graph: Graph, conv_op: int, partial_headroom: float = 1.0,
                          time_limit: float = 10.0) -> ChannelSplit:
    """Split main-subgraph CONV_2D `conv_op`, which reads a CONCATENATION along channels, into partial
    convolutions summed by ADD."""
    sg = graph.main
    conv = sg.operators[conv_op]
    concat_op = _concatenation_feeding(graph, conv_op)
    concat = sg.operators[concat_op]
    weights_index, bias_index = conv.inputs[1], conv.inputs[2]
    weights = graph.constant_array(weights_index)
    output = conv.outputs[0]
    out_quant = graph.raw.subgraphs[0].tensors[output].quantization
    partial_scale = float(out_quant.scale[0]) * partial_headroom
    writer = ModelWriter(graph)
    replacement = []
    partials = []
    first_channel = 0
    for part, source in enumerate(concat.inputs):
        channels = sg.tensors[source].shape[3]
        part_weights = writer.constant_like(
            weights_index, np.ascontiguousarray(weights[..., first_channel:first_channel + channels]),
            f"{sg.tensors[weights_index].name}/part{part}")
        first_channel += channels
        # The bias is added once, by the first partial.
        bias = bias_index if part == 0 else writer.constant_like(
            bias_index, np.zeros(sg.tensors[bias_index].shape, dtype="<i4"), f"{sg.tensors[bias_index].name}/zero")
        partial = writer.activation(sg.tensors[output].shape, output, partial_scale, 0,
                                    f"{sg.tensors[output].name}/part{part}")
        op = writer.original(conv_op)
        op.inputs = [source, part_weights, bias]
        op.outputs = [partial]
        op.builtinOptions = _without_activation(op.builtinOptions)
        replacement.append(op)
        partials.append(partial)
    total = partials[0]
    for part, partial in enumerate(partials[1:], start=1):
        last = part == len(partials) - 1
        result = output if last else writer.activation(sg.tensors[output].shape, output, partial_scale, 0,
                                                       f"{sg.tensors[output].name}/sum{part}")
        options = fb.AddOptionsT()
        options.fusedActivationFunction = (conv.options.fusedActivationFunction if last
                                           else fb.ActivationFunctionType.NONE)
        replacement.append(writer.operator("ADD", [total, partial], result, fb.BuiltinOptions.AddOptions, options))
        total = result
    operators = []
    for op in sg.operators:
        if op.index == conv_op:
            operators.extend(replacement)
        elif op.index != concat_op:
            operators.append(writer.original(op.index))
    partitioned = read_model(model_bytes(writer.finish(operators)))
    schedule = find_schedule(partitioned, time_limit=time_limit)
    original = find_schedule(graph, time_limit=time_limit)
    return ChannelSplit(model_bytes(apply_order(partitioned, schedule.order)), len(partials), schedule.head_bytes,
                        tflm_plan(graph, original.order).head_bytes)


def _concatenation_feeding(graph: Graph, conv_op: int) -> int:
    sg = graph.main
    conv = sg.operators[conv_op]
    if conv.opcode != "CONV_2D":
        raise LowtideError(f"operator {conv_op} is {conv.opcode}, not CONV_2D")
    concat_op = sg.producers().get(conv.inputs[0])
    concat = sg.operators[concat_op] if concat_op is not None else None
    if concat is None or concat.opcode != "CONCATENATION" or concat.options.axis not in (3, -1):
        raise LowtideError(f"CONV_2D operator {conv_op} does not read a concatenation along channels")
    if sg.consumers()[conv.inputs[0]] != [conv_op] or conv.inputs[0] in sg.outputs:
        raise LowtideError(f"the concatenation feeding operator {conv_op} has other readers")
    if sg.tensors[conv.inputs[0]].dtype != "int8" or len(conv.inputs) < 3 or conv.inputs[2] < 0:
        raise LowtideError(f"operator {conv_op} is not an int8 convolution with a bias")
    return concat_op


def _without_activation(options):
    options = copy.copy(options)
    options.fusedActivationFunction = fb.ActivationFunctionType.NONE
    return options
