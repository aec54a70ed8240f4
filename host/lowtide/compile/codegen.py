"""Generate plain C99 for one model: `<prefix>.h` (the API) and `<prefix>.c` (weights, parameters, `invoke`).

Activations live where lowtide's plan for the compiled runtime puts them: each PAD a fast convolution can absorb is fused into it, outputs the compiled kernels may write over a dying input share its bytes
(`lowtide.memory.in_place`, `Executor.COMPILED`), and the placement heuristics of `lowtide.memory.placement` lay
the buffers out. The fast kernels' int16 scratch (im2col rows, a depthwise channel's plane) is a buffer of the
arena too, live while its operator runs, so the arena is all the RAM the generated code writes besides the state
of stateful models. Where that plan is not smaller than TFLM's own tensor offsets (the model's
OfflineMemoryAllocation plan where it has one, else the greedy planner replica) with the scratch fitted around
them, TFLM's offsets are used.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lowtide.compile.banks import DataRegion, RegionArena, split_arena
from lowtide.compile.lowering import (
    STATE_OBJECT,
    ModelEmitter,
    StateMember,
    Unsupported,
    c_float,
    lower_operator,
)
from lowtide.compile.lowering.conv import pad_fusions
from lowtide.compile.lowering.emitter import PadFusion, RingGuest
from lowtide.compile.rows import DEFAULT_MAX_ROW_OVERHEAD, RowChain, RowPlan, RowRefusal, find_row_chains
from lowtide.errors import LowtideError
from lowtide.memory import Buffer, Executor, align_up, arena_head, buffers_to_plan, tflm_plan
from lowtide.memory.placement import Placement, place, placement_budget, tflm_offsets_with_plan
from lowtide.model import Graph
from lowtide.model.ir import TensorKind
from lowtide.storage import replacing

LT_TYPE_NAMES = {
    "float32": "LT_FLOAT32",
    "int32": "LT_INT32",
    "uint8": "LT_UINT8",
    "bool": "LT_BOOL",
    "int16": "LT_INT16",
    "int8": "LT_INT8",
}


@dataclass(frozen=True)
class IoTensor:
    """A model input or output as the generated header describes it."""

    index: int  # tensor index in the main subgraph
    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int  # bytes from the start of the arena (of its region's, compiled for memory regions)
    region: str | None  # the memory region whose arena holds it; None: compiled for no regions
    nbytes: int
    scale: float
    zero_point: int


@dataclass(frozen=True)
class CompiledModel:
    model: str  # the compiled model's source, for messages (`Graph.source`)
    prefix: str
    files: dict[str, str]  # file name -> C source
    arena_bytes: int  # the arena head the generated code needs (caller-provided, 16-byte aligned)
    fixed_state_bytes: int  # mutable globals: the static struct of variable tensors (0 without any)
    operator_count: int
    inputs: tuple[IoTensor, ...]
    outputs: tuple[IoTensor, ...]
    model_hash: str  # first 8 bytes of the model file's sha256, hex
    row_chains: tuple[RowChain, ...]  # operators run a row at a time (`lowtide.compile.rows`)
    row_refusals: tuple[RowRefusal, ...]  # where a chain was not formed, and why
    region_arenas: tuple[RegionArena, ...]  # compiled for memory regions: the arena of each region used (the first
    # is the caller's, `arena_bytes`); empty: one arena, wherever the caller puts it

    @property
    def total_arena_bytes(self) -> int:
        return sum(a.head_bytes for a in self.region_arenas) if self.region_arenas else self.arena_bytes

    def write(self, directory: str | Path) -> list[Path]:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        written = []
        for name, text in self.files.items():
            path = directory / name
            with replacing(path) as temporary:
                temporary.write_text(text)
            written.append(path)
        return written


@dataclass(frozen=True)
class Blocker:
    """One thing that keeps a model from compiling: an operator (with its index and types) or the graph."""

    op_index: int | None  # None: the graph itself (a subgraph, a model input or output)
    opcode: str
    input_types: tuple[str, ...]  # "-" for an omitted optional input
    output_types: tuple[str, ...]
    reason: str

    def __str__(self) -> str:
        if self.op_index is None:
            return self.reason
        return (
            f"operator {self.op_index} ({self.opcode} {', '.join(self.input_types)} -> "
            f"{', '.join(self.output_types)}): {self.reason}"
        )


@dataclass(frozen=True)
class ArenaPlan:
    """Where the generated code keeps its activations and its kernels' scratch: everything it writes but state."""

    offsets: dict[int, int]  # main-subgraph tensor -> arena offset
    scratch: dict[int, list[int]]  # operator -> arena offsets of its kernel scratch buffers (TFLM's requests)
    fast_scratch: dict[int, int]  # operator -> arena offset of its fast kernel's int16 scratch
    fast_scratch_bytes: dict[int, int]  # operator -> bytes of that scratch
    head_bytes: int
    fused_pads: dict[int, PadFusion]  # depthwise operator -> the PAD it absorbs
    in_place: bool  # lowtide's compiled-runtime plan; False: TFLM's tensor offsets
    wide_weights: frozenset[int]  # CONV_2D layers whose filter is stored as int16 (`wide_weight_layers`)
    wide_weight_bytes: int  # the flash those filters take beyond their int8 size
    rows: RowPlan  # the row chains the generated code runs (none where TFLM's offsets are used) and the refusals
    buffers: tuple[Buffer, ...]  # everything placed, in the plan's order (what lowtide.compile.banks splits)
    fast_count: int  # how many of `buffers`, the last ones, are the fast kernels' scratch

    @property
    def ring_rows(self) -> dict[int, int]:
        return {t: rows for chain in self.rows.chains for t, rows in chain.ring_rows}

    @property
    def ring_guests(self) -> dict[int, RingGuest]:
        return {g.tensor: g for chain in self.rows.chains for g in chain.guests}


