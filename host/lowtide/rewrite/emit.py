"""Turn a `TilingPlan` into a model stock TFLM runs: SPLIT_V, STRIDED_SLICE, PAD, the original operators with
VALID padding, and CONCATENATION, all builtins.

The new model shares everything it can with the original: weights and biases are the original tensors (so the
patches compute with exactly the original parameters), operators outside the region are the original operator
objects, and each window tensor copies the quantization of the tensor whose values it holds. Tensors that no
operator uses any more are dropped, so TFLM allocates no per-tensor structs for them.
"""

from __future__ import annotations

import copy

import numpy as np

from lowtide.model.ir import Graph
from lowtide.model.offline_memory import NAME as OFFLINE_PLAN_NAME
from lowtide.model.operators import RESIZE_OPCODES
from lowtide.model.schema import BUILTIN_CODES, TYPE_CODES, TYPE_NAMES, builtin_code, fb, operator_code
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

RESIZE_CODES = frozenset(BUILTIN_CODES[name] for name in RESIZE_OPCODES)


def emit_tiled(graph: Graph, plan: TilingPlan, before: list[int], after: list[int]):
    """A new ModelT: main-subgraph operators `before` (original indices), the plan's steps, then `after`.
    `graph.raw` is left untouched; weight buffers are shared with it, not copied."""
    writer = ModelWriter(graph)
    sg = graph.main
    last = plan.steps[-1]
    assert not isinstance(last, Split)  # a plan ends in the step that writes its target
    whole = {whole_piece(sg, t): t for t in plan.region.held_whole} | {last.result: plan.region.target}
    tensor_of = dict(whole)

    def window(piece: Piece) -> int:
        if piece not in tensor_of:
            tensor_of[piece] = writer.activation_like(piece.quant_of, (1, piece.height, piece.width, _channels(piece)),
                                                      _piece_name(sg, piece))
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
            paddings = [[0, 0],
                        [step.source.rows[0] - step.result.rows[0], step.result.rows[1] - step.source.rows[1]],
                        [step.source.cols[0] - step.result.cols[0], step.result.cols[1] - step.source.cols[1]],
                        [0, 0]]
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
            operators.append(writer.split_rows(window(step.source), [p.height for p in step.results],
                                               [window(p) for p in step.results]))
    operators.extend(writer.original(i) for i in after)
    return writer.finish(operators)


WINDOW_NAME = "/patch_r"  # in the name of every window tensor a tiling creates


def _piece_name(sg, piece: Piece) -> str:
    return f"{sg.tensors[piece.tensor].name}{WINDOW_NAME}{piece.rows[0]}_{piece.rows[1]}_c{piece.cols[0]}_{piece.cols[1]}"


def is_window(name: str) -> bool:
    """Whether the tensor named `name` is a window of another, made by an earlier tiling."""
    return WINDOW_NAME in name


