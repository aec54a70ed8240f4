"""Stale memory observed on the host TFLM: the bytes of each tensor that change with what the arena held.

The check runs a copy of the model made for it, never the user's: every planned tensor gets bytes of its own (an
offline plan in which nothing shares memory, so no tensor is overwritten once written: the plan-independent
reference), every tensor of the main subgraph becomes a model output (so it can be read after the invoke), and
one extra model input, read by no operator, is planned over the whole head. That input lives only in scope 0,
before the first operator, so TFLM lets every other buffer overlap it, and setting it fills the arena. Kernel
scratch buffers, which cannot be planned offline, fit at the start of the head, which the tensors leave free.

The copy runs on the same inputs under several fills (zero bytes, 0xFF bytes, seeded random bytes). A byte that
differs between runs depends on stale memory: that is proof. One that equals the fill at its own address in
every run was never written: a sound detector of "not written", since a written byte cannot follow five fills.
Equal bytes under every fill prove nothing (a byte computed from stale memory can come out the same whatever the
fill: a saturated sum, a softmax): independence is for `lowtide.stale.dependence` to prove.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lowtide import oracle
from lowtide.memory.lifetimes import ALIGNMENT, align_up
from lowtide.memory.scratch import scratch_sizes
from lowtide.model.edit import GraphEditor, with_offline_plan
from lowtide.model.ir import Graph
from lowtide.model.offline_memory import OfflinePlan
from lowtide.settings import Settings

FILLS = ("0x00", "0xff", "0x7f", "0x80", "random")
FILL_SEED = 20190601
# Room for TFLM's persistent tail beside the filled head.
_TAIL_ROOM = 64 << 20


@dataclass(frozen=True)
class Observation:
    """What the fill runs showed of one tensor's bytes."""

    differs: np.ndarray  # bool per byte: not the same under every fill, so it depends on stale memory
    kept_fill: np.ndarray  # bool per byte: equal to the fill at its own address under every fill


def observe(graph: Graph, inputs: list[np.ndarray], settings: Settings) -> dict[int, Observation]:
    """The fill runs on `inputs`: an observation per main-subgraph tensor an operator writes and TFLM plans."""
    fixture = Fixture.of(graph)
    rng = np.random.default_rng(FILL_SEED)
    fills = {
        "0x00": np.zeros(fixture.fill_bytes, np.uint8),
        "0xff": np.full(fixture.fill_bytes, 0xFF, np.uint8),
        "0x7f": np.full(fixture.fill_bytes, 0x7F, np.uint8),
        "0x80": np.full(fixture.fill_bytes, 0x80, np.uint8),
        "random": rng.integers(0, 256, fixture.fill_bytes, dtype=np.uint8),
    }
    runs = dict(zip(fills, fixture.run(graph, [(fill, inputs) for fill in fills.values()], settings)))
    observed = {}
    for t, offset in fixture.offsets.items():
        if t not in runs[FILLS[0]]:
            continue
        first = runs[FILLS[0]][t]
        differs = np.zeros(first.size, bool)
        kept_fill = np.ones(first.size, bool)
        for name in FILLS:
            differs |= runs[name][t] != first
            kept_fill &= runs[name][t] == fills[name][offset : offset + first.size]
        observed[t] = Observation(differs, kept_fill)
    return observed


@dataclass(frozen=True)
class Fixture:
    """The copy of a model the check runs: no two tensors share bytes, every main-subgraph tensor an output,
    and the arena filled through an extra input (see the module's docstring)."""

    model: bytes
    fill_bytes: int  # size of the filling input: the whole head
    offsets: dict[int, int]  # main-subgraph tensor -> its offset in the head
    output_positions: dict[int, int]  # main-subgraph tensor -> its position among the fixture's outputs

    def run(
        self, graph: Graph, runs: list[tuple[np.ndarray, list[np.ndarray]]], settings: Settings
    ) -> list[dict[int, np.ndarray]]:
        """One interpreter invoked once per (fill of `fill_bytes` bytes, model inputs), reset before each so that
        variable tensors start from zero every time: the bytes of every planned tensor an operator writes."""
        sequence = oracle.run_sequence(
            self.model,
            [[fill.view(np.int8), *inputs] for fill, inputs in runs],
            graph.name,
            frozenset(range(len(runs))),
            self.fill_bytes + _TAIL_ROOM,
            settings,
        )
        return [
            {t: np.frombuffer(outputs[p].tobytes(), np.uint8) for t, p in self.output_positions.items()}
            for outputs in sequence
        ]

    @classmethod
    def of(cls, graph: Graph) -> Fixture:
        scratch = max(
            (sum(scratch_sizes(graph, sg.index, op.index)) for sg in graph.subgraphs for op in sg.operators), default=0
        )
        offset = align_up(scratch)
        offsets: dict[tuple[int, int], int] = {}
        for sg in graph.subgraphs:
            for t in sg.tensors:
                if t.planned:
                    offsets[(sg.index, t.index)] = offset
                    offset += align_up(t.nbytes)
        offset = max(offset, ALIGNMENT)  # the filler needs one byte at least, even with nothing to fill
        editor = GraphEditor(graph)
        # An activation with a buffer of its own (no data), as the converter gives every tensor.
        filler_index = editor.tensor("lowtide_arena_fill", [offset], "int8", data=np.zeros(0, np.int8))
        main = graph.main
        written = [t for op in main.operators for t in op.outputs if t >= 0 and main.tensors[t].planned]
        # The filler is set first (input 0), so the real inputs, set after it, overwrite their share of the fill.
        inputs = [filler_index, *main.inputs]
        outputs = [*main.outputs, *(t for t in dict.fromkeys(written) if t not in main.outputs)]
        filled = editor.finish([editor.original(op.index) for op in main.operators], inputs, outputs, prune=False)
        counts = list(graph.tensor_counts)
        counts[0] += 1
        model = with_offline_plan(filled, OfflinePlan.from_offsets(counts, {**offsets, (0, filler_index): 0})).data
        main_offsets = {t: o for (sg, t), o in offsets.items() if sg == 0}
        positions: dict[int, int] = {}
        for position, output in enumerate(outputs):
            positions.setdefault(output, position)
        return cls(model, offset, main_offsets, {t: p for t, p in positions.items() if t in main_offsets})