# Flash the compiled model may spend beyond its int8 weights on int16 filters (lt_matmul_2_w16 needs no SXTB16
# in its loop: 12 instead of 16 instructions per 16 products). The MLPerf Tiny models widen all their layers
# within it; a large model widens the layers with the most output pixels (most products per filter byte).
WIDE_WEIGHTS_BUDGET_BYTES = 128 * 1024


def wide_weight_layers(matrix_layers: dict[int, tuple[int, int]]) -> tuple[frozenset[int], int]:
    """The matrix layers (operator -> (output pixels, int8 filter bytes)) to widen, most pixels first (then the
    earliest), each while the added bytes stay within WIDE_WEIGHTS_BUDGET_BYTES, and the bytes added."""
    chosen, added = set(), 0
    for op, (pixels, nbytes) in sorted(matrix_layers.items(), key=lambda item: (-item[1][0], item[0])):
        if pixels > 1 and added + nbytes <= WIDE_WEIGHTS_BUDGET_BYTES:
            chosen.add(op)
            added += nbytes
    return frozenset(chosen), added


# Operators that may lower to a fast kernel of lt_conv_dsp.h (`_fast_int8` in lowering/conv.py)
_FAST_CANDIDATES = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"})


def _fast_kernels(
    graph: Graph,
    fused_pads: dict[int, PadFusion] | None = None,
    row_ops: frozenset[int] = frozenset(),
    one_row_ops: frozenset[int] = frozenset(),
) -> ModelEmitter:
    """An emitter that lowered every operator that may run a fast kernel, at made-up offsets: its `in_place_safe`
    names the depthwise convolutions the fast kernel runs (which may run in place and absorb a PAD), its
    `fast_scratch_bytes` the int16 scratch each fast layer needs while it runs (`row_ops`: a row's, `one_row_ops`
    one row of all the pixels), its
    `fast_rows` the layers a row kernel can run."""
    offsets = {t.index: 0 for t in graph.main.tensors if t.kind is TensorKind.ACTIVATION}
    probe = ModelEmitter(graph, offsets, fused_pads=fused_pads, row_ops=row_ops, one_row_ops=one_row_ops)
    for op in graph.main.operators:
        if op.opcode in _FAST_CANDIDATES:
            try:
                lower_operator(probe, op)
            except Unsupported:
                pass
    return probe


def _planning_view(graph: Graph, fusions: dict[int, PadFusion]) -> Graph:
    """`graph` as the generated code runs it: each fused PAD reads and writes nothing, its depthwise reads the PAD's input."""
    operators = list(graph.main.operators)
    for dw, fusion in fusions.items():
        operators[fusion.pad_op] = dataclasses.replace(operators[fusion.pad_op], inputs=(), outputs=())
        operators[dw] = dataclasses.replace(operators[dw], inputs=(fusion.source, *operators[dw].inputs[1:]))
    main = dataclasses.replace(graph.main, operators=tuple(operators))
    return dataclasses.replace(graph, subgraphs=(main, *graph.subgraphs[1:]))


def _split(
    buffers: Sequence[Buffer], offsets: Sequence[int], fast_count: int, chains: Sequence[RowChain] = ()
) -> tuple[dict[int, int], dict[int, list[int]], dict[int, int]]:
    """Tensor offsets, TFLM scratch offsets by operator, and fast-kernel scratch offsets by operator, from a plan
    whose last `fast_count` buffers are the fast kernels' scratch; the guests of `chains`' rings, which have no
    buffer, at their host's offset (in its slots)."""
    split = len(buffers) - fast_count
    tensors = {b.tensor: off for b, off in zip(buffers, offsets) if b.subgraph == 0 and b.tensor is not None}
    tensors.update({g.tensor: tensors[g.host] for chain in chains for g in chain.guests})
    scratch: dict[int, list[int]] = {}
    for b, off in zip(buffers[:split], offsets[:split]):
        if b.subgraph == 0 and b.tensor is None and b.op is not None:  # a scratch buffer names its operator
            scratch.setdefault(b.op, []).append(off)
    fast = {b.op: off for b, off in zip(buffers[split:], offsets[split:]) if b.op is not None}
    return tensors, scratch, fast


