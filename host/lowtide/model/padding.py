"""SAME and VALID window geometry, as TFLite computes it (ComputeOutSize and ComputePaddingHeightWidth in
tensorflow/lite/kernels/padding.h): one place for the compiler, the model builder and the rewrites.

`padding` is TFLite's Padding enum code (`lowtide.model.attributes.Padding`).
"""

from __future__ import annotations

from lowtide.model.attributes import Padding

SAME, VALID = Padding.SAME, Padding.VALID


def effective_size(kernel: int, dilation: int = 1) -> int:
    """The extent a dilated window covers."""
    return (kernel - 1) * dilation + 1


def output_size(padding: int, size: int, kernel: int, stride: int, dilation: int = 1) -> int:
    """ComputeOutSize: SAME keeps ceil(size / stride) positions, VALID only windows wholly inside."""
    if padding == SAME:
        return (size + stride - 1) // stride
    if padding == VALID:
        return (size + stride - effective_size(kernel, dilation)) // stride
    raise ValueError(f"padding code {padding} is neither SAME ({SAME}) nor VALID ({VALID})")


def padding_before(size: int, kernel: int, stride: int, dilation: int, out_size: int) -> int:
    """ComputePaddingWithOffset's padding before the first row/column: half the total, the odd one goes after."""
    return max(0, (out_size - 1) * stride + effective_size(kernel, dilation) - size) // 2
