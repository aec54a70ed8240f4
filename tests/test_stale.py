"""Stale memory: the origins (BATCH_TO_SPACE_ND's geometry, the host TFLM under different arena fills) followed
through every operator's reads prove which output bytes are independent; `optimize --verify` compares only those,
and refuses a model none of whose output bytes is. On every model the analysis covers all the fill runs show."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from lowtide import oracle
from lowtide.model import read_model
from lowtide.model.builder import ModelBuilder
from lowtide.model.ir import Graph
from lowtide.model.reader import object_tree
from lowtide.model.schema import fb, operator_code
from lowtide.model.writer import model_bytes
from lowtide.pipeline.optimize import _same_outputs
from lowtide.settings import read_settings
from lowtide.stale import StaleReport, check_stale
from lowtide.stale.dependence import element_shape, propagate
from lowtide.stale.fills import Fixture
from lowtide.validation import load_model
from support.builder_models import SIZE, converted_dilated_model, nas_model

LAUNCH = "import sys; from lowtide.cli import main; sys.argv[0] = 'lowtide'; main()"
DECLARED = 17  # BATCH_TO_SPACE_ND's declared output height and width: one row and column more than it covers


def dilated_model(declared: int | None = DECLARED) -> bytes:
    """A branchy block with a SAME 3x3 convolution dilated by 2, lowered to SPACE_TO_BATCH_ND (operator 3),
    CONV_2D and BATCH_TO_SPACE_ND (operator 5); a 2x2 VALID convolution brings its output back to 16x16. Stored
    breadth-first, so that `optimize` reorders it."""
    b = ModelBuilder(seed=3, name="dilated")
    x = b.input((1, SIZE, SIZE, 4))
    stem = b.conv2d(x, 8, 3)
    wide = b.conv2d(stem, 32, 1)
    other = b.conv2d(stem, 16, 1)
    shape = (1, declared, declared, 8) if declared else None
    dilated = b.dilated_conv2d(stem, 8, kernel=3, dilation=2, declared_shape=shape)
    back = b.conv2d(dilated, 8, kernel=2, padding="VALID" if declared else "SAME")
    wide = b.conv2d(b.depthwise_conv2d(wide, 3), 8, 1)
    other = b.conv2d(b.depthwise_conv2d(other, 3), 8, 1)
    b.output(b.conv2d(b.concat([wide, other, back]), 8, 1, activation="NONE"))
    return b.build()


def partial_model() -> bytes:
    """BATCH_TO_SPACE_ND (operator 3) leaves rows and columns 16..19 of its 20x20x4 output unwritten; an ADD
    with the stem padded to 20x20 passes exactly those on, a CONCATENATION puts them in channels 0..3 of 8
    (output 0); a 2x2 max pool of it (output 1) reads them in its pooled rows and columns 8..9."""
    b = ModelBuilder(seed=7, name="partial")
    stem = b.conv2d(b.input((1, SIZE, SIZE, 4)), 4, 3)
    dilated = b.dilated_conv2d(stem, 4, kernel=3, dilation=2, declared_shape=(1, 20, 20, 4))
    padded = b.pad(stem, rows=(0, 4), cols=(0, 4))
    joined = b.concat([b.add(dilated, padded), padded])
    b.output(joined, b.max_pool(joined, 2))
    return b.build()


def operators_model() -> bytes:
    """One operator of each kind the builder makes, each rule's geometry off its simplest case (strides, SAME
    windows, depth multipliers, half-pixel resizing, mirror padding, splits, products)."""
    b = ModelBuilder(seed=11, name="operators")
    stem = b.conv2d(b.input((1, SIZE, SIZE, 4)), 8, 3)
    depthwise = b.depthwise_conv2d(stem, 3, stride=2, depth_multiplier=2)
    pooled = b.avg_pool(stem, 3, stride=2, padding="SAME")
    bilinear = b.resize(pooled, 2, "bilinear", half_pixel_centers=True)
    nearest = b.resize(depthwise, 2, "nearest", align_corners=True)
    mirrored = b.pad(stem, rows=(1, 2), cols=(2, 1), mode="REFLECT")
    moved = b.batch_to_space_nd(b.space_to_batch_nd(stem, (2, 2), [(1, 1), (0, 2)]), (2, 2), [(1, 1), (0, 2)])
    low, high = b.split(b.concat([bilinear, moved]), [3, -1], axis=3)
    product = b.binary("MUL", low, b.mean(high, axes=(3,)))
    flat = b.fully_connected(b.reshape(b.mean(nearest, axes=(3,)), (1, SIZE * SIZE)), 10)
    b.output(product, b.max_pool(b.prelu(mirrored), 2), b.softmax(flat), b.quantize(b.activation(moved, "TANH")))
    return b.build()


def movement_model() -> bytes:
    """Operators the builder does not make, each appended to a 3x3 convolution's (1, 8, 8, 8) output `x` as a
    converter writes them (int8, the input's quantization), every one a model output: TRANSPOSE, SLICE,
    STRIDED_SLICE with a shrunk axis and strides, GATHER, DEPTH_TO_SPACE, SPACE_TO_DEPTH, UNPACK, REVERSE_V2,
    BROADCAST_TO, PACK, BATCH_MATMUL, and TRANSPOSE_CONV with SAME and VALID padding."""
    b = ModelBuilder(seed=13, name="movement")
    b.output(b.conv2d(b.input((1, 8, 8, 4)), 8, 3))
    raw = object_tree(read_model(b.build()))
    sg = raw.subgraphs[0]
    x = int(sg.outputs[0])

    def tensor(shape, values: np.ndarray | None = None) -> int:
        t = fb.TensorT()
        t.name, t.shape = f"t{len(sg.tensors)}", list(shape)
        if values is None:
            t.type, t.buffer, t.quantization = fb.TensorType.INT8, 0, copy.deepcopy(sg.tensors[x].quantization)
        else:
            data = fb.BufferT()
            data.data = list(np.asarray(values, "<i4" if values.dtype != np.int8 else np.int8).tobytes())
            raw.buffers.append(data)
            t.type, t.buffer = (
                fb.TensorType.INT32 if values.dtype != np.int8 else fb.TensorType.INT8,
                len(raw.buffers) - 1,
            )
            if values.dtype == np.int8:  # TRANSPOSE_CONV's filter: per output channel, as TFLM's kernel needs
                t.quantization = fb.QuantizationParametersT()
                t.quantization.scale, t.quantization.zeroPoint = [0.01] * len(values), [0] * len(values)
        sg.tensors.append(t)
        return len(sg.tensors) - 1

    def append(opcode, inputs, shapes, options_name, **fields) -> list[int]:
        if opcode not in [c.builtinCode for c in raw.operatorCodes]:
            raw.operatorCodes.append(operator_code(opcode))
        op = fb.OperatorT()
        op.opcodeIndex = [c.builtinCode for c in raw.operatorCodes].index(operator_code(opcode).builtinCode)
        op.inputs = [i if isinstance(i, int) else tensor(np.shape(i), i) for i in inputs]
        op.outputs = [tensor(shape) for shape in shapes]
        op.builtinOptionsType, op.builtinOptions = (
            getattr(fb.BuiltinOptions, options_name),
            getattr(fb, options_name + "T")(),
        )
        for name, value in fields.items():
            setattr(op.builtinOptions, name, value)
        sg.operators.append(op)
        return op.outputs

    (transposed,) = append("TRANSPOSE", [x, np.array([0, 2, 1, 3])], [(1, 8, 8, 8)], "TransposeOptions")
    outputs = [transposed]
    outputs += append("SLICE", [x, np.array([0, 1, 2, 0]), np.array([1, 5, -1, 4])], [(1, 5, 6, 4)], "SliceOptions")
    outputs += append(
        "STRIDED_SLICE",
        [x, np.array([0, 1, 0, 0]), np.array([1, 8, 8, 8]), np.array([1, 2, 3, 1])],
        [(4, 3, 8)],
        "StridedSliceOptions",
        shrinkAxisMask=1,
    )
    outputs += append("GATHER", [x, np.array([3, 0, 3])], [(1, 8, 8, 3)], "GatherOptions", axis=3)
    outputs += append("DEPTH_TO_SPACE", [x], [(1, 16, 16, 2)], "DepthToSpaceOptions", blockSize=2)
    outputs += append("SPACE_TO_DEPTH", [x], [(1, 4, 4, 32)], "SpaceToDepthOptions", blockSize=2)
    outputs += append("UNPACK", [x], [(1, 8, 8)] * 8, "UnpackOptions", num=8, axis=1)
    outputs += append("REVERSE_V2", [x, np.array([2])], [(1, 8, 8, 8)], "ReverseV2Options")
    outputs += append("BROADCAST_TO", [x, np.array([2, 8, 8, 8])], [(2, 8, 8, 8)], "BroadcastToOptions")
    outputs += append("PACK", [x, transposed], [(2, 1, 8, 8, 8)], "PackOptions", valuesCount=2, axis=0)
    outputs += append("BATCH_MATMUL", [x, transposed], [(1, 8, 8, 8)], "BatchMatMulOptions")
    filters = np.random.default_rng(0).integers(-127, 128, (4, 3, 3, 8), dtype=np.int8)
    for code, size in ((fb.Padding.SAME, 16), (fb.Padding.VALID, 17)):
        outputs += append(
            "TRANSPOSE_CONV",
            [np.array([1, size, size, 4]), filters, x],
            [(1, size, size, 4)],
            "TransposeConvOptions",
            padding=code,
            strideH=2,
            strideW=2,
        )
    sg.outputs = [*sg.outputs, *outputs]
    return model_bytes(raw)


def assert_input_dependence_covers_what_changes(graph: Graph) -> dict[int, np.ndarray]:
    """Mark a corner of input 0 (rows of the last quarter, columns of the first third), propagate the marks, and
    redraw those input elements three times: on every tensor of the fixture, each byte that changes is marked.
    The same rules that follow stale bytes, checked against the host TFLM on values it can set."""
    sg = graph.main
    corner = np.zeros(element_shape(graph, sg.inputs[0]), bool)
    if corner.ndim == 4:
        corner[:, corner.shape[1] * 3 // 4 :, : max(1, corner.shape[2] // 3)] = True
    else:
        corner[..., corner.shape[-1] * 3 // 4 :] = True
    masks = {sg.inputs[0]: corner}
    for op in sg.operators:
        for t, flow in zip([t for t in op.outputs if t >= 0], propagate(graph, op, masks)):
            masks[t] = flow.dependent | flow.unwritten
    base = oracle.random_inputs(graph)
    input_sets = [base]
    for seed in (1, 2, 3):
        redrawn = [a.copy() for a in base]
        redrawn[0][corner.reshape(base[0].shape)] = oracle.random_inputs(graph, seed)[0][corner.reshape(base[0].shape)]
        input_sets.append(redrawn)
    fixture = Fixture.of(graph)
    runs = [(np.zeros(fixture.fill_bytes, np.uint8), inputs) for inputs in input_sets]
    first, *others = fixture.run(graph, runs, read_settings())
    for t, reference in first.items():
        changed = np.zeros(reference.size, bool)
        for run in others:
            changed |= run[t] != reference
        marked = np.repeat(masks[t].reshape(-1), reference.size // max(masks[t].size, 1))
        opcode = sg.operators[sg.producers()[t]].opcode
        assert not (changed & ~marked).any(), f"tensor {t} ({opcode}): {int((changed & ~marked).sum())} bytes"
    return masks


def test_every_rule_covers_what_changing_its_inputs_changes():
    graph = read_model(operators_model())
    masks = assert_input_dependence_covers_what_changes(graph)
    # The rules are no blanket default: only the fully connected layer and the softmax see the whole corner.
    partial = {graph.main.operators[op].opcode for t, op in graph.main.producers().items() if not masks[t].all()}
    assert partial >= {
        "CONV_2D",
        "DEPTHWISE_CONV_2D",
        "AVERAGE_POOL_2D",
        "RESIZE_BILINEAR",
        "RESIZE_NEAREST_NEIGHBOR",
        "MIRROR_PAD",
        "SPACE_TO_BATCH_ND",
        "BATCH_TO_SPACE_ND",
        "CONCATENATION",
        "SPLIT_V",
        "MUL",
        "MEAN",
        "RESHAPE",
        "PRELU",
        "MAX_POOL_2D",
        "TANH",
        "QUANTIZE",
    }
    assert_covers_the_fills(check_stale(graph), [])


def test_movement_rules_cover_what_changing_their_inputs_changes():
    graph = read_model(movement_model())
    masks = assert_input_dependence_covers_what_changes(graph)
    partial = {graph.main.operators[op].opcode for t, op in graph.main.producers().items() if not masks[t].all()}
    assert partial >= {
        "TRANSPOSE",
        "SLICE",
        "STRIDED_SLICE",
        "GATHER",
        "DEPTH_TO_SPACE",
        "SPACE_TO_DEPTH",
        "UNPACK",
        "REVERSE_V2",
        "BROADCAST_TO",
        "PACK",
        "BATCH_MATMUL",
        "TRANSPOSE_CONV",
    }


@pytest.mark.parametrize("name", ["mltk_anomaly_detection", "mww_v2_okay_nabu", "mcunet_vww"])
def test_rules_cover_what_changes_on_real_models(shared_models, name):
    """STRIDED_SLICE, PACK, SHAPE, SPLIT_V, TRANSPOSE, resource variables and CALL_ONCE, as converters write them."""
    assert_input_dependence_covers_what_changes(load_model(shared_models / f"{name}.tflite"))


def _positions(mask: np.ndarray, shape: tuple[int, ...]) -> set[tuple[int, ...]]:
    return {tuple(int(i) for i in p) for p in np.argwhere(mask.reshape(shape))}


def _mask(ranges, size: int) -> np.ndarray:
    mask = np.zeros(size, bool)
    for start, end in ranges:
        mask[start:end] = True
    return mask


def assert_covers_the_fills(report: StaleReport, origins: list[tuple[int, str]]) -> None:
    """What the fill runs saw change is inside what the analysis marks, on every tensor and output, and only
    `origins` make stale bytes of their own: the analysis explains everything the fills saw."""
    for determined, observed in zip(report.output_determined, report.output_observed):
        assert not (observed & determined).any()
    for s in report.operators:
        marked = _mask(s.unwritten + s.stale_read, s.tensor_bytes)
        assert not (_mask(s.observed, s.tensor_bytes) & ~marked).any(), s.describe()
    assert [(s.op, s.opcode) for s in report.origins] == origins


def test_batch_to_space_leaves_exactly_the_uncovered_rows_and_columns_unwritten():
    graph = read_model(dilated_model())
    report = check_stale(graph)
    (origin,) = report.origins
    assert (origin.op, origin.opcode) == (5, "BATCH_TO_SPACE_ND")
    # TFLM writes output row in_h * 2 + offset for in_h < 8, offset < 2 (crop_top 0): rows and columns 0..15 of
    # the 17 declared; every channel byte of row 16 and of column 16 keeps what the arena held.
    unwritten = np.zeros(DECLARED * DECLARED * 8, bool)
    for start, end in origin.unwritten:
        unwritten[start:end] = True
    expected = {
        (0, h, w, c) for h in range(DECLARED) for w in range(DECLARED) for c in range(8) if h == SIZE or w == SIZE
    }
    assert _positions(unwritten, (1, DECLARED, DECLARED, 8)) == expected
    assert origin.stale_read == ()
    assert origin.fix is not None and "(1, 16, 16, 8)" in origin.fix
    # The 2x2 VALID convolution reads row and column 16 for its last output row and column; the final 1x1
    # convolution mixes every channel, so exactly its row 15 and column 15 depend on stale memory.
    passed_on = {s.opcode for s in report.operators if not s.origin}
    assert passed_on == {"CONV_2D", "CONCATENATION"}
    assert_covers_the_fills(report, [(5, "BATCH_TO_SPACE_ND")])
    (determined,) = report.output_determined
    assert _positions(~determined, (1, SIZE, SIZE, 8)) == {
        (0, h, w, c) for h in range(SIZE) for w in range(SIZE) for c in range(8) if h == SIZE - 1 or w == SIZE - 1
    }
    assert report.undetermined_output_bytes == (2 * SIZE - 1) * 8


def test_a_converted_dilated_convolution_leaves_the_pixels_of_the_missing_batches_unwritten():
    """TensorFlow's converter declares batch 1 where it is unknown: SPACE_TO_BATCH_ND keeps the first of its 4
    batches, and BATCH_TO_SPACE_ND (operator 3) writes only the even rows and columns that one reaches; the 1x1
    convolution after it passes on exactly those pixels' stale bytes (issue 41)."""
    report = check_stale(read_model(converted_dilated_model()))
    (origin,) = report.origins
    assert (origin.op, origin.opcode) == (3, "BATCH_TO_SPACE_ND")
    assert _positions(_mask(origin.unwritten, origin.tensor_bytes), (1, SIZE, SIZE, 8)) == {
        (0, h, w, c) for h in range(SIZE) for w in range(SIZE) for c in range(8) if h % 2 or w % 2
    }
    assert_covers_the_fills(report, [(3, "BATCH_TO_SPACE_ND")])
    (determined,) = report.output_determined
    assert _positions(~determined, (1, SIZE, SIZE, 4)) == {
        (0, h, w, c) for h in range(SIZE) for w in range(SIZE) for c in range(4) if h % 2 or w % 2
    }


def test_a_dilated_convolution_whose_shapes_agree_is_deterministic():
    report = check_stale(read_model(dilated_model(declared=None)))
    assert report.clean and report.operators == ()
    assert_covers_the_fills(report, [])


def _independent_spans(side: int, covered: int) -> list[list[int]]:
    """Byte ranges proven independent in a side x side map of 8 channel bytes whose first 4 channels are stale
    outside the covered x covered corner, merged where they touch."""
    spans: list[list[int]] = []
    for pixel in range(side * side):
        h, w = divmod(pixel, side)
        span = [8 * pixel, 8 * pixel + 8] if h < covered and w < covered else [8 * pixel + 4, 8 * pixel + 8]
        if spans and spans[-1][1] == span[0]:
            spans[-1][1] = span[1]
        else:
            spans.append(span)
    return spans


def test_a_reduction_makes_every_output_byte_depend_though_the_fills_agree_on_most():
    report = check_stale(read_model(nas_model()))
    (origin,) = report.origins
    assert (origin.op, origin.opcode, origin.inputs_determined) == (3, "BATCH_TO_SPACE_ND", True)
    unwritten = _mask(origin.unwritten, origin.tensor_bytes)
    assert _positions(unwritten, (1, 20, 20, 10)) == {
        (0, h, w, c) for h in range(20) for w in range(20) for c in range(10) if h >= SIZE or w >= SIZE
    }
    assert report.outputs_undefined and report.undetermined_output_bytes == report.output_bytes == 10
    assert report.to_json()["outputs"][0]["independent"] == []
    # Sampling alone would have called 6 of the 10 bytes determined: the proof does not rest on the fills.
    assert report.observed_output_bytes == 4
    assert [(s.op, s.opcode, s.stale_read) for s in report.operators if not s.origin] == [
        (4, "MEAN", ((0, 10),)),
        (5, "SOFTMAX", ((0, 10),)),
    ]
    assert_covers_the_fills(report, [(3, "BATCH_TO_SPACE_ND")])


def test_partial_dependence_gets_the_exact_independent_bytes():
    report = check_stale(read_model(partial_model()))
    assert_covers_the_fills(report, [(3, "BATCH_TO_SPACE_ND")])
    joined, pooled = report.to_json()["outputs"]
    # 20x20 pixels of 8 channel bytes: a pixel in rows or columns 16..19 has channels 0..3 stale, 4..7 not.
    assert joined["independent"] == _independent_spans(side=20, covered=16)
    assert joined["bytes"] - sum(b - a for a, b in joined["independent"]) == (400 - 256) * 4
    assert pooled["independent"] == _independent_spans(side=10, covered=8)
    assert not report.outputs_undefined


def test_outputs_are_compared_only_where_determined():
    stock = (np.arange(8, dtype=np.int8).reshape(2, 4),)
    determined = (np.array([True] * 6 + [False] * 2),)
    stale_byte_differs = (stock[0].copy(),)
    stale_byte_differs[0][1, 3] = 100
    assert _same_outputs(stock, stale_byte_differs, determined)
    assert not _same_outputs(stock, stale_byte_differs)
    determined_byte_differs = (stock[0].copy(),)
    determined_byte_differs[0][0, 0] = 100
    assert not _same_outputs(stock, determined_byte_differs, determined)


def test_optimize_verify_names_the_stale_operator_and_verifies_the_determined_bytes(tmp_path):
    model, out = tmp_path / "dilated.tflite", tmp_path / "dilated_opt.tflite"
    model.write_bytes(dilated_model())
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            LAUNCH,
            "optimize",
            str(model),
            "-o",
            str(out),
            "--verify",
            "--time-limit",
            "4",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["after"]["planned_head_bytes"] < report["before"]["tflm_head_bytes"]  # reordered and placed
    assert report["determined_outputs_identical"] is True
    stale = report["stale"]
    assert not stale["clean"] and stale["undetermined_output_bytes"] == (2 * SIZE - 1) * 8
    assert (stale["proof"], stale["outputs_undefined"]) == ("analysis", False)
    assert stale["independent_output_bytes"] == SIZE * SIZE * 8 - (2 * SIZE - 1) * 8
    origins = [op for op in stale["operators"] if op["origin"]]
    assert [(op["index"], op["opcode"], op["unwritten_bytes"]) for op in origins] == [
        (5, "BATCH_TO_SPACE_ND", (DECLARED * DECLARED - SIZE * SIZE) * 8)
    ]
    inspected = subprocess.run(
        [sys.executable, "-c", LAUNCH, "inspect", str(model), "--check-stale"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "300"},
    )
    assert inspected.returncode == 0, inspected.stderr
    assert "operator 5 (BATCH_TO_SPACE_ND) leaves 264 of its 2,312 output bytes unwritten" in inspected.stdout
    assert "output 0: 1,800 of 2,048 bytes proven independent of stale memory: [0, 120), [128, 248)" in (
        inspected.stdout
    )


def test_optimize_verify_refuses_a_model_whose_outputs_are_all_undefined_and_writes_nothing(tmp_path):
    model, out = tmp_path / "nas.tflite", tmp_path / "nas_opt.tflite"
    model.write_bytes(nas_model())
    for extra in ([], ["--json"]):
        done = subprocess.run(
            [sys.executable, "-c", LAUNCH, "optimize", str(model), "-o", str(out), "--verify", *extra],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 2 and done.stdout == ""
        (line,) = [line for line in done.stderr.splitlines() if line.strip()]  # the progress bar leaves a blank
        assert line.startswith(
            f"lowtide: error: {out}: cannot verify: the original model's outputs are themselves "
            "undefined under TFLM: every one of its 10 output bytes depends on stale memory "
            "(operator 3 (BATCH_TO_SPACE_ND) leaves 1,440 of its 4,000 output bytes unwritten)"
        )
        assert "TFLM measured the planned head" in line and "declare its output (1, 16, 16, 10)" in line
        assert "differ" not in line and "Traceback" not in done.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == ["nas.tflite"]


def test_inspect_check_stale_reports_the_reduction_as_wholly_dependent(tmp_path):
    model = tmp_path / "nas.tflite"
    model.write_bytes(nas_model())
    done = subprocess.run(
        [sys.executable, "-c", LAUNCH, "inspect", str(model), "--check-stale", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    stale = json.loads(done.stdout)["stale"]
    assert (stale["proof"], stale["outputs_undefined"], stale["clean"]) == ("analysis", True, False)
    assert (stale["undetermined_output_bytes"], stale["independent_output_bytes"], stale["observed_output_bytes"]) == (
        10,
        0,
        4,
    )
    assert stale["outputs"][0]["undetermined"] == [[0, 10]] and stale["outputs"][0]["independent"] == []
    assert [(op["index"], op["opcode"], op["origin"], op["own_bytes"]) for op in stale["operators"]] == [
        (3, "BATCH_TO_SPACE_ND", True, 1440),
        (4, "MEAN", False, 0),
        (5, "SOFTMAX", False, 0),
    ]
