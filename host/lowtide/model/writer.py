"""Serialise a graph's object tree (schema ModelT) to .tflite bytes, every buffer 16-byte aligned as TFLM requires;
write files all or none; and the copy of a graph's tree an edit builds its new graph on."""

from __future__ import annotations

import copy
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import flatbuffers
from tflite_micro.tensorflow.lite.micro.tools.tflite_flatbuffer_align_wrapper import align_tflite_model

from lowtide.model.schema import FILE_IDENTIFIER, fb

if TYPE_CHECKING:
    from lowtide.model.ir import Graph


def editable_tree(graph: Graph) -> fb.ModelT:
    """A shallow copy of `graph`'s object tree for an edit to change: its own lists of buffers, operator codes,
    subgraphs and metadata, whose entries stay `graph`'s, so an edit replaces an entry (a copy of it) rather than
    change it, and shares everything it does not replace."""
    tree: fb.ModelT = copy.copy(graph._tree)
    for name in ("buffers", "operatorCodes", "subgraphs", "metadata"):
        entries = getattr(tree, name)
        if entries is not None:  # None (no vector) and [] (an empty one) serialise differently
            setattr(tree, name, list(entries))
    return tree


def model_bytes(raw: fb.ModelT) -> bytes:
    """Serialise `raw` (a ModelT). The Python builder aligns buffers to 4 bytes only; TFLM's own C++ aligner
    (shipped in the tflite-micro package) repacks the flatbuffer with 16-byte buffer alignment."""
    builder = flatbuffers.Builder(1024)
    builder.Finish(raw.Pack(builder), file_identifier=FILE_IDENTIFIER)
    with tempfile.TemporaryDirectory(prefix="lowtide-") as tmp:
        unaligned, aligned = os.path.join(tmp, "in.tflite"), os.path.join(tmp, "out.tflite")
        Path(unaligned).write_bytes(bytes(builder.Output()))
        align_tflite_model(unaligned, aligned)
        return Path(aligned).read_bytes()


def misaligned_buffers(data: bytes, alignment: int = 16) -> list[int]:
    """Indices of buffers whose data does not start on an `alignment`-byte boundary of the file."""
    model = fb.Model.GetRootAs(data, 0)
    bad = []
    for i in range(model.BuffersLength()):
        table = model.Buffers(i)._tab
        field = table.Offset(4)  # Buffer.data
        if field and table.VectorLen(field) > 0 and table.Vector(field) % alignment:
            bad.append(i)
    return bad
