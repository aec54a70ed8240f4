"""Stale memory proven: which bytes of each tensor depend on memory a kernel leaves unwritten or reads before
writing, from where it starts (geometry, and the host TFLM's fill runs) through every operator's data dependence.

Origins: the elements an operator never writes by its geometry (`dependence`, BATCH_TO_SPACE_ND), the elements the
fill runs found never written, and the elements the fill runs found depending on stale memory that its inputs'
dependence does not explain (a kernel that reads memory before writing it). The fills can miss an origin whose
bytes come out the same under every fill; what they find is always one.

Propagation: each operator's rule (`dependence.propagate`) marks every output element that may read a marked
input element. A byte is reported independent only if the analysis proves it: no chain of reads from any origin
reaches it. The fill runs must then show nothing the analysis does not: every byte they see differ is marked.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lowtide import oracle
from lowtide.model.ir import Graph, Operator, TensorKind
from lowtide.settings import Settings, settings_or_read
from lowtide.stale.dependence import element_shape, propagate
from lowtide.stale.fills import FILLS, Observation, observe

ByteRanges = tuple[tuple[int, int], ...]  # [start, end) byte offsets inside one tensor


@dataclass(frozen=True)
class StaleOperator:
    """One output tensor of a main-subgraph operator with bytes that may depend on stale memory."""

    op: int  # operator index in the main subgraph's stored order
    opcode: str
    tensor: int  # its output tensor
    tensor_name: str
    tensor_bytes: int
    unwritten: ByteRanges  # bytes the operator never writes: they keep whatever was in the arena
    stale_read: ByteRanges  # the other bytes that may depend on stale memory: computed from it
    own: ByteRanges  # bytes the operator itself makes stale (unwritten, or read stale memory), not its inputs
    observed: ByteRanges  # bytes the fill runs saw differ: a subset of unwritten and stale_read
    inputs_determined: bool  # no input byte depends on stale memory
    fix: str | None = None  # a rewrite that makes it deterministic, bit-identical on the independent bytes

    @property
    def origin(self) -> bool:
        return bool(self.own)

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
    operators: tuple[StaleOperator, ...]  # every main-subgraph output tensor with dependent bytes, in run order
    output_determined: tuple[np.ndarray, ...]  # per model output: bool per byte, True where proven independent
    output_observed: tuple[np.ndarray, ...]  # per model output: bool per byte, True where the fill runs differed
    fills: tuple[str, ...]

    @property
    def clean(self) -> bool:
        return not self.operators and all(mask.all() for mask in self.output_determined)

    @property
    def origins(self) -> tuple[StaleOperator, ...]:
        return tuple(s for s in self.operators if s.origin)

    @property
    def independent_ranges(self) -> tuple[ByteRanges, ...]:
        """Per model output: the byte ranges proven independent of stale memory."""
        return tuple(_ranges(mask) for mask in self.output_determined)

    @property
    def undetermined_output_bytes(self) -> int:
        return int(sum((~mask).sum() for mask in self.output_determined))

    @property
    def observed_output_bytes(self) -> int:
        return int(sum(mask.sum() for mask in self.output_observed))

    @property
    def output_bytes(self) -> int:
        return int(sum(mask.size for mask in self.output_determined))

    @property
    def outputs_undefined(self) -> bool:
        """Every output byte depends on stale memory: no plan's outputs can be compared with the model's."""
        return self.output_bytes > 0 and self.undetermined_output_bytes == self.output_bytes

    def summary(self) -> str:
        if self.clean:
            return "no operator reads or leaves stale memory: outputs are the same whatever the arena held"
        origins = "; ".join(s.describe() for s in self.origins) or "; ".join(s.describe() for s in self.operators)
        share = (
            f"all {self.output_bytes:,} output bytes depend"
            if self.outputs_undefined
            else f"{self.undetermined_output_bytes:,} of {self.output_bytes:,} output bytes depend"
        )
        return (
            f"{share} on stale memory (by analysis; the fill runs saw {self.observed_output_bytes:,} change): {origins}"
        )

    def to_json(self) -> dict:
        return {
            "clean": self.clean,
            "proof": "analysis",  # independent bytes are proven, not sampled
            "fills": list(self.fills),
            "output_bytes": self.output_bytes,
            "undetermined_output_bytes": self.undetermined_output_bytes,
            "independent_output_bytes": self.output_bytes - self.undetermined_output_bytes,
            "observed_output_bytes": self.observed_output_bytes,
            "outputs_undefined": self.outputs_undefined,
            "outputs": [
                {
                    "index": i,
                    "bytes": int(m.size),
                    "undetermined": _ranges_json(_ranges(~m)),
                    "independent": _ranges_json(independent),
                    "observed": _ranges_json(_ranges(seen)),
                }
                for i, (m, independent, seen) in enumerate(
                    zip(self.output_determined, self.independent_ranges, self.output_observed)
                )
            ],
            "operators": [
                {
                    "index": s.op,
                    "opcode": s.opcode,
                    "tensor": s.tensor,
                    "tensor_name": s.tensor_name,
                    "tensor_bytes": s.tensor_bytes,
                    "origin": s.origin,
                    "inputs_determined": s.inputs_determined,
                    "unwritten_bytes": _count(s.unwritten),
                    "unwritten": _ranges_json(s.unwritten),
                    "stale_read_bytes": _count(s.stale_read),
                    "stale_read": _ranges_json(s.stale_read),
                    "own_bytes": _count(s.own),
                    "own": _ranges_json(s.own),
                    "observed_bytes": _count(s.observed),
                    "observed": _ranges_json(s.observed),
                    "fix": s.fix,
                }
                for s in self.operators
            ],
        }


def check_stale(graph: Graph, inputs: list[np.ndarray] | None = None, settings: Settings | None = None) -> StaleReport:
    """Prove which bytes of `graph`'s outputs depend on stale memory; the fill runs use `inputs` (default:
    `oracle.random_inputs`)."""
    observed = observe(graph, oracle.random_inputs(graph) if inputs is None else inputs, settings_or_read(settings))
    # State that outlives an invocation carries stale bytes into the next one, to operators before the one that
    # wrote it: follow the graph again with that state marked until nothing more is.
    state = _State(frozenset(), False)
    while True:
        followed = _follow(graph, observed, state)
        grown = _stale_state(graph, followed[1], state)
        if grown == state:
            return followed[0]
        state = grown


@dataclass(frozen=True)
class _State:
    variables: frozenset[int]  # variable tensors (SVDF's, LSTM's state) an operator updates from marked inputs
    resources: bool  # an ASSIGN_VARIABLE stores a marked value: every READ_VARIABLE may read it


def _stale_state(graph: Graph, masks: dict[int, np.ndarray], state: _State) -> _State:
    sg = graph.main
    variables, resources = set(state.variables), state.resources
    for op in sg.operators:
        if any(masks[t].any() for t in op.inputs if t in masks):
            variables |= {t for t in op.inputs if t >= 0 and sg.tensors[t].kind is TensorKind.VARIABLE}
            resources |= op.opcode == "ASSIGN_VARIABLE"
    return _State(frozenset(variables), resources)


def _follow(graph: Graph, observed: dict[int, Observation], state: _State) -> tuple[StaleReport, dict[int, np.ndarray]]:
    """One pass over the operators in stored order: the report, and every tensor's mask."""
    sg = graph.main
    masks: dict[int, np.ndarray] = {t: np.ones(element_shape(graph, t), bool) for t in state.variables}
    seen: dict[int, np.ndarray] = {}  # tensor -> bool per byte: the fill runs saw it differ
    operators = []
    for op in sg.operators:
        inputs_determined = not any(masks[t].any() for t in op.inputs if t in masks)
        outputs = [t for t in op.outputs if t >= 0]
        for t, flow in zip(outputs, propagate(graph, op, masks)):
            itemsize = sg.tensors[t].nbytes // max(flow.dependent.size, 1)
            differs, kept_fill = _elements(observed.get(t), flow.dependent.shape, itemsize)
            unwritten = flow.unwritten | (differs & kept_fill)
            own = unwritten | (differs & ~flow.dependent)
            masks[t] = flow.dependent | own | (state.resources and op.opcode == "READ_VARIABLE")
            seen[t] = _bytes(differs, itemsize)
            if not masks[t].any():
                continue
            tensor = sg.tensors[t]
            fix = _deterministic_rewrite(graph, op, own) if own.any() else None
            operators.append(
                StaleOperator(
                    op.index,
                    op.opcode,
                    t,
                    tensor.name,
                    tensor.nbytes,
                    _ranges(_bytes(unwritten, itemsize)),
                    _ranges(_bytes(masks[t] & ~unwritten, itemsize)),
                    _ranges(_bytes(own, itemsize)),
                    _ranges(seen[t]),
                    inputs_determined,
                    fix,
                )
            )
    determined, observed_outputs = [], []
    for t in sg.outputs:
        nbytes = sg.tensors[t].nbytes
        mask = masks.get(t)
        determined.append(np.ones(nbytes, bool) if mask is None else ~_bytes(mask, nbytes // max(mask.size, 1)))
        observed_outputs.append(seen.get(t, np.zeros(nbytes, bool)))
    return StaleReport(tuple(operators), tuple(determined), tuple(observed_outputs), FILLS), masks


def _bytes(mask: np.ndarray, itemsize: int) -> np.ndarray:
    """A mask per element as a mask per byte."""
    return np.repeat(mask.reshape(-1), itemsize)


def _elements(seen: Observation | None, shape: tuple[int, ...], itemsize: int) -> tuple[np.ndarray, np.ndarray]:
    """(differs, kept fill) per element: an element differs if any of its bytes does, and kept the fill if each
    of its bytes did; nothing for a tensor the fill runs did not read."""
    if seen is None or seen.differs.size != int(np.prod(shape)) * itemsize:
        return np.zeros(shape, bool), np.zeros(shape, bool)
    return (
        np.asarray(seen.differs.reshape(*shape, itemsize).any(axis=-1)),
        np.asarray(seen.kept_fill.reshape(*shape, itemsize).all(axis=-1)),
    )


def _deterministic_rewrite(graph: Graph, op: Operator, own: np.ndarray) -> str | None:
    """BATCH_TO_SPACE_ND writes output row `in_h * block + offset - crop_top` (columns likewise) for every input
    row, and nothing else: a declared output larger than that leaves the rest unwritten. Declaring the covered
    shape and padding it back with PAD (which writes the zero point) keeps every independent byte and fixes the
    others. Offered only when what the operator itself makes stale is exactly the positions outside the covered
    shape."""
    sg = graph.main
    if op.opcode != "BATCH_TO_SPACE_ND" or len(sg.tensors[op.inputs[0]].shape) != 4 or own.ndim != 4:
        return None
    block, crops = graph.constant_array(op.inputs[1]), graph.constant_array(op.inputs[2])
    if block is None or crops is None or block.shape != (2,) or crops.shape != (2, 2):
        return None
    _, in_h, in_w, _ = sg.tensors[op.inputs[0]].shape
    n, h, w, c = own.shape
    covered = (min(h, in_h * int(block[0]) - int(crops[0][0])), min(w, in_w * int(block[1]) - int(crops[1][0])))
    outside = np.ones(own.shape, bool)
    outside[:, : covered[0], : covered[1], :] = False
    if not outside.any() or not np.array_equal(outside, own):
        return None
    return (
        f"declare its output {(n, *covered, c)} (what its input covers) and PAD it to {(n, h, w, c)} after: "
        "PAD writes the zero point where nothing was written, every other byte stays bit-identical"
    )


def _ranges(mask: np.ndarray) -> ByteRanges:
    """The runs of True in `mask` as [start, end) pairs."""
    padded = np.concatenate(([False], mask, [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return tuple((int(a), int(b)) for a, b in zip(edges[::2], edges[1::2]))


def _count(ranges: ByteRanges) -> int:
    return sum(end - start for start, end in ranges)


def _ranges_json(ranges: ByteRanges) -> list[list[int]]:
    return [[start, end] for start, end in ranges]
