"""Turn a `TilingPlan` into a model stock TFLM runs: SPLIT_V, STRIDED_SLICE, PAD, the original operators with
VALID padding, and CONCATENATION, all builtins (`emit_tiled`, `emit_in_order`); and write a rewritten graph's
placement into it as its offline plan (`planned_model`).

The new model shares everything it can with the original: weights and biases are the original tensors (so the
patches compute with exactly the original parameters), operators outside the region are the original operator
objects, and each window tensor copies the quantization of the tensor whose values it holds. Tensors that no
operator uses any more are dropped, so TFLM allocates no per-tensor structs for them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from lowtide.budget import WorkBudget
from lowtide.memory import placed_plan
from lowtide.memory.placement import check_no_overlap, offline_plan, placement_budget
from lowtide.model.attributes import (
    ConcatenationAttributes,
    Conv2DAttributes,
    DepthwiseConv2DAttributes,
    Padding,
    Pool2DAttributes,
    SplitVAttributes,
    StridedSliceAttributes,
    TransposeConvAttributes,
    UnreadAttributes,
)
from lowtide.model.edit import GraphEditor, with_offline_plan
from lowtide.model.ir import Graph, Subgraph
from lowtide.model.operators import RESIZE_OPCODES
from lowtide.model.schema import TYPE_NAMES
from lowtide.rewrite.regions import (
    Apply,
    Concat,
    Pad,
    Piece,
    Slice,
    Split,
    TilingPlan,
    whole_piece,
)

# Attributes with a padding, which windows run with VALID.
WINDOW_ATTRIBUTES = (Conv2DAttributes, DepthwiseConv2DAttributes, Pool2DAttributes, TransposeConvAttributes)


def emit_tiled(graph: Graph, plan: TilingPlan, before: list[int], after: list[int]) -> Graph:
    """A new graph: main-subgraph operators `before` (original indices), the plan's steps, then `after`.
    `graph` is left untouched; weight buffers are shared with it, not copied."""
    writer = TilingEditor(graph)
    sg = graph.main
    last = plan.steps[-1]
    assert not isinstance(last, Split)  # a plan ends in the step that writes its target
    whole = {whole_piece(sg, t): t for t in plan.region.held_whole} | {last.result: plan.region.target}
    tensor_of = dict(whole)

    def window(piece: Piece) -> int:
        if piece not in tensor_of:
            tensor_of[piece] = writer.activation_like(
                piece.quant_of, (1, piece.height, piece.width, _channels(piece)), _piece_name(sg, piece)
            )
        return tensor_of[piece]

    def _channels(piece: Piece) -> int:
        return sg.tensors[piece.tensor].shape[3]

    operators = [writer.original(i) for i in before]
    for step in plan.steps:
        if isinstance(step, Slice):
            begin = [0, step.result.rows[0] - step.source.rows[0], step.result.cols[0] - step.source.cols[0], 0]
            end = [1, begin[1] + step.result.height, begin[2] + step.result.width, _channels(step.result)]
            operators.append(writer.strided_slice(window(step.source), begin, end, window(step.result)))
        elif isinstance(step, Pad):
            paddings = [
                [0, 0],
                [step.source.rows[0] - step.result.rows[0], step.result.rows[1] - step.source.rows[1]],
                [step.source.cols[0] - step.result.cols[0], step.result.cols[1] - step.source.cols[1]],
                [0, 0],
            ]
            source, result = window(step.source), window(step.result)
            if step.lowest:
                operators.append(writer.pad_lowest(source, paddings, result))
            else:
                operators.append(writer.pad(source, paddings, result, step.pad_op))
        elif isinstance(step, Apply):
            inputs = {slot: window(piece) for slot, piece in step.inputs}
            results = [window(piece) for piece in step.results]
            if step.spatial_padding is not None:
                operators.append(writer.pad_window(step.op, inputs[0], step.spatial_padding, results[0]))
            else:
                operators.append(writer.valid(step.op, inputs, results, (step.result.height, step.result.width)))
        elif isinstance(step, Concat):
            operators.append(writer.concatenation([window(p) for p in step.sources], step.axis, window(step.result)))
        elif isinstance(step, Split):
            operators.append(
                writer.split_rows(
                    window(step.source), [p.height for p in step.results], [window(p) for p in step.results]
                )
            )
    operators.extend(writer.original(i) for i in after)
    return writer.finish(operators)


WINDOW_NAME = "/patch_r"  # in the name of every window tensor a tiling creates


def _piece_name(sg: Subgraph, piece: Piece) -> str:
    return (
        f"{sg.tensors[piece.tensor].name}{WINDOW_NAME}{piece.rows[0]}_{piece.rows[1]}_c{piece.cols[0]}_{piece.cols[1]}"
    )


def is_window(name: str) -> bool:
    """Whether the tensor named `name` is a window of another, made by an earlier tiling."""
    return WINDOW_NAME in name


class TilingEditor(GraphEditor):
    """The graph editor with the operators a tiling plan adds."""

    def __init__(self, graph: Graph):
        super().__init__(graph)
        self.source = graph

    def strided_slice(self, source: int, begin: list[int], end: list[int], result: int) -> Any:
        inputs = [source, self.int32_constant(begin), self.int32_constant(end), self.int32_constant([1, 1, 1, 1])]
        return self.operator("STRIDED_SLICE", inputs, result, StridedSliceAttributes())

    def pad(self, source: int, paddings: list[list[int]], result: int, pad_op: int | None) -> Any:
        inputs = [source, self.int32_constant(paddings)]
        if pad_op is not None:  # keep the original PAD's constant_values input, if it has one
            inputs.extend(self._sg_raw.operators[pad_op].inputs[2:3])
        return self.operator("PAD", inputs, result, UnreadAttributes("PadOptions"))

    def split_rows(self, source: int, heights: list[int], results: list[int]) -> Any:
        """SPLIT_V of an NHWC tensor along its rows."""
        inputs = [source, self.int32_constant(heights), self.int32_constant(1)]
        return self.operator("SPLIT_V", inputs, results, SplitVAttributes(num_splits=len(results)))

    def concatenation(self, sources: list[int], axis: int, result: int) -> Any:
        return self.operator("CONCATENATION", sources, result, ConcatenationAttributes(axis=axis))

    def pad_lowest(self, source: int, paddings: list[list[int]], result: int) -> Any:
        """PADV2 with the lowest value of `source`'s type: what a SAME MAX_POOL's out-of-image taps amount to
        (TFLM skips them; no maximum picks the lowest value over an in-image one)."""
        dtype = np.dtype(TYPE_NAMES[self.tensors[source].type])
        lowest = np.array([np.finfo(dtype).min if dtype.kind == "f" else np.iinfo(dtype).min], dtype=dtype)
        fill = self.constant_like(source, lowest, f"{self.tensors[source].name}/lowest")
        inputs = [source, self.int32_constant(paddings), fill]
        return self.operator("PADV2", inputs, result, UnreadAttributes("PadV2Options"))

    def pad_window(self, index: int, source: int, spatial: tuple[tuple[int, int], tuple[int, int]], result: int) -> Any:
        """The PAD, PADV2 or MIRROR_PAD `index` on one window of its input: its own padding of the batch and
        channels, and `spatial` ((before, after) rows, columns): where the window leaves the input."""
        op = self.original(index)
        paddings = np.array(self.source.constant_array(op.inputs[1]), dtype=np.int64).tolist()
        paddings[1], paddings[2] = list(spatial[0]), list(spatial[1])
        op.inputs = [source, self.int32_constant(paddings), *op.inputs[2:]]
        op.outputs = [result]
        return op

    def valid(self, index: int, inputs: dict[int, int], results: list[int], window: tuple[int, int]) -> Any:
        """The original operator on windows: same weights, bias, options and quantization, VALID padding; a
        resize gets the size of its output `window` (rows, columns)."""
        op = self.original(index)
        op.inputs = [inputs.get(slot, t) for slot, t in enumerate(op.inputs)]
        op.outputs = list(results)
        attributes = self.source.main.operators[index].attributes
        if isinstance(attributes, WINDOW_ATTRIBUTES):
            self.set_attributes(op, dataclasses.replace(attributes, padding=Padding.VALID))
        if self.source.main.operators[index].opcode in RESIZE_OPCODES:
            op.inputs[1] = self.int32_constant(list(window))
        return op


def emit_in_order(graph: Graph, plan: TilingPlan, order: list[int] | None) -> Graph:
    """The plan placed in `order` (default: stored): operators the source depends on, the region's broadcast
    branch, the patches, then everything else."""
    sg = graph.main
    order = order if order is not None else list(range(len(sg.operators)))
    region_ops = plan.region.all_ops
    producers = sg.producers()
    before_mask: set[int] = set()
    stack = [producers[t] for t in plan.region.held_whole if t in producers]
    while stack:
        op = stack.pop()
        if op not in before_mask:
            before_mask.add(op)
            stack.extend(producers[t] for t in sg.operators[op].inputs if t in producers)
    before = [op for op in order if op in before_mask or op in plan.region.broadcast_ops]
    after = [op for op in order if op not in before_mask and op not in region_ops]
    return emit_tiled(graph, plan, before, after)


def planned_model(graph: Graph, work: WorkBudget | None = None) -> tuple[int, Graph]:
    """The graph with its placement as an OfflineMemoryAllocation plan, so stock TFLM allocates exactly that
    head (a SPLIT_V's strips only share their source's bytes through such a plan); and the head. The placement is
    lowtide's of the stored order, in-place outputs inside their inputs and CONCATENATION inputs inside their
    output where that places lower (`work`: default `place`'s, and as much again for those, `placed_plan`)."""
    plan = placed_plan(graph, None, work or placement_budget())
    check_no_overlap(plan.buffers, plan.placement.offsets)
    return plan.placement.head_bytes, with_offline_plan(
        graph, offline_plan(graph, plan.buffers, plan.placement.offsets)
    )
