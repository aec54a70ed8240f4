"""Stale memory: operators whose outputs depend on what the arena held before they ran, found on the host TFLM.

TFLM never clears its arena, and a kernel that leaves part of its output unwritten (BATCH_TO_SPACE_ND when the
model declares a larger output than its input covers) or reads memory before writing it makes the model's outputs
depend on whatever the memory plan put there earlier. Such outputs change when only the plan changes, so they
cannot be compared bit for bit between two plans of one model.

The check runs a copy of the model made for it, never the user's: every planned tensor gets bytes of its own (an
offline plan in which nothing shares memory, so no tensor is overwritten once written: the plan-independent
reference), every tensor of the main subgraph becomes a model output (so it can be read after the invoke), and
one extra model input, read by no operator, is planned over the whole head. That input lives only in scope 0,
before the first operator, so TFLM lets every other buffer overlap it, and setting it fills the arena. Kernel
scratch buffers, which cannot be planned offline, fit at the start of the head, which the tensors leave free.

The copy runs on the same inputs under several fills (zero bytes, 0xFF bytes, seeded random bytes). A byte that
is the same in every run is determined; one that equals the fill at its own address in every run was never
written; any other is computed from stale bytes (read before written, or from an input that was). An operator is
the origin of its stale bytes when all its inputs are determined. Equal bytes under every fill are evidence, not
proof: a byte computed from stale memory that comes out the same whatever the fill (a sum saturated at the end of
the int8 range) counts as determined. The fills at both ends of the range and one random make that rare.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from lowtide import oracle
from lowtide.memory.lifetimes import ALIGNMENT, align_up
from lowtide.memory.scratch import scratch_sizes
from lowtide.model.ir import Graph, Operator
from lowtide.model.offline_memory import OfflinePlan
from lowtide.model.reader import read_model
from lowtide.model.schema import fb
from lowtide.model.writer import model_bytes, set_offline_plan

FILLS = ("0x00", "0xff", "0x7f", "0x80", "random")
FILL_SEED = 20190601
# Room for TFLM's persistent tail beside the filled head.
_TAIL_ROOM = 64 << 20

ByteRanges = tuple[tuple[int, int], ...]  # [start, end) byte offsets inside one tensor


@dataclass(frozen=True)
class StaleOperator:
    """One output tensor of a main-subgraph operator whose bytes are not all determined."""

    op: int  # operator index in the main subgraph's stored order
    opcode: str
    tensor: int  # its output tensor
    tensor_name: str
    tensor_bytes: int
    unwritten: ByteRanges  # bytes the operator never wrote: they keep whatever was in the arena
    stale_read: ByteRanges  # bytes it wrote from stale memory (its own, or undetermined input bytes)
    inputs_determined: bool  # True: the operator itself is the origin; False: it passes on an earlier one's
    fix: str | None = None  # a rewrite that makes it deterministic, bit-identical on the determined bytes

    @property
    def undetermined_bytes(self) -> int:
        return _count(self.unwritten) + _count(self.stale_read)

    def describe(self) -> str:
        what = []
        if self.unwritten:
            what.append(f"leaves {_count(self.unwritten):,} of its {self.tensor_bytes:,} output bytes unwritten")
        if self.stale_read:
            verb = "computes" if self.inputs_determined else "passes on"
            what.append(f"{verb} {_count(self.stale_read):,} output bytes from stale memory")
        return f"operator {self.op} ({self.opcode}) " + " and ".join(what)


@dataclass(frozen=True)
class StaleReport:
    operators: tuple[StaleOperator, ...]  # every main-subgraph output tensor with undetermined bytes, in run order
    output_determined: tuple[np.ndarray, ...]  # per model output: bool per byte, True where determined
    fills: tuple[str, ...]

    @property
    def clean(self) -> bool:
        return not self.operators and all(mask.all() for mask in self.output_determined)

    @property
    def origins(self) -> tuple[StaleOperator, ...]:
        return tuple(s for s in self.operators if s.inputs_determined)

    @property
    def undetermined_output_bytes(self) -> int:
        return int(sum((~mask).sum() for mask in self.output_determined))

    @property
    def output_bytes(self) -> int:
        return int(sum(mask.size for mask in self.output_determined))

    def summary(self) -> str:
        if self.clean:
            return "no operator reads or leaves stale memory: outputs are the same whatever the arena held"
        origins = "; ".join(s.describe() for s in self.origins) or "; ".join(s.describe() for s in self.operators)
        return (f"{self.undetermined_output_bytes:,} of {self.output_bytes:,} output bytes depend on stale "
                f"memory: {origins}")

    def to_json(self) -> dict:
        return {
            "clean": self.clean,
            "fills": list(self.fills),
            "output_bytes": self.output_bytes,
            "undetermined_output_bytes": self.undetermined_output_bytes,
            "outputs": [{"index": i, "bytes": int(m.size), "undetermined": _ranges_json(_ranges(~m))}
                        for i, m in enumerate(self.output_determined)],
            "operators": [{
                "index": s.op, "opcode": s.opcode, "tensor": s.tensor, "tensor_name": s.tensor_name,
                "tensor_bytes": s.tensor_bytes, "origin": s.inputs_determined,
                "unwritten_bytes": _count(s.unwritten), "unwritten": _ranges_json(s.unwritten),
                "stale_read_bytes": _count(s.stale_read), "stale_read": _ranges_json(s.stale_read),
                "fix": s.fix,
            } for s in self.operators],
        }


def check_stale(graph: Graph, inputs: list[np.ndarray] | None = None) -> StaleReport:
    """Run the check on `graph`, on `inputs` (default: `oracle.random_inputs`)."""
    fixture = _Fixture.of(graph)
    inputs = oracle.random_inputs(graph) if inputs is None else inputs
    rng = np.random.default_rng(FILL_SEED)
    fills = {
        "0x00": np.zeros(fixture.fill_bytes, np.uint8),
        "0xff": np.full(fixture.fill_bytes, 0xFF, np.uint8),
        "0x7f": np.full(fixture.fill_bytes, 0x7F, np.uint8),
        "0x80": np.full(fixture.fill_bytes, 0x80, np.uint8),
        "random": rng.integers(0, 256, fixture.fill_bytes, dtype=np.uint8),
    }
    # One interpreter, reset before each fill so that variable tensors start from zero every time.
    sequence = oracle.run_sequence(fixture.model, [[fill.view(np.int8), *inputs] for fill in fills.values()],
                                   graph.path, frozenset(range(len(fills))), fixture.fill_bytes + _TAIL_ROOM)
    runs = {name: [np.frombuffer(a.tobytes(), np.uint8) for a in outputs]
            for name, outputs in zip(fills, sequence)}

    def unsettled(position: int, offset: int) -> tuple[np.ndarray, np.ndarray]:
        """(undetermined, unwritten) bytes of the fixture's output at `position`, planned at `offset`."""
        first = runs[FILLS[0]][position]
        differs = np.zeros(first.size, bool)
        kept_fill = np.ones(first.size, bool)
        for name in FILLS:
            differs |= runs[name][position] != first
            kept_fill &= runs[name][position] == fills[name][offset:offset + first.size]
        return differs, differs & kept_fill

    sg = graph.main
    undetermined: dict[int, np.ndarray] = {}
    operators = []
    for op in sg.operators:
        found = []
        for t in op.outputs:
            if t < 0 or t not in fixture.output_positions:
                continue
            differs, unwritten = unsettled(fixture.output_positions[t], fixture.offsets[t])
            undetermined[t] = differs
            if differs.any():
                found.append((t, differs, unwritten))
        inputs_determined = not any(undetermined.get(t, np.zeros(0, bool)).any() for t in op.inputs if t >= 0)
        for t, differs, unwritten in found:
            tensor = sg.tensors[t]
            fix = _deterministic_rewrite(graph, op, unwritten) if inputs_determined else None
            operators.append(StaleOperator(op.index, op.opcode, t, tensor.name, tensor.nbytes, _ranges(unwritten),
                                           _ranges(differs & ~unwritten), inputs_determined, fix))
    masks = []
    for position, t in enumerate(sg.outputs):
        differs = undetermined.get(t)
        masks.append(~differs if differs is not None else np.ones(runs[FILLS[0]][position].size, bool))
    return StaleReport(tuple(operators), tuple(masks), FILLS)


