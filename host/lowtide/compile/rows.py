"""Row chains of the compiled runtime: runs of int8 convolutions (CONV_2D, pointwise, DEPTHWISE_CONV_2D, each
with the PAD before it fused), residual ADDs, PRELUs, max pools, nearest-neighbour resizes, PADs of columns and
channels, CONCATENATIONs of channels, bilinear resizes and a leading TRANSPOSE that run one output row at a time, each layer
computing its next row as soon as a later layer needs it, so that a tensor made and used inside the chain is held
as a ring of the rows still needed instead of whole (no row is computed twice), or, where its writer writes
over its input (a depthwise layer channel by channel, pointwise layers, ADDs and PRELUs pixel by pixel) and its
readers read a row at a time, in the slots of its input's ring rows no reader needs any more (`RingGuest`,
vMCU's in-place rows). A chain reads its sources whole
and writes its output whole, over the rows of a source no later operator reads once they are read. Where a run
of such operators is cut into chains is the minimax of the chains' RAM (sources, rings, output and the row
kernels' scratch), fewer bytes in all breaking ties."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache, cached_property

from lowtide.compile.lowering import ModelEmitter, Unsupported
from lowtide.compile.lowering.conv import window_geometry
from lowtide.compile.lowering.emitter import RingGuest, attributes_of
from lowtide.compile.lowering.movement import bilinear_q10
from lowtide.memory import ALIGNMENT
from lowtide.model.attributes import ConcatenationAttributes, Pool2DAttributes, ResizeAttributes
from lowtide.model.ir import Operator, TensorKind
from lowtide.model.operators import nearest_indices

# The row kernels keep one pointer per filter row on the stack (lt_rows.h, LT_RING_MAX_FILTER_ROWS): taller
# windows are not rolled.
MAX_FILTER_ROWS = 16

# A chain runs only where its layers' estimated instructions grow by at most this fraction over the same layers run
# whole; `compile --max-row-overhead` sets another. What a chain adds below a thousandth of the estimate of all the
# model's row layers is allowed whatever its share (a small TRANSPOSE's row calls: a large share of nearly nothing).
DEFAULT_MAX_ROW_OVERHEAD = 0.15
NEGLIGIBLE_SHARE = 0.001

# The instruction estimate of the fast kernels on a Cortex-M4 (lt_conv_dsp.h, lt_rows.h), fitted to the operator
# counts of mlperf_kws_dscnn, mlperf_str_ww and tflm_person_detect on qemu-m4 (whole against by rows):
# - a two-pixel matrix call: 1.5 per filter value (in words of four) and output channel, and 31 per output channel
#   (requantizing and storing two outputs); a one-pixel call at a row's odd end about 3/4 of that (it walks the
#   same filter);
# - depthwise: 2 per pair of taps and 8 per output, 60 per channel and output row; a plane row copied to int16,
#   1 per value and 1.5 per row;
# - a row call 30;
# - a max pool (scalar, both kernels): 3 per window value and 6 per output; a PRELU 20 per value (guessed, not
#   fitted); a bilinear resize 20 per value (guessed).
_PER_FILTER_VALUE = 1.5
_PER_OUTPUT_CHANNEL = 31
_SINGLE_CALL_SHARE = 0.75
_DEPTHWISE_PER_TAP_PAIR = 2
_DEPTHWISE_PER_OUTPUT = 8
_DEPTHWISE_PER_CHANNEL_ROW = 60
_PLANE_PER_VALUE = 1
_PLANE_PER_ROW = 1.5
_ROW_CALL = 30
_POOL_PER_TAP = 3
_POOL_PER_OUTPUT = 6
_PRELU_PER_VALUE = 20
_BILINEAR_PER_VALUE = 20


@dataclass(frozen=True)
class RowLayer:
    """One operator of a chain as the row loop sees it: which rows of each input its output row `oy` reads."""

    op: int
    inputs: tuple[int, ...]  # tensors read (a fused PAD's input for the convolution that absorbs it)
    output: int
    out_rows: int
    stride: int  # rows: 1, 1, 0, 0 for an ADD (row oy reads row oy)
    filter_rows: int
    dilation: int
    pad_top: int
    in_rows: int
    # How the row kernel may write its row over the rows it reads: "pixel" (ADD, pointwise convolutions with no
    # more output than input channels: a pixel is written after it is read, no further along its row),
    # "channel" (depthwise: channel c of the row after channel c of every window row is read), "" (not at all)
    writes_over: str = ""
    # bytes between the input's rows as they lie in memory, where they are not NHWC rows (0): a TRANSPOSE reads
    # its input whole, the lowest byte output rows from n on read is n such steps in
    in_row_bytes: int = 0
    # estimated instructions of the layer run whole, and the extra ones it costs run a row at a time (module top)
    whole_instructions: int = 0
    row_instructions: int = 0
    # the first and last input row each output row reads, where that is no window (RESIZE_NEAREST_NEIGHBOR: the
    # one row TFLM's nearest-neighbour map gives; RESIZE_BILINEAR: the two rows it interpolates), never
    # decreasing; empty: the window above
    source_windows: tuple[tuple[int, int], ...] = ()
    # a convolution reading its input through a TRANSPOSE from NCHW (`planes_source`): that TRANSPOSE, which runs
    # no code (the input is the TRANSPOSE's input, its rows `in_row_bytes` apart in each channel's plane)
    fused_transpose: int | None = None

    def window(self, oy: int) -> tuple[int, int]:
        """The first and last input row output row `oy` reads (last < first: all padding)."""
        if self.source_windows:
            return self.source_windows[oy]
        top = oy * self.stride - self.pad_top
        return max(top, 0), min(top + (self.filter_rows - 1) * self.dilation, self.in_rows - 1)

    @cached_property
    def windows(self) -> tuple[tuple[int, int], ...]:
        """`window` of every output row (the row loop asks for them again and again)."""
        return tuple(self.window(oy) for oy in range(self.out_rows))

    @cached_property
    def needed(self) -> tuple[int, ...]:
        """The first input row still needed once `done` output rows are written, by `done` (0..out_rows)."""
        return tuple(min(first, self.in_rows) for first, _ in self.windows) + (self.in_rows,)


@dataclass(frozen=True)
class RowChain:
    ops: tuple[int, ...]  # operators in execution order (fused PADs left out: they run no code)
    sources: tuple[int, ...]  # tensors the chain reads whole, made before it
    output: int  # the tensor the chain writes whole
    ring_rows: tuple[tuple[int, int], ...]  # (tensor made and used inside, rows its ring holds)
    order: tuple[int, ...]  # the row loop: position in `ops` of the layer each step advances by one row
    ring_bytes: int  # the rings
    whole_bytes: int  # the tensors held as rings or guests, whole
    # (a source no operator reads after the chain, bytes from its start to the output's (a multiple of 16, may
    # be negative)): the output's rows land only on that source's rows already read; None: apart
    overlap: tuple[int, int] | None
    # a pointwise convolution alone: its pixels run as one row, H x W long, so that they pair up for the
    # two-pixel kernel across the ends of the tensor's rows (an odd-width row leaves none over); the plan is the
    # same (a pixel lands on its own input pixel's bytes or below)
    one_row: bool = False
    whole_instructions: int = 0  # the estimate of its layers run whole (module top)
    extra_instructions: int = 0  # and what running them by rows adds to it
    guests: tuple[RingGuest, ...] = ()  # tensors made inside whose rows lie in the slots of a ring
    # (convolution, the TRANSPOSE from NCHW it reads through: `RowLayer.fused_transpose`)
    transposes: tuple[tuple[int, int], ...] = ()

    @property
    def rings(self) -> dict[int, int]:
        return dict(self.ring_rows)


@dataclass(frozen=True)
class RowRefusal:
    """Where a chain was not formed, and why."""

    ops: tuple[int, ...]
    reason: str


@dataclass(frozen=True)
class RowPlan:
    chains: tuple[RowChain, ...]
    refusals: tuple[RowRefusal, ...]
    # estimated instructions too few to weigh (NEGLIGIBLE_SHARE of the model's row layers run whole)
    negligible_instructions: float = 0

    @property
    def row_ops(self) -> frozenset[int]:
        """The operators that run a row at a time."""
        return frozenset(op for chain in self.chains for op in chain.ops)

    @property
    def fused_transposes(self) -> dict[int, int]:
        """The TRANSPOSEs that run no code -> the convolution that reads their input's planes."""
        return {transpose: op for chain in self.chains for op, transpose in chain.transposes}

    @property
    def one_row_ops(self) -> frozenset[int]:
        """The layers run as one row of all their pixels (`RowChain.one_row`)."""
        return frozenset(chain.ops[0] for chain in self.chains if chain.one_row)


