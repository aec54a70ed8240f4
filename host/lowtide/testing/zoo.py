"""Models built with `lowtide.model.builder.ModelBuilder` for the README, tests and benchmarks: the demo model,
randomly wired networks (`RandWireSpec`), the stems of public vision nets (`STEMS`), and a command that writes the
demo model (`python -m lowtide.testing.zoo demo OUT`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lowtide.model.builder import ModelBuilder, TensorRef


def demo_model() -> bytes:
    """The README demo model's bytes, operators in their (memory-poor) stored order; see `demo_builder`."""
    return demo_builder().build()


def demo_builder() -> ModelBuilder:
    """The README demo: a 14-operator inception-like block with a residual connection, 48x48x3 input.

    Three branches leave the stem: two expand to 48 and 16 channels, run a depthwise conv and project back to
    16 and 8 channels; the third (24 channels) is max-pooled. They are concatenated, projected and added to
    the stem. Stored breadth-first (every branch's first operator, then every second, ...), as a graph
    exporter may well write it, all wide branch tensors are live at once: live peak 82,944 bytes and TFLM's
    greedy head 92,160 bytes. Running one branch to the end before starting the next brings both down to
    59,904 bytes (the best of all 560 topological orders, by brute force).
    """
    b = ModelBuilder(seed=0, name="lowtide_demo")
    image = b.input((1, 48, 48, 3))
    stem = b.conv2d(image, filters=8, kernel=3, stride=2)  # 24x24x8
    expand_a = b.conv2d(stem, filters=48, kernel=1)
    expand_b = b.conv2d(stem, filters=16, kernel=1)
    expand_c = b.conv2d(stem, filters=24, kernel=1)
    spatial_a = b.depthwise_conv2d(expand_a, kernel=3)
    spatial_b = b.depthwise_conv2d(expand_b, kernel=5)
    pooled_c = b.max_pool(expand_c, size=3, stride=1, padding="SAME")
    project_a = b.conv2d(spatial_a, filters=16, kernel=1, activation="NONE")
    project_b = b.conv2d(spatial_b, filters=8, kernel=1, activation="NONE")
    merged = b.concat([project_a, project_b, pooled_c])
    mixed = b.conv2d(merged, filters=8, kernel=1, activation="NONE")
    block_out = b.add(stem, mixed, activation="RELU")
    features = b.avg_pool(block_out, size=24)
    b.output(b.fully_connected(features, units=10))
    return b


RandWireGenerator = Literal["ws", "er", "ba"]
Aggregation = Literal["concat", "add"]


@dataclass(frozen=True)
class RandWireSpec:
    """A randomly wired network in the shape of Xie et al. 2019 ("Exploring Randomly Wired Neural Networks"):
    a stem, `stages` random graphs of `nodes` nodes each, a classifier. Each stage is drawn by networkx with the
    paper's parameters (WS: k=4, p=0.75; ER: p=0.2; BA: m=5), its edges oriented from lower to higher node
    number. A node aggregates its inputs (one CONCATENATION, or a chain of ADDs), then runs a separable
    convolution: 3x3 depthwise, 1x1 to the stage's channels."""

    generator: RandWireGenerator
    nodes: int  # per stage
    stages: int = 2
    aggregation: Aggregation = "concat"
    channels: int = 16  # of the first stage; doubled per stage as the resolution halves
    size: int = 32  # input height and width
    seed: int = 0

    @property
    def name(self) -> str:
        return f"randwire_{self.generator}_{self.aggregation}_{self.stages}x{self.nodes}_s{self.seed}"


