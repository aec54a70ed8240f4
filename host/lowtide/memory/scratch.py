"""Kernel scratch buffers that TFLM's reference kernels request in Prepare, by operator.

Each request becomes one planned buffer live only at its operator's scope, in the order the kernel requests them
(TFLM's planner sees them in that order). The requests below are every `RequestScratchBufferInArena` call in
TFLM's reference kernels (tensorflow/lite/micro/kernels/*.cc at the pinned commit) for the builtin operators
lowtide reads; optimized kernel libraries such as CMSIS-NN request more, which only the 32-bit sizer
(`lowtide.tflm`) sees.
"""

from __future__ import annotations

import math

from lowtide.errors import ModelError
from lowtide.model.attributes import SvdfAttributes, attributes_as
from lowtide.model.ir import Graph, Tensor
from lowtide.model.schema import ELEMENT_BYTES

_LSTM_CELL_STATE_INPUT = 19  # input index of the cell-state variable in (UNI|BI)DIRECTIONAL_SEQUENCE_LSTM
_LSTM_GATE_BUFFERS = 4  # one buffer per gate: input, forget, cell, output
_INT = 4  # sizeof(int) and sizeof(int32_t) on every target TFLM runs on
# ADD_N asks for one pointer per input: 8 bytes on the 64-bit host TFLM that lowtide's head is checked against,
# 4 on a 32-bit MCU (where the 32-bit sizer measures the real figure).
_HOST_POINTER = 8
# Reduce kernels: REDUCE_MAX/REDUCE_MIN/REDUCE_ALL (reduce_common.cc PrepareMinMaxHelper, PrepareAllHelper)
# and MEAN/SUM (PrepareMeanOrSumHelper, which adds an int32 accumulator per output element for int8/int16).
_MIN_MAX_REDUCERS = {"REDUCE_MAX", "REDUCE_MIN", "REDUCE_ALL"}
_MEAN_SUM_REDUCERS = {"MEAN", "SUM"}
# conv_common.cc, depthwise_conv_common.cc, fully_connected.cc: int4 filters are unpacked into the arena.
_UNPACKED_INT4_FILTER = {"CONV_2D": 1, "DEPTHWISE_CONV_2D": 1, "FULLY_CONNECTED": 1}  # filter input index


def _elements(tensor: Tensor) -> int:
    return math.prod(tensor.shape)  # a scalar's empty shape counts one element, as TFLM's ElementCount does


def scratch_sizes(graph: Graph, subgraph: int, op: int) -> list[int]:
    sg = graph.subgraphs[subgraph]
    operator = sg.operators[op]
    opcode, inputs = operator.opcode, operator.inputs

    def tensor(position: int) -> Tensor | None:
        return sg.tensors[inputs[position]] if len(inputs) > position and inputs[position] >= 0 else None

    def required(position: int) -> Tensor:
        """An input the kernel reads unconditionally."""
        found = tensor(position)
        if found is None:
            raise ModelError(f"subgraph {subgraph} operator {op} ({opcode}) needs input {position}", graph.name)
        return found

    if opcode == "SVDF":
        batch = sg.tensors[inputs[0]].shape[0]
        num_filters = sg.tensors[inputs[1]].shape[0]
        if sg.tensors[inputs[0]].dtype == "float32":
            return [batch * num_filters * 4]
        rank = attributes_as(operator.attributes, SvdfAttributes).rank or 1
        # Integer SVDF keeps int32 accumulators for every filter and every output unit.
        return [batch * num_filters * 4, batch * (num_filters // rank) * 4]
    if opcode == "UNIDIRECTIONAL_SEQUENCE_LSTM" and len(inputs) > _LSTM_CELL_STATE_INPUT:
        cell = sg.tensors[inputs[_LSTM_CELL_STATE_INPUT]]
        return [math.prod(cell.shape) * ELEMENT_BYTES[cell.dtype]] * _LSTM_GATE_BUFFERS
    if opcode == "MIRROR_PAD":  # mirror_pad.cc: the input's and the output's dimension strides
        return [len(required(0).shape) * _INT] * 2
    if opcode in _MIN_MAX_REDUCERS:
        return [len(required(0).shape) * _INT, _elements(required(1)) * _INT]
    if opcode in _MEAN_SUM_REDUCERS:
        accumulator = (
            [_elements(sg.tensors[operator.outputs[0]]) * _INT] if required(0).dtype in ("int8", "int16") else []
        )
        return [*accumulator, len(required(0).shape) * _INT, _elements(required(1)) * _INT]
    if opcode == "ADD_N" and sg.tensors[operator.outputs[0]].dtype in ("float32", "int8"):
        return [_HOST_POINTER * len(inputs)]
    if opcode == "TRANSPOSE_CONV":  # inputs: output shape, filter, input, bias; transpose_conv.cc
        output_elements = _elements(sg.tensors[operator.outputs[0]])
        if required(2).dtype == "int8":
            return [output_elements * 4]  # int32 accumulators
        if required(2).dtype == "int16":  # int64 accumulators, after the 16-bit bias widened to 64 bits
            bias = tensor(3)
            widened_bias = [_elements(bias) * 8] if bias is not None and bias.dtype == "int16" else []
            return [*widened_bias, output_elements * 8]
        return []
    if opcode in _UNPACKED_INT4_FILTER:
        weights = tensor(_UNPACKED_INT4_FILTER[opcode])
        return [_elements(weights)] if weights is not None and weights.dtype == "int4" else []
    return []
