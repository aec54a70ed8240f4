"""Read a .tflite flatbuffer into the typed graph, rejecting anything malformed with one clear message.

The flatbuffers Python runtime has no verifier, so every index the IR relies on is range-checked here, and
every failure of the generated accessors on corrupt bytes is turned into a ModelError. Vector lengths read
from a corrupt file cannot cause a huge allocation: the accessors fail as soon as they read past the buffer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

from lowtide.errors import ModelError
from lowtide.model.attributes import read_attributes
from lowtide.model.ir import Graph, Operator, Quantization, Subgraph, Tensor, TensorKind, named_subgraphs, stored_bytes
from lowtide.model.schema import BUILTIN_NAMES, ELEMENT_BYTES, FILE_IDENTIFIER, TYPE_NAMES, builtin_code, fb
from lowtide.text import model_text

# No microcontroller addresses more than 4 GiB: a tensor declared larger is corrupt, not ambitious.
MAX_TENSOR_BYTES = 1 << 32
# The schema's union fields (each `field` with its tag `fieldType`) and the union each tag names a member of.
_UNIONS = {
    "builtinOptions": fb.BuiltinOptions,
    "builtinOptions2": fb.BuiltinOptions2,
    "details": fb.QuantizationDetails,
    "arraySegments": fb.SparseIndexVector,
    "arrayIndices": fb.SparseIndexVector,
}


def load_bytes(path: str | Path) -> bytes:
    path = Path(path)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ModelError("no such file", path) from None
    except IsADirectoryError:
        raise ModelError("is a directory, not a .tflite file", path) from None
    except OSError as exc:
        raise ModelError(f"cannot read: {exc.strerror}", path) from None


def read_model(data: bytes, path: str = "<bytes>") -> Graph:
    """The graph of `data`, read from the file at `path` (the graph's `source`, never opened again), its
    references range-checked. Models from outside lowtide go through `lowtide.validation.load_model`, which also
    validates them."""
    if len(data) == 0:
        raise ModelError("file is empty", path)
    if len(data) < 8 or data[4:8] != FILE_IDENTIFIER:
        raise ModelError("not a TFLite model (no 'TFL3' flatbuffer identifier)", path)
    try:
        # A private writable copy: the object tree's numpy arrays are views into it, and later stages edit them.
        raw = fb.ModelT.InitFromObj(fb.Model.GetRootAs(bytearray(data), 0))
    except Exception as exc:  # the generated accessors raise struct/numpy/index errors on corrupt bytes
        raise ModelError(f"corrupt or truncated flatbuffer ({type(exc).__name__}: {exc})", path) from None
    return _graph_from_raw(raw, data, path)


def graph_from_tree(raw: fb.ModelT, source: str) -> Graph:
    """The graph of the object tree `raw`, an edit of the model `source` names, with the checks `read_model`
    makes: nothing is serialised until the graph's bytes are asked for (`Graph.data`). `raw` must not be changed
    afterwards."""
    return _graph_from_raw(raw, None, source)


def _graph_from_raw(raw: fb.ModelT, data: bytes | None, path: str) -> Graph:
    """The graph of `raw` from the model `path` names, read from its file's bytes `data` (None: built in memory by
    an edit)."""
    buffers = raw.buffers or []
    opcodes = raw.operatorCodes or []
    if not raw.subgraphs:
        raise ModelError("model has no subgraphs", path)
    subgraph_count = len(raw.subgraphs)
    subgraphs = tuple(
        _read_subgraph(i, sg, buffers, opcodes, subgraph_count, path) for i, sg in enumerate(raw.subgraphs)
    )
    metadata: dict[str, bytes] = {}
    for entry in raw.metadata or []:
        entry_name = model_text(entry.name)
        if not 0 <= entry.buffer < len(buffers):
            raise ModelError(f"metadata '{entry_name}' points at buffer {entry.buffer}, which does not exist", path)
        metadata[entry_name] = stored_bytes(buffers[entry.buffer], data, path)
    return Graph(source=path, subgraphs=subgraphs, metadata=metadata, _tree=raw, file_data=data)


def _has_data(buffer: fb.BufferT) -> bool:
    return (buffer.data is not None and len(buffer.data) > 0) or (
        getattr(buffer, "offset", 0) > 1 and getattr(buffer, "size", 0) > 0
    )


def _read_subgraph(
    index: int,
    sg: fb.SubGraphT,
    buffers: list[fb.BufferT],
    opcodes: list[fb.OperatorCodeT],
    subgraph_count: int,
    path: str,
) -> Subgraph:
    raw_tensors = sg.tensors or []
    tensors = []
    for t_index, t in enumerate(raw_tensors):
        tensors.append(_read_tensor(index, t_index, t, buffers, path))
    n_tensors = len(tensors)

    def check_tensor_refs(refs: Iterable[int] | None, what: str, allow_omitted: bool) -> tuple[int, ...]:
        out = tuple(int(r) for r in (refs if refs is not None else ()))
        for r in out:
            if not (0 <= r < n_tensors or (allow_omitted and r == -1)):
                raise ModelError(f"subgraph {index}: {what} refers to tensor {r}, but there are {n_tensors}", path)
        return out

    operators = []
    for op_index, op in enumerate(sg.operators or []):
        if not 0 <= op.opcodeIndex < len(opcodes):
            raise ModelError(f"subgraph {index} operator {op_index}: opcode index {op.opcodeIndex} out of range", path)
        opcode = _opcode_name(opcodes[op.opcodeIndex])
        attributes = read_attributes(op.builtinOptions)
        called = []
        for target in named_subgraphs(opcode, attributes):
            if target is None or not 0 <= target < subgraph_count:
                raise ModelError(
                    f"subgraph {index} operator {op_index} ({opcode}) calls missing subgraph {target}", path
                )
            called.append(int(target))
        where = f"operator {op_index} ({opcode})"
        operators.append(
            Operator(
                index=op_index,
                opcode=opcode,
                inputs=check_tensor_refs(op.inputs, f"{where} input", allow_omitted=True),
                outputs=check_tensor_refs(op.outputs, f"{where} output", allow_omitted=False),
                intermediates=check_tensor_refs(op.intermediates, f"{where} intermediate", allow_omitted=True),
                called_subgraphs=tuple(called),
                attributes=attributes,
            )
        )
    name = model_text(sg.name)
    return Subgraph(
        index=index,
        name=name,
        tensors=tuple(tensors),
        operators=tuple(operators),
        inputs=check_tensor_refs(sg.inputs, "subgraph input", allow_omitted=False),
        outputs=check_tensor_refs(sg.outputs, "subgraph output", allow_omitted=False),
    )


def _opcode_name(opcode: fb.OperatorCodeT) -> str:
    code = builtin_code(opcode)
    if code == fb.BuiltinOperator.CUSTOM:
        custom = model_text(opcode.customCode) or "?"
        return f"CUSTOM:{custom}"
    return BUILTIN_NAMES.get(code, f"BUILTIN_{code}")


def _read_tensor(sg_index: int, t_index: int, t: fb.TensorT, buffers: list[fb.BufferT], path: str) -> Tensor:
    name = model_text(t.name)
    where = f"subgraph {sg_index} tensor {t_index} '{name}'"
    dtype = TYPE_NAMES.get(t.type)
    if dtype is None:
        raise ModelError(f"{where} has unknown type code {t.type}", path)
    if not 0 <= t.buffer < max(len(buffers), 1):
        raise ModelError(f"{where} points at buffer {t.buffer}, but there are {len(buffers)}", path)
    shape = tuple(int(d) for d in (t.shape if t.shape is not None else ()))
    if any(d < 0 for d in shape):
        raise ModelError(f"{where} has a dynamic shape {list(shape)}; TFLite Micro needs static shapes", path)
    nbytes = math.prod(shape) * ELEMENT_BYTES[dtype]
    if nbytes > MAX_TENSOR_BYTES:
        raise ModelError(f"{where} declares {nbytes:,} bytes, more than a 32-bit address space", path)
    if t.isVariable:
        kind = TensorKind.VARIABLE
    elif buffers and _has_data(buffers[t.buffer]):
        kind = TensorKind.CONSTANT
    else:
        kind = TensorKind.ACTIVATION
    return Tensor(
        index=t_index,
        name=name,
        shape=shape,
        dtype=dtype,
        nbytes=nbytes,
        kind=kind,
        buffer=t.buffer,
        quantization=_quantization(t.quantization),
    )


def _quantization(table: fb.QuantizationParametersT | None) -> Quantization | None:
    """The typed quantization of a tensor's table, as stored (the validator judges it)."""
    if table is None:
        return None
    return Quantization(
        tuple(float(s) for s in (table.scale if table.scale is not None else ())),
        tuple(int(z) for z in (table.zeroPoint if table.zeroPoint is not None else ())),
        int(table.quantizedDimension or 0),
    )


