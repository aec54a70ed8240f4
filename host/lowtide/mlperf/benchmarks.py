"""MLPerf Tiny's benchmarks as the runner and the firmware see them: what one input looks like on the wire, and the
firmware's MLPerf grammar configured for a model (firmware/app/lt_mlperf.h).

The formats are those of the runner's datasets (benchmark/evaluation/datasets, /work/shared/mlperf-tiny/README.md):
kws01 sends 490 int8 MFCC features, ic01 and vww01 uint8 RGB pixels, ad01 windows of 640 little-endian fp32
spectrogram values (its files hold longer recordings that the runner cuts into windows: bytes_to_send, stride).
"""

from __future__ import annotations

from dataclasses import dataclass

from lowtide.errors import LowtideError
from lowtide.model.ir import Graph
from lowtide.project import ProtocolDefines

# firmware/app/lt_mlperf.h: LT_MLPERF_INPUT_* and LT_MLPERF_RESULT_*
INPUT_BYTES, INPUT_UINT8_AS_INT8, INPUT_FLOAT32_QUANTIZED = 0, 1, 2
RESULT_SCORES, RESULT_RECONSTRUCTION = 0, 1
_ELEMENT_BYTES = {"int8": 1, "uint8": 1, "float32": 4}


@dataclass(frozen=True)
class Benchmark:
    """One MLPerf Tiny benchmark: its id (the runner picks its test and dataset folder by it) and input format."""

    id: str
    task: str
    element: str  # what the runner sends per input element: int8, uint8 or float32
    elements: int | None  # elements of one input; None: whatever the model takes (a user's own benchmark)
    label_classes: int  # the labels' classes (ad01: normal or anomalous); 0: a user's, the model's output count
    window_stride: int | None = None  # ad01: a dataset file is a recording, sent as windows this many bytes apart

    @property
    def input_bytes(self) -> int | None:
        return None if self.elements is None else self.elements * _ELEMENT_BYTES[self.element]

    @property
    def scores_reconstruction(self) -> bool:
        return self.id == "ad01"


BENCHMARKS = {
    b.id: b
    for b in (
        Benchmark("kws01", "keyword spotting", "int8", 490, 12),
        Benchmark("vww01", "visual wake words", "uint8", 96 * 96 * 3, 2),
        Benchmark("ic01", "image classification", "uint8", 32 * 32 * 3, 10),
        Benchmark("ad01", "anomaly detection", "float32", 640, 2, window_stride=512),
    )
}
STREAMING_ID = "sww01"  # the streaming wake-word test: needs an interface board that plays audio, not the db grammar


def benchmark_named(benchmark_id: str) -> Benchmark:
    """A known benchmark, or a user's own id (raw bytes in, scores out), which the runner knows only from their own
    test script."""
    if benchmark_id in BENCHMARKS:
        return BENCHMARKS[benchmark_id]
    if not benchmark_id or len(benchmark_id) > 16 or not benchmark_id.isascii() or not benchmark_id.isalnum():
        raise LowtideError(
            f"MLPerf benchmark id {benchmark_id!r}: 1 to 16 letters and digits "
            f"(known: {', '.join(BENCHMARKS)}, {STREAMING_ID})"
        )
    return Benchmark(benchmark_id, "user benchmark", "int8", None, 0)


