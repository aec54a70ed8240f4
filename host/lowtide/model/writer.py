"""Serialise a graph's object tree (schema ModelT) to .tflite bytes, every buffer 16-byte aligned as TFLM requires;
write files all or none."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import flatbuffers
from tflite_micro.tensorflow.lite.micro.tools.tflite_flatbuffer_align_wrapper import align_tflite_model

from lowtide.model.schema import FILE_IDENTIFIER, fb


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
