"""Channel partitioning: a convolution runs as partial convolutions over groups of its input channels, summed by
ADD, so the tensor of all those channels is never whole.
- `partition_concat_conv` (SERENITY-style): a convolution reading a channel concatenation, one partial per
  concatenated input; each input can be freed as soon as its partial is computed.
- `partition_wide_layer`: an inverted bottleneck (expand, depthwise, project), split into groups of its wide
  channels; a group's expand and depthwise outputs are exact, only the projection is summed from partials.
The scheduler then orders the pieces.

Unlike spatial tiling this is not bit-identical: each partial sum is requantized to int8 before the ADDs, so
outputs may move. With the partials on the output's scale (`partial_headroom` 1) two partials differ from the
original by at most 1 LSB, as long as no partial leaves the output's range; a larger headroom avoids that
clipping but rounds more coarsely (2 LSB at headroom 2, measured on a builder graph).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from lowtide.memory import tflm_plan
from lowtide.model.attributes import (
    Activation,
    AddAttributes,
    ConcatenationAttributes,
    Conv2DAttributes,
    DepthwiseConv2DAttributes,
    attributes_as,
    fused_activation,
)
from lowtide.model.edit import GraphEditor
from lowtide.model.ir import Graph, Operator
from lowtide.rewrite.errors import NotApplicable
from lowtide.schedule import apply_order, find_schedule


@dataclass(frozen=True)
class ChannelSplit:
    model: Graph  # the partitioned graph, in the scheduler's best order
    parts: int
    summed_tensor: str  # the convolution output now summed from partials: where the (<= 1 LSB) difference arises
    head_bytes: int  # planned TFLM head of `model`
    original_head_bytes: int  # planned TFLM head of the original in its best order


def partition_at_peak(graph: Graph, parts: int = 2, partial_headroom: float = 1.0) -> ChannelSplit:
    """Channel-partition what holds the live peak of the graph's best order: the inverted bottleneck or the
    concatenation-fed convolution its operator belongs to."""
    sg = graph.main
    order = find_schedule(graph).order
    peak = max(tflm_plan(graph, order).steps, key=lambda step: step.live_bytes)
    op = sg.operators[peak.op]
    producers, consumers = sg.producers(), sg.consumers()

    def producer_of(op_index: int) -> int | None:
        return producers.get(sg.operators[op_index].inputs[0])

    def reader_of(op_index: int) -> int | None:
        readers = consumers.get(sg.operators[op_index].outputs[0], [])
        return readers[0] if len(readers) == 1 else None

    # The expand convolution of a bottleneck the peak operator may belong to: itself, or one or two steps back.
    reasons: list[str] = []  # why each candidate does not apply, for the message if none does
    expands = [peak.op, producer_of(peak.op)]
    if expands[1] is not None:
        expands.append(producer_of(expands[1]))
    for expand in expands:
        if expand is not None and sg.operators[expand].opcode == "CONV_2D":
            try:
                return partition_wide_layer(graph, expand, parts, partial_headroom)
            except NotApplicable as reason:
                reasons.append(str(reason))
    for conv in (peak.op, reader_of(peak.op)):
        if conv is not None and sg.operators[conv].opcode == "CONV_2D":
            try:
                return partition_concat_conv(graph, conv, partial_headroom)
            except NotApplicable as reason:
                reasons.append(str(reason))
    tried = f": {'; '.join(reasons)}" if reasons else " (no CONV_2D there to try)"
    raise NotApplicable(
        f"the memory peak (operator {peak.op}, {op.opcode}) is in no inverted bottleneck and no "
        f"concatenation-fed convolution{tried}"
    )


def partition_concat_conv(graph: Graph, conv_op: int, partial_headroom: float = 1.0) -> ChannelSplit:
    """Split main-subgraph CONV_2D `conv_op`, which reads a CONCATENATION along channels, into partial
    convolutions summed by ADD."""
    sg = graph.main
    concat_op = _concatenation_feeding(graph, conv_op)
    writer = GraphEditor(graph)
    pieces, first_channel = [], 0
    for source in sg.operators[concat_op].inputs:
        channels = sg.tensors[source].shape[3]
        pieces.append((source, np.arange(first_channel, first_channel + channels)))
        first_channel += channels
    replacement = _partial_convolutions(writer, graph, conv_op, pieces, partial_headroom)
    operators = []
    for op in sg.operators:
        if op.index == conv_op:
            operators.extend(replacement)
        elif op.index != concat_op:
            operators.append(writer.original(op.index))
    return _scheduled(graph, writer, operators, len(pieces), sg.operators[conv_op].outputs[0])


def partition_wide_layer(graph: Graph, expand_op: int, parts: int = 2, partial_headroom: float = 1.0) -> ChannelSplit:
    """Split a linear inverted bottleneck (MobileNetV2-style: CONV_2D `expand_op` widening the channels, an
    optional PAD, a depthwise convolution, a CONV_2D without activation projecting them back) into `parts` groups
    of the wide channels. Each group's expand, pad and depthwise outputs are exact (every channel has its own
    weights); the projection becomes partial convolutions over the groups, summed by ADD. The wide tensors are
    never whole."""
    sg = graph.main
    chain, project_op = _bottleneck_after(graph, expand_op)
    width = sg.tensors[sg.operators[expand_op].outputs[0]].shape[3]
    if not 2 <= parts <= width:
        raise NotApplicable(f"cannot split {width} channels into {parts} parts")
    writer = GraphEditor(graph)
    replacement, pieces = [], []
    for part, channels in enumerate(np.array_split(np.arange(width), parts)):
        source = sg.operators[expand_op].inputs[0]
        for op_index in chain:
            op = sg.operators[op_index]
            output = op.outputs[0]
            result = writer.activation_like(
                output, (*sg.tensors[output].shape[:3], len(channels)), f"{sg.tensors[output].name}/part{part}"
            )
            copy_op = writer.original(op_index)
            copy_op.inputs = [source, *op.inputs[1:]]
            if op.opcode != "PAD":  # weights: output channels first (CONV_2D) or last (DEPTHWISE); bias
                weights_axis = 0 if op.opcode == "CONV_2D" else 3
                copy_op.inputs[1] = writer.constant_slice(
                    op.inputs[1], weights_axis, channels, f"{sg.tensors[op.inputs[1]].name}/part{part}"
                )
                copy_op.inputs[2] = writer.constant_slice(
                    op.inputs[2], 0, channels, f"{sg.tensors[op.inputs[2]].name}/part{part}"
                )
            copy_op.outputs = [result]
            replacement.append(copy_op)
            source = result
        pieces.append((source, channels))
    replacement.extend(_partial_convolutions(writer, graph, project_op, pieces, partial_headroom))
    operators = []
    for op in sg.operators:
        if op.index == project_op:
            operators.extend(replacement)
        elif op.index not in chain:
            operators.append(writer.original(op.index))
    return _scheduled(graph, writer, operators, parts, sg.operators[project_op].outputs[0])


def _partial_convolutions(
    writer: GraphEditor, graph: Graph, conv_op: int, pieces: list[tuple[int, np.ndarray]], partial_headroom: float
) -> list[Any]:
    """CONV_2D `conv_op` as one partial convolution per (input tensor, the conv's input channels it holds),
    summed by a chain of ADDs into the conv's output. The bias is added once, by the first partial."""
    sg = graph.main
    conv = sg.operators[conv_op]
    weights_index, bias_index = conv.inputs[1], conv.inputs[2]
    output = conv.outputs[0]
    out_quant = sg.tensors[output].quantization
    assert out_quant is not None  # the output of an int8 convolution, which the callers check
    partial_scale = out_quant.scales[0] * partial_headroom
    replacement, partials = [], []
    for part, (source, channels) in enumerate(pieces):
        bias = (
            bias_index
            if part == 0
            else writer.constant_like(
                bias_index, np.zeros(sg.tensors[bias_index].shape, dtype="<i4"), f"{sg.tensors[bias_index].name}/zero"
            )
        )
        partial = writer.activation(
            sg.tensors[output].shape, output, partial_scale, 0, f"{sg.tensors[output].name}/part{part}"
        )
        op = writer.original(conv_op)
        op.inputs = [
            source,
            writer.constant_slice(weights_index, 3, channels, f"{sg.tensors[weights_index].name}/part{part}"),
            bias,
        ]
        op.outputs = [partial]
        writer.set_attributes(op, dataclasses.replace(_conv_attributes(conv), fused_activation=Activation.NONE))
        replacement.append(op)
        partials.append(partial)
    total = partials[0]
    for part, partial in enumerate(partials[1:], start=1):
        last = part == len(partials) - 1
        result = (
            output
            if last
            else writer.activation(
                sg.tensors[output].shape, output, partial_scale, 0, f"{sg.tensors[output].name}/sum{part}"
            )
        )
        add = AddAttributes(fused_activation=_conv_attributes(conv).fused_activation if last else Activation.NONE)
        replacement.append(writer.operator("ADD", [total, partial], result, add))
        total = result
    return replacement


def _scheduled(graph: Graph, writer: GraphEditor, operators: list[Any], parts: int, summed: int) -> ChannelSplit:
    partitioned = writer.finish(operators)
    schedule = find_schedule(partitioned)
    original = find_schedule(graph)
    return ChannelSplit(
        apply_order(partitioned, schedule.order),
        parts,
        graph.main.tensors[summed].name,
        schedule.head_bytes,
        tflm_plan(graph, original.order).head_bytes,
    )


def _bottleneck_after(graph: Graph, expand_op: int) -> tuple[list[int], int]:
    """(expand, [PAD,] depthwise operators, projection operator) of the linear inverted bottleneck that CONV_2D
    `expand_op` opens."""
    sg = graph.main
    consumers = sg.consumers()

    def only_reader(tensor: int, opcodes: tuple[str, ...]) -> int:
        readers = consumers.get(tensor, [])
        if len(readers) != 1 or tensor in sg.outputs or sg.operators[readers[0]].opcode not in opcodes:
            raise NotApplicable(
                f"operator {expand_op} opens no inverted bottleneck: tensor {tensor} is not read by "
                f"one {' or '.join(opcodes)} alone"
            )
        return readers[0]

    expand = sg.operators[expand_op]
    if (
        expand.opcode != "CONV_2D"
        or len(expand.inputs) < 3
        or expand.inputs[2] < 0
        or sg.tensors[expand.inputs[0]].dtype != "int8"
    ):
        raise NotApplicable(f"operator {expand_op} is not an int8 CONV_2D with a bias")
    chain = [expand_op, only_reader(expand.outputs[0], ("PAD", "DEPTHWISE_CONV_2D"))]
    if sg.operators[chain[-1]].opcode == "PAD":
        pad = sg.operators[chain[-1]]
        paddings = graph.constant_array(pad.inputs[1])
        if paddings is None or paddings[3].any():
            raise NotApplicable(f"PAD operator {chain[-1]} pads the channels")
        chain.append(only_reader(pad.outputs[0], ("DEPTHWISE_CONV_2D",)))
    dw = sg.operators[chain[-1]]
    if (
        (attributes_as(dw.attributes, DepthwiseConv2DAttributes).depth_multiplier or 1) != 1
        or len(dw.inputs) < 3
        or dw.inputs[2] < 0
    ):
        raise NotApplicable(f"depthwise operator {chain[-1]} multiplies channels or has no bias")
    project_op = only_reader(dw.outputs[0], ("CONV_2D",))
    project = sg.operators[project_op]
    if len(project.inputs) < 3 or project.inputs[2] < 0:
        raise NotApplicable(f"projection operator {project_op} has no bias")
    if fused_activation(project.attributes) != Activation.NONE:
        # Partials on the output's scale cannot hold pre-activation sums that an activation would clip.
        raise NotApplicable(f"projection operator {project_op} is not linear (fused activation)")
    return chain, project_op


def _concatenation_feeding(graph: Graph, conv_op: int) -> int:
    sg = graph.main
    conv = sg.operators[conv_op]
    if conv.opcode != "CONV_2D":
        raise NotApplicable(f"operator {conv_op} is {conv.opcode}, not CONV_2D")
    concat_op = sg.producers().get(conv.inputs[0])
    concat = sg.operators[concat_op] if concat_op is not None else None
    if (
        concat is None
        or concat.opcode != "CONCATENATION"
        or attributes_as(concat.attributes, ConcatenationAttributes).axis not in (3, -1)
    ):
        raise NotApplicable(f"CONV_2D operator {conv_op} does not read a concatenation along channels")
    if sg.consumers()[conv.inputs[0]] != [conv_op] or conv.inputs[0] in sg.outputs:
        raise NotApplicable(f"the concatenation feeding operator {conv_op} has other readers")
    if sg.tensors[conv.inputs[0]].dtype != "int8" or len(conv.inputs) < 3 or conv.inputs[2] < 0:
        raise NotApplicable(f"operator {conv_op} is not an int8 convolution with a bias")
    return concat.index


def _conv_attributes(op: Operator) -> Conv2DAttributes:
    assert isinstance(op.attributes, Conv2DAttributes), op.opcode  # validated CONV_2D operators store them
    return op.attributes
