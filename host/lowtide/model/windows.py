"""Which rows and columns of its input an operator's output reads: per operator, one window map along H and one
along W, as TFLM's reference kernels index their input. One definition for the stage that runs operators on
windows (`rewrite.regions`: the input window an output window needs) and the one that follows reads element by
element (`stale.dependence`: the input rows each output row may read).

A map takes output indices to input indices along one axis. Input indices outside the input are padding: what the
kernel reads there is no input element (a SAME window's out-of-image taps, a PAD's constant).

- `AxisMap`, affine: convolutions, pools (`window_maps`, from the typed attributes and `model.padding`'s SAME
  geometry), PAD and PADV2 (`pad_maps`: shifted by the padding before), element-wise operators (`IDENTITY`).
- `MirrorMap`: MIRROR_PAD, REFLECT or SYMMETRIC.
- `ResizeMap`: a RESIZE_* by an integer factor whose windows compute what the whole resize does
  (`resize_window_map`); the per-output source rows of any resize are `ResizeAxis.sources`, TFLM's maps from
  `model.operators`.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from lowtide.model import padding
from lowtide.model.attributes import (
    Conv2DAttributes,
    DepthwiseConv2DAttributes,
    MirrorPadAttributes,
    MirrorPadMode,
    Pool2DAttributes,
    ResizeAttributes,
    attributes_as,
)
from lowtide.model.operators import resize_kernel_scale, resize_sources

if TYPE_CHECKING:
    from lowtide.model.ir import Operator, Subgraph

Interval = tuple[int, int]  # half-open [lo, hi)


@dataclass(frozen=True)
class AxisMap:
    """How one spatial axis of an operator's output reads its input: output index o reads input indices
    o * stride - offset + k * dilation for k in 0 ... kernel - 1."""

    kernel: int
    stride: int
    offset: int  # padding before the first row/column (SAME padding and PAD)
    dilation: int = 1

    @property
    def extent(self) -> int:
        """The input rows one output row's taps span, first to last."""
        return padding.effective_size(self.kernel, self.dilation)

    def needed(self, out: Interval) -> Interval:
        lo, hi = out
        return lo * self.stride - self.offset, (hi - 1) * self.stride - self.offset + self.extent

    def computed(self, out: Interval) -> Interval:
        """The window of the output the operator computes when `out` is wanted."""
        return out

    def taps(self, outputs: np.ndarray) -> list[np.ndarray]:
        """Per tap k, the input index each of `outputs` reads with it (outside the input: padding)."""
        return [outputs * self.stride - self.offset + k * self.dilation for k in range(self.kernel)]

    def shifted(self, pad_before: int) -> AxisMap:
        """The map through a PAD in front: row p of the padded tensor is row p - pad_before of its input."""
        return dataclasses.replace(self, offset=self.offset + pad_before)


IDENTITY = AxisMap(1, 1, 0)


@dataclass(frozen=True)
class MirrorMap:
    """MIRROR_PAD along one axis: a window reaching past the input's edge reads the rows it mirrors, so the
    input window grows to hold them (REFLECT skips the edge row itself, SYMMETRIC repeats it)."""

    size: int  # of the input along this axis
    offset: int  # padding before
    reflect: bool

    def needed(self, out: Interval) -> Interval:
        lo, hi = out[0] - self.offset, out[1] - self.offset
        skip = int(self.reflect)
        if lo < 0:
            hi = max(hi, -lo + skip)
        if hi > self.size:
            lo = min(lo, self.size - (hi - self.size) - skip)
        return max(lo, 0), min(hi, self.size)

    def computed(self, out: Interval) -> Interval:
        lo, hi = self.needed(out)
        return min(out[0], lo + self.offset), max(out[1], hi + self.offset)

    def sources(self, outputs: np.ndarray) -> np.ndarray:
        """The input index each of `outputs` copies, as GetInputDimension in TFLM's mirror_pad.cc computes it:
        mirrored once at each edge, clamped to the first row after the input; before it, a padding wider than the
        input gives indices past its end, which the kernel reads all the same."""
        skip = int(self.reflect)
        inside = outputs - self.offset
        before = -inside - 1 + skip
        after = np.maximum(2 * self.size - 1 - skip - inside, 0)
        return np.where(inside < 0, before, np.where(inside >= self.size, after, inside))


@dataclass(frozen=True)
class ResizeMap:
    """RESIZE_* along one axis by an integer factor: output o reads input rows first[o] ... last[o]. A window of
    the output is computed as the resize of whole input rows [a, b) to rows [factor * a, factor * b), which TFLM
    computes exactly as the whole tensor's (checked by `resize_window_map`); the wanted rows are sliced out of
    it."""

    factor: int
    first: tuple[int, ...]
    last: tuple[int, ...]

    def needed(self, out: Interval) -> Interval:
        """The input rows of a computed window (see `computed`)."""
        return out[0] // self.factor, -(-out[1] // self.factor)

    def computed(self, out: Interval) -> Interval:
        return self.factor * min(self.first[out[0] : out[1]]), self.factor * (max(self.last[out[0] : out[1]]) + 1)


WindowMap = AxisMap | MirrorMap | ResizeMap