# ---- the file's own structure, which the typed graph does not hold, for the validator -------------------------------


def object_tree(graph: Graph) -> fb.ModelT:
    """The schema object tree underneath `graph`, to read (tests build malformed models from it); an edit works on
    a copy (`lowtide.model.writer.editable_tree`)."""
    tree: fb.ModelT = graph._tree
    return tree


def stored_external_buffers(graph: Graph) -> list[tuple[int, int, int]]:
    """(buffer, offset, size) of each buffer stored after the flatbuffer (models over 2 GB)."""
    return [
        (i, b.offset, getattr(b, "size", 0))
        for i, b in enumerate(object_tree(graph).buffers or [])
        if getattr(b, "offset", 0) > 1
    ]


def stored_buffer_size(graph: Graph, buffer: int) -> int:
    """The bytes buffer `buffer` holds, in the flatbuffer or after it."""
    stored = object_tree(graph).buffers[buffer]
    return len(stored.data) if stored.data is not None and len(stored.data) else int(getattr(stored, "size", 0))


def stored_options_tagged(graph: Graph, subgraph: int, operator: int) -> bool:
    """Whether the operator's builtin options carry a type tag (its table may still be missing)."""
    return bool(object_tree(graph).subgraphs[subgraph].operators[operator].builtinOptionsType)


