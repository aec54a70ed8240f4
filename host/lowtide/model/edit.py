"""One editor for the graphs lowtide derives from a model: new tensors (activations, constants with their
quantization), new operators with typed attributes, the original operators kept as they are; and the edits of a
whole graph (`with_operator_order`, `with_offline_plan`, `with_outputs`). Every edit returns a new `Graph`
(`reader.graph_from_tree`), serialised only when its bytes are needed (`Graph.data`).

The editor works on a shallow copy of the model's object tree (`writer.editable_tree`): the original graph is never
changed, and what the edit does not change (weight buffers, the operators and tensors it keeps) is shared with it,
not copied. Tensor ids are positions in the main subgraph's tensor list, stable while editing (new tensors are
appended); `finish` drops the tensors no operator uses and renumbers the rest. Every tensor the editor creates gets
a name no other tensor of the subgraph has (a suffix `#2`, `#3`, ... where the name it is given is taken): tilings
and reports find tensors by name.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lowtide.model.attributes import Attributes, options_table
from lowtide.model.ir import Graph, Quantization
from lowtide.model.offline_memory import NAME as OFFLINE_PLAN_NAME
from lowtide.model.offline_memory import OfflinePlan
from lowtide.model.reader import graph_from_tree
from lowtide.model.schema import TYPE_CODES, builtin_code, fb, operator_code
from lowtide.model.writer import editable_tree
from lowtide.text import model_text


class GraphEditor:
    """Collects new tensors, buffers, operator codes and operators for the main subgraph of `graph` (None: a new
    model, from `GraphEditor.new`)."""

    def __init__(self, graph: Graph | None, tree: Any = None):
        self.graph = graph
        self.model = editable_tree(graph) if graph is not None else tree  # tree: a new model's, the editor's own
        self._sg_raw = self.model.subgraphs[0]
        self.tensors: list[Any] = list(self._sg_raw.tensors)
        self._names = {model_text(t.name) for t in self.tensors}
        self._constants: dict[tuple[tuple[int, ...], bytes], int] = {}

    @classmethod
    def new(cls, description: str | None = None, subgraph_name: str | None = None) -> GraphEditor:
        """An editor of a new model of one empty subgraph."""
        tree = fb.ModelT()
        tree.version, tree.description = 3, description
        tree.buffers = [fb.BufferT()]  # buffer 0: the empty buffer of every activation
        tree.operatorCodes = []
        sg = fb.SubGraphT()
        sg.name, sg.tensors, sg.operators, sg.inputs, sg.outputs = subgraph_name, [], [], [], []
        tree.subgraphs = [sg]
        return cls(None, tree)

    # ---- tensors --------------------------------------------------------------------------------------
    def tensor(
        self,
        name: str,
        shape: Sequence[int],
        dtype: str,
        quantization: Quantization | None = None,
        data: np.ndarray | None = None,
        variable: bool = False,
    ) -> int:
        """A new tensor: a constant holding `data` (of type `dtype`), a variable, or an activation."""
        t = fb.TensorT()
        t.shape, t.type, t.name, t.isVariable = list(shape), TYPE_CODES[dtype], name, variable
        if quantization is not None:
            t.quantization = _quantization_table(quantization)
        t.buffer = 0 if data is None else self._buffer(np.asarray(data, dtype=dtype).tobytes())
        return self._add_tensor(t)

    def _add_tensor(self, t: Any) -> int:
        """Append `t`, renamed `<name>#2`, `#3`, ... when another tensor of the subgraph has its name (two
        windows clipped to the same rows and columns, a second tiling's constants)."""
        name = unique = model_text(t.name)
        suffix = 2
        while unique in self._names:
            unique, suffix = f"{name}#{suffix}", suffix + 1
        if unique != name:
            t.name = unique
        self._names.add(unique)
        self.tensors.append(t)
        return len(self.tensors) - 1

    def activation_like(self, like: int, shape: tuple[int, ...], name: str) -> int:
        """A new activation of `like`'s type and quantization."""
        original = self._sg_raw.tensors[like]
        t = fb.TensorT()
        t.name = name
        t.shape = list(shape)
        t.type = original.type
        t.buffer = 0
        t.quantization = copy.deepcopy(original.quantization)
        return self._add_tensor(t)

    def activation(self, shape: tuple[int, ...], like: int, scale: float, zero_point: int, name: str) -> int:
        """A new activation of `like`'s type with its own per-tensor quantization."""
        index = self.activation_like(like, shape, name)
        self.tensors[index].quantization = _quantization_table(Quantization((float(scale),), (int(zero_point),)))
        return index

    def _buffer(self, data: bytes) -> int:
        buffer = fb.BufferT()
        buffer.data = np.frombuffer(data, dtype=np.uint8).copy()
        self.model.buffers.append(buffer)
        return len(self.model.buffers) - 1

    def constant_like(self, like: int, values: np.ndarray, name: str) -> int:
        """A new constant holding `values`, with the type and quantization of tensor `like` (any tensor the
        editor holds)."""
        original = self.tensors[like]
        t = fb.TensorT()
        t.name, t.shape, t.type = name, list(values.shape), original.type
        t.buffer = self._buffer(np.ascontiguousarray(values).tobytes())
        t.quantization = copy.deepcopy(original.quantization)
        return self._add_tensor(t)

    def constant_slice(self, like: int, axis: int, channels: np.ndarray, name: str) -> int:
        """Constant `like` restricted to `channels` along `axis`; per-channel quantization along that axis is
        restricted with it, so every kept channel computes exactly as before."""
        values = self.graph.constant_array(like) if self.graph is not None else None
        assert values is not None, like  # the callers restrict constant operands only
        index = self.constant_like(like, np.ascontiguousarray(np.take(values, channels, axis=axis)), name)
        q = self.tensors[index].quantization
        if q is not None and q.scale is not None and len(q.scale) > 1 and (q.quantizedDimension or 0) == axis:
            q.scale = np.asarray(q.scale)[channels]
            q.zeroPoint = np.asarray(q.zeroPoint)[channels]
        return index

    def int32_constant(self, values: int | list[int] | list[list[int]]) -> int:
        """An int32 constant holding `values`, one tensor for equal values."""
        array = np.asarray(values, dtype="<i4")
        key = (array.shape, array.tobytes())
        if key not in self._constants:
            t = fb.TensorT()
            t.name = f"lowtide/const_{len(self._constants)}"
            t.shape = list(array.shape)
            t.type = TYPE_CODES["int32"]
            t.buffer = self._buffer(array.tobytes())
            self._constants[key] = self._add_tensor(t)
        return self._constants[key]

    # ---- operators ------------------------------------------------------------------------------------
    def opcode_index(self, name: str) -> int:
        code = operator_code(name)
        for i, existing in enumerate(self.model.operatorCodes):
            if builtin_code(existing) == code.builtinCode:
                return i
        self.model.operatorCodes.append(code)
        return len(self.model.operatorCodes) - 1

    def original(self, index: int) -> Any:
        """A copy of main-subgraph operator `index`, to change its operands."""
        return copy.copy(self._sg_raw.operators[index])

    def operator(
        self, name: str, inputs: Sequence[int], output: int | Sequence[int], attributes: Attributes | None
    ) -> Any:
        """A new builtin operator `name` with `attributes` (None: no options table)."""
        op = fb.OperatorT()
        op.opcodeIndex = self.opcode_index(name)
        op.inputs, op.outputs = list(inputs), [output] if isinstance(output, int) else list(output)
        if attributes is not None:
            op.builtinOptionsType, op.builtinOptions = options_table(attributes)
        return op

    @staticmethod
    def set_attributes(op: Any, attributes: Attributes) -> None:
        """Store `attributes` as the options of `op` (an operator from `original` or `operator`)."""
        op.builtinOptionsType, op.builtinOptions = options_table(attributes)

    # ---- the finished model ---------------------------------------------------------------------------
    @property
    def _source(self) -> str:
        """The edited graph's source: the original's (an edit is of the same model)."""
        return self.graph.source if self.graph is not None else "<new model>"

    def finish(
        self,
        operators: list[Any],
        inputs: Sequence[int] | None = None,
        outputs: Sequence[int] | None = None,
        prune: bool = True,
    ) -> Graph:
        """The edited graph with main-subgraph `operators` (and `inputs` and `outputs`, when given): with `prune`,
        tensors no operator or subgraph boundary uses are dropped and the rest renumbered, and metadata that names
        tensors by index (an offline memory plan, which no longer fits) is dropped."""
        sg = copy.copy(self._sg_raw)
        sg.inputs = list(inputs) if inputs is not None else sg.inputs
        sg.outputs = list(outputs) if outputs is not None else sg.outputs
        if not prune:
            sg.tensors, sg.operators = list(self.tensors), operators
            self.model.subgraphs = [sg] + list(self.model.subgraphs[1:])
            return graph_from_tree(self.model, self._source)
        # An operator read from a file holds its intermediates as an array (None: it has none).
        operands = {
            t for op in operators for ts in (op.inputs, op.outputs, op.intermediates) if ts is not None for t in ts
        }
        used = sorted({t for t in operands if t >= 0} | set(sg.inputs) | set(sg.outputs))
        renumber = {old: new for new, old in enumerate(used)}
        for op in operators:
            op.inputs = [renumber[t] if t >= 0 else t for t in op.inputs]
            op.outputs = [renumber[t] for t in op.outputs]
            if op.intermediates is not None and len(op.intermediates):
                op.intermediates = [renumber[t] for t in op.intermediates]
        sg.tensors = [self.tensors[t] for t in used]
        sg.inputs = [renumber[t] for t in sg.inputs]
        sg.outputs = [renumber[t] for t in sg.outputs]
        sg.operators = operators
        self.model.subgraphs = [sg] + list(self.model.subgraphs[1:])
        if self.model.metadata:
            self.model.metadata = [m for m in self.model.metadata if model_text(m.name) != OFFLINE_PLAN_NAME]
        if self.model.signatureDefs:
            self.model.signatureDefs = [_renumbered_signature(s, renumber) for s in self.model.signatureDefs]
        return graph_from_tree(self.model, self._source)


def with_operator_order(graph: Graph, order: Mapping[int, Sequence[int]]) -> Graph:
    """`graph` with the operators of each subgraph `order` names stored in that order (positions in the stored
    order; the caller checks that it is valid). The operators and tensors are shared with `graph`."""
    model = editable_tree(graph)
    for sg_index, ops in order.items():
        subgraph = model.subgraphs[sg_index] = copy.copy(model.subgraphs[sg_index])
        operators = subgraph.operators or []
        subgraph.operators = [operators[i] for i in ops]
    return graph_from_tree(model, graph.source)


def with_offline_plan(graph: Graph, plan: OfflinePlan) -> Graph:
    """`graph` with `plan` as TFLM's `OfflineMemoryAllocation` metadata, replacing any plan it carries."""
    model = editable_tree(graph)
    buffer = fb.BufferT()
    buffer.data = np.frombuffer(plan.encode(), dtype=np.uint8)
    for entry in model.metadata or []:
        if model_text(entry.name) == OFFLINE_PLAN_NAME:
            model.buffers[entry.buffer] = buffer  # the old plan's place
            return graph_from_tree(model, graph.source)
    model.buffers.append(buffer)
    entry = fb.MetadataT()
    entry.name = OFFLINE_PLAN_NAME
    entry.buffer = len(model.buffers) - 1
    model.metadata = [*(model.metadata or []), entry]
    return graph_from_tree(model, graph.source)


def with_outputs(graph: Graph, tensors: list[int]) -> Graph:
    """`graph` with the main-subgraph `tensors` added to its outputs, so an interpreter returns them too (their
    lifetimes grow: for reading values, not for memory figures)."""
    model = editable_tree(graph)
    main = model.subgraphs[0] = copy.copy(model.subgraphs[0])
    main.outputs = [*main.outputs, *tensors]
    return graph_from_tree(model, graph.source)


def _quantization_table(quantization: Quantization) -> Any:
    """The schema's quantization table of `quantization`. Scales are held as the float32 the file stores, so an
    edited graph computes with the values its bytes hold."""
    table = fb.QuantizationParametersT()
    table.scale = [float(np.float32(s)) for s in quantization.scales]
    table.zeroPoint = list(quantization.zero_points)
    table.quantizedDimension = quantization.axis
    return table


def _renumbered_signature(signature: Any, renumber: dict[int, int]) -> Any:
    if signature.subgraphIndex != 0:
        return signature
    signature = copy.copy(signature)
    for field in ("inputs", "outputs"):
        maps = []
        for m in getattr(signature, field) or []:
            m = copy.copy(m)
            m.tensorIndex = renumber[m.tensorIndex]
            maps.append(m)
        setattr(signature, field, maps)
    return signature