class ModelWriter:
    """Collects new tensors, buffers and operator codes on a shallow copy of the model."""

    def __init__(self, graph: Graph):
        raw = graph.raw
        self._graph = graph
        self.model = copy.copy(raw)
        self.model.buffers = list(raw.buffers)
        self.model.operatorCodes = list(raw.operatorCodes)
        self._sg_raw = raw.subgraphs[0]
        self.tensors = list(self._sg_raw.tensors)
        self._constants: dict[tuple, int] = {}

    # ---- tensors --------------------------------------------------------------------------------------
    def activation_like(self, like: int, shape: tuple[int, ...], name: str) -> int:
        original = self._sg_raw.tensors[like]
        t = fb.TensorT()
        t.name = name
        t.shape = list(shape)
        t.type = original.type
        t.buffer = 0
        t.quantization = copy.deepcopy(original.quantization)
        self.tensors.append(t)
        return len(self.tensors) - 1

    def activation(self, shape: tuple[int, ...], like: int, scale: float, zero_point: int, name: str) -> int:
        """A new activation of `like`'s type with its own per-tensor quantization."""
        index = self.activation_like(like, shape, name)
        q = fb.QuantizationParametersT()
        q.scale, q.zeroPoint = [float(scale)], [int(zero_point)]
        self.tensors[index].quantization = q
        return index

    def constant_like(self, like: int, values: np.ndarray, name: str) -> int:
        """A new constant holding `values`, with the type and quantization of tensor `like` (any tensor the
        writer holds)."""
        original = self.tensors[like]
        buffer = fb.BufferT()
        buffer.data = np.frombuffer(np.ascontiguousarray(values).tobytes(), dtype=np.uint8).copy()
        self.model.buffers.append(buffer)
        t = fb.TensorT()
        t.name, t.shape, t.type = name, list(values.shape), original.type
        t.buffer = len(self.model.buffers) - 1
        t.quantization = copy.deepcopy(original.quantization)
        self.tensors.append(t)
        return len(self.tensors) - 1

    def constant_slice(self, like: int, axis: int, channels: np.ndarray, name: str) -> int:
        """Constant `like` restricted to `channels` along `axis`; per-channel quantization along that axis is
        restricted with it, so every kept channel computes exactly as before."""
        values = self._graph.constant_array(like)
        assert values is not None, like  # the callers restrict constant operands only
        index = self.constant_like(like, np.ascontiguousarray(np.take(values, channels, axis=axis)), name)
        q = self.tensors[index].quantization
        if q is not None and q.scale is not None and len(q.scale) > 1 and (q.quantizedDimension or 0) == axis:
            q.scale = np.asarray(q.scale)[channels]
            q.zeroPoint = np.asarray(q.zeroPoint)[channels]
        return index

    def int32_constant(self, values: int | list[int] | list[list[int]]) -> int:
        array = np.asarray(values, dtype="<i4")
        key = (array.shape, array.tobytes())
        if key not in self._constants:
            buffer = fb.BufferT()
            buffer.data = np.frombuffer(array.tobytes(), dtype=np.uint8).copy()
            self.model.buffers.append(buffer)
            t = fb.TensorT()
            t.name = f"lowtide/const_{len(self._constants)}"
            t.shape = list(array.shape)
            t.type = TYPE_CODES["int32"]
            t.buffer = len(self.model.buffers) - 1
            self.tensors.append(t)
            self._constants[key] = len(self.tensors) - 1
        return self._constants[key]

    # ---- operators ------------------------------------------------------------------------------------
    def opcode_index(self, name: str) -> int:
        code = operator_code(name)
        for i, existing in enumerate(self.model.operatorCodes):
            if builtin_code(existing) == code.builtinCode:
                return i
        self.model.operatorCodes.append(code)
        return len(self.model.operatorCodes) - 1

    def original(self, index: int):
        return copy.copy(self._sg_raw.operators[index])

    def operator(self, name: str, inputs: list[int], output: int | list[int], options_type: int, options):
        op = fb.OperatorT()
        op.opcodeIndex = self.opcode_index(name)
        op.inputs, op.outputs = list(inputs), list(output) if isinstance(output, list) else [output]
        op.builtinOptionsType, op.builtinOptions = options_type, options
        return op

    def strided_slice(self, source: int, begin: list[int], end: list[int], result: int):
        options = fb.StridedSliceOptionsT()
        inputs = [source, self.int32_constant(begin), self.int32_constant(end), self.int32_constant([1, 1, 1, 1])]
        return self.operator("STRIDED_SLICE", inputs, result, fb.BuiltinOptions.StridedSliceOptions, options)

    def pad(self, source: int, paddings: list[list[int]], result: int, pad_op: int | None):
        inputs = [source, self.int32_constant(paddings)]
        if pad_op is not None:  # keep the original PAD's constant_values input, if it has one
            inputs.extend(self._sg_raw.operators[pad_op].inputs[2:3])
        return self.operator("PAD", inputs, result, fb.BuiltinOptions.PadOptions, fb.PadOptionsT())

    def split_rows(self, source: int, heights: list[int], results: list[int]):
        """SPLIT_V of an NHWC tensor along its rows."""
        options = fb.SplitVOptionsT()
        options.numSplits = len(results)
        inputs = [source, self.int32_constant(heights), self.int32_constant(1)]
        return self.operator("SPLIT_V", inputs, results, fb.BuiltinOptions.SplitVOptions, options)

    def concatenation(self, sources: list[int], axis: int, result: int):
        options = fb.ConcatenationOptionsT()
        options.axis = axis
        options.fusedActivationFunction = fb.ActivationFunctionType.NONE
        return self.operator("CONCATENATION", sources, result, fb.BuiltinOptions.ConcatenationOptions, options)

    def pad_lowest(self, source: int, paddings: list[list[int]], result: int):
        """PADV2 with the lowest value of `source`'s type: what a SAME MAX_POOL's out-of-image taps amount to
        (TFLM skips them; no maximum picks the lowest value over an in-image one)."""
        dtype = np.dtype(TYPE_NAMES[self.tensors[source].type])
        lowest = np.array([np.finfo(dtype).min if dtype.kind == "f" else np.iinfo(dtype).min], dtype=dtype)
        fill = self.constant_like(source, lowest, f"{self.tensors[source].name}/lowest")
        inputs = [source, self.int32_constant(paddings), fill]
        return self.operator("PADV2", inputs, result, fb.BuiltinOptions.PadV2Options, fb.PadV2OptionsT())

    def pad_window(self, index: int, source: int, spatial: tuple[tuple[int, int], tuple[int, int]], result: int):
        """The PAD, PADV2 or MIRROR_PAD `index` on one window of its input: its own padding of the batch and
        channels, and `spatial` ((before, after) rows, columns): where the window leaves the input."""
        op = copy.copy(self._sg_raw.operators[index])
        paddings = np.array(self._graph.constant_array(op.inputs[1]), dtype=np.int64).tolist()
        paddings[1], paddings[2] = list(spatial[0]), list(spatial[1])
        op.inputs = [source, self.int32_constant(paddings), *op.inputs[2:]]
        op.outputs = [result]
        return op

    def valid(self, index: int, inputs: dict[int, int], results: list[int], window: tuple[int, int]):
        """The original operator on windows: same weights, bias, options and quantization, VALID padding; a
        resize gets the size of its output `window` (rows, columns)."""
        op = copy.copy(self._sg_raw.operators[index])
        op.inputs = [inputs.get(slot, t) for slot, t in enumerate(op.inputs)]
        op.outputs = list(results)
        if hasattr(op.builtinOptions, "padding"):
            op.builtinOptions = copy.copy(op.builtinOptions)
            op.builtinOptions.padding = fb.Padding.VALID
        if builtin_code(self.model.operatorCodes[op.opcodeIndex]) in RESIZE_CODES:
            op.inputs[1] = self.int32_constant(list(window))
        return op

    # ---- the finished model ---------------------------------------------------------------------------
    def finish(self, operators: list):
        """Drop tensors no operator or subgraph boundary uses, renumber the rest, and drop metadata that
        names tensors by index (an offline memory plan no longer fits)."""
        sg = copy.copy(self._sg_raw)
        used = sorted({t for op in operators for t in list(op.inputs) + list(op.outputs) + list(op.intermediates or [])
                       if t >= 0} | set(sg.inputs) | set(sg.outputs))
        renumber = {old: new for new, old in enumerate(used)}
        for op in operators:
            op.inputs = [renumber[t] if t >= 0 else t for t in op.inputs]
            op.outputs = [renumber[t] for t in op.outputs]
            if op.intermediates is not None and len(op.intermediates):
                op.intermediates = [renumber[t] for t in op.intermediates]
        sg.tensors = [self.tensors[t] for t in used]
        sg.inputs = [renumber[t] for t in sg.inputs]
        sg.outputs = [renumber[t] for t in sg.outputs]
        sg.operators = operators
        self.model.subgraphs = [sg] + list(self.model.subgraphs[1:])
        if self.model.metadata:
            self.model.metadata = [m for m in self.model.metadata if _name(m) != OFFLINE_PLAN_NAME]
        if self.model.signatureDefs:
            self.model.signatureDefs = [_renumbered_signature(s, renumber) for s in self.model.signatureDefs]
        return self.model


def _name(entry) -> str:
    return entry.name.decode("utf-8", "replace") if isinstance(entry.name, bytes) else str(entry.name)


def _renumbered_signature(signature, renumber: dict[int, int]):
    if signature.subgraphIndex != 0:
        return signature
    signature = copy.copy(signature)
    for field in ("inputs", "outputs"):
        maps = []
        for m in getattr(signature, field) or []:
            m = copy.copy(m)
            m.tensorIndex = renumber[m.tensorIndex]
            maps.append(m)
        setattr(signature, field, maps)
    return signature