def _row_layer(e: ModelEmitter, op: Operator, fast_rows: frozenset[int]) -> RowLayer | str:
    """`op` as a row layer, or why it cannot be one."""
    out = e.tensor(op.outputs[0]) if len(op.outputs) == 1 else None
    if out is None or len(out.shape) != 4 or out.shape[0] != 1 or out.dtype != "int8":
        return "not a batch-1 int8 NHWC output"
    if op.opcode == "ADD":
        a, b = (e.tensor(t) for t in op.inputs[:2])
        if a.shape != out.shape or b.shape != out.shape or a.dtype != "int8" or b.dtype != "int8":
            return "an ADD that broadcasts"
        return _elementwise_rows(op, tuple(op.inputs[:2]), out.shape[1], out.shape[1], out.nbytes * 4, "pixel")
    if op.opcode == "TRANSPOSE":
        read = e.tensor(op.inputs[0])
        perm = [int(v) for v in e.constant_values(op.inputs[1]).reshape(-1)]
        if read.dtype != "int8" or len(perm) != 4 or perm[0] != 0:
            return "a TRANSPOSE of the batch or not of int8 NHWC"
        step = math.prod(read.shape[perm[1] + 1 :])  # elements between the input's slices output rows read
        return _elementwise_rows(op, (op.inputs[0],), out.shape[1], out.shape[1], out.nbytes * 3, in_row_bytes=step)
    if op.opcode in ("RESIZE_NEAREST_NEIGHBOR", "RESIZE_BILINEAR"):
        return _resize_layer(e, op)
    if op.opcode == "MAX_POOL_2D":
        return _max_pool_layer(e, op)
    if op.opcode == "PRELU":
        return _prelu_layer(e, op)
    if op.opcode in ("PAD", "PADV2"):
        return _pad_layer(e, op)
    if op.opcode == "CONCATENATION":
        return _concatenation_layer(e, op)
    if op.opcode not in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        return f"{op.opcode} has no row kernel"
    if op.index not in fast_rows:
        return "no fast int8 kernel for this layer (or one output pixel over its whole input)"
    filter_shape = e.tensor(op.inputs[1]).shape
    try:
        g = window_geometry(e, op, filter_shape[1], filter_shape[2])
    except Unsupported as exc:
        return str(exc)
    if g.filter_h > MAX_FILTER_ROWS:
        return f"a window of {g.filter_h} rows (row kernels take at most {MAX_FILTER_ROWS})"
    source, pad_top, in_rows = op.inputs[0], g.pad_h, g.in_h
    fusion = e.fused_pads.get(op.index)
    if fusion is not None:
        source, pad_top, in_rows = fusion.source, g.pad_h + fusion.top, e.tensor(fusion.source).shape[1]
    planes = planes_source(e, source) if op.opcode == "CONV_2D" else None
    in_row_bytes = 0
    if planes is not None:
        transpose, source = planes
        in_row_bytes = e.tensor(source).shape[3]  # a plane's row
    pointwise = (g.filter_h, g.filter_w, g.stride_h, g.stride_w, g.pad_h, g.pad_w) == (1, 1, 1, 1, 0, 0)
    if op.opcode == "DEPTHWISE_CONV_2D" and g.in_c > 1:  # (one input channel runs as a convolution)
        writes_over = "channel"
    elif op.opcode == "CONV_2D" and pointwise and g.in_w == g.out_w and g.out_c <= g.in_c:
        writes_over = "pixel"
    else:
        writes_over = ""
    whole, by_rows = _instructions(
        op.opcode == "DEPTHWISE_CONV_2D" and g.in_c > 1,
        g.out_h,
        g.out_w,
        g.out_c,
        g.filter_h,
        g.filter_w,
        g.in_c,
        g.stride_h,
        g.stride_w,
    )
    return RowLayer(
        op.index,
        (source,),
        op.outputs[0],
        g.out_h,
        g.stride_h,
        g.filter_h,
        g.dilation_h,
        pad_top,
        in_rows,
        writes_over,
        in_row_bytes,
        whole_instructions=whole,
        row_instructions=by_rows,
        fused_transpose=None if planes is None else transpose,
    )


