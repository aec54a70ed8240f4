"""Write a model with a new operator order and an offline memory plan, plus a C header and a JSON sidecar.

The plan is TFLM's `OfflineMemoryAllocation` metadata: little-endian int32 words
`[version=1, subgraph count, tensor count n, offset_0 .. offset_{n-1}]` over the tensors of all subgraphs
concatenated, -1 meaning "plan online". TFLM honours it byte for byte and checks nothing, so the plan is checked
for overlaps here, before anything is written. Kernel scratch buffers cannot be planned offline: TFLM's greedy
planner fits them around the fixed tensors, so the head is computed through the greedy replica.
"""

from __future__ import annotations

import dataclasses
import json
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lowtide.errors import LowtideError
from lowtide.memory.greedy import arena_head
from lowtide.memory.lifetimes import Buffer, Order, buffer_lifetimes
from lowtide.memory.placement import check_no_overlap, tflm_offsets_with_plan
from lowtide.model.ir import Graph
from lowtide.model.reader import read_model
from lowtide.model.schema import fb
from lowtide.model.writer import write_model
from lowtide.oracle import allocate
from lowtide.schedule import apply_order

OFFLINE_PLAN_NAME = "OfflineMemoryAllocation"
OFFLINE_PLAN_VERSION = 1
ONLINE = -1
# A static arena array is not necessarily 16-byte aligned; TFLM aligns the start of the head, losing up to 15 bytes.
ARENA_START_ALIGNMENT_BYTES = 16
TAIL_ESTIMATE_NOTE = (
    "arena_size_bytes = planned_head_bytes + mcu32_tail_bytes + alignment_margin_bytes. The head is exact: TFLM "
    "puts every activation at its offset in the model's OfflineMemoryAllocation plan and fits kernel scratch "
    "buffers around them as lowtide's replica of its greedy planner does. The tail (persistent structs) is an "
    "estimate for a 32-bit MCU: the host interpreter's 64-bit tail, less 12 bytes per TfLiteEvalTensor (24 -> 12) "
    "and 32 bytes per NodeAndRegistration (64 -> 32). The margin covers aligning the arena start to 16 bytes."
)


@dataclass(frozen=True)
class ExportResult:
    model_path: Path
    header_path: Path
    json_path: Path
    model_size_bytes: int
    planned_head_bytes: int  # the head TFLM will have with this plan (exact)
    host_tail_bytes: int  # persistent part measured by the 64-bit host interpreter
    mcu32_tail_bytes: int  # estimated persistent part on a 32-bit MCU
    arena_size_bytes: int  # what to declare on the MCU: head + 32-bit tail + alignment margin
    measured_head_bytes: int  # host TFLM on the written model, after AllocateTensors
    measured_total_bytes: int


def offline_plan_words(graph: Graph, buffers: Sequence[Buffer], offsets: Sequence[int]) -> list[int]:
    """The metadata's int32 words: one offset per tensor of every subgraph, -1 for tensors TFLM plans itself
    (and for constants and variables, which must not move into the head)."""
    base = [0]
    for sg in graph.subgraphs[:-1]:
        base.append(base[-1] + len(sg.tensors))
    per_tensor = [ONLINE] * graph.tensor_count
    for b, offset in zip(buffers, offsets):
        if b.tensor is not None:
            per_tensor[base[b.subgraph] + b.tensor] = offset
    return [OFFLINE_PLAN_VERSION, len(graph.subgraphs), graph.tensor_count, *per_tensor]


def _tensor_offsets(buffers: Sequence[Buffer], offsets_by_buffer: Mapping[Buffer, int]) -> list[int]:
    """Each tensor buffer's offset from the mapping. A buffer planned for another operator order has other
    lifetimes: using its offset could overlap live data, so it is refused."""
    given = {(b.subgraph, b.tensor): (b, o) for b, o in offsets_by_buffer.items() if b.tensor is not None}
    offsets = []
    for b in buffers:
        if b.tensor is None:
            offsets.append(0)  # scratch: placed by TFLM's greedy planner, whatever is given
            continue
        planned = given.get((b.subgraph, b.tensor))
        if planned is None:
            raise LowtideError(f"memory plan has no offset for {b.label}")
        source, offset = planned
        if (source.size, source.first, source.last) != (b.size, b.first, b.last):
            raise LowtideError(f"memory plan for {b.label} was made for another operator order "
                               f"(scopes {source.first}-{source.last}, here {b.first}-{b.last})")
        offsets.append(offset)
    return offsets