@dataclass(frozen=True)
class MlperfProtocol:
    """The firmware answers MLPerf Tiny's grammar instead of lowtide's protocol (LT_PROTOCOL_MLPERF), for this
    benchmark id, converting the runner's db bytes into the model's input 0 and its output 0 into m-results."""

    model_id: str
    db_bytes: int
    input_encoding: int
    result: int
    output_float32: bool
    input_scale: float = 1.0
    input_zero_point: int = 0
    output_scale: float = 1.0
    output_zero_point: int = 0

    def firmware_defines(self) -> ProtocolDefines:
        """The preprocessor defines lt_mlperf.c reads (lowtide_project.json); the model id is a string define,
        LT_MLPERF_MODEL_ID."""
        defines = (
            ("LT_PROTOCOL_MLPERF", None),
            ("LT_MLPERF_DB_BYTES", str(self.db_bytes)),
            ("LT_MLPERF_INPUT", str(self.input_encoding)),
            ("LT_MLPERF_RESULT", str(self.result)),
            ("LT_MLPERF_OUTPUT_FLOAT32", "1" if self.output_float32 else "0"),
            ("LT_MLPERF_INPUT_SCALE", _c_float(self.input_scale)),
            ("LT_MLPERF_INPUT_ZERO_POINT", str(self.input_zero_point)),
            ("LT_MLPERF_OUTPUT_SCALE", _c_float(self.output_scale)),
            ("LT_MLPERF_OUTPUT_ZERO_POINT", str(self.output_zero_point)),
        )
        return ProtocolDefines(defines, (("LT_MLPERF_MODEL_ID", self.model_id),))


def _c_float(value: float) -> str:
    # repr is exact for a float32 read from the model: C rounds the literal back to the same float
    return f"{value!r}f"


def _quantization(graph: Graph, index: int) -> tuple[float, int]:
    qp = graph.main.tensors[index].quantization
    if qp is None or not qp.scales:
        return 1.0, 0
    return qp.scale, qp.zero_point


def mlperf_protocol(graph: Graph, benchmark: Benchmark) -> MlperfProtocol:
    """The grammar for `graph` in `benchmark`; refuses a model whose input or output does not fit the benchmark."""
    name = graph.name
    sg = graph.main
    if benchmark.id == STREAMING_ID:
        raise LowtideError(f"{STREAMING_ID} streams audio through an interface board: not a db/infer benchmark")
    if len(sg.inputs) != 1 or len(sg.outputs) != 1:
        raise LowtideError(
            f"{name}: MLPerf Tiny models have one input and one output; this one has "
            f"{len(sg.inputs)} and {len(sg.outputs)}"
        )
    model_in, model_out = sg.tensors[sg.inputs[0]], sg.tensors[sg.outputs[0]]
    if model_out.dtype not in ("int8", "float32"):
        raise LowtideError(f"{name}: output of type {model_out.dtype}: m-results needs int8 or float32")
    out_scale, out_zero = _quantization(graph, sg.outputs[0]) if model_out.dtype == "int8" else (1.0, 0)
    elements = model_in.nbytes // _ELEMENT_BYTES.get(model_in.dtype, 1)
    if benchmark.elements is not None and elements != benchmark.elements:
        raise LowtideError(
            f"{name}: input {model_in.shape} has {elements:,} elements, but {benchmark.id} sends "
            f"{benchmark.elements:,} ({benchmark.task}, {benchmark.element})"
        )
    if benchmark.elements is None or benchmark.element == model_in.dtype:
        encoding, in_scale, in_zero = INPUT_BYTES, 1.0, 0
    elif benchmark.element == "uint8" and model_in.dtype == "int8":
        encoding, in_scale, in_zero = INPUT_UINT8_AS_INT8, 1.0, 0
    elif benchmark.element == "float32" and model_in.dtype == "int8":
        encoding, (in_scale, in_zero) = INPUT_FLOAT32_QUANTIZED, _quantization(graph, sg.inputs[0])
    else:
        raise LowtideError(f"{name}: input of type {model_in.dtype}, but {benchmark.id} sends {benchmark.element}")
    if benchmark.scores_reconstruction and model_out.nbytes // _ELEMENT_BYTES[model_out.dtype] != elements:
        raise LowtideError(
            f"{name}: {benchmark.id} scores the reconstruction of its input, but the output has "
            f"{model_out.shape} elements against the input's {model_in.shape}"
        )
    return MlperfProtocol(
        model_id=benchmark.id,
        db_bytes=benchmark.input_bytes or model_in.nbytes,
        input_encoding=encoding,
        result=RESULT_RECONSTRUCTION if benchmark.scores_reconstruction else RESULT_SCORES,
        output_float32=model_out.dtype == "float32",
        input_scale=in_scale,
        input_zero_point=in_zero,
        output_scale=out_scale,
        output_zero_point=out_zero,
    )