def window_attributes(op: Operator) -> Conv2DAttributes | DepthwiseConv2DAttributes | Pool2DAttributes:
    """A convolution's or pool's attributes (validated models store them); ValueError when it stores none."""
    o = op.attributes
    if not isinstance(o, (Conv2DAttributes, DepthwiseConv2DAttributes, Pool2DAttributes)):
        raise ValueError(f"operator {op.index} ({op.opcode}) stores no window attributes")
    return o


def window_maps(sg: Subgraph, op: Operator) -> tuple[AxisMap, AxisMap]:
    """CONV_2D, DEPTHWISE_CONV_2D and the pools, rows and columns: the kernel from the filter's shape (O, H, W, I)
    or the pool's attributes, SAME padding before the first row as TFLite's ComputePaddingHeightWidth."""
    o = window_attributes(op)
    if isinstance(o, Pool2DAttributes):
        kernel, dilation = o.filter, (1, 1)
    else:
        weights = sg.tensors[op.inputs[1]].shape  # CONV: (O, H, W, I); DEPTHWISE: (1, H, W, C)
        kernel, dilation = (weights[1], weights[2]), (o.dilation[0] or 1, o.dilation[1] or 1)
    in_shape, out_shape = sg.tensors[op.inputs[0]].shape, sg.tensors[op.outputs[0]].shape
    maps = []
    for axis in range(2):
        offset = 0
        if o.padding == padding.SAME:
            offset = padding.padding_before(
                in_shape[1 + axis], kernel[axis], o.stride[axis], dilation[axis], out_shape[1 + axis]
            )
        maps.append(AxisMap(kernel[axis], o.stride[axis], offset, dilation[axis]))
    return maps[0], maps[1]


def pad_maps(op: Operator, widths: tuple[Interval, ...], in_shape: tuple[int, ...]) -> tuple[AxisMap | MirrorMap, ...]:
    """PAD, PADV2 and MIRROR_PAD, one map per axis of the input: `widths` are the paddings (before, after)."""
    if op.opcode != "MIRROR_PAD":
        return tuple(AxisMap(1, 1, before) for before, _ in widths)
    reflect = attributes_as(op.attributes, MirrorPadAttributes).mode == MirrorPadMode.REFLECT
    return tuple(MirrorMap(size, before, reflect) for size, (before, _) in zip(in_shape, widths))


@dataclass(frozen=True)
class ResizeAxis:
    """One spatial axis of a RESIZE_*: what TFLM's kernel computes its source rows from."""

    bilinear: bool
    n_in: int
    n_out: int
    align_corners: bool
    half_pixel: bool
    integer: bool  # the integer bilinear kernel (int8); TFLM runs float32 with the float one

    def sources(self) -> tuple[np.ndarray, np.ndarray]:
        """Per output index, the first and the last input index the kernel reads (`resize_sources`)."""
        first, last, _ = resize_sources(
            self.bilinear, self.n_in, self.n_out, self.align_corners, self.half_pixel, self.integer
        )
        return first, last

    def window_map(self) -> ResizeMap | None:
        return resize_window_map(
            self.bilinear, self.n_in, self.n_out, self.align_corners, self.half_pixel, self.integer
        )


def resize_axes(sg: Subgraph, op: Operator) -> tuple[ResizeAxis, ResizeAxis]:
    """RESIZE_NEAREST_NEIGHBOR and RESIZE_BILINEAR, rows and columns."""
    o = attributes_as(op.attributes, ResizeAttributes)
    in_shape, out_shape = sg.tensors[op.inputs[0]].shape, sg.tensors[op.outputs[0]].shape
    integer = sg.tensors[op.outputs[0]].dtype != "float32"
    bilinear = op.opcode == "RESIZE_BILINEAR"
    rows, cols = (
        ResizeAxis(bilinear, in_shape[axis], out_shape[axis], o.align_corners, o.half_pixel_centers, integer)
        for axis in (1, 2)
    )
    return rows, cols


@functools.lru_cache(maxsize=256)
def resize_window_map(
    bilinear: bool, n_in: int, n_out: int, align_corners: bool, half_pixel: bool, integer: bool
) -> ResizeMap | None:
    """The axis map of a resize whose windows compute exactly what the whole resize computes there, or None.
    A window of input rows [a, b) resized to factor * (b - a) rows must give the same source rows and weights,
    shifted by a, for every output it is asked for (those reading no row before a), and the scale TFLM derives
    from the window's sizes must equal the whole tensor's."""
    if n_out % n_in:
        return None
    factor = n_out // n_in
    whole = resize_sources(bilinear, n_in, n_out, align_corners, half_pixel, integer)
    if any(
        resize_kernel_scale(bilinear, n, factor * n, align_corners, integer)
        != resize_kernel_scale(bilinear, n_in, n_out, align_corners, integer)
        for n in range(1, n_in)
    ):
        return None
    first, last, weight = whole
    outputs = np.arange(n_out)
    if ((factor * first > outputs) | (outputs >= factor * (last + 1))).any():
        return None
    for a in range(1, n_in):
        lf, ll, lw = resize_sources(bilinear, n_in - a, n_out - factor * a, align_corners, half_pixel, integer)
        asked = first[factor * a :] >= a
        if not (
            np.array_equal((lf + a)[asked], first[factor * a :][asked])
            and np.array_equal((ll + a)[asked], last[factor * a :][asked])
            and np.array_equal(lw[asked], weight[factor * a :][asked])
        ):
            return None
    return ResizeMap(factor, tuple(int(v) for v in first), tuple(int(v) for v in last))
