"""Write a schema ModelT back to .tflite bytes with every buffer 16-byte aligned, as TFLM requires."""

from __future__ import annotations

import copy
import os
import tempfile
from pathlib import Path

import flatbuffers
import numpy as np
from tflite_micro.tensorflow.lite.micro.tools.tflite_flatbuffer_align_wrapper import align_tflite_model

from lowtide.model.ir import Graph
from lowtide.model.offline_memory import NAME as OFFLINE_PLAN_NAME
from lowtide.model.offline_memory import OfflinePlan
from lowtide.model.schema import FILE_IDENTIFIER, fb
from lowtide.storage import write_files


def set_offline_plan(raw: fb.ModelT, plan: OfflinePlan) -> None:
    """Store `plan` as TFLM's `OfflineMemoryAllocation` metadata in the ModelT `raw`, replacing any plan it
    carries."""
    data = np.frombuffer(plan.encode(), dtype=np.uint8)
    for entry in raw.metadata or []:
        name = entry.name.decode("utf-8", "replace") if isinstance(entry.name, bytes) else entry.name
        if name == OFFLINE_PLAN_NAME:
            raw.buffers[entry.buffer].data = data  # replace the old plan in place
            return
    buffer = fb.BufferT()
    buffer.data = data
    raw.buffers.append(buffer)
    entry = fb.MetadataT()
    entry.name = OFFLINE_PLAN_NAME
    entry.buffer = len(raw.buffers) - 1
    raw.metadata = [*(raw.metadata or []), entry]


def with_outputs(graph: Graph, tensors: list[int]) -> bytes:
    """The model with the main-subgraph `tensors` added to its outputs, so an interpreter returns them too
    (their lifetimes grow: for reading values, not for memory figures)."""
    raw = copy.deepcopy(graph.raw)
    raw.subgraphs[0].outputs = [*raw.subgraphs[0].outputs, *tensors]
    return model_bytes(raw)


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


def write_model(raw: fb.ModelT, path: str | Path) -> bytes:
    """Write atomically, so an interrupted run never leaves a half-written model behind."""
    data = model_bytes(raw)
    write_files({Path(path): data})
    return data


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
