"""Builder models in the shapes of public vision nets whose memory peaks tiling must reach (issue #23): FPN and
PAN detector heads, a FastDepth-style encoder-decoder, a face-landmark regressor, MobileNetV3 and EfficientNet
blocks with squeeze-and-excitation. Each takes `size` (input height and width): `SMALL` sizes keep a test to
seconds, `FULL` sizes are the public nets' own inputs (the benchmark's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from lowtide.model.builder import ModelBuilder, TensorRef

Gate = Literal["hard_sigmoid", "logistic"]


def squeeze_excite(b: ModelBuilder, x: TensorRef, reduced: int, gate: Gate) -> TensorRef:
    """Squeeze-and-excitation: global MEAN, 1x1 convolution to `reduced` channels, 1x1 back, a gate, the input
    scaled per channel by MUL. MobileNetV3's hard-sigmoid as TFLite converts it (RELU6(x + 3) * 1/6);
    EfficientNet's LOGISTIC after a SiLU-less ReLU reduction."""
    s = b.conv2d(b.mean(x), reduced, kernel=1, activation="RELU")
    s = b.conv2d(s, x.shape[-1], kernel=1, activation="NONE")
    if gate == "hard_sigmoid":
        s = b.binary("MUL", b.binary("ADD", s, 3.0, activation="RELU6"), 1.0 / 6.0)
    else:
        s = b.activation(s, "LOGISTIC")
    return b.binary("MUL", x, s)