def stored_tensor_union_mismatches(graph: Graph, subgraph: int, tensor: int) -> list[str]:
    """The union fields of a tensor's quantization and sparsity tables whose tag and table disagree
    (`_union_mismatches`)."""
    table = object_tree(graph).subgraphs[subgraph].tensors[tensor]
    sparsity = (table.sparsity.dimMetadata or []) if table.sparsity is not None else []
    return _union_mismatches([table.quantization, *sparsity] if table.quantization is not None else sparsity)


def stored_operator_union_mismatches(graph: Graph, subgraph: int, operator: int) -> list[str]:
    """The union fields of an operator's table whose tag and table disagree (`_union_mismatches`)."""
    return _union_mismatches([object_tree(graph).subgraphs[subgraph].operators[operator]])


def _union_mismatches(tables: Iterable[object]) -> list[str]:
    """Union fields of the object-API `tables` whose tag and table disagree. The reader builds a union's table
    from its tag; a tag that names a table where the bytes hold none (or a tag no member has) leaves the tag
    without its table, and TFLM's flatbuffer aligner, which writes every model lowtide writes, follows that tag
    into memory that is not there (a segmentation fault in lowtide's own process)."""
    found = []
    for table in tables:
        for field, union in _UNIONS.items():
            tag = getattr(table, f"{field}Type", None)
            if not tag:
                continue
            members = {v: k for k, v in vars(union).items() if not k.startswith("_")}
            if tag not in members:
                found.append(f"{field} type {tag} is no {union.__name__} member")
            elif getattr(table, field) is None:
                found.append(f"{field} type {tag} ({members[tag]}) without its table")
    return found