def arena_plan(
    graph: Graph,
    keep_model_plan: bool = False,
    row_chains: bool = True,
    max_row_overhead: float = DEFAULT_MAX_ROW_OVERHEAD,
    wide_weights: bool = True,
) -> ArenaPlan:
    """The compiled runtime's plan (module docstring), or TFLM's tensor offsets where that is no larger. The fast
    kernels' scratch is planned in both, live only while its operator runs; TFLM's greedy planner fits it around
    the tensors, as it does its own kernels' scratch. `keep_model_plan`: TFLM's offsets in any case, so a model's
    OfflineMemoryAllocation is used as it is (in-place cases the compiled plan has no rule for included).
    `row_chains`: run the row chains `lowtide.compile.rows` finds, where that makes the arena smaller, none whose
    estimated instructions grow by more than the fraction `max_row_overhead`. `wide_weights`: widen filters to
    int16 (`wide_weight_layers`); False keeps them int8, which the Helium kernels multiply sixteen lanes at a time
    (lt_mve_conv.h) where int16 would halve that."""
    stock = tflm_plan(graph)
    probe = _fast_kernels(graph)
    scopes = {s.op: s.scope for s in stock.steps if s.subgraph == 0}
    # convolutions whose fast kernel pads its window with the input zero point: a PAD by that value before one
    # is absorbed (the depthwise planes and the im2col rows fill padding so)
    absorbing = probe.in_place_safe | {
        op for op in probe.matrix_layers if graph.main.operators[op].opcode != "FULLY_CONNECTED"
    }
    fusions = pad_fusions(ModelEmitter(graph, {}), absorbing - probe.whole_input)
    view = _planning_view(graph, fusions)
    stock_scratch = _fast_scratch(probe.fast_scratch_bytes, scopes)
    stock_buffers = list(stock.buffers) + stock_scratch
    stock_offsets = tflm_offsets_with_plan(stock_buffers, list(stock.offsets) + [0] * len(stock_scratch))
    stock_head = arena_head(stock_buffers, stock_offsets)
    wide = wide_weight_layers(probe.matrix_layers) if wide_weights else (frozenset[int](), 0)
    fused = _fast_kernels(graph, fusions)  # the scratch of layers that absorb a PAD is theirs with it
    whole = _compiled_plan(view, fused, fusions, scopes, RowPlan((), ()), keep_model_plan)
    plan = whole
    refused: tuple[RowRefusal, ...] = ()
    if row_chains and plan is not None:
        row_probe = _fast_kernels(graph, fusions, frozenset(probe.fast_rows))
        # lone depthwise layers whole in place (fewer instructions) where that plans no larger, else by rows
        for whole_depthwise in (True, False):
            rows = find_row_chains(
                row_probe,
                view.main.consumers(),
                frozenset(probe.fast_rows),
                row_probe.fast_scratch_bytes,
                whole_depthwise,
                max_row_overhead,
            )
            if not rows.chains:
                continue
            chained = _fast_kernels(graph, fusions, rows.row_ops, rows.one_row_ops)
            candidate = _compiled_plan(view, chained, fusions, scopes, rows, False)
            if candidate is not None and candidate[0].head_bytes < plan[0].head_bytes:
                plan, refused = candidate, rows.refusals
        if plan is whole:
            refused = rows.refusals + tuple(
                RowRefusal(c.ops, "the arena is no smaller with this chain") for c in rows.chains
            )
        else:
            plan, refused = _without_idle_chains(graph, view, fusions, scopes, plan, refused)
    if plan is None or plan[0].head_bytes >= stock_head:
        split = _split(stock_buffers, stock_offsets, len(stock_scratch))
        no_rows = RowPlan((), refused)
        return ArenaPlan(
            *split,
            probe.fast_scratch_bytes,
            stock_head,
            {},
            False,
            *wide,
            no_rows,
            tuple(stock_buffers),
            len(stock_scratch),
        )
    placement, buffers, scratch_bytes, rows, scratch_count = plan
    tensors, scratch, fast = _split(buffers, placement.offsets, scratch_count, rows.chains)
    split = tensors, scratch, _chain_scratch(fast, scratch_bytes, rows.chains)
    return ArenaPlan(
        *split,
        scratch_bytes,
        placement.head_bytes,
        fusions,
        True,
        *wide,
        RowPlan(rows.chains, refused),
        tuple(buffers),
        scratch_count,
    )


def _without_idle_chains(
    graph: Graph,
    view: Graph,
    fusions: dict[int, PadFusion],
    scopes: dict[int, int],
    plan: tuple[Placement, list[Buffer], dict[int, int], RowPlan, int],
    refused: tuple[RowRefusal, ...],
) -> tuple[tuple[Placement, list[Buffer], dict[int, int], RowPlan, int], tuple[RowRefusal, ...]]:
    """`plan` without the chains that cost more than negligible instructions (`RowPlan.negligible_instructions`)
    and leave the arena no larger run whole (a chain away from the model's peak), the costliest first, and the
    refusals with theirs."""
    negligible = plan[3].negligible_instructions
    for chain in sorted(plan[3].chains, key=lambda c: (-c.extra_instructions, c.ops)):
        if chain.extra_instructions <= negligible:
            break
        rows = RowPlan(tuple(c for c in plan[3].chains if c is not chain), (), negligible)
        chained = _fast_kernels(graph, fusions, rows.row_ops, rows.one_row_ops)
        candidate = _compiled_plan(view, chained, fusions, scopes, rows, False)
        if candidate is not None and candidate[0].head_bytes <= plan[0].head_bytes:
            plan = candidate
            refused += (RowRefusal(chain.ops, "the arena is no smaller with this chain"),)
    return plan, tuple(sorted(refused, key=lambda r: r.ops))