def planes_source(e: ModelEmitter, tensor: int) -> tuple[int, int] | None:
    """Where `tensor` is an int8 TRANSPOSE of NCHW to NHWC that only one operator reads (and no model output),
    that TRANSPOSE and its NCHW input: a convolution reading `tensor` by rows may read the input's channel
    planes instead (lt_conv_planes_row_s8_fast), and the TRANSPOSE need not run."""
    sg = e.sg
    producer = sg.producers().get(tensor)
    if producer is None or tensor in sg.outputs or len(sg.consumers().get(tensor, [])) != 1:
        return None
    op = sg.operators[producer]
    if op.opcode != "TRANSPOSE" or e.tensor(op.inputs[0]).kind is not TensorKind.ACTIVATION:
        return None
    read = e.tensor(op.inputs[0])
    perm = [int(v) for v in e.constant_values(op.inputs[1]).reshape(-1)]
    if read.dtype != "int8" or len(read.shape) != 4 or read.shape[0] != 1 or perm != [0, 2, 3, 1]:
        return None
    return op.index, op.inputs[0]


def _elementwise_rows(
    op: Operator,
    inputs: tuple[int, ...],
    out_rows: int,
    in_rows: int,
    whole_instructions: int,
    writes_over: str = "",
    calls_per_row: int = 1,
    in_row_bytes: int = 0,
    source_windows: tuple[tuple[int, int], ...] = (),
) -> RowLayer:
    """A layer whose output row oy reads row oy of its inputs (or the rows `source_windows` names): no window, a
    row call (or `calls_per_row`) per output row on top of the whole layer's work."""
    return RowLayer(
        op.index,
        inputs,
        op.outputs[0],
        out_rows,
        1,
        1,
        1,
        0,
        in_rows,
        writes_over,
        in_row_bytes,
        whole_instructions=whole_instructions,
        row_instructions=whole_instructions + out_rows * _ROW_CALL * calls_per_row,
        source_windows=source_windows,
    )


