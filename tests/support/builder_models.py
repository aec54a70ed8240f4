"""Models built with lowtide's ModelBuilder whose best operator order, or whose stale memory, is known by
construction."""

from __future__ import annotations

from lowtide.model.builder import ModelBuilder


def two_branch_builder(wide: int = 64) -> ModelBuilder:
    """Two branches that each expand a 1 KiB tensor to 16 KiB (`wide` channels) and project it back, then an ADD.

    Op 0: a = conv(x, 64)  op 1: b = conv(x, 64)  op 2: a' = conv(a, 4)  op 3: b' = conv(b, 4)  op 4: add.
    Both wide tensors are live together in call order (breadth first); branch by branch, only one is.
    """
    b = ModelBuilder(seed=3)
    x = b.input((1, 16, 16, 4))
    wide_a = b.conv2d(x, filters=wide, kernel=1)
    wide_b = b.conv2d(x, filters=wide, kernel=1)
    narrow_a = b.conv2d(wide_a, filters=4, kernel=1, activation="NONE")
    narrow_b = b.conv2d(wide_b, filters=4, kernel=1, activation="NONE")
    b.output(b.add(narrow_a, narrow_b))
    return b


BREADTH_FIRST, BRANCH_BY_BRANCH = [0, 1, 2, 3, 4], [0, 2, 1, 3, 4]


def converted_dilated_model() -> bytes:
    """A SAME 3x3 convolution dilated by 2 on a 16x16x8 stem, as TensorFlow's converter writes it for a model of
    unknown batch size (`ModelBuilder.dilated_conv2d(..., unknown_batch=True)`): SPACE_TO_BATCH_ND (operator 1)
    declares a batch of 1 of the 4 it computes, CONV_2D (operator 2) convolves that one, and BATCH_TO_SPACE_ND
    (operator 3) writes the quarter of its 16x16x8 output that batch reaches (even rows and columns). A 1x1
    convolution (operator 4) keeps each pixel's bytes apart, so the written pixels' outputs are independent of
    stale memory."""
    b = ModelBuilder(seed=5, name="converted")
    stem = b.conv2d(b.input((1, 16, 16, 4)), 8, 3)
    dilated = b.dilated_conv2d(stem, 8, kernel=3, dilation=2, unknown_batch=True)
    b.output(b.conv2d(dilated, 4, 1, activation="NONE"))
    return b.build()


SIZE = 16  # the stale-memory models' input height and width


def nas_model() -> bytes:
    """The issue's NAS net in small: a dilated convolution whose BATCH_TO_SPACE_ND (operator 3) declares 20x20 of
    the 16x16 it covers, a global MEAN, then a SOFTMAX sharp enough (beta 16) to saturate: the five fills change
    only 4 of its 10 output bytes, yet every one reads the unwritten rows and columns through the MEAN."""
    b = ModelBuilder(seed=5, name="nas")
    stem = b.conv2d(b.input((1, SIZE, SIZE, 4)), 10, 3)
    dilated = b.dilated_conv2d(stem, 10, kernel=3, dilation=2, declared_shape=(1, 20, 20, 10))
    b.output(b.softmax(b.mean(dilated, axes=(1, 2), keep_dims=False), beta=16.0))
    return b.build()


def mobilenet_v2(resolution: int, width: float, classes: int = 10) -> bytes:
    """MobileNetV2's layers (Sandler et al. 2018, table 2: a 3x3 stem of stride 2, then inverted residual blocks of
    expansion t, channels c, repeats n, first stride s, a 1x1 convolution to 1280 channels, average pool and
    classifier) at `width` times its channels (rounded to multiples of 8, at least 8) on a `resolution` square RGB
    input, with random weights. The activations grow with the resolution; TFLM's persistent tail (its per-channel
    requantization data, 8 B a channel of every convolution) with the width only."""
    b = ModelBuilder(seed=7, name=f"mobilenet_v2_{width:g}_{resolution}")

    def channels(n: int) -> int:
        return max(8, int(n * width + 4) // 8 * 8)

    x = b.conv2d(b.input((1, resolution, resolution, 3)), channels(32), 3, 2, activation="RELU6")
    for expansion, out, repeats, stride in [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ]:
        for repeat in range(repeats):
            y = b.conv2d(x, x.shape[-1] * expansion, 1, activation="RELU6") if expansion != 1 else x
            y = b.depthwise_conv2d(y, 3, stride if repeat == 0 else 1, activation="RELU6")
            y = b.conv2d(y, channels(out), 1, activation="NONE")
            x = b.add(x, y) if y.shape == x.shape else y
    x = b.conv2d(x, 1280, 1, activation="RELU6")
    x = b.reshape(b.avg_pool(x, x.shape[1]), (1, 1280))
    b.output(b.softmax(b.fully_connected(x, classes)))
    return b.build()