def _fast_scratch(nbytes: dict[int, int], scopes: dict[int, int], chains: tuple[RowChain, ...] = ()) -> list[Buffer]:
    """The fast kernels' scratch buffers, each live while its operator runs; a row chain's layers, which run one
    row call at a time, share one, live while the chain runs (keyed by the chain's first operator)."""
    chained = {op for chain in chains for op in chain.ops}
    buffers = [
        Buffer(0, None, op, align_up(n), scopes[op], scopes[op]) for op, n in nbytes.items() if op not in chained
    ]
    for chain in chains:
        size = max((nbytes.get(op, 0) for op in chain.ops), default=0)
        if size:
            buffers.append(Buffer(0, None, chain.ops[0], align_up(size), scopes[chain.ops[0]], scopes[chain.ops[-1]]))
    return sorted(buffers, key=lambda b: b.op or 0)


def _chain_scratch(offsets: dict[int, int], nbytes: dict[int, int], chains: tuple[RowChain, ...]) -> dict[int, int]:
    """Fast scratch offsets by operator, each chain layer's at its chain's shared buffer (`_fast_scratch`)."""
    offsets = dict(offsets)
    for chain in chains:
        for op in chain.ops:
            if op in nbytes:
                offsets[op] = offsets[chain.ops[0]]
    return offsets