def _resize_layer(e: ModelEmitter, op: Operator) -> RowLayer | str:
    """A RESIZE_NEAREST_NEIGHBOR or RESIZE_BILINEAR as a row layer: output row oy copies, column by column, the one
    input row TFLM's nearest map gives it, or interpolates the two rows TFLM's integer bilinear kernel reads."""
    read, out = e.tensor(op.inputs[0]), e.tensor(op.outputs[0])
    if read.dtype != "int8" or len(read.shape) != 4 or read.shape[3] != out.shape[3]:
        return f"a {op.opcode} not of int8 NHWC"
    try:
        resize = attributes_of(op, ResizeAttributes)
    except Unsupported as exc:
        return str(exc)
    align, half = resize.align_corners, resize.half_pixel_centers
    if op.opcode == "RESIZE_BILINEAR":
        if align and half:
            return "a RESIZE_BILINEAR with align_corners and half_pixel_centers"
        lower, upper, _ = bilinear_q10(read.shape[1], out.shape[1], align, half)
        windows = tuple(zip(lower, upper))
        whole = out.nbytes * _BILINEAR_PER_VALUE
    else:
        windows = tuple((int(y), int(y)) for y in nearest_indices(read.shape[1], out.shape[1], align, half))
        whole = out.nbytes * 3  # a pixel's bytes copied, as a TRANSPOSE's
    return _elementwise_rows(op, (op.inputs[0],), out.shape[1], read.shape[1], whole, source_windows=windows)


def _prelu_layer(e: ModelEmitter, op: Operator) -> RowLayer | str:
    """An int8 PRELU as a row layer: output row oy from input row oy and the constant alpha, which must not vary
    along the rows (a pixel is written after it is read, as an ADD's)."""
    read, alpha, out = (e.tensor(t) for t in (op.inputs[0], op.inputs[1], op.outputs[0]))
    rows_of_alpha = (1, 1, 1, *alpha.shape)[-3]
    if read.dtype != "int8" or read.shape != out.shape or alpha.kind is TensorKind.ACTIVATION or rows_of_alpha != 1:
        return "a PRELU not of int8, or with an alpha computed or varying along the rows"
    whole = out.nbytes * _PRELU_PER_VALUE
    return _elementwise_rows(op, (op.inputs[0],), out.shape[1], out.shape[1], whole, "pixel")


def _pad_layer(e: ModelEmitter, op: Operator) -> RowLayer | str:
    """An int8 PAD of columns and channels only as a row layer: output row oy is input row oy padded."""
    read, out = e.tensor(op.inputs[0]), e.tensor(op.outputs[0])
    paddings = [int(v) for v in e.constant_values(op.inputs[1]).reshape(-1)]
    if read.dtype != "int8" or len(read.shape) != 4 or paddings[:4] != [0, 0, 0, 0]:
        return "a PAD of rows or the batch, or not of int8 NHWC"
    whole = out.nbytes * 3  # filled, and the input's bytes copied, as a TRANSPOSE's
    return _elementwise_rows(op, (op.inputs[0],), out.shape[1], read.shape[1], whole)


def _concatenation_layer(e: ModelEmitter, op: Operator) -> RowLayer | str:
    """An int8 CONCATENATION of channels as a row layer: output row oy is row oy of each input, pixel by pixel."""
    out = e.tensor(op.outputs[0])
    reads = [e.tensor(t) for t in op.inputs]
    axis = attributes_of(op, ConcatenationAttributes).axis % max(len(out.shape), 1)
    if (
        axis != 3
        or out.shape[1] < 2
        or any(t.kind is not TensorKind.ACTIVATION or t.dtype != "int8" or t.shape[:3] != out.shape[:3] for t in reads)
    ):
        return "a CONCATENATION not of the channels of int8 NHWC activations"
    whole = out.nbytes * 3  # the inputs' bytes copied, as a TRANSPOSE's
    return _elementwise_rows(op, tuple(op.inputs), out.shape[1], out.shape[1], whole, calls_per_row=len(reads))


