"""Kernel scratch buffers that TFLM's reference kernels request in Prepare, by operator.

Each request becomes one planned buffer live only at its operator's scope. Figures were checked against the
host interpreter's head on the shared SVDF and LSTM models. Every other reference kernel requests none
(optimized kernel libraries such as CMSIS-NN do request more; lowtide predicts TFLM's reference build).
"""

from __future__ import annotations

import math

from lowtide.model.ir import Graph
from lowtide.model.schema import ELEMENT_BYTES

_LSTM_CELL_STATE_INPUT = 19  # input index of the cell-state variable in (UNI|BI)DIRECTIONAL_SEQUENCE_LSTM
_LSTM_GATE_BUFFERS = 4  # one buffer per gate: input, forget, cell, output


def scratch_sizes(graph: Graph, subgraph: int, op: int) -> list[int]:
    sg = graph.subgraphs[subgraph]
    operator = sg.operators[op]
    if operator.opcode == "SVDF":
        inputs = operator.inputs
        batch = sg.tensors[inputs[0]].shape[0]
        num_filters = sg.tensors[inputs[1]].shape[0]
        if sg.tensors[inputs[0]].dtype == "float32":
            return [batch * num_filters * 4]
        rank = getattr(operator.options, "rank", 1) or 1
        # Integer SVDF keeps int32 accumulators for every filter and every output unit.
        return [batch * num_filters * 4, batch * (num_filters // rank) * 4]
    if operator.opcode == "UNIDIRECTIONAL_SEQUENCE_LSTM" and len(operator.inputs) > _LSTM_CELL_STATE_INPUT:
        cell = sg.tensors[operator.inputs[_LSTM_CELL_STATE_INPUT]]
        return [math.prod(cell.shape) * ELEMENT_BYTES[cell.dtype]] * _LSTM_GATE_BUFFERS
    return []
