"""The typed graph that every later stage works on.

A graph is immutable: tensors and operators by their ids (a tensor's `index` is its position in its subgraph's
tensor list, an operator's its position in the stored execution order), operator attributes typed
(`lowtide.model.attributes`). Tensor ids are stable: reordering operators keeps them, and the editor
(`lowtide.model.edit`) appends new tensors; only its `finish` renumbers, when it drops the tensors no operator uses
any more. Underneath is the flatbuffer object tree, read from a file (`reader.read_model`) or built by an edit
(`reader.graph_from_tree`). It is private to the graph: only the reader (`reader.object_tree`) and the writer
(`writer.editable_tree`) reach it, so every other stage reads the typed fields. Every edit (`lowtide.model.edit`,
`lowtide.schedule.apply_order`) returns a new graph over a new tree that shares what it does not change with the
one it came from, and no one writes to a graph's tree once the graph exists.

A graph is its model: it carries its identity (`Graph.source`, the model file as the user named it, which every
edit keeps, for messages; `Graph.name`, that file's name, in reports and generated files) and its bytes (`Graph.data`: the file's for a graph read from one, serialised once, when first asked, for an edited one).
No stage below `lowtide.pipeline` takes a path or reads a model file: the commands and the pytest plugin read and
validate a file once, at entry (`lowtide.validation.load_model`), and hand the graph on.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from lowtide.errors import ModelError
from lowtide.model.attributes import Attributes, CallOnceAttributes, IfAttributes, VarHandleAttributes, WhileAttributes
from lowtide.model.offline_memory import NAME as OFFLINE_PLAN_NAME
from lowtide.model.offline_memory import OfflinePlan, PlanFormatError
from lowtide.model.operators import SIDE_EFFECT_OPCODES
from lowtide.model.writer import model_bytes

# Operators that call other subgraphs: the attributes that name those subgraphs.
CONTROL_FLOW_ATTRIBUTES: dict[str, type[Attributes]] = {
    "IF": IfAttributes,
    "WHILE": WhileAttributes,
    "CALL_ONCE": CallOnceAttributes,
}


def named_subgraphs(opcode: str, attributes: Attributes | None) -> tuple[int | None, ...]:
    """The subgraphs a control-flow operator names (None for each it cannot name: its attributes are missing or
    of another table); () for other operators."""
    cls = CONTROL_FLOW_ATTRIBUTES.get(opcode)
    if cls is None:
        return ()
    if isinstance(attributes, IfAttributes):
        return attributes.then_subgraph, attributes.else_subgraph
    if isinstance(attributes, WhileAttributes):
        return attributes.cond_subgraph, attributes.body_subgraph
    if isinstance(attributes, CallOnceAttributes):
        return (attributes.init_subgraph,)
    return (None,)


class TensorKind(enum.Enum):
    ACTIVATION = "activation"  # planned in the arena head by TFLM
    CONSTANT = "constant"  # data in the model's flatbuffer (flash)
    VARIABLE = "variable"  # persistent state, allocated in the arena tail


@dataclass(frozen=True)
class Quantization:
    """A tensor's affine quantization: one scale and zero point per tensor, or one per channel along `axis`. The
    scales are the float32 values the file stores; a model may store no zero points (read as 0 each)."""

    scales: tuple[float, ...]
    zero_points: tuple[int, ...]
    axis: int = 0

    @property
    def scale(self) -> float:
        """The (first) scale; 0.0 where there is none."""
        return self.scales[0] if self.scales else 0.0

    @property
    def zero_point(self) -> int:
        """The (first) zero point; 0 where there is none."""
        return self.zero_points[0] if self.zero_points else 0


@dataclass(frozen=True)
class Tensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str  # TFLite TensorType name in lower case: "int8", "float32", ...
    nbytes: int  # bytes TFLM allocates for it (element count x element size)
    kind: TensorKind
    buffer: int
    quantization: Quantization | None = None  # None: the file stores no quantization table

    @property
    def planned(self) -> bool:
        """True when TFLM's memory planner places this tensor in the arena head."""
        return self.kind is TensorKind.ACTIVATION and self.nbytes > 0


@dataclass(frozen=True)
class Operator:
    index: int  # position in the subgraph's stored execution order
    opcode: str  # builtin operator name, or "CUSTOM:<name>"
    inputs: tuple[int, ...]  # tensor indices; -1 marks an omitted optional input
    outputs: tuple[int, ...]
    intermediates: tuple[int, ...]
    called_subgraphs: tuple[int, ...]  # subgraphs run by control-flow operators (IF, WHILE, CALL_ONCE)
    attributes: Attributes | None = field(default=None, compare=False, repr=False)  # None: no options stored

    @property
    def has_side_effects(self) -> bool:
        return self.opcode in SIDE_EFFECT_OPCODES or self.opcode.startswith("CUSTOM:")