def _set_offline_plan(raw, words: list[int]) -> None:
    data = np.frombuffer(struct.pack(f"<{len(words)}i", *words), dtype=np.uint8)
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


def _macro_prefix(path: Path) -> str:
    name = re.sub(r"[^0-9A-Za-z]+", "_", path.stem).strip("_").upper() or "MODEL"
    return name if not name[0].isdigit() else f"MODEL_{name}"


def _header(prefix: str, source: Graph, result: ExportResult) -> str:
    guard = f"{prefix}_ARENA_H_"
    return (
        f"// Generated by lowtide optimize from {Path(source.path).name} (sha256 {source.sha256[:16]}...).\n"
        f"// Model with its operator order and offline memory plan: {result.model_path.name}\n"
        f"//\n"
        f"// {prefix}_ARENA_SIZE = planned head {result.planned_head_bytes} B (exact: every activation has a fixed\n"
        f"// offset in the model's OfflineMemoryAllocation plan)\n"
        f"//   + persistent tail {result.mcu32_tail_bytes} B (estimate for a 32-bit MCU: the 64-bit host tail of\n"
        f"//     {result.host_tail_bytes} B less 12 B per TfLiteEvalTensor and 32 B per NodeAndRegistration)\n"
        f"//   + {ARENA_START_ALIGNMENT_BYTES} B margin for aligning the arena start to 16 bytes.\n"
        f"#ifndef {guard}\n#define {guard}\n\n"
        f"#define {prefix}_ARENA_SIZE {result.arena_size_bytes}\n"
        f"#define {prefix}_ARENA_HEAD_BYTES {result.planned_head_bytes}\n\n"
        f"#endif  // {guard}\n"
    )


def export_optimized(graph: Graph, order: Order, offsets_by_buffer: Mapping[Buffer, int],
                     out_path: str | Path) -> ExportResult:
    """Write `out_path` (the model), `out_path`.h and `out_path`.json. `offsets_by_buffer` gives the offset of
    every tensor buffer of `buffer_lifetimes(graph, order)` (scratch entries are ignored: TFLM places them)."""
    out_path = Path(out_path)
    buffers = [dataclasses.replace(b, offline_offset=None) for b in buffer_lifetimes(graph, order)[0]]
    offsets = tflm_offsets_with_plan(buffers, _tensor_offsets(buffers, offsets_by_buffer))
    check_no_overlap(buffers, offsets)
    planned_head = arena_head(buffers, offsets)

    raw = apply_order(graph, order)
    words = offline_plan_words(graph, buffers, offsets)
    _set_offline_plan(raw, words)
    try:
        data = write_model(raw, out_path)
    except OSError as exc:
        raise LowtideError(f"cannot write: {exc.strerror}", out_path) from None
    written = read_model(data, str(out_path))
    if written.offline_plan != words[3:]:
        raise LowtideError("the written model does not carry the memory plan (metadata lost on write)", out_path)
    figures = allocate(data, path=str(out_path))
    result = ExportResult(
        model_path=out_path,
        header_path=out_path.with_suffix(".h"),
        json_path=out_path.with_suffix(".json"),
        model_size_bytes=len(data),
        planned_head_bytes=planned_head,
        host_tail_bytes=figures.tail_bytes,
        mcu32_tail_bytes=figures.mcu32_tail_bytes,
        arena_size_bytes=planned_head + figures.mcu32_tail_bytes + ARENA_START_ALIGNMENT_BYTES,
        measured_head_bytes=figures.head_bytes,
        measured_total_bytes=figures.total_bytes,
    )
    result.header_path.write_text(_header(_macro_prefix(out_path), graph, result))
    sidecar = {
        "model": out_path.name,
        "source_model": Path(graph.path).name,
        "source_sha256": graph.sha256,
        "sha256": written.sha256,
        "planned_head_bytes": planned_head,
        "host_tail_bytes": result.host_tail_bytes,
        "mcu32_tail_bytes": result.mcu32_tail_bytes,
        "alignment_margin_bytes": ARENA_START_ALIGNMENT_BYTES,
        "arena_size_bytes": result.arena_size_bytes,
        "estimate": TAIL_ESTIMATE_NOTE,
        "operator_order": {str(sg): ops for sg, ops in order.items()},
        "offline_offsets": sum(1 for w in words[3:] if w != ONLINE),
    }
    result.json_path.write_text(json.dumps(sidecar, indent=2) + "\n")
    return result