def _compiled_plan(
    view: Graph, probe: ModelEmitter, fusions: dict[int, PadFusion], scopes: dict[int, int], rows: RowPlan, keep: bool
) -> tuple[Placement, list[Buffer], dict[int, int], RowPlan, int] | None:
    """lowtide's placement of the compiled runtime's buffers with `rows`' chains (their inner tensors as rings,
    everything a chain reads, writes or scratches live while it runs), the buffers, the fast scratch bytes and
    `rows`; None where the plan cannot be used."""
    spans: dict[int, tuple[int, int]] = {}
    roles: dict[int, list[tuple[RowChain, tuple[int, int]]]] = {}  # tensor -> the chains that read or write it
    for chain in rows.chains:
        span = (scopes[chain.ops[0]], scopes[chain.ops[-1]])
        for op in chain.ops:
            spans[op] = span
        for t in (*chain.sources, chain.output, *chain.rings):
            roles.setdefault(t, []).append((chain, span))
    # no bytes of their own: guests of rings, and what a TRANSPOSE a convolution reads through would write
    guests = {g.tensor for chain in rows.chains for g in chain.guests} | {
        view.main.operators[transpose].outputs[0] for transpose in rows.fused_transposes
    }
    buffers: list[Buffer] = []
    for b in buffers_to_plan(view, executor=Executor.COMPILED):
        if b.subgraph == 0 and b.tensor in guests:
            continue
        if b.subgraph == 0 and b.tensor is None and b.op in spans:
            b = dataclasses.replace(b, first=spans[b.op][0], last=spans[b.op][1])
        for chain, (start, end) in roles.get(b.tensor, []) if b.subgraph == 0 and b.tensor is not None else []:
            rings = chain.rings
            if b.tensor in rings:
                tensor = view.main.tensors[b.tensor]
                ring_bytes = align_up(rings[b.tensor] * tensor.nbytes // tensor.shape[1])
                b = dataclasses.replace(b, size=ring_bytes, first=start, last=end, shares=None)
            else:  # read or written whole while the chain runs; an output's rows do not share an input's
                shares = None if b.tensor == chain.output else b.shares
                b = dataclasses.replace(b, first=min(b.first, start), last=max(b.last, end), shares=shares)
        buffers.append(b)
    scratch = _fast_scratch(probe.fast_scratch_bytes, scopes, rows.chains)
    buffers += scratch
    producers = view.main.producers()
    # Depthwise outputs may share their input only where the fast kernel runs them (it copies before writing).
    unsafe = any(
        b.shares is not None
        and b.tensor is not None
        and b.subgraph == 0
        and view.main.operators[producers[b.tensor]].opcode == "DEPTHWISE_CONV_2D"
        and producers[b.tensor] not in probe.in_place_safe
        for b in buffers
    )
    if not buffers or unsafe or keep:
        return None
    index = {b.tensor: i for i, b in enumerate(buffers) if b.subgraph == 0 and b.tensor is not None}

    def root(tensor: int) -> tuple[int, int]:
        """The buffer whose bytes `tensor`'s are fixed inside (`Buffer.shares`), and the offset in it."""
        offset = 0
        while (shared := buffers[index[tensor]].shares) is not None:
            tensor, offset = shared[0], offset + shared[1]
        return tensor, offset

    for chain in rows.chains:  # the output's rows over the rows of a dying source already read
        if chain.overlap is not None:
            source, offset = chain.overlap
            top, inside = root(source)
            out = index[chain.output]
            if inside + offset >= 0:
                buffers[out] = dataclasses.replace(buffers[out], shares=(top, inside + offset))
            else:  # the output starts before the group: the group goes inside the output
                buffers[index[top]] = dataclasses.replace(buffers[index[top]], shares=(chain.output, -inside - offset))
    return place(buffers, placement_budget(0)), buffers, probe.fast_scratch_bytes, rows, len(scratch)


def _c_region(region: str) -> str:
    """A memory region's name as a C identifier's part (as its arena's section names it: lowtide.tflm.regions)."""
    return re.sub(r"[^0-9A-Za-z_]", "_", region)


def region_arena_name(prefix: str, region: str) -> str:
    """The C array of the compiled arena in memory region `region` (after the first: lowtide.compile.banks)."""
    return f"{prefix}_arena_{_c_region(region)}"


def _in_regions(
    graph: Graph, plan: ArenaPlan, regions: Sequence[DataRegion]
) -> tuple[ArenaPlan, tuple[RegionArena, ...]]:
    """`plan` across `regions` (lowtide.compile.banks), and the arena of each region used; `plan` itself and none
    without regions."""
    if not regions:
        return plan, ()
    banks = split_arena(graph, plan.buffers, plan.head_bytes, regions)
    if banks.offsets is None:
        return plan, banks.arenas
    tensors, scratch, fast = _split(plan.buffers, banks.offsets, plan.fast_count, plan.rows.chains)
    fast = _chain_scratch(fast, plan.fast_scratch_bytes, plan.rows.chains)
    last = banks.arenas[-1]
    moved = dataclasses.replace(
        plan, offsets=tensors, scratch=scratch, fast_scratch=fast, head_bytes=last.base + last.head_bytes
    )
    return moved, banks.arenas


def region_arenas(graph: Graph, regions: Sequence[DataRegion]) -> tuple[RegionArena, ...]:
    """The arena of each memory region `compile_model(graph, regions=regions)` uses, without generating code;
    raises LowtideError where no split fits."""
    return _in_regions(graph, arena_plan(graph), regions)[1]


def _emitter(
    graph: Graph,
    keep_model_plan: bool = False,
    row_chains: bool = True,
    max_row_overhead: float = DEFAULT_MAX_ROW_OVERHEAD,
    wide_weights: bool = True,
    prefix: str = "model",
    regions: Sequence[DataRegion] = (),
) -> tuple[ModelEmitter, ArenaPlan, tuple[RegionArena, ...]]:
    """An emitter with every activation and scratch buffer at its planned offset (`arena_plan`, across `regions`
    where given), that plan, and the arena of each region used."""
    whole = arena_plan(graph, keep_model_plan, row_chains, max_row_overhead, wide_weights)
    plan, arenas = _in_regions(graph, whole, regions)
    emitter = ModelEmitter(
        graph,
        plan.offsets,
        plan.scratch,
        plan.fused_pads,
        plan.fast_scratch,
        plan.wide_weights,
        plan.rows.row_ops,
        plan.ring_rows,
        plan.rows.one_row_ops,
        plan.ring_guests,
        plan.rows.fused_transposes,
        tuple((a.base, region_arena_name(prefix, a.region)) for a in arenas[1:]),
    )
    return emitter, plan, arenas


def _lower_all(graph: Graph, emitter: ModelEmitter) -> tuple[list[str], list[Blocker]]:
    """Every operator's C statement, and a Blocker for each one that cannot be lowered and for the graph."""
    calls, blockers = [], []
    fused = {f.pad_op: dw for dw, f in emitter.fused_pads.items()}
    fused.update(emitter.fused_transposes)
    for op in graph.main.operators:
        if op.index in fused:
            calls.append(f"/* fused into operator {fused[op.index]} */")
            continue
        try:
            calls.append(lower_operator(emitter, op))
        except Unsupported as exc:
            tensors = graph.main.tensors
            blockers.append(
                Blocker(
                    op.index,
                    op.opcode,
                    tuple(tensors[t].dtype if t >= 0 else "-" for t in op.inputs),
                    tuple(tensors[t].dtype for t in op.outputs),
                    str(exc),
                )
            )
    blockers += [Blocker(None, "", (), (), reason) for reason in _graph_problems(graph)]
    return calls, blockers


def check_model(graph: Graph) -> list[Blocker]:
    """Everything that keeps `graph` from compiling, without generating code."""
    emitter, _, _ = _emitter(graph)
    return _lower_all(graph, emitter)[1]


def compile_model(
    graph: Graph,
    prefix: str = "model",
    keep_model_plan: bool = False,
    row_chains: bool = True,
    max_row_overhead: float = DEFAULT_MAX_ROW_OVERHEAD,
    regions: Sequence[DataRegion] = (),
    wide_weights: bool = True,
) -> CompiledModel:
    """Lower every operator of `graph` (a validated model: `lowtide.validation.load_model`); raises LowtideError
    naming the first thing it cannot compile. `keep_model_plan`: the model's OfflineMemoryAllocation as it is, even
    where lowtide's compiled plan is smaller. `row_chains`: False runs every operator on whole tensors;
    `max_row_overhead`: the most a chain may add to its layers' estimated instructions, a fraction (`arena_plan`).
    `regions`: the memory regions the arena may use, fastest first (lowtide.compile.banks): one arena per region
    used. `wide_weights`: False keeps every filter int8 (for cores with Helium, `arena_plan`)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", prefix):
        raise LowtideError(f"prefix '{prefix}' is not a C identifier")
    emitter, plan, arenas = _emitter(
        graph, keep_model_plan, row_chains, max_row_overhead, wide_weights, prefix, regions
    )
    head_bytes = arenas[0].head_bytes if arenas else plan.head_bytes
    calls, blockers = _lower_all(graph, emitter)
    unplanned = sorted(set(emitter.fast_scratch_bytes) - set(emitter.fast_scratch))
    if unplanned:  # the plan is made from the same lowering: a difference is a lowtide bug
        raise LowtideError(f"operator {unplanned[0]}'s kernel scratch has no place in the arena plan", graph.source)
    if blockers:
        more = f" (and {len(blockers) - 1} more: lowtide compile --check)" if len(blockers) > 1 else ""
        raise LowtideError(f"cannot compile {blockers[0]}{more}", graph.source)
    offsets = emitter.offsets
    inputs = tuple(_io(graph, emitter, t, offsets, arenas) for t in graph.main.inputs)
    outputs = tuple(_io(graph, emitter, t, offsets, arenas) for t in graph.main.outputs)
    model_hash = graph.sha256[:16]
    members = _state_members(emitter)
    state_bytes = _struct_size(members)
    header = _header(prefix, head_bytes, state_bytes, graph, inputs, outputs, model_hash, arenas)
    source = _source(prefix, graph, emitter, calls, inputs, outputs, model_hash, members, plan.rows.chains)
    return CompiledModel(
        model=graph.source,
        prefix=prefix,
        files={f"{prefix}.h": header, f"{prefix}.c": source},
        arena_bytes=head_bytes,
        fixed_state_bytes=state_bytes,
        operator_count=len(graph.main.operators),
        inputs=inputs,
        outputs=outputs,
        model_hash=model_hash,
        row_chains=plan.rows.chains,
        row_refusals=plan.rows.refusals,
        region_arenas=arenas,
    )


def _state_members(emitter: ModelEmitter) -> list[StateMember]:
    """The emitter's state, widest element first so the struct has no padding between members, then the `ready`
    flag that makes the first invoke reset the state."""
    members = sorted(emitter.state_members(), key=lambda m: -m.element_bytes)
    return members + [StateMember("ready", "uint8_t", 0, 1, None)] if members else []


def _struct_size(members: list[StateMember]) -> int:
    """sizeof the struct: members in order (no inner padding by construction), rounded to the widest alignment."""
    if not members:
        return 0
    size = sum(m.nbytes for m in members)
    alignment = max(m.element_bytes for m in members)
    return -(-size // alignment) * alignment


def _graph_problems(graph: Graph) -> list[str]:
    problems = []
    init_subgraphs = {i for op in graph.main.operators if op.opcode == "CALL_ONCE" for i in op.called_subgraphs}
    for sg in graph.subgraphs[1:]:
        if sg.operators and sg.index not in init_subgraphs:
            problems.append(
                f"subgraph {sg.index} has operators; only the main subgraph and CALL_ONCE init subgraphs compile"
            )
    for t in list(graph.main.inputs) + list(graph.main.outputs):
        tensor = graph.main.tensors[t]
        if tensor.dtype not in LT_TYPE_NAMES:
            problems.append(f"model input/output tensor {t} has type {tensor.dtype}")
    return problems


def _io(
    graph: Graph, emitter: ModelEmitter, index: int, offsets: dict[int, int], arenas: tuple[RegionArena, ...]
) -> IoTensor:
    t = graph.main.tensors[index]
    if index not in offsets:
        raise LowtideError(f"model input/output tensor {index} '{t.name}' is not an arena tensor", graph.source)
    qp = emitter.quantization(index, required=False)
    arena = max((a for a in arenas if a.base <= offsets[index]), key=lambda a: a.base, default=None)
    return IoTensor(
        index=index,
        name=t.name,
        dtype=t.dtype,
        shape=t.shape,
        offset=offsets[index] - (arena.base if arena else 0),
        region=arena.region if arena else None,
        nbytes=t.nbytes,
        scale=qp.scale,
        zero_point=qp.zero_point,
    )


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _header(
    prefix: str,
    arena_bytes: int,
    state_bytes: int,
    graph: Graph,
    inputs: tuple[IoTensor, ...],
    outputs: tuple[IoTensor, ...],
    model_hash: str,
    arenas: tuple[RegionArena, ...],
) -> str:
    up = prefix.upper()
    guard = f"{up}_H"
    lines = [
        f"/* Generated by `lowtide compile` from {graph.name} (sha256 {model_hash}...). Do not edit. */",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        "#include <stdint.h>",
        '#include "lt_runtime.h"',
        "",
        "/* The caller provides the arena: at least ARENA_SIZE bytes, aligned to ARENA_ALIGNMENT. */",
        f"#define {up}_ARENA_SIZE {arena_bytes}u",
        f"#define {up}_ARENA_ALIGNMENT 16u",
        *_region_lines(prefix, arenas),
        "/* Static state outside the arena: variable tensors and resource variables kept across invocations. */",
        f"#define {up}_STATE_SIZE {state_bytes}u",
        f"#define {up}_OPERATOR_COUNT {len(graph.main.operators)}",
        f"#define {up}_INPUT_COUNT {len(inputs)}",
        f"#define {up}_OUTPUT_COUNT {len(outputs)}",
        f'#define {up}_HASH "{model_hash}"',
        "",
    ]
    for kind, tensors in (("INPUT", inputs), ("OUTPUT", outputs)):
        for i, t in enumerate(tensors):
            lines += [
                f"#define {up}_{kind}{i}_OFFSET {t.offset}u",
                *([f'#define {up}_{kind}{i}_REGION "{t.region}"'] if len(arenas) > 1 else []),
                f"#define {up}_{kind}{i}_BYTES {t.nbytes}u",
                f"#define {up}_{kind}{i}_TYPE {LT_TYPE_NAMES[t.dtype]}",
                f"#define {up}_{kind}{i}_SCALE {c_float(t.scale)}",
                f"#define {up}_{kind}{i}_ZERO_POINT {t.zero_point}",
            ]
    lines += [
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
        f"extern const uint8_t {prefix}_hash[8]; /* first 8 bytes of the model file's sha256 */",
        *(f"extern uint8_t {region_arena_name(prefix, a.region)}[{a.head_bytes}u];" for a in arenas[1:]),
        f"extern const lt_tensor_info {prefix}_inputs[{up}_INPUT_COUNT];",
        f"extern const lt_tensor_info {prefix}_outputs[{up}_OUTPUT_COUNT];",
        f"extern const char *const {prefix}_operator_names[{up}_OPERATOR_COUNT];",
        "",
        *_io_pointers(prefix, inputs, outputs, arenas),
        "",
        "/* Runs every operator in the model's order. `hook` (may be NULL) is called before and after each. */",
        f"int {prefix}_invoke(uint8_t *arena, lt_op_hook hook, void *user);",
        "",
        "/* Puts the persistent state back as TFLM's Reset() does (the first invoke does it by itself). */",
        f"void {prefix}_reset(void);",
        "",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        "",
        f"#endif /* {guard} */",
        "",
    ]
    return "\n".join(lines)


def _io_pointers(
    prefix: str, inputs: tuple[IoTensor, ...], outputs: tuple[IoTensor, ...], arenas: tuple[RegionArena, ...]
) -> list[str]:
    """The header's `<prefix>_input` and `<prefix>_output`: inside `arena`, or where the arena is split across memory
    regions, inside the arena of each one's region."""
    if len(arenas) <= 1:
        return [
            "/* Pointer to input/output i inside `arena`. */",
            f"static inline void *{prefix}_input(uint8_t *arena, int i) {{ return arena + {prefix}_inputs[i].offset; }}",
            f"static inline void *{prefix}_output(uint8_t *arena, int i) {{ return arena + {prefix}_outputs[i].offset; }}",
        ]
    first = arenas[0].region

    def at(t: IoTensor) -> str:
        return f"{'arena' if t.region == first else region_arena_name(prefix, t.region or first)} + {t.offset}u"

    lines = ["/* Pointer to input/output i: inside `arena`, or inside the arena of its memory region. */"]
    for kind, tensors in (("input", inputs), ("output", outputs)):
        lines.append(
            f"static inline void *{prefix}_{kind}(uint8_t *arena, int i) {{ "
            f"uint8_t *const at[] = {{{', '.join(at(t) for t in tensors)}}}; return at[i]; }}"
        )
    return lines


def _region_lines(prefix: str, arenas: tuple[RegionArena, ...]) -> list[str]:
    """The header's memory regions: the one the caller's arena belongs in, and the arrays of the others, which the
    caller defines (each aligned to ARENA_ALIGNMENT, in its region) through the X-macro."""
    if not arenas:
        return []
    up = prefix.upper()
    lines = [f'#define {up}_ARENA_REGION "{arenas[0].region}"  /* where the caller\'s arena belongs */']
    if len(arenas) == 1:
        return lines
    lines.append("/* The arena's bytes in further memory regions: X(region, bytes) for each; the caller defines each")
    lines.append(f" * as uint8_t {prefix}_arena_<region>[bytes], aligned to {up}_ARENA_ALIGNMENT, in that region. */")
    xs = " ".join(f"X({_c_region(a.region)}, {a.head_bytes}u)" for a in arenas[1:])
    lines.append(f"#define {up}_REGION_ARENAS(X) {xs}")
    lines.append(f"#define {up}_ARENAS_TOTAL_SIZE {sum(a.head_bytes for a in arenas)}u")
    return lines


def _tensor_info(t: IoTensor) -> str:
    dims = list(t.shape) + [0] * (6 - len(t.shape))
    return (
        f"{{{_c_string(t.name)}, {LT_TYPE_NAMES[t.dtype]}, {t.offset}u, {t.nbytes}u, {c_float(t.scale)}, "
        f"{t.zero_point}, {len(t.shape)}, {{{', '.join(str(d) for d in dims)}}}}}"
    )


def _state_source(prefix: str, members: list[StateMember]) -> list[str]:
    """The static state struct and `reset`; a stateless model gets an empty `reset`."""
    if not members:
        return [f"void {prefix}_reset(void) {{}}", ""]
    lines = ["static struct {"]
    lines += [f"    {m.ctype} {m.name}[{m.count}];" if m.count else f"    {m.ctype} {m.name};" for m in members]
    lines += [f"}} {STATE_OBJECT};", "", f"void {prefix}_reset(void) {{"]
    lines += [
        f"    memset({STATE_OBJECT}.{m.name}, {m.reset_byte}, sizeof {STATE_OBJECT}.{m.name});"
        for m in members
        if m.reset_byte is not None
    ]
    lines += [f"    {STATE_OBJECT}.ready = 1;", "}", ""]
    return lines


def _chain_loop(index: int, chain: RowChain, calls: dict[int, str]) -> list[str]:
    """The row loop of one chain: a table of which layer advances by one row at each step (`RowChain.order`)."""
    if chain.one_row:
        return [
            f"    {{ /* row chain {index}: operator {chain.ops[0]}, its pixels as one row */",
            "        const int32_t oy = 0;",
            f"        {calls[chain.ops[0]]}",
            "    }",
        ]
    table = ", ".join(str(pos) for pos in chain.order)
    ctype = "uint8_t" if len(chain.ops) <= 256 else "uint16_t"
    lines = [
        f"    {{ /* row chain {index}: operators {', '.join(str(op) for op in chain.ops)} */",
        f"        static const {ctype} order[{len(chain.order)}] = {{{table}}};",
        f"        int32_t next_row[{len(chain.ops)}] = {{0}};",
        f"        for (int32_t step = 0; step < {len(chain.order)}; ++step) {{",
        "            const int32_t oy = next_row[order[step]]++;",
        "            switch (order[step]) {",
    ]
    lines += [f"            case {pos}: {calls[op]} break;" for pos, op in enumerate(chain.ops)]
    lines += ["            }", "        }", "    }"]
    return lines


def _source(
    prefix: str,
    graph: Graph,
    emitter: ModelEmitter,
    calls: list[str],
    inputs: tuple[IoTensor, ...],
    outputs: tuple[IoTensor, ...],
    model_hash: str,
    members: list[StateMember],
    chains: tuple[RowChain, ...] = (),
) -> str:
    hash_bytes = ", ".join(f"0x{model_hash[i : i + 2]}" for i in range(0, 16, 2))
    lines = [
        f"/* Generated by `lowtide compile` from {graph.name}. Do not edit. */",
        "#include <float.h>",
        "#include <stddef.h>",
        "#include <string.h>",
        "",
        f'#include "{prefix}.h"',
        '#include "lt_rows.h"',
        "",
        f"const uint8_t {prefix}_hash[8] = {{{hash_bytes}}};",
        f"const lt_tensor_info {prefix}_inputs[{len(inputs)}] = {{{', '.join(_tensor_info(t) for t in inputs)}}};",
        f"const lt_tensor_info {prefix}_outputs[{len(outputs)}] = {{{', '.join(_tensor_info(t) for t in outputs)}}};",
        f"const char *const {prefix}_operator_names[{len(calls)}] = {{"
        + ", ".join(_c_string(op.opcode) for op in graph.main.operators)
        + "};",
        "",
        *emitter.declarations,
        "",
        *_state_source(prefix, members),
        f"int {prefix}_invoke(uint8_t *arena, lt_op_hook hook, void *user) {{",
    ]
    if members:
        lines.append(f"    if (!{STATE_OBJECT}.ready) {prefix}_reset();")
    # A chain runs as one loop at its last operator: the hooks of the operators before it come first, in order
    # (their time is the chain's, reported at its last operator).
    by_op = dict(enumerate(calls))
    loops = {chain.ops[-1]: _chain_loop(i, chain, by_op) for i, chain in enumerate(chains)}
    in_chain = {op for chain in chains for op in range(chain.ops[0], chain.ops[-1] + 1)}
    for op, call in zip(graph.main.operators, calls):
        if op.index in in_chain and op.index not in loops:
            lines += [f"    /* {op.index}: {op.opcode}, in a row chain */", f"    if (hook) hook({op.index}, 0, user);"]
            lines += [f"    {call}"] if call.startswith("/*") else []  # a fused PAD says where it went
            lines += [f"    if (hook) hook({op.index}, 1, user);"]
            continue
        lines += [f"    /* {op.index}: {op.opcode} */", f"    if (hook) hook({op.index}, 0, user);"]
        lines += loops.get(op.index, [f"    {call}"])
        lines += [f"    if (hook) hook({op.index}, 1, user);"]
    lines += ["    return 0;", "}", ""]
    return "\n".join(lines)
