"""Build small int8 .tflite graphs from a few Python calls, for tests and the README demo.

Each call adds one operator and returns a handle to its output tensor. Operators are stored in call order
unless `build(order=...)` names another topological order, so tests can write the same graph in a bad and a
good order. Weights are drawn from `numpy.random.default_rng(seed)` as the calls are made: the same calls and
seed give the same bytes, whatever order is chosen.

Quantization follows TFLite's int8 scheme: per-channel symmetric weights, int32 bias with
scale = input_scale * weight_scale, affine int8 activations. Activation ranges are estimated from each
operator's fan-in (weights are drawn so a layer roughly keeps the root-mean-square of its input), and operators
whose int8 kernels copy bytes without requantizing (CONCATENATION, SPLIT_V, pooling, RESHAPE) share one scale and
zero point across their inputs and outputs, as the TFLite converter arranges it.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from lowtide.errors import LowtideError
from lowtide.model import attributes as attrs
from lowtide.model import padding as window
from lowtide.model.edit import GraphEditor
from lowtide.model.ir import Graph, Quantization

Activation = Literal["NONE", "RELU", "RELU6"]
UnaryActivation = Literal["LOGISTIC", "TANH", "HARD_SWISH", "RELU", "RELU6", "RELU_N1_TO_1", "LEAKY_RELU"]
InputType = Literal["int8", "uint8", "float32"]
Padding = Literal["SAME", "VALID"]

_ACTIVATION_CODES: dict[str, attrs.Activation] = {
    "NONE": attrs.Activation.NONE,
    "RELU": attrs.Activation.RELU,
    "RELU6": attrs.Activation.RELU6,
}
_PADDING_CODES: dict[str, attrs.Padding] = {"SAME": attrs.Padding.SAME, "VALID": attrs.Padding.VALID}
# How many root-mean-squares of a tensor its int8 range covers: wide enough that few values clip, narrow
# enough that typical values use most of the 256 levels.
_RANGE_IN_RMS = 3.5
_builder_serials = itertools.count()


@dataclass(frozen=True)
class TensorRef:
    """A tensor of the graph being built, as returned by the builder's calls."""

    index: int  # tensor index in the built model
    shape: tuple[int, ...]
    op: int | None  # call-order index of the operator that writes it; None for a model input
    builder: int  # serial number of the ModelBuilder that made it: handles cannot cross models


@dataclass(frozen=True)
class _QuantParams:
    scale: float
    zero_point: int


@dataclass(frozen=True)
class _ActivationSpec:
    name: str
    shape: tuple[int, ...]
    rms: float  # estimated root-mean-square of the real values
    nonnegative: bool  # after RELU/RELU6: the int8 range can start at 0
    fixed_range: tuple[float, float] | None = None  # model inputs: the range the caller gave
    dtype: str = "int8"  # "float32" (DEQUANTIZE's output, a float input): no quantization; "uint8" (an input)
    fixed_quant: _QuantParams | None = None  # what the kernel requires (LOGISTIC: 1/256, -128)


@dataclass(frozen=True)
class _ConstantSpec:
    name: str
    values: np.ndarray  # float32, broadcast against an activation (per channel or scalar)
    quant_like: int | None  # activation whose scale and zero point it takes; None: its own symmetric scale


@dataclass(frozen=True)
class _WeightSpec:
    name: str
    values: np.ndarray  # float32, in the TFLite layout of the operator
    channel_axis: int | None  # per-channel quantization axis; None = one scale for the whole tensor


@dataclass(frozen=True)
class _BiasSpec:
    name: str
    values: np.ndarray  # float32, one per output channel
    input: int  # tensor index of the activation the bias is added to (its scale is part of the bias scale)
    weights: int  # tensor index of the weights


@dataclass(frozen=True)
class _Int32Spec:
    name: str
    values: np.ndarray  # int32 operator parameters stored as they are (SPLIT_V's sizes and axis)


@dataclass(frozen=True)
class _OperatorSpec:
    opcode: str
    inputs: tuple[int, ...]  # tensor indices, activations and constants as the kernel expects them
    outputs: tuple[int, ...]
    attributes: attrs.Attributes | None