def randwire_builder(spec: RandWireSpec) -> ModelBuilder:
    """The operators of `spec` in a breadth-first stored order (each stage's nodes in number order)."""
    import networkx as nx  # only the RandWire graphs need it

    b = ModelBuilder(seed=spec.seed, name=spec.name)
    image = b.input((1, spec.size, spec.size, 3))
    x = b.conv2d(image, spec.channels, kernel=3)
    for stage in range(spec.stages):
        graph_seed = spec.seed * 1000 + stage
        if spec.generator == "ws":
            wiring = nx.connected_watts_strogatz_graph(spec.nodes, 4, 0.75, seed=graph_seed)
        elif spec.generator == "er":
            wiring = nx.erdos_renyi_graph(spec.nodes, 0.2, seed=graph_seed)
        else:
            wiring = nx.barabasi_albert_graph(spec.nodes, 5, seed=graph_seed)
        channels = spec.channels << stage
        outputs: dict[int, TensorRef] = {}
        for node in range(spec.nodes):
            sources = sorted(n for n in wiring.neighbors(node) if n < node)
            merged = _aggregate(b, [outputs[n] for n in sources], spec.aggregation) if sources else x
            # The stage's input nodes halve the resolution (the first stage keeps the stem's).
            stride = 2 if stage and not sources else 1
            spatial = b.depthwise_conv2d(merged, kernel=3, stride=stride)
            outputs[node] = b.conv2d(spatial, channels, kernel=1)
        sinks = [outputs[n] for n in range(spec.nodes) if not any(m > n for m in wiring.neighbors(n))]
        x = _aggregate(b, sinks, spec.aggregation)
    features = b.avg_pool(x, size=x.shape[1])
    b.output(b.fully_connected(features, units=10))
    return b


def randwire_model(spec: RandWireSpec) -> bytes:
    return randwire_builder(spec).build()


def _aggregate(b: ModelBuilder, tensors: list[TensorRef], aggregation: Aggregation) -> TensorRef:
    if len(tensors) == 1:
        return tensors[0]
    if aggregation == "concat":
        return b.concat(tensors)
    total = tensors[0]
    for t in tensors[1:]:
        total = b.add(total, t)
    return total


def _silu(b: ModelBuilder, x: TensorRef) -> TensorRef:
    """SiLU as TFLite converts it: x * LOGISTIC(x)."""
    return b.binary("MUL", x, b.activation(x, "LOGISTIC"))


def _squeeze_excite(b: ModelBuilder, x: TensorRef, reduced: int) -> TensorRef:
    """MobileNetV3's squeeze-and-excitation: a global MEAN, two 1x1 convolutions, hard-sigmoid
    (RELU6(x + 3) / 6), the input scaled per channel."""
    s = b.conv2d(b.mean(x), reduced, kernel=1, activation="RELU")
    s = b.binary("ADD", b.conv2d(s, x.shape[-1], kernel=1, activation="NONE"), 3.0, activation="RELU6")
    return b.binary("MUL", x, b.binary("MUL", s, 1.0 / 6.0))


def mobilenet_v3_stem(size: int = 96) -> ModelBuilder:
    """The first blocks of MobileNetV3-Small: a hard-swish stem, inverted bottlenecks with hard-swish and
    squeeze-and-excitation, a residual add, then global pooling and a classifier."""
    b = ModelBuilder(seed=31, name="mobilenet_v3_stem")
    x = b.activation(b.conv2d(b.input((1, size, size, 3)), 16, kernel=3, stride=2, activation="NONE"), "HARD_SWISH")
    y = _squeeze_excite(b, b.depthwise_conv2d(x, kernel=3, stride=2), 8)
    x = b.conv2d(y, 16, kernel=1, activation="NONE")
    x = b.conv2d(b.depthwise_conv2d(b.conv2d(x, 72, kernel=1), kernel=3, stride=2), 24, kernel=1, activation="NONE")
    y = b.conv2d(b.depthwise_conv2d(b.conv2d(x, 88, kernel=1), kernel=3), 24, kernel=1, activation="NONE")
    x = b.add(x, y)
    y = b.activation(b.conv2d(x, 96, kernel=1, activation="NONE"), "HARD_SWISH")
    y = b.activation(b.depthwise_conv2d(y, kernel=5, stride=2, activation="NONE"), "HARD_SWISH")
    x = b.conv2d(_squeeze_excite(b, y, 24), 40, kernel=1, activation="NONE")
    b.output(b.fully_connected(b.mean(x), 10))
    return b