def _deterministic_rewrite(graph: Graph, op: Operator, unwritten: np.ndarray) -> str | None:
    """BATCH_TO_SPACE_ND writes output row `in_h * block + offset - crop_top` (columns likewise) for every input
    row, and nothing else: a declared output larger than that leaves the rest unwritten. Declaring the covered
    shape and padding it back with PAD (which writes the zero point) keeps every determined byte and fixes the
    others. Offered only when exactly the positions outside the covered shape were found unwritten."""
    sg = graph.main
    if op.opcode != "BATCH_TO_SPACE_ND" or len(sg.tensors[op.inputs[0]].shape) != 4:
        return None
    block, crops = graph.constant_array(op.inputs[1]), graph.constant_array(op.inputs[2])
    if block is None or crops is None or block.shape != (2,) or crops.shape != (2, 2):
        return None
    _, in_h, in_w, _ = sg.tensors[op.inputs[0]].shape
    out = sg.tensors[op.outputs[0]]
    n, h, w, c = out.shape
    covered = (min(h, in_h * int(block[0]) - int(crops[0][0])), min(w, in_w * int(block[1]) - int(crops[1][0])))
    outside = np.ones((n, h, w, c * out.nbytes // max(n * h * w * c, 1)), bool)
    outside[:, :covered[0], :covered[1], :] = False
    if not outside.any() or not np.array_equal(outside.reshape(-1), unwritten):
        return None
    return (f"declare its output {(n, *covered, c)} (what its input covers) and PAD it to {(n, h, w, c)} after: "
            "PAD writes the zero point where nothing was written, every other byte stays bit-identical")


@dataclass(frozen=True)
class _Fixture:
    model: bytes
    fill_bytes: int  # size of the filling input: the whole head
    offsets: dict[int, int]  # main-subgraph tensor -> its offset in the head
    output_positions: dict[int, int]  # main-subgraph tensor -> its position among the fixture's outputs

    @classmethod
    def of(cls, graph: Graph) -> _Fixture:
        scratch = max((sum(scratch_sizes(graph, sg.index, op.index)) for sg in graph.subgraphs
                       for op in sg.operators), default=0)
        offset = align_up(scratch)
        offsets: dict[tuple[int, int], int] = {}
        for sg in graph.subgraphs:
            for t in sg.tensors:
                if t.planned:
                    offsets[(sg.index, t.index)] = offset
                    offset += align_up(t.nbytes)
        offset = max(offset, ALIGNMENT)  # the filler needs one byte at least, even with nothing to fill
        raw = copy.deepcopy(graph.raw)
        main = raw.subgraphs[0]
        filler = fb.TensorT()
        filler.name, filler.shape, filler.type = "lowtide_arena_fill", [offset], fb.TensorType.INT8
        empty = fb.BufferT()
        raw.buffers.append(empty)
        filler.buffer = len(raw.buffers) - 1
        main.tensors.append(filler)
        filler_index = len(main.tensors) - 1
        # The filler is set first (input 0), so the real inputs, set after it, overwrite their share of the fill.
        main.inputs = [filler_index, *_indices(main.inputs)]
        outputs = _indices(main.outputs)
        written = [t for op in graph.main.operators for t in op.outputs
                   if t >= 0 and graph.main.tensors[t].planned and t not in outputs]
        main.outputs = outputs + list(dict.fromkeys(written))
        counts = list(graph.tensor_counts)
        counts[0] += 1
        set_offline_plan(raw, OfflinePlan.from_offsets(counts, {**offsets, (0, filler_index): 0}))
        model = model_bytes(raw)
        read_model(model, graph.path)  # the copy must parse as the original did
        main_offsets = {t: o for (sg, t), o in offsets.items() if sg == 0}
        positions = {}
        for position, t in enumerate(main.outputs):
            positions.setdefault(t, position)
        return cls(model, offset, main_offsets, {t: p for t, p in positions.items() if t in main_offsets})


def _indices(vector) -> list[int]:
    """A ModelT index vector (None, a list or a numpy array, whose truth value is not its length) as a list."""
    return [] if vector is None else [int(i) for i in vector]


def _ranges(mask: np.ndarray) -> ByteRanges:
    """The runs of True in `mask` as [start, end) pairs."""
    padded = np.concatenate(([False], mask, [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return tuple((int(a), int(b)) for a, b in zip(edges[::2], edges[1::2]))


def _count(ranges: ByteRanges) -> int:
    return sum(end - start for start, end in ranges)


def _ranges_json(ranges: ByteRanges) -> list[list[int]]:
    return [[start, end] for start, end in ranges]