@dataclass(frozen=True)
class Subgraph:
    index: int
    name: str
    tensors: tuple[Tensor, ...]
    operators: tuple[Operator, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]

    def producers(self) -> dict[int, int]:
        """Tensor index -> index of the operator that writes it."""
        return {t: op.index for op in self.operators for t in op.outputs if t >= 0}

    def consumers(self) -> dict[int, list[int]]:
        """Tensor index -> indices of the operators that read it, in stored order."""
        readers: dict[int, list[int]] = {}
        for op in self.operators:
            for t in op.inputs:
                if t >= 0:
                    readers.setdefault(t, []).append(op.index)
        return readers


@dataclass(frozen=True)
class Graph:
    source: str  # the model file as the user named it (an edit keeps its original's): a label, never opened
    subgraphs: tuple[Subgraph, ...]
    metadata: dict[str, bytes]  # metadata entries by name, with the bytes of the buffer each names
    # The schema ModelT, read from the file or built by an edit: only the reader and the writer touch it.
    _tree: Any = field(compare=False, repr=False)
    file_data: bytes | None = field(default=None, compare=False, repr=False)  # the bytes it was read from

    @property
    def name(self) -> str:
        """The model's name: its source file's (e.g. "kws.tflite"), in reports and generated files."""
        return Path(self.source).name

    @cached_property
    def data(self) -> bytes:
        """The model's .tflite bytes: the file's for a graph read from one, else its object tree serialised
        (once, when first asked: edits chain graphs without writing the ones between)."""
        return self.file_data if self.file_data is not None else model_bytes(self._tree)

    @cached_property
    def sha256(self) -> str:
        """Hash of the model's bytes: identifies the model in baselines and on devices."""
        return sha256_hex(self.data)

    @property
    def size_bytes(self) -> int:
        return len(self.data)

    @property
    def main(self) -> Subgraph:
        return self.subgraphs[0]

    @property
    def operator_count(self) -> int:
        return sum(len(sg.operators) for sg in self.subgraphs)

    @property
    def tensor_count(self) -> int:
        return sum(len(sg.tensors) for sg in self.subgraphs)

    @property
    def tensor_counts(self) -> tuple[int, ...]:
        return tuple(len(sg.tensors) for sg in self.subgraphs)

    @property
    def offline_plan(self) -> OfflinePlan | None:
        """The model's `OfflineMemoryAllocation` plan. A malformed one reads as none: `lowtide.model.validate`
        rejects it in every model a user gives; lowtide's own models carry well-formed plans."""
        data = self.metadata.get(OFFLINE_PLAN_NAME)
        if data is None:
            return None
        try:
            return OfflinePlan.decode(data)
        except PlanFormatError:
            return None

    def constant_array(self, tensor: int, subgraph: int = 0) -> np.ndarray | None:
        """The data of a constant tensor, shaped; None for activations and variables."""
        t = self.subgraphs[subgraph].tensors[tensor]
        if t.planned or t.kind is not TensorKind.CONSTANT:
            return None
        data = self.buffer_data(t.buffer)
        return np.frombuffer(data, dtype=np.dtype(t.dtype).newbyteorder("<")).reshape(t.shape)

    def buffer_data(self, buffer: int) -> bytes:
        """The contents of buffer `buffer` (`stored_bytes`)."""
        return stored_bytes(self._tree.buffers[buffer], self.file_data, self.source)


def resource_key(op: Operator) -> tuple[bytes, bytes]:
    """The resource variable a VAR_HANDLE names: its container and shared name."""
    a = op.attributes
    return (a.container, a.shared_name) if isinstance(a, VarHandleAttributes) else (b"", b"")


def variable_handles(graph: Graph) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    """(subgraph, resource tensor) -> the resource variable of the VAR_HANDLE writing it."""
    return {
        (sg.index, op.outputs[0]): resource_key(op)
        for sg in graph.subgraphs
        for op in sg.operators
        if op.opcode == "VAR_HANDLE" and op.outputs
    }


def first_assignments(graph: Graph) -> dict[tuple[bytes, bytes], tuple[int, int]]:
    """Resource variable -> (subgraph, value tensor) of its first ASSIGN_VARIABLE in Prepare order (subgraph 0
    first), which sets its size in TFLM's MicroResourceVariables."""
    handles = variable_handles(graph)
    found: dict[tuple[bytes, bytes], tuple[int, int]] = {}
    for sg in graph.subgraphs:
        for op in sg.operators:
            if op.opcode == "ASSIGN_VARIABLE" and len(op.inputs) > 1 and min(op.inputs[:2]) >= 0:
                key = handles.get((sg.index, op.inputs[0]))
                if key is not None:
                    found.setdefault(key, (sg.index, op.inputs[1]))
    return found


def stored_bytes(buffer: Any, data: bytes | None, name: str) -> bytes:
    """The contents of `buffer` (a schema BufferT) of a model read from `data` (None: a tree built in memory, which
    holds every buffer's contents itself)."""
    if buffer.data is not None and len(buffer.data) > 0:
        return bytes(buffer.data)
    # Models over 2 GB keep buffer contents after the flatbuffer, addressed by offset and size.
    if getattr(buffer, "offset", 0) > 1:
        if data is None or buffer.offset + buffer.size > len(data):
            raise ModelError("a buffer lies past the end of the file (truncated model?)", name)
        return data[buffer.offset : buffer.offset + buffer.size]
    return b""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