class ModelBuilder:
    """Describe an int8 graph one operator at a time, then `build()` it into .tflite bytes."""

    def __init__(self, seed: int = 0, name: str = "lowtide_builder"):
        self._serial = next(_builder_serials)
        self._rng = np.random.default_rng(seed)
        self._name = name
        self._tensors: list[_ActivationSpec | _WeightSpec | _BiasSpec | _Int32Spec | _ConstantSpec] = []
        self._operators: list[_OperatorSpec] = []
        self._producer: dict[int, int] = {}  # activation tensor index -> operator index
        self._inputs: list[int] = []
        self._outputs: list[int] = []
        # Union-find over activation tensors that must share quantization parameters.
        self._same_quant_parent: dict[int, int] = {}

    # ---- graph inputs and outputs -------------------------------------------------------------------------
    def input(
        self, shape: Sequence[int], value_range: tuple[float, float] = (-1.0, 1.0), dtype: InputType = "int8"
    ) -> TensorRef:
        """A model input, NHWC, covering `value_range` in real values: int8, or uint8 or float32 as camera
        pipelines deliver them (follow it with `quantize` to reach int8)."""
        lo, hi = value_range
        if not lo < hi:
            raise LowtideError(f"input range {value_range} is empty")
        if dtype not in ("int8", "uint8", "float32"):
            raise LowtideError(f"input type must be int8, uint8 or float32, got {dtype!r}")
        rms = math.sqrt((lo * lo + lo * hi + hi * hi) / 3.0)  # of a uniform distribution on [lo, hi]
        ref = self._add_activation(f"input_{len(self._inputs)}", tuple(shape), rms, lo >= 0, None, (lo, hi))
        self._tensors[ref.index] = dataclasses.replace(self._activation_spec(ref.index), dtype=dtype)
        self._inputs.append(ref.index)
        return ref

    def output(self, *tensors: TensorRef) -> None:
        for t in tensors:
            self._check_activation(t)
            self._outputs.append(t.index)

    # ---- operators ----------------------------------------------------------------------------------------
    def conv2d(
        self,
        x: TensorRef,
        filters: int,
        kernel: int = 3,
        stride: int = 1,
        padding: Padding = "SAME",
        activation: Activation = "RELU",
        dilation: int = 1,
    ) -> TensorRef:
        n, h, w, c = self._nhwc(x)
        out_h, out_w = _conv_out(h, kernel, stride, padding, dilation), _conv_out(w, kernel, stride, padding, dilation)
        weights = self._draw_weights((filters, kernel, kernel, c), fan_in=kernel * kernel * c, activation=activation)
        attributes = attrs.Conv2DAttributes(
            padding=_PADDING_CODES[padding],
            stride=(stride, stride),
            dilation=(dilation, dilation),
            fused_activation=_activation_code(activation),
        )
        return self._add_weighted(
            "CONV_2D",
            x,
            weights,
            channel_axis=0,
            out_shape=(n, out_h, out_w, filters),
            activation=activation,
            attributes=attributes,
        )

    def depthwise_conv2d(
        self,
        x: TensorRef,
        kernel: int = 3,
        stride: int = 1,
        padding: Padding = "SAME",
        activation: Activation = "RELU",
        depth_multiplier: int = 1,
        dilation: int = 1,
    ) -> TensorRef:
        n, h, w, c = self._nhwc(x)
        out_h, out_w = _conv_out(h, kernel, stride, padding, dilation), _conv_out(w, kernel, stride, padding, dilation)
        channels = c * depth_multiplier
        weights = self._draw_weights((1, kernel, kernel, channels), fan_in=kernel * kernel, activation=activation)
        attributes = attrs.DepthwiseConv2DAttributes(
            padding=_PADDING_CODES[padding],
            stride=(stride, stride),
            depth_multiplier=depth_multiplier,
            dilation=(dilation, dilation),
            fused_activation=_activation_code(activation),
        )
        return self._add_weighted(
            "DEPTHWISE_CONV_2D",
            x,
            weights,
            channel_axis=3,
            out_shape=(n, out_h, out_w, channels),
            activation=activation,
            attributes=attributes,
        )

    def fully_connected(self, x: TensorRef, units: int, activation: Activation = "NONE") -> TensorRef:
        """Dense layer over all but the batch dimension (TFLM flattens a 4-D input itself)."""
        batch, features = x.shape[0], math.prod(x.shape[1:])
        weights = self._draw_weights((units, features), fan_in=features, activation=activation)
        # TFLite quantizes FULLY_CONNECTED weights per tensor; TFLM's reference kernel expects that.
        return self._add_weighted(
            "FULLY_CONNECTED",
            x,
            weights,
            channel_axis=None,
            out_shape=(batch, units),
            activation=activation,
            attributes=attrs.FullyConnectedAttributes(fused_activation=_activation_code(activation)),
        )

    def add(self, a: TensorRef, b: TensorRef, activation: Activation = "NONE") -> TensorRef:
        if a.shape != b.shape:
            raise LowtideError(f"ADD needs equal shapes, got {a.shape} and {b.shape}")
        sa, sb = self._activation(a), self._activation(b)
        pre_rms = math.hypot(sa.rms, sb.rms)  # branches treated as independent
        return self._add_op(
            "ADD",
            (a.index, b.index),
            a.shape,
            *_after_activation(pre_rms, activation, sa.nonnegative and sb.nonnegative),
            attrs.AddAttributes(fused_activation=_activation_code(activation)),
        )

    def concat(self, tensors: Sequence[TensorRef], axis: int = -1) -> TensorRef:
        """Concatenate along `axis` (default: the channel, last, axis). TFLM's int8 kernel copies bytes, so
        every input and the output share one scale and zero point."""
        if len(tensors) < 2:
            raise LowtideError("CONCATENATION needs at least two inputs")
        first = tensors[0].shape
        axis = _axis(axis, first)

        def others(shape: tuple[int, ...]) -> tuple[int, ...]:
            return shape[:axis] + shape[axis + 1 :]

        if any(len(t.shape) != len(first) or others(t.shape) != others(first) for t in tensors):
            shapes = [t.shape for t in tensors]
            raise LowtideError(f"CONCATENATION needs equal shapes but for axis {axis}, got {shapes}")
        specs = [self._activation(t) for t in tensors]
        sizes = [t.shape[axis] for t in tensors]
        rms = math.sqrt(sum(s.rms**2 * n for s, n in zip(specs, sizes)) / sum(sizes))
        out = self._add_op(
            "CONCATENATION",
            tuple(t.index for t in tensors),
            (*first[:axis], sum(sizes), *first[axis + 1 :]),
            rms,
            all(s.nonnegative for s in specs),
            attrs.ConcatenationAttributes(axis=axis),
        )
        for t in tensors:
            self._share_quant(t.index, out.index)
        return out

    def split(self, x: TensorRef, sizes: Sequence[int], axis: int) -> list[TensorRef]:
        """SPLIT_V: cut `x` along `axis` into pieces of `sizes` elements (one size may be -1: the rest), one
        tensor per piece. TFLM's kernel copies bytes, so the pieces share the input's scale and zero point."""
        axis = _axis(axis, x.shape)
        sizes = [int(n) for n in sizes]
        known = [n for n in sizes if n != -1]
        rest = x.shape[axis] - sum(known)
        valid = (
            bool(sizes)
            and all(n > 0 for n in known)
            and sizes.count(-1) <= 1
            and (rest > 0 if -1 in sizes else rest == 0)
        )
        if not valid:
            raise LowtideError(f"SPLIT_V sizes {sizes} do not cut axis {axis} of {x.shape}")
        spec = self._activation(x)
        op_index = len(self._operators)
        sizes_index = self._add_int32(f"split_v_{op_index}/size_splits", sizes)
        axis_index = self._add_int32(f"split_v_{op_index}/axis", axis)
        shapes = [(*x.shape[:axis], rest if n == -1 else n, *x.shape[axis + 1 :]) for n in sizes]
        pieces = self._add_op_outputs(
            "SPLIT_V",
            (x.index, sizes_index, axis_index),
            shapes,
            spec.rms,
            spec.nonnegative,
            attrs.SplitVAttributes(num_splits=len(sizes)),
        )
        for piece in pieces:
            self._share_quant(x.index, piece.index)
        return pieces

    def avg_pool(self, x: TensorRef, size: int = 2, stride: int | None = None, padding: Padding = "VALID") -> TensorRef:
        return self._pool("AVERAGE_POOL_2D", x, size, stride or size, padding)

    def max_pool(self, x: TensorRef, size: int = 2, stride: int | None = None, padding: Padding = "VALID") -> TensorRef:
        return self._pool("MAX_POOL_2D", x, size, stride or size, padding)

    def reshape(self, x: TensorRef, shape: Sequence[int]) -> TensorRef:
        shape = tuple(shape)
        if math.prod(shape) != math.prod(x.shape):
            raise LowtideError(f"cannot reshape {x.shape} to {shape}: element counts differ")
        spec = self._activation(x)
        out = self._add_op(
            "RESHAPE", (x.index,), shape, spec.rms, spec.nonnegative, attrs.ReshapeAttributes(new_shape=tuple(shape))
        )
        self._share_quant(x.index, out.index)
        return out

    def transpose(self, x: TensorRef, perm: Sequence[int]) -> TensorRef:
        """TRANSPOSE by `perm` (output axis i is input axis perm[i]). TFLM's kernel moves bytes: the output shares
        the input's quantization."""
        perm = [_axis(a, x.shape) for a in perm]
        if sorted(perm) != list(range(len(x.shape))):
            raise LowtideError(f"{tuple(perm)} is not a permutation of the axes of {x.shape}")
        spec = self._activation(x)
        shape = tuple(x.shape[a] for a in perm)
        out = self._add_op(
            "TRANSPOSE",
            (x.index, self._add_int32(f"transpose_{len(self._operators)}/perm", perm)),
            shape,
            spec.rms,
            spec.nonnegative,
            None,
        )
        self._share_quant(x.index, out.index)
        return out

    def space_to_batch_nd(
        self, x: TensorRef, block: Sequence[int], paddings: Sequence[tuple[int, int]], batch: int | None = None
    ) -> TensorRef:
        """SPACE_TO_BATCH_ND of an NHWC tensor: pad height and width by `paddings`, then move each `block`
        offset into a batch of its own. TFLM's kernel copies bytes (padding with the zero point), so the output
        shares the input's scale and zero point. The output's batch is computed unless `batch` declares another:
        TFLM's kernel fills the declared batches only (the first `batch` block offsets)."""
        n, h, w, c = self._nhwc(x)
        (bh, bw), ((top, bottom), (left, right)) = block, paddings
        if bh < 1 or bw < 1 or min(top, bottom, left, right) < 0 or (h + top + bottom) % bh or (w + left + right) % bw:
            raise LowtideError(
                f"SPACE_TO_BATCH_ND block {list(block)} and paddings {list(paddings)} do not fit {x.shape}"
            )
        if batch is not None and batch < 1:
            raise LowtideError(f"SPACE_TO_BATCH_ND cannot declare a batch of {batch}")
        spec = self._activation(x)
        op_index = len(self._operators)
        inputs = (
            x.index,
            self._add_int32(f"space_to_batch_nd_{op_index}/block_shape", [bh, bw]),
            self._add_int32(f"space_to_batch_nd_{op_index}/paddings", [[top, bottom], [left, right]]),
        )
        out = self._add_op(
            "SPACE_TO_BATCH_ND",
            inputs,
            (batch or n * bh * bw, (h + top + bottom) // bh, (w + left + right) // bw, c),
            spec.rms,
            spec.nonnegative,
            attrs.UnreadAttributes("SpaceToBatchNDOptions"),
        )
        self._share_quant(x.index, out.index)
        return out

    def batch_to_space_nd(
        self, x: TensorRef, block: Sequence[int], crops: Sequence[tuple[int, int]], shape: Sequence[int] | None = None
    ) -> TensorRef:
        """BATCH_TO_SPACE_ND, the inverse of `space_to_batch_nd` with `crops` cut off. The output shape is
        computed unless `shape` declares another: TFLM's kernel never checks it against block and crops (its
        Prepare checks only rank and type) and writes only the positions its input covers (of a batch that is no
        whole number of blocks, the offsets of the batches there are)."""
        n, h, w, c = self._nhwc(x)
        (bh, bw), ((top, bottom), (left, right)) = block, crops
        if bh < 1 or bw < 1 or (n % (bh * bw) and shape is None) or min(top, bottom, left, right) < 0:
            raise LowtideError(f"BATCH_TO_SPACE_ND block {list(block)} and crops {list(crops)} do not fit {x.shape}")
        computed = (n // (bh * bw), h * bh - top - bottom, w * bw - left - right, c)
        out_shape = tuple(shape) if shape is not None else computed
        if len(out_shape) != 4 or out_shape[3] != c or min(out_shape) < 1:
            raise LowtideError(f"BATCH_TO_SPACE_ND of {x.shape} cannot declare the output shape {out_shape}")
        spec = self._activation(x)
        op_index = len(self._operators)
        inputs = (
            x.index,
            self._add_int32(f"batch_to_space_nd_{op_index}/block_shape", [bh, bw]),
            self._add_int32(f"batch_to_space_nd_{op_index}/crops", [[top, bottom], [left, right]]),
        )
        out = self._add_op(
            "BATCH_TO_SPACE_ND",
            inputs,
            out_shape,
            spec.rms,
            spec.nonnegative,
            attrs.UnreadAttributes("BatchToSpaceNDOptions"),
        )
        self._share_quant(x.index, out.index)
        return out

    def dilated_conv2d(
        self,
        x: TensorRef,
        filters: int,
        kernel: int = 3,
        dilation: int = 2,
        activation: Activation = "RELU",
        declared_shape: Sequence[int] | None = None,
        unknown_batch: bool = False,
    ) -> TensorRef:
        """A SAME dilated convolution as TensorFlow lowers it when it has no dilated kernel
        (`tf.nn.with_space_to_batch`): SPACE_TO_BATCH_ND pads by dilation x (kernel - 1), rounded up to a
        multiple of `dilation`, and splits the image into dilation² batches; a VALID CONV_2D runs on each;
        BATCH_TO_SPACE_ND interleaves them back and crops the rounding. `declared_shape` makes
        BATCH_TO_SPACE_ND declare another output shape (see `batch_to_space_nd`). `unknown_batch` declares the
        shapes as TensorFlow's converter writes them for a model whose batch size is left unknown (Keras'
        default): every batch dimension it cannot compute, SPACE_TO_BATCH_ND's output and all after it, is stored
        as 1 (its shape signature's -1), so TFLM, which allocates and loops over the declared shapes, convolves
        only the first block offset and BATCH_TO_SPACE_ND writes only the pixels it holds."""
        n, h, w, _ = self._nhwc(x)
        if dilation < 1:
            raise LowtideError(f"dilation must be at least 1, got {dilation}")
        pad = dilation * (kernel - 1)
        paddings, crops = [], []
        for size in (h, w):
            extra = -(size + pad) % dilation
            paddings.append((pad // 2, pad - pad // 2 + extra))
            crops.append((0, extra))
        batched = self.space_to_batch_nd(x, (dilation, dilation), paddings, n if unknown_batch else None)
        convolved = self.conv2d(batched, filters, kernel, padding="VALID", activation=activation)
        if unknown_batch and declared_shape is None:
            declared_shape = (n, h, w, filters)
        return self.batch_to_space_nd(convolved, (dilation, dilation), crops, declared_shape)

    # ---- element-wise operators, padding, resizing, reductions --------------------------------------------
    def activation(self, x: TensorRef, kind: UnaryActivation, alpha: float = 0.2) -> TensorRef:
        """A unary activation operator: LOGISTIC, TANH, HARD_SWISH, RELU, RELU6, RELU_N1_TO_1 or LEAKY_RELU
        (slope `alpha` below zero). LOGISTIC and TANH get the output quantization TFLM's int8 kernels require."""
        spec = self._activation(x)
        fixed = {"LOGISTIC": _QuantParams(1.0 / 256, -128), "TANH": _QuantParams(1.0 / 128, 0)}
        attributes: attrs.Attributes | None = None
        if kind in fixed:
            rms, nonnegative = 0.5, kind == "LOGISTIC"
        elif kind in ("RELU", "RELU6"):
            rms, nonnegative = _after_activation(spec.rms, kind, spec.nonnegative)
        elif kind == "RELU_N1_TO_1":
            rms, nonnegative = min(spec.rms, 1.0), False
        elif kind == "HARD_SWISH":
            rms, nonnegative = spec.rms / math.sqrt(2.0), False
        elif kind == "LEAKY_RELU":
            rms, nonnegative = spec.rms, False
            attributes = attrs.LeakyReluAttributes(alpha=alpha)
        else:
            raise LowtideError(f"unknown activation {kind!r}")
        out = self._add_op(kind, (x.index,), x.shape, rms, nonnegative, attributes)
        if kind in fixed:
            self._tensors[out.index] = dataclasses.replace(self._activation_spec(out.index), fixed_quant=fixed[kind])
        return out

    def prelu(self, x: TensorRef) -> TensorRef:
        """PRELU with one learned slope per channel (a constant of shape (1, 1, C))."""
        spec = self._activation(x)
        alpha = self._add_constant(
            f"prelu_{len(self._operators)}/alpha", self._rng.uniform(0.05, 0.3, size=(1, 1, x.shape[-1])), None
        )
        return self._add_op("PRELU", (x.index, alpha), x.shape, spec.rms, False, None)

    def binary(
        self, opcode: str, a: TensorRef, b: TensorRef | np.ndarray | float, activation: Activation = "NONE"
    ) -> TensorRef:
        """ADD, SUB, MUL, MAXIMUM, MINIMUM or SQUARED_DIFFERENCE of `a` with `b`: an activation (broadcast as
        numpy does) or a constant (a scalar, or one value per channel). MAXIMUM and MINIMUM compare raw int8
        values, so their operands and output share one scale and zero point."""
        fused = _activation_code(activation)
        options_of: dict[str, attrs.Attributes] = {
            "ADD": attrs.AddAttributes(fused_activation=fused),
            "SUB": attrs.SubAttributes(fused_activation=fused),
            "MUL": attrs.MulAttributes(fused_activation=fused),
            "MAXIMUM": attrs.UnreadAttributes("MaximumMinimumOptions"),
            "MINIMUM": attrs.UnreadAttributes("MaximumMinimumOptions"),
            "SQUARED_DIFFERENCE": attrs.UnreadAttributes("SquaredDifferenceOptions"),
        }
        if opcode not in options_of:
            raise LowtideError(f"unknown binary operator {opcode!r}")
        sa = self._activation(a)
        shared = opcode in ("MAXIMUM", "MINIMUM")
        if isinstance(b, TensorRef):
            sb = self._activation(b)
            b_index, b_rms, b_nonnegative = b.index, sb.rms, sb.nonnegative
            try:
                shape = tuple(np.broadcast_shapes(a.shape, b.shape))
            except ValueError:
                raise LowtideError(f"{opcode} cannot broadcast {a.shape} with {b.shape}") from None
        else:
            values = np.asarray(b, dtype=np.float32)
            if values.ndim > 1 or (values.ndim == 1 and values.shape[0] not in (1, a.shape[-1])):
                raise LowtideError(f"{opcode}'s constant must be a scalar or one value per channel")
            b_index = self._add_constant(
                f"{opcode.lower()}_{len(self._operators)}/constant", values, a.index if shared else None
            )
            b_rms, b_nonnegative, shape = float(np.sqrt(np.mean(values**2))), bool((values >= 0).all()), a.shape
        rms = {"MUL": sa.rms * b_rms, "SQUARED_DIFFERENCE": sa.rms**2 + b_rms**2}.get(
            opcode, max(sa.rms, b_rms) if shared else math.hypot(sa.rms, b_rms)
        )
        nonnegative = opcode == "SQUARED_DIFFERENCE" or (sa.nonnegative and b_nonnegative and opcode != "SUB")
        out = self._add_op(
            opcode, (a.index, b_index), shape, *_after_activation(rms, activation, nonnegative), options_of[opcode]
        )
        if shared:
            self._share_quant(a.index, out.index)
            if isinstance(b, TensorRef):
                self._share_quant(b.index, out.index)
        return out

    def pad(
        self,
        x: TensorRef,
        rows: tuple[int, int] = (0, 0),
        cols: tuple[int, int] = (0, 0),
        channels: tuple[int, int] = (0, 0),
        mode: str = "CONSTANT",
        value: float | None = None,
    ) -> TensorRef:
        """PAD (zero point), PADV2 (`value`) or MIRROR_PAD (`mode` REFLECT or SYMMETRIC) of an NHWC tensor by
        (before, after) rows, columns and channels. The output shares the input's scale and zero point."""
        n, h, w, c = self._nhwc(x)
        spec = self._activation(x)
        op_index = len(self._operators)
        paddings = self._add_int32(f"pad_{op_index}/paddings", [[0, 0], list(rows), list(cols), list(channels)])
        inputs: tuple[int, ...]
        attributes: attrs.Attributes
        if mode == "CONSTANT" and value is None:
            opcode, inputs, attributes = "PAD", (x.index, paddings), attrs.UnreadAttributes("PadOptions")
        elif mode == "CONSTANT":
            fill = self._add_constant(f"pad_{op_index}/value", np.array([value], dtype=np.float32), x.index)
            opcode, inputs, attributes = "PADV2", (x.index, paddings, fill), attrs.UnreadAttributes("PadV2Options")
        elif mode in ("REFLECT", "SYMMETRIC"):
            opcode, inputs = "MIRROR_PAD", (x.index, paddings)
            attributes = attrs.MirrorPadAttributes(mode=attrs.MirrorPadMode[mode])
        else:
            raise LowtideError(f"padding mode must be CONSTANT, REFLECT or SYMMETRIC, got {mode!r}")
        shape = (n, h + sum(rows), w + sum(cols), c + sum(channels))
        out = self._add_op(opcode, inputs, shape, spec.rms, spec.nonnegative, attributes)
        self._share_quant(x.index, out.index)
        return out

    def resize(
        self,
        x: TensorRef,
        factor: int = 2,
        method: str = "nearest",
        align_corners: bool = False,
        half_pixel_centers: bool = False,
    ) -> TensorRef:
        """RESIZE_NEAREST_NEIGHBOR or RESIZE_BILINEAR (`method` "bilinear") by an integer factor. The output
        shares the input's scale and zero point."""
        n, h, w, c = self._nhwc(x)
        spec = self._activation(x)
        size = self._add_int32(f"resize_{len(self._operators)}/size", [h * factor, w * factor])
        if method == "nearest":
            opcode, table = "RESIZE_NEAREST_NEIGHBOR", attrs.ResizeAttributes
        elif method == "bilinear":
            opcode, table = "RESIZE_BILINEAR", attrs.ResizeBilinearAttributes
        else:
            raise LowtideError(f"resize method must be nearest or bilinear, got {method!r}")
        out = self._add_op(
            opcode,
            (x.index, size),
            (n, h * factor, w * factor, c),
            spec.rms,
            spec.nonnegative,
            table(align_corners=align_corners, half_pixel_centers=half_pixel_centers),
        )
        self._share_quant(x.index, out.index)
        return out

    def mean(self, x: TensorRef, axes: Sequence[int] = (1, 2), keep_dims: bool = True) -> TensorRef:
        """MEAN over `axes` (default: rows and columns, a global average pool). Shares the input's quantization."""
        spec = self._activation(x)
        axes = sorted(_axis(a, x.shape) for a in axes)
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep_dims or i not in axes)
        out = self._add_op(
            "MEAN",
            (x.index, self._add_int32(f"mean_{len(self._operators)}/axes", axes)),
            shape,
            spec.rms,
            spec.nonnegative,
            attrs.ReducerAttributes(keep_dims=keep_dims),
        )
        self._share_quant(x.index, out.index)
        return out

    def softmax(self, x: TensorRef, beta: float = 1.0) -> TensorRef:
        """SOFTMAX over the last axis, with the output quantization TFLM's int8 kernel requires (1/256, -128)."""
        self._activation(x)
        out = self._add_op("SOFTMAX", (x.index,), x.shape, 0.5, True, attrs.SoftmaxAttributes(beta=beta))
        self._tensors[out.index] = dataclasses.replace(
            self._activation_spec(out.index), fixed_quant=_QuantParams(1.0 / 256, -128)
        )
        return out

    def split_equal(self, x: TensorRef, parts: int, axis: int = -1) -> list[TensorRef]:
        """SPLIT: `parts` equal pieces along `axis`; they share the input's scale and zero point."""
        axis = _axis(axis, x.shape)
        if parts < 1 or x.shape[axis] % parts:
            raise LowtideError(f"SPLIT cannot cut axis {axis} of {x.shape} into {parts} equal parts")
        spec = self._activation(x)
        shape = (*x.shape[:axis], x.shape[axis] // parts, *x.shape[axis + 1 :])
        pieces = self._add_op_outputs(
            "SPLIT",
            (self._add_int32(f"split_{len(self._operators)}/axis", axis), x.index),
            [shape] * parts,
            spec.rms,
            spec.nonnegative,
            attrs.SplitAttributes(num_splits=parts),
        )
        for piece in pieces:
            self._share_quant(x.index, piece.index)
        return pieces

    def quantize(self, x: TensorRef, widen: float = 1.5) -> TensorRef:
        """QUANTIZE to int8: from float32, from uint8 on the same scale (the zero point moves by 128, as the
        TFLite converter writes a uint8 model input), or from int8 on a range `widen` times the input's."""
        spec = self._activation(x)
        out = self._add_op(
            "QUANTIZE", (x.index,), x.shape, spec.rms * (widen if spec.dtype == "int8" else 1.0), spec.nonnegative, None
        )
        if spec.dtype == "uint8":
            self._share_quant(x.index, out.index)
        return out

    def dequantize(self, x: TensorRef) -> TensorRef:
        """DEQUANTIZE: int8 to float32."""
        spec = self._activation(x)
        out = self._add_op("DEQUANTIZE", (x.index,), x.shape, spec.rms, spec.nonnegative, None)
        self._tensors[out.index] = dataclasses.replace(self._activation_spec(out.index), dtype="float32")
        return out

    # ---- serialisation ------------------------------------------------------------------------------------
    def build(self, order: Sequence[int] | None = None) -> bytes:
        """The .tflite bytes, operators stored in `order` (call-order indices; default: call order)."""
        if not self._inputs or not self._outputs:
            raise LowtideError("the model needs at least one input() and one output()")
        order = list(range(len(self._operators))) if order is None else list(order)
        self._check_order(order)
        quant = self._activation_quant()
        return self._model(order, quant).data

    def _model(self, order: list[int], quant: dict[int, _QuantParams]) -> Graph:
        editor = GraphEditor.new(description=self._name, subgraph_name="main")
        weight_scales: dict[int, np.ndarray] = {}
        for index, spec in enumerate(self._tensors):
            if isinstance(spec, _ActivationSpec) and spec.dtype == "float32":
                editor.tensor(spec.name, spec.shape, "float32")
            elif isinstance(spec, _ActivationSpec):
                q = quant[index]
                # A uint8 tensor holds the int8 value + 128: same scale, zero point shifted.
                shift = 128 if spec.dtype == "uint8" else 0
                editor.tensor(
                    spec.name,
                    spec.shape,
                    "uint8" if shift else "int8",
                    Quantization((q.scale,), (q.zero_point + shift,)),
                )
            elif isinstance(spec, _ConstantSpec):
                q = (
                    quant[spec.quant_like]
                    if spec.quant_like is not None
                    else _QuantParams(float(np.float32(max(np.abs(spec.values).max(), 1e-6) / 127.0)), 0)
                )
                data = np.clip(np.round(spec.values / q.scale) + q.zero_point, -128, 127).astype(np.int8)
                editor.tensor(spec.name, spec.values.shape, "int8", Quantization((q.scale,), (q.zero_point,)), data)
            elif isinstance(spec, _Int32Spec):
                editor.tensor(spec.name, spec.values.shape, "int32", data=spec.values)
            else:
                if isinstance(spec, _WeightSpec):
                    scales, data = _quantize_weights(spec.values, spec.channel_axis)
                    weight_scales[index] = scales
                    dtype, axis = "int8", spec.channel_axis or 0
                else:
                    scales = quant[spec.input].scale * weight_scales[spec.weights]
                    data = np.round(spec.values / scales).astype("<i4")
                    dtype, axis = "int32", 0
                editor.tensor(
                    spec.name,
                    spec.values.shape,
                    dtype,
                    Quantization(tuple(float(s) for s in scales), (0,) * len(scales), axis),
                    data,
                )
        # The opcode table follows call order, so that orders of one graph differ only in the operator vector.
        for opcode in dict.fromkeys(op_spec.opcode for op_spec in self._operators):
            editor.opcode_index(opcode)
        operators = [
            editor.operator(op_spec.opcode, op_spec.inputs, op_spec.outputs, op_spec.attributes)
            for op_spec in (self._operators[i] for i in order)
        ]
        return editor.finish(operators, self._inputs, self._outputs, prune=False)

    # ---- internals ----------------------------------------------------------------------------------------
    def _add_activation(
        self,
        name: str,
        shape: tuple[int, ...],
        rms: float,
        nonnegative: bool,
        producer: int | None,
        fixed_range: tuple[float, float] | None = None,
    ) -> TensorRef:
        if not shape or any(d <= 0 for d in shape):
            raise LowtideError(f"tensor '{name}' would have shape {shape}; every dimension must be positive")
        index = len(self._tensors)
        self._tensors.append(_ActivationSpec(name, shape, rms, nonnegative, fixed_range))
        self._same_quant_parent[index] = index
        if producer is not None:
            self._producer[index] = producer
        return TensorRef(index, shape, producer, self._serial)

    def _add_op(
        self,
        opcode: str,
        inputs: tuple[int, ...],
        out_shape: tuple[int, ...],
        rms: float,
        nonnegative: bool,
        attributes: attrs.Attributes | None,
    ) -> TensorRef:
        return self._add_op_outputs(opcode, inputs, [out_shape], rms, nonnegative, attributes)[0]

    def _add_op_outputs(
        self,
        opcode: str,
        inputs: tuple[int, ...],
        out_shapes: Sequence[tuple[int, ...]],
        rms: float,
        nonnegative: bool,
        attributes: attrs.Attributes | None,
    ) -> list[TensorRef]:
        op_index = len(self._operators)
        name = f"{opcode.lower()}_{op_index}"
        outs = [
            self._add_activation(name if len(out_shapes) == 1 else f"{name}/{k}", shape, rms, nonnegative, op_index)
            for k, shape in enumerate(out_shapes)
        ]
        self._operators.append(_OperatorSpec(opcode, inputs, tuple(o.index for o in outs), attributes))
        return outs

    def _add_constant(self, name: str, values: np.ndarray, quant_like: int | None) -> int:
        self._tensors.append(_ConstantSpec(name, np.asarray(values, dtype=np.float32), quant_like))
        return len(self._tensors) - 1

    def _add_int32(self, name: str, values: int | Sequence[int] | Sequence[Sequence[int]]) -> int:
        self._tensors.append(_Int32Spec(name, np.asarray(values, dtype=np.int32)))
        return len(self._tensors) - 1

    def _add_weighted(
        self,
        opcode: str,
        x: TensorRef,
        weights: np.ndarray,
        channel_axis: int | None,
        out_shape: tuple[int, ...],
        activation: Activation,
        attributes: attrs.Attributes,
    ) -> TensorRef:
        spec = self._activation(x)
        # Weights of standard deviation gain/sqrt(fan_in) scale the input's root-mean-square by `gain`.
        pre_rms = spec.rms * _gain(activation)
        channels = out_shape[-1]
        bias = self._rng.uniform(-0.1, 0.1, size=channels).astype(np.float32) * pre_rms
        op_index = len(self._operators)
        w_index = len(self._tensors)
        self._tensors.append(_WeightSpec(f"{opcode.lower()}_{op_index}/weights", weights, channel_axis))
        b_index = len(self._tensors)
        self._tensors.append(_BiasSpec(f"{opcode.lower()}_{op_index}/bias", bias, x.index, w_index))
        return self._add_op(
            opcode, (x.index, w_index, b_index), out_shape, *_after_activation(pre_rms, activation, False), attributes
        )

    def _pool(self, opcode: str, x: TensorRef, size: int, stride: int, padding: Padding) -> TensorRef:
        n, h, w, c = self._nhwc(x)
        spec = self._activation(x)
        out_shape = (n, _conv_out(h, size, stride, padding), _conv_out(w, size, stride, padding), c)
        out = self._add_op(
            opcode,
            (x.index,),
            out_shape,
            spec.rms,
            spec.nonnegative,
            attrs.Pool2DAttributes(padding=_PADDING_CODES[padding], stride=(stride, stride), filter=(size, size)),
        )
        # TFLM's int8 pooling kernels do not requantize: the output keeps the input's scale and zero point.
        self._share_quant(x.index, out.index)
        return out

    def _draw_weights(self, shape: tuple[int, ...], fan_in: int, activation: Activation) -> np.ndarray:
        half_width = _gain(activation) * math.sqrt(3.0 / fan_in)  # uniform with std gain/sqrt(fan_in)
        return self._rng.uniform(-half_width, half_width, size=shape).astype(np.float32)

    def _activation(self, t: TensorRef) -> _ActivationSpec:
        self._check_activation(t)
        return self._activation_spec(t.index)

    def _activation_spec(self, index: int) -> _ActivationSpec:
        """The spec of activation tensor `index`: every TensorRef, and every operator output, is one."""
        spec = self._tensors[index]
        assert isinstance(spec, _ActivationSpec)
        return spec

    def _check_activation(self, t: TensorRef) -> None:
        if t.builder != self._serial:
            raise LowtideError(f"tensor {t.index} was not made by this builder")

    def _nhwc(self, t: TensorRef) -> tuple[int, int, int, int]:
        if len(t.shape) != 4:
            raise LowtideError(f"expected an NHWC tensor, got shape {t.shape}")
        n, h, w, c = t.shape
        return n, h, w, c

    def _root(self, index: int) -> int:
        while self._same_quant_parent[index] != index:
            index = self._same_quant_parent[index]
        return index

    def _share_quant(self, a: int, b: int) -> None:
        ra, rb = self._root(a), self._root(b)
        if ra != rb:
            self._same_quant_parent[max(ra, rb)] = min(ra, rb)

    def _activation_quant(self) -> dict[int, _QuantParams]:
        """One scale and zero point per group of tensors that must share them, covering every member's range."""
        ranges: dict[int, tuple[float, float]] = {}
        fixed: dict[int, _QuantParams] = {}  # groups holding a tensor whose kernel fixes its quantization
        for index, spec in enumerate(self._tensors):
            if not isinstance(spec, _ActivationSpec):
                continue
            if spec.fixed_quant is not None:
                fixed[self._root(index)] = spec.fixed_quant
                continue
            if spec.fixed_range is not None:
                lo, hi = spec.fixed_range
            elif spec.nonnegative:
                lo, hi = 0.0, _RANGE_IN_RMS * math.sqrt(2.0) * spec.rms  # the positive half of the pre-activation
            else:
                lo, hi = -_RANGE_IN_RMS * spec.rms, _RANGE_IN_RMS * spec.rms
            root = self._root(index)
            old = ranges.get(root, (lo, hi))
            ranges[root] = (min(old[0], lo), max(old[1], hi))
        group_quant = {root: _affine_quant(lo, hi) for root, (lo, hi) in ranges.items()}
        group_quant.update(fixed)
        return {index: group_quant[self._root(index)] for index in self._same_quant_parent}

    def _check_order(self, order: list[int]) -> None:
        if sorted(order) != list(range(len(self._operators))):
            raise LowtideError(f"order must list each of the {len(self._operators)} operators once, got {order}")
        done: set[int] = set()
        for op_index in order:
            for t in self._operators[op_index].inputs:
                producer = self._producer.get(t)
                if producer is not None and producer not in done:
                    raise LowtideError(f"order runs operator {op_index} before operator {producer}, which feeds it")
            done.add(op_index)


def _axis(axis: int, shape: tuple[int, ...]) -> int:
    """`axis` of `shape`, negative counting from the end."""
    if not -len(shape) <= axis < len(shape):
        raise LowtideError(f"axis {axis} is out of range for shape {shape}")
    return axis % len(shape)


def _conv_out(size: int, kernel: int, stride: int, padding: Padding, dilation: int = 1) -> int:
    if padding not in _PADDING_CODES:
        raise LowtideError(f"padding must be SAME or VALID, got {padding!r}")
    if kernel < 1 or stride < 1 or dilation < 1:
        raise LowtideError(
            f"kernel, stride and dilation must be at least 1, got kernel {kernel}, stride {stride} "
            f"and dilation {dilation}"
        )
    out = window.output_size(_PADDING_CODES[padding], size, kernel, stride, dilation)
    if out <= 0:
        raise LowtideError(f"a {kernel}x{kernel} window with VALID padding does not fit in size {size}")
    return out


def _activation_code(activation: Activation) -> attrs.Activation:
    if activation not in _ACTIVATION_CODES:
        raise LowtideError(f"activation must be one of {sorted(_ACTIVATION_CODES)}, got {activation!r}")
    return _ACTIVATION_CODES[activation]


def _gain(activation: Activation) -> float:
    """Weight scale that keeps a layer's root-mean-square: He initialisation before a rectifier."""
    return 1.0 if _activation_code(activation) == attrs.Activation.NONE else math.sqrt(2.0)


def _after_activation(pre_rms: float, activation: Activation, inputs_nonnegative: bool) -> tuple[float, bool]:
    """(root-mean-square, non-negative) of an operator's output given its pre-activation root-mean-square."""
    if activation == "NONE":
        return pre_rms, inputs_nonnegative
    post = pre_rms / math.sqrt(2.0)  # a rectifier keeps half of a zero-mean distribution's energy
    return (min(post, 6.0) if activation == "RELU6" else post), True


def _affine_quant(lo: float, hi: float) -> _QuantParams:
    """int8 scale and zero point mapping [lo, hi] (widened to include 0, as TFLite requires) onto [-128, 127]."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / 255.0
    zero_point = int(np.clip(round(-128 - lo / scale), -128, 127))
    return _QuantParams(float(np.float32(scale)), zero_point)


def _quantize_weights(values: np.ndarray, channel_axis: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 quantization, per channel along `channel_axis` or per tensor: (scales, int8 data)."""
    reduce_axes = tuple(a for a in range(values.ndim) if a != channel_axis)
    peak = np.abs(values).max(axis=reduce_axes, keepdims=True)
    scales = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    data = np.clip(np.round(values / scales), -127, 127).astype(np.int8)
    return scales.reshape(-1).astype(np.float64), data