def yolov8_stem(size: int = 96) -> ModelBuilder:
    """YOLOv8's stem: two stride-2 convolutions and a C2f block (1x1 convolution, SPLIT in two halves, a
    residual bottleneck on one, CONCATENATION of all three, 1x1 convolution), SiLU everywhere, then a
    stride-2 convolution and a pooled classifier."""
    b = ModelBuilder(seed=32, name="yolov8_stem")

    def conv(x: TensorRef, filters: int, kernel: int = 3, stride: int = 1) -> TensorRef:
        return _silu(b, b.conv2d(x, filters, kernel=kernel, stride=stride, activation="NONE"))

    x = conv(conv(b.input((1, size, size, 3)), 16, stride=2), 32, stride=2)
    first, second = b.split_equal(conv(x, 32, kernel=1), 2)
    third = b.add(second, conv(conv(second, 16), 16))
    x = conv(b.concat([first, second, third]), 32, kernel=1)
    x = conv(x, 64, stride=2)
    b.output(b.fully_connected(b.mean(x), 10))
    return b


def blazeface_stem(size: int = 128) -> ModelBuilder:
    """BlazeFace's front: a 5x5 stride-2 convolution, then BlazeBlocks (5x5 depthwise, 1x1 projection, residual
    add); where a block widens, the residual path pads channels with zeros (PAD along channels); where it
    strides, the residual path is a 2x2 MAX_POOL."""
    b = ModelBuilder(seed=33, name="blazeface_stem")

    def block(x: TensorRef, filters: int, stride: int = 1) -> TensorRef:
        y = b.conv2d(
            b.depthwise_conv2d(x, kernel=5, stride=stride, activation="NONE"), filters, kernel=1, activation="NONE"
        )
        skip = b.max_pool(x, 2) if stride == 2 else x
        if filters > x.shape[-1]:
            skip = b.pad(skip, channels=(0, filters - x.shape[-1]))
        return b.activation(b.add(y, skip), "RELU")

    x = b.conv2d(b.input((1, size, size, 3)), 24, kernel=5, stride=2)
    x = block(block(x, 24), 28)
    x = block(block(block(x, 32, stride=2), 36), 42)
    x = block(block(x, 48, stride=2), 48)
    b.output(b.conv2d(x, 2, kernel=1, activation="NONE"))
    return b


def unet_stem(size: int = 64) -> ModelBuilder:
    """A small U-Net: two encoder stages (convolutions, 2x2 MAX_POOL), a bottleneck, two decoder stages that
    upsample (RESIZE_NEAREST_NEIGHBOR, then RESIZE_BILINEAR), concatenate the encoder's skip tensor and
    convolve, and a 1x1 per-pixel classifier at full resolution."""
    b = ModelBuilder(seed=34, name="unet_stem")
    e1 = b.conv2d(b.conv2d(b.input((1, size, size, 3)), 16), 16)
    e2 = b.conv2d(b.conv2d(b.max_pool(e1, 2), 32), 32)
    m = b.conv2d(b.max_pool(e2, 2), 64)
    d2 = b.conv2d(b.concat([b.resize(m, 2), e2]), 32)
    d1 = b.conv2d(b.concat([b.resize(d2, 2, "bilinear", half_pixel_centers=True), e1]), 16)
    b.output(b.conv2d(d1, 2, kernel=1, activation="NONE"))
    return b


STEMS = {
    "mobilenet_v3_stem": mobilenet_v3_stem,
    "yolov8_stem": yolov8_stem,
    "blazeface_stem": blazeface_stem,
    "unet_stem": unet_stem,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lowtide.testing.zoo", description="Write lowtide's demo model, an irregularly wired int8 graph."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="write the README demo model")
    demo.add_argument("out", type=Path, help="where to write the .tflite file")
    args = parser.parse_args(argv)
    data = demo_model()
    args.out.write_bytes(data)
    print(f"wrote {args.out} ({len(data):,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