def _inverted_bottleneck(
    b: ModelBuilder, x: TensorRef, expand: int, out: int, stride: int = 1, kernel: int = 3, se: Gate | None = None
) -> TensorRef:
    y = b.conv2d(x, expand, kernel=1, activation="RELU6")
    y = b.depthwise_conv2d(y, kernel=kernel, stride=stride, activation="RELU6")
    if se is not None:
        y = squeeze_excite(b, y, max(expand // 4, 8), se)
    y = b.conv2d(y, out, kernel=1, activation="NONE")
    return b.add(x, y) if stride == 1 and x.shape[-1] == out else y


def mobilenet_v3_se(size: int = 224) -> ModelBuilder:
    """MobileNetV3-Small's first stages: a stride-2 hard-swish stem, its first bottleneck (a stride-2 depthwise
    with SE at the widest resolution, no expansion), bottlenecks without and with SE, and a classifier."""
    b = ModelBuilder(seed=41, name=f"mobilenet_v3_se_{size}")
    x = b.activation(b.conv2d(b.input((1, size, size, 3)), 16, stride=2, activation="NONE"), "HARD_SWISH")
    y = squeeze_excite(b, b.depthwise_conv2d(x, kernel=3, stride=2, activation="RELU"), 8, "hard_sigmoid")
    x = b.conv2d(y, 16, kernel=1, activation="NONE")
    x = _inverted_bottleneck(b, _inverted_bottleneck(b, x, 72, 24, stride=2), 88, 24)
    x = _inverted_bottleneck(b, x, 96, 40, stride=2, kernel=5, se="hard_sigmoid")
    x = _inverted_bottleneck(b, x, 160, 40, kernel=5, se="hard_sigmoid")
    b.output(b.fully_connected(b.mean(x), 10))
    return b


def efficientnet_se(size: int = 224) -> ModelBuilder:
    """EfficientNet-B0's front (its lite variant's ReLU6 for the int8 kernels): a stride-2 stem, an MBConv1 with SE
    (LOGISTIC gate) at full stem resolution, MBConv6 blocks with SE, a classifier."""
    b = ModelBuilder(seed=42, name=f"efficientnet_se_{size}")
    x = b.conv2d(b.input((1, size, size, 3)), 32, stride=2, activation="RELU6")
    y = squeeze_excite(b, b.depthwise_conv2d(x, kernel=3, activation="RELU6"), 8, "logistic")
    x = b.conv2d(y, 16, kernel=1, activation="NONE")
    x = _inverted_bottleneck(b, x, 96, 24, stride=2, se="logistic")
    x = _inverted_bottleneck(b, x, 144, 24, se="logistic")
    x = _inverted_bottleneck(b, x, 144, 40, stride=2, kernel=5, se="logistic")
    b.output(b.fully_connected(b.mean(x), 10))
    return b


def _anchor_head(b: ModelBuilder, x: TensorRef, anchors: int, values: int) -> TensorRef:
    """A detector head: a 1x1 convolution to `anchors * values` channels, reshaped to one row per anchor."""
    y = b.conv2d(x, anchors * values, kernel=1, activation="NONE")
    return b.reshape(y, (1, y.shape[1] * y.shape[2] * anchors, values))


def fpn_detector(size: int = 192) -> ModelBuilder:
    """A BlazeFace / palm-detector FPN: a strided backbone to 1/8, 1/16 and 1/32, a top-down path (1x1 lateral
    convolutions, RESIZE_NEAREST_NEIGHBOR x2, ADD), 3x3 smoothing, and per-scale heads (boxes and scores) that
    RESHAPE per anchor and CONCATENATE across scales."""
    b = ModelBuilder(seed=43, name=f"fpn_detector_{size}")
    x = b.conv2d(b.input((1, size, size, 3)), 24, kernel=5, stride=2)
    x = _inverted_bottleneck(b, x, 48, 24)
    x = _inverted_bottleneck(b, x, 72, 32, stride=2)
    c3 = _inverted_bottleneck(b, _inverted_bottleneck(b, x, 96, 48, stride=2), 144, 48)
    c4 = _inverted_bottleneck(b, c3, 144, 64, stride=2)
    c5 = _inverted_bottleneck(b, c4, 192, 96, stride=2)
    p5 = b.conv2d(c5, 48, kernel=1, activation="NONE")
    p4 = b.add(b.conv2d(c4, 48, kernel=1, activation="NONE"), b.resize(p5, 2))
    p3 = b.add(b.conv2d(c3, 48, kernel=1, activation="NONE"), b.resize(p4, 2))
    levels = [b.conv2d(p, 48, kernel=3) for p in (p3, p4, p5)]
    boxes = b.concat([_anchor_head(b, p, 2, 4) for p in levels], axis=1)
    scores = b.concat([_anchor_head(b, p, 2, 1) for p in levels], axis=1)
    b.output(boxes, scores)
    return b


def pan_detector(size: int = 160) -> ModelBuilder:
    """A YOLO-style PAN neck: backbone to 1/8, 1/16, 1/32; top-down RESIZE_BILINEAR (half-pixel) x2 and channel
    CONCATENATION with the lateral features, bottom-up stride-2 convolutions concatenated back; anchor heads
    RESHAPEd and CONCATENATEd along anchors."""
    b = ModelBuilder(seed=44, name=f"pan_detector_{size}")
    x = b.conv2d(b.conv2d(b.input((1, size, size, 3)), 16, stride=2), 32, stride=2)
    x = b.add(x, b.conv2d(b.conv2d(x, 32, kernel=1), 32))
    c3 = b.conv2d(x, 48, stride=2)
    c4 = b.conv2d(c3, 64, stride=2)
    c5 = b.conv2d(c4, 96, stride=2)
    t4 = b.conv2d(b.concat([b.resize(c5, 2, "bilinear", half_pixel_centers=True), c4]), 64, kernel=1)
    t3 = b.conv2d(b.concat([b.resize(t4, 2, "bilinear", half_pixel_centers=True), c3]), 48, kernel=1)
    n4 = b.conv2d(b.concat([b.conv2d(t3, 48, stride=2), t4]), 64, kernel=1)
    n5 = b.conv2d(b.concat([b.conv2d(n4, 64, stride=2), c5]), 96, kernel=1)
    b.output(b.concat([_anchor_head(b, p, 3, 6) for p in (t3, n4, n5)], axis=1))
    return b


def fastdepth(size: int = 160) -> ModelBuilder:
    """FastDepth: a MobileNet encoder to 1/16, a decoder of depthwise 5x5 + 1x1 stages each upsampled by
    RESIZE_NEAREST_NEIGHBOR x2, skip ADDs from the encoder at 1/8, 1/4 and 1/2, and a full-resolution depth map:
    the peak sits in the decoder, at the last skip addition and upsampling."""
    b = ModelBuilder(seed=45, name=f"fastdepth_{size}")
    e1 = b.conv2d(b.input((1, size, size, 3)), 16, stride=2)  # 1/2
    e2 = _inverted_bottleneck(b, e1, 64, 24, stride=2)  # 1/4
    e3 = _inverted_bottleneck(b, e2, 96, 32, stride=2)  # 1/8
    x = _inverted_bottleneck(b, e3, 128, 64, stride=2)  # 1/16

    def up(x: TensorRef, filters: int) -> TensorRef:
        y = b.conv2d(b.depthwise_conv2d(x, kernel=5), filters, kernel=1)
        return b.resize(y, 2)

    x = b.add(up(x, 32), e3)
    x = b.add(up(x, 24), e2)
    x = b.add(up(x, 16), e1)
    x = up(x, 16)
    b.output(b.conv2d(x, 1, kernel=1, activation="NONE"))
    return b


def face_landmarks(size: int = 192) -> ModelBuilder:
    """A MediaPipe face-mesh-style regressor: a stride-2 PReLU stem, residual depthwise blocks (max-pooled and
    channel-padded where they stride), downsampled to 3x3, then 1x1 convolutions to the landmark coordinates and
    a face score."""
    b = ModelBuilder(seed=46, name=f"face_landmarks_{size}")

    def block(x: TensorRef, filters: int, stride: int = 1) -> TensorRef:
        y = b.conv2d(
            b.depthwise_conv2d(x, kernel=3, stride=stride, activation="NONE"), filters, kernel=1, activation="NONE"
        )
        skip = b.max_pool(x, 2) if stride == 2 else x
        if filters > x.shape[-1]:
            skip = b.pad(skip, channels=(0, filters - x.shape[-1]))
        return b.prelu(b.add(y, skip))

    x = b.prelu(b.conv2d(b.input((1, size, size, 3)), 16, stride=2, activation="NONE"))
    x = block(block(x, 16), 16)
    while x.shape[1] > 3:
        x = block(block(x, min(2 * x.shape[-1], 64), stride=2), min(2 * x.shape[-1], 64))
    features = b.conv2d(x, 32, kernel=x.shape[1], padding="VALID")
    b.output(
        b.reshape(b.conv2d(features, 3 * 68, kernel=1, activation="NONE"), (1, 3 * 68)),
        b.reshape(b.conv2d(features, 1, kernel=1, activation="NONE"), (1, 1)),
    )
    return b


@dataclass(frozen=True)
class Family:
    """One public net's shape: its builder, the input a test uses and the public net's own."""

    build: Callable[[int], ModelBuilder]
    small: int
    full: int


FAMILIES = {
    "mobilenet_v3_se": Family(mobilenet_v3_se, 48, 224),
    "efficientnet_se": Family(efficientnet_se, 48, 224),
    "fpn_detector": Family(fpn_detector, 64, 192),
    "pan_detector": Family(pan_detector, 64, 160),
    "fastdepth": Family(fastdepth, 64, 160),
    "face_landmarks": Family(face_landmarks, 48, 192),
}