def _max_pool_layer(e: ModelEmitter, op: Operator) -> RowLayer | str:
    """An int8 MAX_POOL_2D as a row layer: its window over the input rows as a convolution's (lt_rows.h)."""
    if e.tensor(op.inputs[0]).dtype != "int8" or e.quantization(op.inputs[0]) != e.quantization(op.outputs[0]):
        return "a MAX_POOL_2D not of int8 with its input's quantization"
    try:
        g = window_geometry(e, op, *attributes_of(op, Pool2DAttributes).filter)
    except Unsupported as exc:
        return str(exc)
    if g.filter_h > MAX_FILTER_ROWS:
        return f"a window of {g.filter_h} rows (row kernels take at most {MAX_FILTER_ROWS})"
    whole = g.out_h * g.out_w * g.out_c * (g.filter_h * g.filter_w * _POOL_PER_TAP + _POOL_PER_OUTPUT)
    return RowLayer(
        op.index,
        (op.inputs[0],),
        op.outputs[0],
        g.out_h,
        g.stride_h,
        g.filter_h,
        1,
        g.pad_h,
        g.in_h,
        whole_instructions=whole,
        row_instructions=whole + g.out_h * _ROW_CALL,
    )


def _instructions(
    depthwise: bool, out_h: int, out_w: int, out_c: int, kh: int, kw: int, in_c: int, stride_h: int, stride_w: int
) -> tuple[int, int]:
    """Estimated instructions of a fast convolution run whole and run a row at a time (module top): a row's odd
    pixel is a one-pixel matrix call the whole tensor pairs with the next row's first, and a depthwise row copies
    its window's plane rows again for each output row, where the whole kernel copies each plane row once."""
    if depthwise:
        plane_w, plane_h = (out_w - 1) * stride_w + kw, (out_h - 1) * stride_h + kh
        taps = kh * ((kw + 1) // 2) * _DEPTHWISE_PER_TAP_PAIR + _DEPTHWISE_PER_OUTPUT
        compute = out_c * out_h * (out_w * taps + _DEPTHWISE_PER_CHANNEL_ROW)
        plane_row = plane_w * _PLANE_PER_VALUE + _PLANE_PER_ROW
        whole = compute + round(out_c * plane_h * plane_row)
        by_rows = compute + round(out_c * out_h * kh * plane_row) + out_h * _ROW_CALL
        return whole, by_rows
    k4 = (kh * kw * in_c + 3) // 4 * 4  # the filter in words of four
    pair_call = out_c * (k4 * _PER_FILTER_VALUE + _PER_OUTPUT_CHANNEL)
    pixels = out_h * out_w
    whole = round((pixels // 2 + pixels % 2 * _SINGLE_CALL_SHARE) * pair_call)
    by_rows = round(out_h * (out_w // 2 + out_w % 2 * _SINGLE_CALL_SHARE) * pair_call) + out_h * _ROW_CALL
    return whole, by_rows


def _schedule(
    layers: list[RowLayer], row_bytes: dict[int, int], dying: set[int]
) -> tuple[list[int], dict[int, int], dict[int, int]]:
    """The row loop, each inner tensor's ring rows, and for each source in `dying` (read by no operator after the
    chain) the largest offset of the output from it at which no output row lands on a row still to be read: the
    last layer's rows pulled in order, each layer computing a row only when a reader needs it, so a ring holds no
    row before it is needed."""
    made_by = {layer.output: i for i, layer in enumerate(layers)}
    readers: dict[int, list[int]] = {}
    for i, layer in enumerate(layers):
        for t in set(layer.inputs):
            readers.setdefault(t, []).append(i)
    done = [0] * len(layers)
    order: list[int] = []
    rings: dict[int, int] = {layer.output: 0 for layer in layers[:-1]}
    last_pos, writer = len(layers) - 1, layers[-1]
    out_row = row_bytes[writer.output]
    # the writer's own row may land on the rows it reads for that row (`RowLayer.writes_over`), at whole rows of
    # the same bytes for "channel", and not after them for "pixel"
    over = {
        t: writer.writes_over
        for t in dying
        if t in writer.inputs
        and (row_bytes[t] >= out_row if writer.writes_over == "pixel" else row_bytes[t] == out_row)
        and writer.writes_over
    }
    headroom = {t: 1 << 62 for t in dying}  # no limit yet
    if over:
        headroom.update({t: 0 for t, kind in over.items() if kind == "pixel"})

    def pull(pos: int, last_row: int) -> None:
        layer = layers[pos]
        while done[pos] <= last_row:
            for t in layer.inputs:
                if t in made_by:
                    first, last = layer.windows[done[pos]]
                    if last >= first:
                        pull(made_by[t], last)
            if pos == last_pos:  # output row done[pos] is written while the rows from `needed` on are still read
                for t in dying:
                    after = 1 if t in over else 0  # the writer's own rows of this row read before it writes
                    needed = min(layers[r].needed[done[r] + (after if r == pos else 0)] for r in readers[t])
                    if needed < layers[readers[t][0]].in_rows:
                        room = needed * row_bytes[t] - (done[pos] + 1) * out_row
                        headroom[t] = min(headroom[t], room)
            order.append(pos)
            done[pos] += 1
            if layer.output in rings:
                held = done[pos] - min(layers[r].needed[done[r]] for r in readers[layer.output])
                rings[layer.output] = max(rings[layer.output], held)

    pull(last_pos, layers[-1].out_rows - 1)
    # offsets in whole rows where the writer writes a channel over the same channel
    quantum = {t: math.lcm(ALIGNMENT, out_row) if over.get(t) == "channel" else ALIGNMENT for t in dying}
    return order, rings, {t: room // quantum[t] * quantum[t] for t, room in headroom.items()}


def _reads_one_row(layer: RowLayer) -> bool:
    """Whether each output row of `layer` reads one row of its inputs, through a pointer to that row (what the
    readers of a `RingGuest` must do: its rows are no ring the window kernels index)."""
    return (
        layer.filter_rows == 1
        and layer.pad_top == 0
        and not layer.in_row_bytes
        and all(first == last for first, last in layer.source_windows)
    )


def _guests(
    layers: list[RowLayer], order: list[int], rings: dict[int, int], row_bytes: dict[int, int]
) -> tuple[RingGuest, ...]:
    """The inner tensors that need no ring of their own: a layer that writes over its input
    (`RowLayer.writes_over`) puts its row y over the row of an input ring under its window's top, (stride * y -
    pad_top), the row it reads first; the row loop `order` is replayed slot by slot, and a guest whose rows would
    land on a row still to be read (or a ring's own row on a guest's still to be read) loses its place, until
    none does."""
    readers: dict[int, list[int]] = {}
    for i, layer in enumerate(layers):
        for t in set(layer.inputs):
            readers.setdefault(t, []).append(i)
    over: dict[int, int] = {}  # position of a layer that may write over an input ring -> that ring
    for pos, layer in enumerate(layers[:-1]):
        if layer.writes_over and all(_reads_one_row(layers[r]) for r in readers[layer.output]):
            ring = next((t for t in layer.inputs if t in rings and row_bytes[layer.output] <= row_bytes[t]), None)
            if ring is not None:
                over[pos] = ring
    while over:
        guests: dict[int, RingGuest] = {}
        for pos, ring in sorted(over.items()):  # a guest's input before it, in the chain's order
            layer, inner = layers[pos], guests.get(ring)
            host, scale, shift = (inner.host, inner.scale, inner.shift) if inner else (ring, 1, 0)
            top = (shift - scale * layer.pad_top) % rings[host]
            guests[layer.output] = RingGuest(layer.output, host, scale * layer.stride, top)
        clash = _clash(layers, order, rings, guests, readers, over)
        if clash is None:
            return tuple(guests[t] for t in sorted(guests))
        del over[clash]
    return ()


def _clash(
    layers: list[RowLayer],
    order: list[int],
    rings: dict[int, int],
    guests: dict[int, RingGuest],
    readers: dict[int, list[int]],
    over: dict[int, int],
) -> int | None:
    """The position of a guest's writer that would write a row over one still to be read, replaying `order`
    (each ring slot's tenant: tensor and row); None where no row is."""
    writer = {layer.output: i for i, layer in enumerate(layers)}
    done = [0] * len(layers)
    tenants: dict[tuple[int, int], tuple[int, int]] = {}
    for pos in order:
        layer, y = layers[pos], done[pos]
        done[pos] += 1  # the row's reads are done when it is written (in place: pixel or channel after its read)
        t = layer.output
        guest = guests.get(t)
        if guest is not None:
            slot = (guest.host, (guest.scale * y + guest.shift) % rings[guest.host])
        elif t in rings:
            slot = (t, y % rings[t])
        else:
            continue
        tenant = tenants.get(slot)
        if tenant is not None:
            other, row = tenant
            first, last = layer.windows[y]
            in_place = guest is not None and over[pos] == other and row == layer.stride * y - layer.pad_top
            read_now = other in layer.inputs and first <= row <= last
            if (read_now and not in_place) or any(layers[r].needed[done[r]] <= row for r in readers[other]):
                if guest is not None:
                    return pos
                assert other in guests, "a ring's own rows outlived its slots"
                return writer[other]
        tenants[slot] = (t, y)
    return None


def find_row_chains(
    e: ModelEmitter,
    consumers: dict[int, list[int]],
    fast_rows: frozenset[int],
    scratch: dict[int, int],
    whole_depthwise: bool = False,
    max_overhead: float = DEFAULT_MAX_ROW_OVERHEAD,
) -> RowPlan:
    """The row chains of the main subgraph `e` lowers, as the compiled runtime runs it (`e.fused_pads` fused;
    `consumers`: each tensor's readers so). `fast_rows`: the convolutions lowered to a fast kernel a row kernel
    can run; `scratch`: the bytes each row layer's kernel needs while the chain runs. `whole_depthwise`: a
    depthwise layer that would be a chain alone is costed as the whole-tensor kernel in place over its input
    instead (no plane copied per output row), which the plan may or may not realise. `max_overhead`: no chain
    whose layers' estimated instructions grow by more than this fraction."""
    sg = e.sg
    outputs = set(sg.outputs)
    layers = {op.index: _row_layer(e, op, fast_rows) for op in sg.operators}
    # fused PADs, and TRANSPOSEs a convolution reads through (which run whole where it runs whole after all)
    fused = {f.pad_op for f in e.fused_pads.values()} | {
        layer.fused_transpose
        for layer in layers.values()
        if isinstance(layer, RowLayer) and layer.fused_transpose is not None
    }
    runs: list[list[RowLayer]] = [[]]
    refusals: list[RowRefusal] = []
    for op in sg.operators:
        if op.index in fused:
            continue
        layer = layers[op.index]
        if isinstance(layer, RowLayer):
            runs[-1].append(layer)
            continue
        if op.opcode in (
            "CONV_2D",
            "DEPTHWISE_CONV_2D",
            "ADD",
            "CONCATENATION",
            "MAX_POOL_2D",
            "PAD",
            "PADV2",
            "PRELU",
            "RESIZE_NEAREST_NEIGHBOR",
            "RESIZE_BILINEAR",
        ):
            refusals.append(RowRefusal((op.index,), layer))
        if runs[-1]:
            runs.append([])
    chains = []
    negligible = NEGLIGIBLE_SHARE * sum(layer.whole_instructions for run in runs for layer in run)
    for run in runs:
        if run:
            found, refused = _cut(e, run, consumers, outputs, scratch, whole_depthwise, max_overhead, negligible)
            chains += found
            refusals += refused
    return RowPlan(tuple(chains), tuple(sorted(refusals, key=lambda r: r.ops)), negligible)


def _cut(
    e: ModelEmitter,
    run: list[RowLayer],
    consumers: dict[int, list[int]],
    outputs: set[int],
    scratch: dict[int, int],
    whole_depthwise: bool,
    max_overhead: float,
    negligible: float,
) -> tuple[list[RowChain], list[RowRefusal]]:
    """The chains of one run of row layers: the cut points with the least largest chain RAM (then the least sum),
    by dynamic programming over the run."""
    nbytes, row_bytes = {}, {}
    for layer in run:
        for t in (*layer.inputs, layer.output):
            nbytes[t] = e.tensor(t).nbytes
            row_bytes[t] = nbytes[t] // e.tensor(t).shape[1]
    positions = {layer.op: i for i, layer in enumerate(run)}
    # a TRANSPOSE a convolution reads through reads its input where the convolution does
    positions.update({layer.fused_transpose: i for i, layer in enumerate(run) if layer.fused_transpose is not None})
    too_slow: dict[int, float] = {}  # a layer whose rows cost more instructions than allowed -> the least overhead
    made_at = {layer.output: i for i, layer in enumerate(run)}
    touched = dict.fromkeys(t for layer in run for t in (*layer.inputs, layer.output))

    def held_across(i: int, j: int, own: set[int]) -> int:
        """Bytes of the run's other tensors live while layers i..j run: made before them (earlier in the run, or
        before it) and read after them (or model outputs), whichever way the rest of the run is cut."""
        last_op = run[j].op
        return sum(
            nbytes[t]
            for t in touched
            if t not in own
            and made_at.get(t, -1) < i
            and (t in outputs or any(r > last_op for r in consumers.get(t, [])))
        )

    @cache
    def segment(i: int, j: int) -> tuple[RowChain | None, int]:
        """Layers i..j as one chain (None: a tensor made inside is read outside, or one layer that cannot write
        over its input), and its RAM."""
        layers = run[i : j + 1]
        made = {layer.output for layer in layers}
        sources = tuple(dict.fromkeys(t for layer in layers for t in layer.inputs if t not in made))
        whole = sum(nbytes[t] for t in sources) + nbytes[run[j].output]
        own_scratch = max(scratch.get(layer.op, 0) for layer in layers)  # one buffer, a row call at a time
        if any(layer.in_row_bytes and layer.inputs[0] in made for layer in layers):
            return None, -1  # a TRANSPOSE reads its input whole
        for layer in layers[:-1]:
            readers = consumers.get(layer.output, [])
            if layer.output in outputs or any(positions.get(r, -1) not in range(i, j + 1) for r in readers):
                return None, -1
        dying = {
            t
            for t in sources
            if t not in outputs and all(positions.get(r, -1) in range(i, j + 1) for r in consumers.get(t, []))
        }
        single = layers[0]
        across = held_across(i, j, {*sources, run[j].output})
        if whole_depthwise and i == j and single.writes_over == "channel" and single.inputs[0] in dying:
            # a depthwise layer alone runs whole over its input already (`Executor.COMPILED`'s in-place rule),
            # with no plane copied per output row
            return None, max(nbytes[single.inputs[0]], nbytes[single.output]) + own_scratch + across
        # a TRANSPOSE's source, read whole: its rows as they lie in memory (a source made earlier in the run is
        # a source here all the same); a source other layers read as NHWC rows too takes the smaller step
        source_rows = dict(row_bytes)
        for layer in layers:
            if layer.in_row_bytes:
                t = layer.inputs[0]
                source_rows[t] = min(source_rows[t], layer.in_row_bytes)
        one_row = i == j and len(single.inputs) == 1 and single.writes_over == "pixel"
        whole_instructions = sum(layer.whole_instructions for layer in layers)
        extra = 0 if one_row else sum(layer.row_instructions - layer.whole_instructions for layer in layers)
        if extra > max(max_overhead * whole_instructions, negligible):
            for layer in layers:
                too_slow[layer.op] = min(too_slow.get(layer.op, math.inf), extra / max(whole_instructions, 1))
            return (None, -1) if i < j else (None, whole + own_scratch + across)
        order, rings, headroom = _schedule(layers, source_rows, dying)
        overlap, saved = None, 0
        out_bytes = nbytes[run[j].output]
        for t, room in sorted(headroom.items()):
            # as far right as the rows allow, up to the output ending where the source ends
            offset = room if room <= 0 else min(room, max(0, nbytes[t] - out_bytes) // ALIGNMENT * ALIGNMENT)
            extent = max(nbytes[t], offset + out_bytes) - min(0, offset)
            if nbytes[t] + out_bytes - extent > saved:
                overlap, saved = (t, offset), nbytes[t] + out_bytes - extent
        guests = _guests(layers, order, rings, row_bytes)
        own = {t: rows for t, rows in rings.items() if t not in {g.tensor for g in guests}}
        ring_bytes = sum(rows * row_bytes[t] for t, rows in own.items())
        chain = RowChain(
            ops=tuple(layer.op for layer in layers),
            sources=sources,
            output=run[j].output,
            ring_rows=tuple(sorted(own.items())),
            order=tuple(order),
            ring_bytes=ring_bytes,
            whole_bytes=sum(nbytes[t] for t in rings),
            overlap=overlap,
            one_row=one_row,
            whole_instructions=whole_instructions,
            extra_instructions=extra,
            guests=guests,
            transposes=tuple(
                (layer.op, layer.fused_transpose) for layer in layers if layer.fused_transpose is not None
            ),
        )
        if i == j and overlap is None:  # one layer alone gains only by writing over its input
            return None, whole + own_scratch + across
        return chain, whole - saved + ring_bytes + own_scratch + across

    # best[j]: (largest RAM, total RAM, segments) of the best cut of run[:j]
    best: list[tuple[int, int, list[tuple[int, int]]]] = [(0, 0, [])]
    for j in range(1, len(run) + 1):
        choice = None
        # a row of each tensor made inside layers i..j-1 that cannot be a guest (`RingGuest`): below any such
        # chain's RAM, growing with it
        inner = 0
        for i in range(j - 1, -1, -1):
            if i < j - 1 and not run[i].writes_over:
                inner += row_bytes[run[i].output]
            if choice is not None and inner > choice[0]:
                break  # every longer chain holds more than the best cut so far
            peak, total, cuts = best[i]
            chain, ram = segment(i, j - 1)
            if ram < 0:
                continue
            candidate = (max(peak, ram), total + ram, [*cuts, (i, j - 1)])
            if choice is None or candidate[:2] < choice[:2]:
                choice = candidate
        assert choice is not None  # a single layer is always a segment
        best.append(choice)
    chains, refusals = [], []
    for i, j in best[-1][2]:
        chain = segment(i, j)[0]
        if chain is not None:
            chains.append(chain)
        else:
            if run[i].op in too_slow:
                least = too_slow[run[i].op]
                reason = f"by rows, alone or in a chain, it would run ~{least:.0%} more instructions (limit {max_overhead:.0%})"
            elif len(run) > 1:
                reason = "a chain through it would hold more RAM (minimax cut)"
            else:
                reason = "no row layer next to it"
            refusals.append(RowRefusal((run[i].op,), reason))
    return chains, refusals
