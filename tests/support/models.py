"""Small models assembled operator by operator, for the operators and geometry no shared model reaches."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lowtide.model.attributes import (
    Activation,
    Attributes,
    Padding,
    Pool2DAttributes,
    SequenceLstmAttributes,
    SvdfAttributes,
)
from lowtide.model.edit import GraphEditor
from lowtide.model.ir import Graph, Quantization

# The fused activations TFLM's integer LSTM takes.
ACT_TANH, ACT_SIGN_BIT = 4, 5


class TinyModel:
    """A one-subgraph model assembled with the graph editor, operators in the order they are added."""

    def __init__(self):
        self.editor = GraphEditor.new()
        self.operators: list = []
        self.count = 0

    @property
    def tensors(self) -> list:
        """The object-API tensors, to make a model malformed by hand."""
        return self.editor.tensors

    def tensor(
        self,
        shape,
        dtype: str,
        scale: float | list[float] | None = None,
        zero_point: int = 0,
        data=None,
        axis: int = 0,
        variable: bool = False,
    ) -> int:
        scales = None if scale is None else scale if isinstance(scale, list) else [scale]
        quantization = None if scales is None else Quantization(tuple(scales), (zero_point,) * len(scales), axis)
        self.count += 1
        return self.editor.tensor(
            f"t{self.count - 1}",
            shape,
            dtype,
            quantization,
            None if data is None else np.asarray(data, dtype=dtype),
            variable,
        )

    def op(self, opcode: str, inputs, outputs, attributes: Attributes | None = None) -> None:
        """Operator `opcode` with `attributes` (None: no options table)."""
        self.operators.append(self.editor.operator(opcode, inputs, outputs, attributes))

    def finished(self, inputs, outputs) -> Graph:
        """The model's graph."""
        return self.editor.finish(self.operators, inputs, outputs, prune=False)

    def save(self, path: Path, inputs, outputs) -> Path:
        path.write_bytes(self.finished(inputs, outputs).data)
        return path


def unsupported_model(path: Path) -> Path:
    """A float L2_POOL_2D: an operator the compiled runtime has no kernel for (every shared model compiles)."""
    m = TinyModel()
    x = m.tensor((1, 2, 2, 1), "float32")
    y = m.tensor((1, 2, 2, 1), "float32")
    m.op("L2_POOL_2D", [x], [y], Pool2DAttributes(padding=Padding.SAME, stride=(1, 1), filter=(1, 1)))
    return m.save(path, [x], [y])


def lstm(
    m: TinyModel,
    rng,
    source: int,
    shape: tuple[int, int, int],
    state: int,
    time_major: bool,
    activation: int,
    cell_scale: float,
    cell_clip: float,
    hidden_zero: int,
    input_gate: bool = True,
) -> int:
    """One LSTM on `source` (shape as the op reads it); returns its int8 output tensor."""
    input_size = shape[2]
    batches = shape[1] if time_major else shape[0]
    in_q = m.tensors[source].quantization
    in_scale = in_q.scale[0]
    hidden_scale = 1 / 128
    inputs = [source]
    for k in range(8):
        depth = input_size if k < 4 else state
        inputs.append(
            m.tensor((state, depth), "int8", 0.004 + 0.001 * k, 0, rng.integers(-127, 128, (state, depth)))
            if input_gate or k % 4
            else -1
        )
    inputs += [-1, -1, -1]  # no peephole
    for _ in range(4):
        inputs.append(m.tensor((state,), "int32", in_scale * 0.004, 0, rng.integers(-3000, 3000, state)))
    inputs += [-1, -1]  # no projection
    hidden = m.tensor((batches, state), "int8", hidden_scale, hidden_zero, variable=True)
    cell = m.tensor((batches, state), "int16", cell_scale, 0, variable=True)
    inputs += [hidden, cell, -1, -1, -1, -1]  # no layer norm
    out = m.tensor(shape[:2] + (state,), "int8", hidden_scale, hidden_zero)
    m.op(
        "UNIDIRECTIONAL_SEQUENCE_LSTM",
        inputs,
        [out],
        SequenceLstmAttributes(
            fused_activation=Activation(activation), cell_clip=cell_clip, proj_clip=0.0, time_major=time_major
        ),
    )
    return out


def svdf_model(m: TinyModel, state_type: str) -> tuple[list[int], list[int]]:
    """Two batches, rank 2, memory 5, then a second SVDF of rank 1: geometry the keyword models do not reach."""
    rng = np.random.default_rng(11)
    x = m.tensor((2, 12), "int8", 0.04, -3)
    lo, hi = (-32767, 32768) if state_type == "int16" else (-127, 128)
    state_scale, time_scale = (0.002, 0.0005) if state_type == "int16" else (0.3, 0.01)
    state_zero = 0 if state_type == "int16" else 7
    outputs = []
    for rank, filters, units, input_size, source in ((2, 8, 4, 12, x), (1, 4, 4, 4, None)):
        source = outputs[-1] if source is None else source
        features = m.tensor((filters, input_size), "int8", 0.01, 0, rng.integers(-127, 128, (filters, input_size)))
        times = m.tensor((filters, 5), state_type, time_scale, 0, rng.integers(lo, hi, (filters, 5)))
        bias = m.tensor((units,), "int32", state_scale * time_scale, 0, rng.integers(-4000, 4000, units))
        state = m.tensor((2, 5 * filters), state_type, state_scale, state_zero, variable=True)
        out = m.tensor((2, units), "int8", 0.05, 4)
        m.op(
            "SVDF",
            [source, features, times, bias, state],
            [out],
            SvdfAttributes(rank=rank, fused_activation=Activation.NONE),
        )
        outputs.append(out)
    return [x], outputs
