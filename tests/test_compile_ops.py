"""Operator kernels of `lowtide compile`, each against the host TFLM on small models built here.

One model per kernel family and type holds every operator of the family, several times with quantization
parameters at their edges (saturating, negative alphas, zero points away from the middle, broadcasts), each
output a model output: one compiler run checks them all, built with ASan and UBSan. Inputs cover each input
type's full range (float inputs are scaled up first, so that the activations' bends and saturations are reached).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lowtide import oracle
from lowtide.compile import verify_compiled
from lowtide.compile.codegen import check_model
from lowtide.compile.lowering import KERNELS, NOT_IN_TFLM, UNDEFINED_IN_TFLM
from lowtide.compile.lowering.elementwise import DIV_INT8_RANGE
from lowtide.compile.quantization import sigmoid_table_int8
from lowtide.model.attributes import (
    Activation,
    AddAttributes,
    BatchMatMulAttributes,
    ConcatenationAttributes,
    Conv2DAttributes,
    CumsumAttributes,
    DepthToSpaceAttributes,
    DepthwiseConv2DAttributes,
    DivAttributes,
    FullyConnectedAttributes,
    GatherAttributes,
    L2NormAttributes,
    LeakyReluAttributes,
    MirrorPadAttributes,
    MirrorPadMode,
    MulAttributes,
    PackAttributes,
    Padding,
    Pool2DAttributes,
    ReducerAttributes,
    ResizeBilinearAttributes,
    SoftmaxAttributes,
    SpaceToDepthAttributes,
    StridedSliceAttributes,
    SubAttributes,
    TransposeConvAttributes,
    UnpackAttributes,
    UnreadAttributes,
)
from lowtide.validation import load_model
from support.models import TinyModel

SHAPE = (2, 3, 4, 5)


def _check(path: Path, seeds=(0, 1)) -> list[np.ndarray]:
    """Every output bit-exact (float32: within the host check's 1e-5) under the sanitizers; the oracle's outputs
    for seed 0."""
    for seed in seeds:
        result = verify_compiled(load_model(path), seed=seed, sanitize=True)
        assert result.passed, [o for o in result.outputs if not o.passed]
        assert all(o.max_abs_diff == 0 for o in result.outputs if o.dtype != "float32")
    graph = load_model(path)
    return oracle.run(path.read_bytes(), oracle.random_inputs(graph, 0)).outputs


def _varied(outputs: list[np.ndarray], at_least: int = 4) -> None:
    """Each output takes several values: no kernel is checked on a constant."""
    for k, out in enumerate(outputs):
        assert len(np.unique(out)) >= at_least, f"output {k} has values {np.unique(out)}"


# ---- activations ---------------------------------------------------------------------------------------------


def _activations_int8(m: TinyModel) -> tuple[list[int], list[int]]:
    x = m.tensor(SHAPE, "int8", 0.05, 3)
    fine = m.tensor(SHAPE, "int8", 0.004, -5)  # HARD_SWISH's reluish multiplier below one
    outputs = []

    def unary(opcode, source, scale, zero_point, attributes=None):
        y = m.tensor(SHAPE, "int8", scale, zero_point)
        m.op(opcode, [source], [y], attributes)
        outputs.append(y)

    unary("RELU", x, 0.03, -128)
    unary("RELU", x, 0.02, 5)  # the clamp starts at a zero point above the minimum
    unary("RELU", x, 0.01, -20)  # saturates
    unary("RELU6", x, 0.5, 0)  # TFLM clamps the input's values: the output's quantization is not used
    unary("LEAKY_RELU", x, 0.04, -10, LeakyReluAttributes(alpha=0.2))
    unary("LEAKY_RELU", x, 0.05, 0, LeakyReluAttributes(alpha=-0.5))  # negative alpha
    unary("LEAKY_RELU", x, 0.09, 7, LeakyReluAttributes(alpha=1.5))
    unary("HARD_SWISH", x, 0.03, -100)
    unary("HARD_SWISH", fine, 0.0006, 20)
    unary("TANH", x, 1 / 128, 0)
    unary("TANH", fine, 1 / 128, 0)
    unary("ELU", x, 0.03, 60)
    unary("LOGISTIC", x, 1 / 256, -128)
    per_channel = m.tensor((5,), "int8", 0.01, 4, data=[-128, -40, 0, 60, 127])
    unary_alpha = m.tensor((3, 1, 5), "int8", 0.02, -3, data=np.arange(15).reshape(3, 1, 5) * 17 - 120)
    for alpha, scale, zero_point in ((per_channel, 0.04, -2), (unary_alpha, 0.07, 10)):
        y = m.tensor(SHAPE, "int8", scale, zero_point)
        m.op("PRELU", [x, alpha], [y])
        outputs.append(y)
    return [x, fine], outputs


def _activations_int16(m: TinyModel) -> tuple[list[int], list[int]]:
    x = m.tensor(SHAPE, "int16", 6 / 32768, 0)
    outputs = []
    for opcode, scale, attributes in (
        ("RELU", 3 / 32768, None),
        ("RELU", 8 / 32768, None),
        ("RELU6", 6 / 32768, None),
        ("LEAKY_RELU", 5 / 32768, LeakyReluAttributes(alpha=0.3)),
        ("LEAKY_RELU", 4 / 32768, LeakyReluAttributes(alpha=-1.25)),
    ):
        y = m.tensor(SHAPE, "int16", scale, 0)
        m.op(opcode, [x], [y], attributes)
        outputs.append(y)
    alpha = m.tensor((4, 1), "int8", 0.01, 2, data=[[-100], [-3], [50], [127]])
    y = m.tensor(SHAPE, "int16", 4 / 32768, 0)
    m.op("PRELU", [x, alpha], [y])
    outputs.append(y)
    # LOGISTIC and TANH interpolate TFLM's table: input scales that are powers of two (the kernel's own shift: 2^-12
    # for both, 2^-11 for TANH) and that are not (a multiplier; 2^-11 is one for LOGISTIC); 16 / 32768 reaches
    # the table's end, where the output saturates
    power_of_two, wide = m.tensor(SHAPE, "int16", 1 / 4096, 0), m.tensor(SHAPE, "int16", 16 / 32768, 0)
    for opcode in ("LOGISTIC", "TANH"):
        for source in (x, power_of_two, wide):
            y = m.tensor(SHAPE, "int16", 1 / 32768, 0)
            m.op(opcode, [source], [y])
            outputs.append(y)
    # SOFTMAX through TFLM's exp and reciprocal tables: differences rescaled by multipliers below and above one
    for source, beta in ((x, 1.0), (power_of_two, 0.3), (wide, 2.5)):
        y = m.tensor(SHAPE, "int16", 1 / 32768, 0)
        m.op("SOFTMAX", [source], [y], SoftmaxAttributes(beta=beta))
        outputs.append(y)
    return [x, power_of_two, wide], outputs


def _activations_float32(m: TinyModel) -> tuple[list[int], list[int]]:
    x = m.tensor(SHAPE, "float32")
    gain = m.tensor((1,), "float32", data=[8.0])
    wide = m.tensor(SHAPE, "float32")  # [-8, 8]
    m.op("MUL", [x, gain], [wide], MulAttributes(fused_activation=Activation.NONE))
    outputs = []
    for opcode, attributes in (
        ("RELU", None),
        ("RELU6", None),
        ("LEAKY_RELU", LeakyReluAttributes(alpha=0.1)),
        ("LEAKY_RELU", LeakyReluAttributes(alpha=-2.0)),
        ("HARD_SWISH", None),
        ("TANH", None),
        ("ELU", None),
        ("LOGISTIC", None),
    ):
        y = m.tensor(SHAPE, "float32")
        m.op(opcode, [wide], [y], attributes)
        outputs.append(y)
    alpha = m.tensor((1, 4, 5), "float32", data=np.linspace(-1.5, 1.5, 20).reshape(1, 4, 5))
    y = m.tensor(SHAPE, "float32")
    m.op("PRELU", [wide, alpha], [y])
    return [x], outputs + [y]


ACTIVATIONS = {"int8": _activations_int8, "int16": _activations_int16, "float32": _activations_float32}


@pytest.mark.parametrize("dtype", sorted(ACTIVATIONS))
def test_activations_bit_exact(tmp_path, dtype):
    m = TinyModel()
    inputs, outputs = ACTIVATIONS[dtype](m)
    path = m.save(tmp_path / f"activations_{dtype}.tflite", inputs, outputs)
    _varied(_check(path))


# ---- element-wise math -----------------------------------------------------------------------------------------


def _binary_ops(m: TinyModel, dtype: str, a: int, b: int, quant: list[tuple]) -> list[int]:
    """SUB (plain, with a fused RELU, and reversed: the broadcast input first), MAXIMUM, MINIMUM,
    SQUARED_DIFFERENCE, ADD (with RELU6) and MUL (reversed) of `a` and `b`, with output quantizations `quant` in
    that order."""
    assert len(quant) == 8
    outputs = []
    for (opcode, first, second, attributes), q in zip(
        (
            ("SUB", a, b, SubAttributes(fused_activation=Activation.NONE)),
            ("SUB", a, b, SubAttributes(fused_activation=Activation.RELU)),
            ("SUB", b, a, SubAttributes(fused_activation=Activation.RELU6)),
            ("MAXIMUM", a, b, None),
            ("MINIMUM", b, a, None),
            ("SQUARED_DIFFERENCE", a, b, None),
            ("ADD", a, b, AddAttributes(fused_activation=Activation.RELU6)),
            ("MUL", b, a, MulAttributes(fused_activation=Activation.NONE)),
        ),
        quant,
    ):
        y = m.tensor(SHAPE, dtype, *q)
        m.op(opcode, [first, second], [y], attributes)
        outputs.append(y)
    return outputs


def _math_int8(m: TinyModel) -> tuple[list[int], list[int]]:
    a = m.tensor(SHAPE, "int8", 0.05, 3)
    b = m.tensor((3, 1, 5), "int8", 0.03, -7)
    c = m.tensor(SHAPE, "int8", 0.05, 3)
    outputs = _binary_ops(
        m, "int8", a, b, [(0.06, 2), (0.04, -50), (0.1, 0), (0.05, 3), (0.03, -7), (0.2, -128), (0.04, -20), (0.01, 5)]
    )
    # DIV, where TFLM's arithmetic is defined (input1 scale / (input2 scale x output scale) in [64, 2^22)): divisors
    # at their zero point (0 / 0 too), of -1, 1 and the extremes; the quotients saturate
    coarse = m.tensor(SHAPE, "int8", 0.5, -10)
    divisors = m.tensor((5,), "int8", 0.03, -7, data=[-7, -8, -6, 127, -128])
    for (first, second), quant, activation in (
        ((coarse, divisors), (0.1, 0), 0),
        ((coarse, b), (0.1, 0), 0),
        ((coarse, a), (0.001, -100), 1),
    ):
        y = m.tensor(SHAPE, "int8", *quant)
        m.op("DIV", [first, second], [y], DivAttributes(fused_activation=Activation(activation)))
        outputs.append(y)
    y = m.tensor(SHAPE, "int8", 0.1, -5)
    m.op("ADD_N", [a, c, a], [y])
    outputs.append(y)
    for scale, zero_point in ((0.05, 3), (0.03, -100)):  # ABS without and with a rescale
        y = m.tensor(SHAPE, "int8", scale, zero_point)
        m.op("ABS", [a], [y])
        outputs.append(y)
    positive = m.tensor(SHAPE, "int8", 0.02, -128)  # TFLM's RSQRT refuses values below the zero point
    for scale, zero_point in ((0.1, -128), (0.05, 20)):
        y = m.tensor(SHAPE, "int8", scale, zero_point)
        m.op("RSQRT", [positive], [y])
        outputs.append(y)
    return [a, b, c, positive, coarse], outputs


def _math_int16(m: TinyModel) -> tuple[list[int], list[int]]:
    a = m.tensor(SHAPE, "int16", 1 / 4096, 0)
    b = m.tensor((4, 5), "int16", 1 / 2048, 0)
    outputs = _binary_ops(
        m,
        "int16",
        a,
        b,
        [
            (1 / 1024, 0),
            (1 / 4096, 0),
            (1 / 2048, 0),
            (1 / 4096, 0),
            (1 / 2048, 0),
            (1 / 512, 0),
            (1 / 3000, 0),
            (1 / 500, 0),
        ],
    )
    y = m.tensor(SHAPE, "int16", 1 / 5000, 7)  # ADD takes int16 zero points (MUL does not)
    m.op(
        "ADD",
        [a, m.tensor((5,), "int16", 1 / 1000, -3, data=[-32768, -5, 0, 900, 32767])],
        [y],
        AddAttributes(fused_activation=Activation.RELU),
    )
    outputs.append(y)
    y = m.tensor(SHAPE, "int16", 1 / 8192, 0)
    m.op("ABS", [a], [y])
    magnitude = m.tensor(SHAPE, "int16", 1 / 4096, 0)
    m.op("ABS", [a], [magnitude])
    inverse_root = m.tensor(SHAPE, "int16", 1 / 256, 0)
    m.op("RSQRT", [magnitude], [inverse_root])
    return [a, b], outputs + [y, inverse_root]


def _math_int32(m: TinyModel) -> tuple[list[int], list[int]]:
    a = m.tensor(SHAPE, "int32")
    b = m.tensor((2, 1, 1, 5), "int32")
    outputs = _binary_ops(m, "int32", a, b, [()] * 8)
    # DIV truncates toward zero: full-range divisors (0 would trap the host TFLM), and a constant one of small ones
    small = m.tensor((5,), "int32", data=[-7, -1, 1, 3, 1000])
    for second, activation in ((b, 0), (small, 1)):
        y = m.tensor(SHAPE, "int32")
        m.op("DIV", [a, second], [y], DivAttributes(fused_activation=Activation(activation)))
        outputs.append(y)
    return [a, b], outputs


def _math_float32(m: TinyModel) -> tuple[list[int], list[int]]:
    x = m.tensor(SHAPE, "float32")
    b = m.tensor((3, 4, 5), "float32")
    gain = m.tensor((1,), "float32", data=[4.0])
    a = m.tensor(SHAPE, "float32")  # [-4, 4]
    m.op("MUL", [x, gain], [a], MulAttributes(fused_activation=Activation.NONE))
    outputs = _binary_ops(m, "float32", a, b, [()] * 8)
    for opcode, inputs, attributes in (
        ("DIV", [a, b], DivAttributes(fused_activation=Activation.NONE)),
        ("DIV", [b, a], DivAttributes(fused_activation=Activation.RELU6)),
        ("ADD_N", [a, x, a], None),
    ):
        y = m.tensor(SHAPE, "float32")
        m.op(opcode, inputs, [y], attributes)
        outputs.append(y)
    magnitude = m.tensor(SHAPE, "float32")
    m.op("ABS", [a], [magnitude])
    outputs.append(magnitude)
    for opcode, source in (
        ("NEG", a),
        ("SQUARE", a),
        ("SQRT", magnitude),
        ("RSQRT", magnitude),
        ("EXP", a),
        ("LOG", magnitude),
        ("SIN", a),
        ("COS", a),
        ("FLOOR", a),
        ("CEIL", a),
    ):
        y = m.tensor(SHAPE, "float32")
        m.op(opcode, [source], [y])
        outputs.append(y)
    # ROUND on halves: floor(4x) / 2 is a multiple of 0.5, so half of the values are halfway cases
    floor, half = m.tensor(SHAPE, "float32"), m.tensor(SHAPE, "float32")
    m.op("FLOOR", [a], [floor])
    m.op("MUL", [floor, m.tensor((1,), "float32", data=[0.5])], [half], MulAttributes(fused_activation=Activation.NONE))
    rounded = m.tensor(SHAPE, "float32")
    m.op("ROUND", [half], [rounded])
    return [x, b], outputs + [rounded]


MATH = {"int8": _math_int8, "int16": _math_int16, "int32": _math_int32, "float32": _math_float32}


@pytest.mark.parametrize("dtype", sorted(MATH))
def test_elementwise_math_bit_exact(tmp_path, dtype):
    m = TinyModel()
    inputs, outputs = MATH[dtype](m)
    path = m.save(tmp_path / f"math_{dtype}.tflite", inputs, outputs)
    _varied(_check(path), at_least=2)  # int32 with RELU6 is 0 or 6 on full-range inputs


def test_cast_between_every_type_bit_exact(tmp_path):
    """Integers narrowed keep their low bits; floats (scaled to [-200, 200]) truncate toward zero and saturate;
    bools become 0 or 1."""
    m = TinyModel()
    sources = {"int8": m.tensor(SHAPE, "int8"), "int16": m.tensor(SHAPE, "int16"), "int32": m.tensor(SHAPE, "int32")}
    x, flags = m.tensor(SHAPE, "float32"), m.tensor(SHAPE, "bool")
    sources["float32"] = m.tensor(SHAPE, "float32")
    m.op(
        "MUL",
        [x, m.tensor((1,), "float32", data=[200.0])],
        [sources["float32"]],
        MulAttributes(fused_activation=Activation.NONE),
    )
    outputs = []
    for source_type, source in sources.items():
        for target_type in sources:
            if target_type != source_type:
                y = m.tensor(SHAPE, target_type)
                m.op("CAST", [source], [y])
                outputs.append(y)
    for target_type in sources:
        y = m.tensor(SHAPE, target_type)
        m.op("CAST", [flags], [y])
        outputs.append(y)
    path = m.save(tmp_path / "cast.tflite", [sources["int8"], sources["int16"], sources["int32"], x, flags], outputs)
    results = _check(path)
    _varied(results[:-4])
    assert all(sorted(np.unique(r).tolist()) == [0, 1] for r in results[-4:])


# ---- quantization ----------------------------------------------------------------------------------------------


def test_quantize_and_dequantize_between_every_type_bit_exact(tmp_path):
    """Every QUANTIZE TFLM has (float32 to int8/int16, requantizing between int8, uint8, int16 and int32:
    narrowing, widening, the scale ratio above and below one, equal scales with zero points 128 apart) and every
    DEQUANTIZE."""
    m = TinyModel()
    sources = {
        "int8": m.tensor(SHAPE, "int8", 0.05, 3),
        "uint8": m.tensor(SHAPE, "uint8", 0.04, 130),
        "int16": m.tensor(SHAPE, "int16", 1 / 3000, 0),
        "int32": m.tensor(SHAPE, "int32", 1e-4, 7),
    }
    x = m.tensor(SHAPE, "float32")
    outputs = []

    def convert(opcode, source, dtype, *quant):
        y = m.tensor(SHAPE, dtype, *quant)
        m.op(opcode, [source], [y])
        outputs.append(y)

    convert("QUANTIZE", x, "int8", 0.009, -4)
    convert("QUANTIZE", x, "int16", 1 / 20000, 0)
    convert("QUANTIZE", sources["int8"], "int8", 0.11, -20)
    convert("QUANTIZE", sources["int8"], "uint8", 0.05, 131)  # equal scales, zero point + 128: TFLM's XOR path
    convert("QUANTIZE", sources["int8"], "uint8", 0.02, 100)
    convert("QUANTIZE", sources["uint8"], "int8", 0.04, 2)  # equal scales, zero point - 128
    convert("QUANTIZE", sources["uint8"], "int8", 0.07, -9)
    convert("QUANTIZE", sources["int8"], "int16", 1 / 4000, 0)
    convert("QUANTIZE", sources["int8"], "int32", 0.001, -5)
    convert("QUANTIZE", sources["int16"], "int8", 0.004, 6)
    convert("QUANTIZE", sources["int16"], "int16", 1 / 5000, 0)
    convert("QUANTIZE", sources["int16"], "int32", 1e-5, 11)
    convert("QUANTIZE", sources["int32"], "int8", 2e3, -1)
    convert("QUANTIZE", sources["int32"], "int16", 3e5, 0)
    for dtype in ("int8", "uint8", "int16"):
        convert("DEQUANTIZE", sources[dtype], "float32")
    path = m.save(tmp_path / "quantize.tflite", [*sources.values(), x], outputs)
    _varied(_check(path), at_least=3)


# ---- resizing and layout --------------------------------------------------------------------------------------


def _layout(m: TinyModel, dtype: str) -> tuple[list[int], list[int]]:
    """RESIZE_BILINEAR up and down in all three coordinate modes, SPACE_TO_DEPTH and DEPTH_TO_SPACE, and
    SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND with padding and crops, 4-D and 3-D."""
    quant = (0.05, -3) if dtype == "int8" else ()
    x = m.tensor((2, 6, 4, 3), dtype, *quant)
    outputs = []

    def op(opcode, inputs, shape, attributes=None):
        y = m.tensor(shape, dtype, *quant)
        m.op(opcode, inputs, [y], attributes)
        outputs.append(y)
        return y

    for size, align, half in (
        ((9, 7), False, False),
        ((9, 7), True, False),
        ((9, 7), False, True),
        ((4, 3), False, True),
        ((1, 5), True, False),
        ((3, 2), False, False),
    ):
        op(
            "RESIZE_BILINEAR",
            [x, m.tensor((2,), "int32", data=list(size))],
            (2, *size, 3),
            ResizeBilinearAttributes(align_corners=align, half_pixel_centers=half),
        )
    deep = op("SPACE_TO_DEPTH", [x], (2, 3, 2, 12), SpaceToDepthAttributes(block_size=2))
    op("DEPTH_TO_SPACE", [deep], (2, 6, 4, 3), DepthToSpaceAttributes(block_size=2))
    batched = op(
        "SPACE_TO_BATCH_ND",
        [x, m.tensor((2,), "int32", data=[2, 3]), m.tensor((2, 2), "int32", data=[[1, 3], [2, 0]])],
        (12, 5, 2, 3),
    )
    op(
        "BATCH_TO_SPACE_ND",
        [batched, m.tensor((2,), "int32", data=[2, 3]), m.tensor((2, 2), "int32", data=[[1, 2], [0, 1]])],
        (2, 7, 5, 3),
    )
    rows = m.tensor((2, 6, 12), dtype, *quant)
    m.op("RESHAPE", [x, m.tensor((3,), "int32", data=[2, 6, 12])], [rows])
    batched_rows = op(
        "SPACE_TO_BATCH_ND",
        [rows, m.tensor((1,), "int32", data=[4]), m.tensor((1, 2), "int32", data=[[1, 1]])],
        (8, 2, 12),
    )
    op(
        "BATCH_TO_SPACE_ND",
        [batched_rows, m.tensor((1,), "int32", data=[2]), m.tensor((1, 2), "int32", data=[[0, 1]])],
        (4, 3, 12),
    )
    return [x], outputs


@pytest.mark.parametrize("dtype", ["int8", "float32"])
def test_resizing_and_layout_bit_exact(tmp_path, dtype):
    m = TinyModel()
    inputs, outputs = _layout(m, dtype)
    path = m.save(tmp_path / f"layout_{dtype}.tflite", inputs, outputs)
    _varied(_check(path))


# ---- gathering, slicing, padding --------------------------------------------------------------------------------


def _gathering(m: TinyModel, dtype: str) -> tuple[list[int], list[int]]:
    quant = (0.05, -3) if dtype == "int8" else ()
    x = m.tensor(SHAPE, dtype, *quant)
    small = m.tensor((1, 4, 1), dtype, *quant)
    condition = m.tensor((4, 5), "bool")
    outputs = []

    def op(opcode, inputs, shape, attributes=None, out_type=dtype):
        y = m.tensor(shape, out_type, *(quant if out_type == dtype else ()))
        m.op(opcode, inputs, [y], attributes)
        outputs.append(y)
        return y

    def ints(*values, shape=None):
        return m.tensor(shape or (len(values),), "int32", data=np.asarray(values).reshape(shape or (len(values),)))

    sliced = op("SLICE", [x, ints(1, 0, 1, 2), ints(1, -1, 2, 3)], (1, 3, 2, 3))
    op("SQUEEZE", [sliced], (3, 2, 3), UnreadAttributes("SqueezeOptions", (('squeezeDims', [0]),)))
    op("EXPAND_DIMS", [x, ints(1)], (2, 1, 3, 4, 5))
    pieces = [m.tensor((2, 3, 5), dtype, *quant) for _ in range(4)]
    m.op("UNPACK", [x], pieces, UnpackAttributes(num=4, axis=2))
    outputs += pieces
    pad_value = m.tensor((), dtype, *quant, data=7 if dtype == "int8" else 2.5)
    op("PADV2", [x, ints(0, 0, 1, 2, 0, 1, 2, 0, shape=(4, 2)), pad_value], (2, 6, 5, 7))
    for mode, pads, index_type in ((0, (0, 0, 2, 1, 1, 3, 0, 0), "int32"), (1, (1, 1, 3, 0, 0, 4, 2, 1), "int64")):
        op(
            "MIRROR_PAD",
            [x, m.tensor((4, 2), index_type, data=np.reshape(pads, (4, 2)))],
            tuple(n + pads[2 * d] + pads[2 * d + 1] for d, n in enumerate(SHAPE)),
            MirrorPadAttributes(mode=MirrorPadMode(mode)),
        )
    wide = op("BROADCAST_TO", [small, ints(*SHAPE)], SHAPE)
    op("GATHER", [x, ints(3, 0, 0, 2, 1)], (2, 3, 5, 5), GatherAttributes(axis=2, batch_dims=0))
    op("GATHER", [x, ints(2, 0, 1, 1, 0, 0, 2, 1, shape=(2, 4))], (2, 4, 4, 5), GatherAttributes(axis=1, batch_dims=1))
    op("GATHER_ND", [x, ints(1, 2, 0, 0, 1, 1, 0, 2, shape=(4, 2))], (4, 4, 5))
    op("SELECT_V2", [condition, x, wide], SHAPE)
    # constant by design: last
    fill_value = m.tensor((), dtype, *quant, data=-5 if dtype == "int8" else -1.25)
    op("FILL", [ints(3, 2), fill_value], (3, 2))
    op("ZEROS_LIKE", [x], SHAPE)
    return [x, small, condition], outputs


@pytest.mark.parametrize("dtype", ["int8", "float32"])
def test_gathering_slicing_padding_bit_exact(tmp_path, dtype):
    m = TinyModel()
    inputs, outputs = _gathering(m, dtype)
    path = m.save(tmp_path / f"gathering_{dtype}.tflite", inputs, outputs)
    *varied, filled, zeros = _check(path)
    _varied(varied)
    assert np.all(filled == filled.reshape(-1)[0]) and not np.any(zeros)


# ---- reductions ------------------------------------------------------------------------------------------------


def _reductions(m: TinyModel, dtype: str) -> tuple[list[int], list[int]]:
    """SUM, MEAN, REDUCE_MAX, REDUCE_MIN over one axis, several (negative, repeated) and all, with and without
    keep_dims; ARG_MAX and ARG_MIN along the first, a middle and the last axis; CUMSUM plain, exclusive,
    reversed."""
    quant = {"int8": (0.05, -3), "int16": (1 / 4096, 0), "float32": ()}[dtype]
    x = m.tensor(SHAPE, dtype, *quant)
    outputs = []

    def op(opcode, inputs, shape, attributes=None, out_type=dtype, out_quant=quant):
        y = m.tensor(shape, out_type, *out_quant)
        m.op(opcode, inputs, [y], attributes)
        outputs.append(y)

    def axes(*values):
        return m.tensor((len(values),), "int32", data=list(values))

    for axis_values, keep, shape in (
        ((1,), False, (2, 4, 5)),
        ((-1, 1, 1), True, (2, 1, 4, 1)),
        ((0, 1, 2, 3), False, ()),
    ):
        sum_quant = {"int8": (0.6, 5), "int16": (1 / 64, 0), "float32": ()}[dtype]
        op("SUM", [x, axes(*axis_values)], shape, ReducerAttributes(keep_dims=keep), out_quant=sum_quant)
        op(
            "MEAN",
            [x, axes(*axis_values)],
            shape,
            ReducerAttributes(keep_dims=keep),
            out_quant=sum_quant[:1] + quant[1:],
        )
        if dtype != "int16":
            op("REDUCE_MAX", [x, axes(*axis_values)], shape, ReducerAttributes(keep_dims=keep))
            op("REDUCE_MIN", [x, axes(*axis_values)], shape, ReducerAttributes(keep_dims=keep))
    if dtype == "int16":
        return [x], outputs
    for axis, shape in ((0, (3, 4, 5)), (2, (2, 3, 5)), (-1, (2, 3, 4))):
        op(
            "ARG_MAX",
            [x, axes(axis)],
            shape,
            UnreadAttributes("ArgMaxOptions", (('outputType', 2),)),
            out_type="int32",
            out_quant=(),
        )
        op(
            "ARG_MIN",
            [x, axes(axis)],
            shape,
            UnreadAttributes("ArgMinOptions", (('outputType', 2),)),
            out_type="int32",
            out_quant=(),
        )
    cumsum_quant = (0.2, 10) if dtype == "int8" else ()
    for axis, exclusive, reverse in ((1, False, False), (2, True, False), (-1, True, True), (0, False, True)):
        op(
            "CUMSUM",
            [x, axes(axis)],
            SHAPE,
            CumsumAttributes(exclusive=exclusive, reverse=reverse),
            out_quant=cumsum_quant,
        )
    return [x], outputs


@pytest.mark.parametrize("dtype", ["int8", "int16", "float32"])
def test_reductions_bit_exact(tmp_path, dtype):
    m = TinyModel()
    inputs, outputs = _reductions(m, dtype)
    path = m.save(tmp_path / f"reductions_{dtype}.tflite", inputs, outputs)
    _varied([o for o in _check(path) if o.size > 1], at_least=2)


# ---- normalizations ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["int8", "float32"])
def test_l2_normalization_and_log_softmax_bit_exact(tmp_path, dtype):
    """L2_NORMALIZATION over rows of 5 and of 1 (int8: a row of zero points is 0 / 0); LOG_SOFTMAX (int8: output
    scale 16/256 and zero point 127; a coarse input scale makes most exps negligible, cut at diff_min)."""
    m = TinyModel()
    int8 = dtype == "int8"
    x = m.tensor(SHAPE, dtype, *((0.05, -3) if int8 else ()))
    coarse = m.tensor(SHAPE, dtype, *((0.4, 10) if int8 else ()))
    column = m.tensor((6, 1), dtype, *((0.05, -3) if int8 else ()))
    outputs = []
    for source, shape in ((x, SHAPE), (column, (6, 1))):
        y = m.tensor(shape, dtype, *((1 / 128, 0) if int8 else ()))
        m.op("L2_NORMALIZATION", [source], [y], L2NormAttributes(fused_activation=Activation.NONE))
        outputs.append(y)
    for source in (x, coarse):
        y = m.tensor(SHAPE, dtype, *((16 / 256, 127) if int8 else ()))
        m.op("LOG_SOFTMAX", [source], [y])
        outputs.append(y)
    path = m.save(tmp_path / f"normalization_{dtype}.tflite", [x, coarse, column], outputs)
    _varied(_check(path), at_least=2)


# ---- comparisons and logic --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["int8", "int32", "float32", "bool"])
def test_comparisons_and_logic_bit_exact(tmp_path, dtype):
    """Every comparison TFLM has for the type, broadcast; int8 inputs of different scales (values rescaled before
    comparing) and a second input that equals the first in places; the logical operators on bools."""
    m = TinyModel()
    quant1, quant2 = ((0.05, 3), (0.1, -2)) if dtype == "int8" else ((), ())
    a = m.tensor(SHAPE, dtype, *quant1)
    b = m.tensor((3, 1, 5), dtype, *quant2)
    # a's first batch, broadcast back over a: equal at batch 0 (and wherever the batches agree); random bools are
    # equal half the time anyway
    coarse = b
    if dtype != "bool":
        coarse = m.tensor((1, 3, 4, 5), dtype, *quant1)
        m.op(
            "SLICE",
            [a, m.tensor((4,), "int32", data=[0, 0, 0, 0]), m.tensor((4,), "int32", data=[1, 3, 4, 5])],
            [coarse],
        )
    outputs = []
    opcodes = (
        ("EQUAL", "NOT_EQUAL")
        if dtype == "bool"
        else ("EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL")
    )
    for opcode in opcodes:
        for second in (b, coarse):
            y = m.tensor(SHAPE, "bool")
            m.op(opcode, [a, second], [y])
            outputs.append(y)
    if dtype == "bool":
        for opcode in ("LOGICAL_AND", "LOGICAL_OR"):
            y = m.tensor(SHAPE, "bool")
            m.op(opcode, [a, b], [y])
            outputs.append(y)
        y = m.tensor(SHAPE, "bool")
        m.op("LOGICAL_NOT", [a], [y])
        outputs.append(y)
    path = m.save(tmp_path / f"comparisons_{dtype}.tflite", [a, b], outputs)
    results = _check(path)
    comparisons = 2 * len(opcodes)
    # against the input that equals the first in places, every comparison is sometimes true and sometimes not
    _varied(results[1:comparisons:2] + results[comparisons:], at_least=2)


# ---- convolutions ----------------------------------------------------------------------------------------------


def test_convolutions_16x8_bit_exact(tmp_path):
    """CONV_2D with an int64 bias (SAME, stride 2, RELU6) and an int32 bias (VALID, dilated, grouped), a
    DEPTHWISE_CONV_2D (depth multiplier 2, dilated) and FULLY_CONNECTED with per-tensor filters and int64 and
    int32 biases: int16 activations and int8 filters."""
    rng = np.random.default_rng(3)
    m = TinyModel()
    x = m.tensor((1, 7, 6, 4), "int16", 1 / 1000, 0)

    def weights(shape, axis):
        scales = list(rng.uniform(0.002, 0.02, size=shape[axis]))
        return m.tensor(shape, "int8", scales, 0, rng.integers(-127, 128, size=shape), axis=axis), scales

    def bias(dtype, scales, low, high):
        return m.tensor((len(scales),), dtype, [s / 1000 for s in scales], 0, rng.integers(low, high, size=len(scales)))

    outputs = []
    w1, s1 = weights((6, 3, 3, 4), 0)
    y = m.tensor((1, 4, 3, 6), "int16", 1 / 10, 0)
    m.op(
        "CONV_2D",
        [x, w1, bias("int64", s1, -(1 << 24), 1 << 24)],
        [y],
        Conv2DAttributes(padding=Padding.SAME, stride=(2, 2), fused_activation=Activation.RELU6, dilation=(1, 1)),
    )
    outputs.append(y)
    w2, s2 = weights((6, 2, 2, 2), 0)
    y = m.tensor((1, 5, 4, 6), "int16", 1 / 30, 0)
    m.op(
        "CONV_2D",
        [x, w2, bias("int32", s2, -30000, 30000)],
        [y],
        Conv2DAttributes(padding=Padding.VALID, stride=(1, 1), fused_activation=Activation.NONE, dilation=(2, 2)),
    )
    outputs.append(y)
    w3, s3 = weights((1, 3, 3, 8), 3)
    y = m.tensor((1, 7, 6, 8), "int16", 1 / 20, 0)
    m.op(
        "DEPTHWISE_CONV_2D",
        [x, w3, bias("int64", s3, -(1 << 24), 1 << 24)],
        [y],
        DepthwiseConv2DAttributes(
            padding=Padding.SAME, stride=(1, 1), depth_multiplier=2, fused_activation=Activation.RELU, dilation=(2, 1)
        ),
    )
    outputs.append(y)
    for bias_type, bound in (("int64", 1 << 22), ("int32", 1 << 20)):
        scale = float(rng.uniform(0.002, 0.02))
        w = m.tensor((5, 168), "int8", scale, 0, rng.integers(-127, 128, size=(5, 168)))
        y = m.tensor((1, 5), "int16", 1 / 20, 0)
        m.op(
            "FULLY_CONNECTED",
            [x, w, bias(bias_type, [scale] * 5, -bound, bound)],
            [y],
            FullyConnectedAttributes(fused_activation=Activation.NONE),
        )
        outputs.append(y)
    path = m.save(tmp_path / "conv16x8.tflite", [x], outputs)
    _varied(_check(path))


@pytest.mark.parametrize("dtype", ["int8", "float32"])
def test_transpose_conv_bit_exact(tmp_path, dtype):
    """TRANSPOSE_CONV with SAME padding and stride 2 (odd output size: the extra pixel), VALID with stride 3 and
    a fused RELU, without a bias."""
    rng = np.random.default_rng(5)
    m = TinyModel()
    int8 = dtype == "int8"
    x = m.tensor((2, 4, 3, 3), dtype, *((0.05, 4) if int8 else ()))
    outputs = []
    for out_shape, padding, stride, activation, with_bias in (
        ((2, 7, 6, 5), 0, 2, 0, True),
        ((2, 12, 10, 4), 1, 3, 1, True),
        ((2, 8, 6, 2), 0, 2, 3, False),
    ):
        kernel = (3, 4)
        filter_shape = (out_shape[3], *kernel, 3)
        scales = list(rng.uniform(0.005, 0.02, size=out_shape[3]))
        if int8:
            w = m.tensor(filter_shape, "int8", scales, 0, rng.integers(-127, 128, size=filter_shape), axis=0)
            b = m.tensor(
                (out_shape[3],), "int32", [0.05 * s for s in scales], 0, rng.integers(-2000, 2000, size=out_shape[3])
            )
        else:
            w = m.tensor(filter_shape, "float32", data=rng.uniform(-0.5, 0.5, size=filter_shape))
            b = m.tensor((out_shape[3],), "float32", data=rng.uniform(-1, 1, size=out_shape[3]))
        y = m.tensor(out_shape, dtype, *((0.04, -6) if int8 else ()))
        inputs = [m.tensor((4,), "int32", data=list(out_shape)), w, x] + ([b] if with_bias else [])
        m.op(
            "TRANSPOSE_CONV",
            inputs,
            [y],
            TransposeConvAttributes(
                padding=Padding(padding), stride=(stride, stride), fused_activation=Activation(activation)
            ),
        )
        outputs.append(y)
    path = m.save(tmp_path / f"transpose_conv_{dtype}.tflite", [x], outputs)
    _varied(_check(path))


@pytest.mark.parametrize("dtype", ["int8", "float32"])
def test_batch_matmul_bit_exact(tmp_path, dtype):
    """BATCH_MATMUL plain, with adj_x and adj_y, with a constant right side broadcast over the batch, and a
    rank-2 left side broadcast against a rank-4 right side."""
    rng = np.random.default_rng(9)
    m = TinyModel()
    int8 = dtype == "int8"

    def tensor(shape, scale, zero_point, data=None):
        return m.tensor(shape, dtype, *((scale, zero_point) if int8 else ()), data=data)

    a = tensor((2, 3, 4, 5), 0.05, 3)
    b = tensor((2, 3, 5, 6), 0.04, -7)
    weights = tensor((5, 6), 0.02, 0, rng.integers(-127, 128, (5, 6)) if int8 else rng.uniform(-1, 1, (5, 6)))
    small = tensor((4, 5), 0.03, 1, rng.integers(-127, 128, (4, 5)) if int8 else rng.uniform(-1, 1, (4, 5)))
    outputs = []
    for lhs, rhs, adj_x, adj_y, shape in (
        (a, b, False, False, (2, 3, 4, 6)),
        (b, a, True, True, (2, 3, 6, 4)),
        (a, weights, False, False, (2, 3, 4, 6)),
        (small, b, False, False, (2, 3, 4, 6)),
    ):
        y = tensor(shape, 0.3, -4)
        m.op("BATCH_MATMUL", [lhs, rhs], [y], BatchMatMulAttributes(adj_x=adj_x, adj_y=adj_y))
        outputs.append(y)
    path = m.save(tmp_path / f"batch_matmul_{dtype}.tflite", [a, b], outputs)
    _varied(_check(path))


def test_16bit_matrix_products_bit_exact(tmp_path):
    """TRANSPOSE_CONV 16x8 with an int64 bias (SAME, stride 2, odd output: the extra pixel), an int16 bias TFLM
    widens (VALID, stride 3, fused RELU6) and none, and BATCH_MATMUL on int16 plain, with adj_x and adj_y, and a
    constant right side broadcast over the batch: 64-bit sums and the int64 rescale."""
    rng = np.random.default_rng(14)
    m = TinyModel()
    x = m.tensor((2, 4, 3, 3), "int16", 1 / 1000, 0)
    outputs = []
    for out_shape, pad, stride, activation, bias_type in (
        ((2, 7, 6, 5), 0, 2, 0, "int64"),
        ((2, 12, 10, 4), 1, 3, 3, "int16"),
        ((2, 8, 6, 2), 0, 2, 1, None),
    ):
        filter_shape = (out_shape[3], 3, 4, 3)
        scales = list(rng.uniform(0.005, 0.02, size=out_shape[3]))
        w = m.tensor(filter_shape, "int8", scales, 0, rng.integers(-127, 128, size=filter_shape), axis=0)
        inputs = [m.tensor((4,), "int32", data=list(out_shape)), w, x]
        if bias_type:
            bound = (1 << 24) if bias_type == "int64" else (1 << 15) - 1
            inputs.append(
                m.tensor(
                    (out_shape[3],),
                    bias_type,
                    [s / 1000 for s in scales],
                    0,
                    rng.integers(-bound, bound, size=out_shape[3]),
                )
            )
        y = m.tensor(out_shape, "int16", 1 / 200, 0)
        m.op(
            "TRANSPOSE_CONV",
            inputs,
            [y],
            TransposeConvAttributes(
                padding=Padding(pad), stride=(stride, stride), fused_activation=Activation(activation)
            ),
        )
        outputs.append(y)
    a = m.tensor((2, 3, 4, 5), "int16", 1 / 2000, 0)
    b = m.tensor((2, 3, 5, 6), "int16", 1 / 3000, 0)
    weights = m.tensor((5, 6), "int16", 1 / 1000, 0, rng.integers(-32768, 32768, (5, 6)))
    for lhs, rhs, adj_x, adj_y, shape, scale in (
        (a, b, False, False, (2, 3, 4, 6), 1 / 300),
        (b, a, True, True, (2, 3, 6, 4), 1 / 100),
        (a, weights, False, False, (2, 3, 4, 6), 1 / 20),
    ):
        y = m.tensor(shape, "int16", scale, 0)
        m.op("BATCH_MATMUL", [lhs, rhs], [y], BatchMatMulAttributes(adj_x=adj_x, adj_y=adj_y))
        outputs.append(y)
    path = m.save(tmp_path / "matrix_products_16.tflite", [x, a, b], outputs)
    _varied(_check(path, seeds=(0,)))


# ---- int64 and bool data ---------------------------------------------------------------------------------------


def test_int64_kernels_bit_exact(tmp_path):
    """Every kernel TFLM's reference runs on int64 data: RESHAPE, SQUEEZE, CONCATENATION, PACK, BROADCAST_TO,
    REVERSE_V2, ZEROS_LIKE, MAXIMUM and MINIMUM (broadcast) and the six comparisons, on the full int64 range.
    Neither TFLM's CAST nor lowtide's model interface takes int64, so the data are constants; each int64 result
    is compared in the model with what NumPy gives (EQUAL, a bool output), and the bools are bit-exact."""
    rng = np.random.default_rng(64)
    m = TinyModel()
    info = np.iinfo(np.int64)
    values_a = rng.integers(info.min, info.max, size=SHAPE, dtype=np.int64, endpoint=True)
    values_b = rng.integers(info.min, info.max, size=(3, 1, 5), dtype=np.int64, endpoint=True)
    values_a[0, 0, 0, :] = values_b[0, 0, :]  # ties where b is broadcast against a
    a, b = m.tensor(SHAPE, "int64", data=values_a), m.tensor((3, 1, 5), "int64", data=values_b)
    flags = m.tensor(SHAPE, "bool")  # the model's input: lowtide compiles models with inputs
    outputs, checks = [], []

    def op(opcode, inputs, expected, attributes=None):
        y = m.tensor(expected.shape, "int64")
        m.op(opcode, inputs, [y], attributes)
        same = m.tensor(expected.shape, "bool")
        m.op("EQUAL", [y, m.tensor(expected.shape, "int64", data=expected)], [same])
        checks.append(same)
        return y

    def ints(*values):
        return m.tensor((len(values),), "int32", data=list(values))

    low_values = np.minimum(values_a, values_b)
    low = op("MINIMUM", [a, b], low_values)
    op("MAXIMUM", [a, b], np.maximum(values_a, values_b))
    for opcode in ("EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL"):
        y = m.tensor(SHAPE, "bool")
        m.op(opcode, [a, b], [y])
        outputs.append(y)
    column = op("RESHAPE", [b, ints(3, 5, 1)], values_b.reshape(3, 5, 1))
    op("SQUEEZE", [column], values_b.reshape(3, 5), UnreadAttributes("SqueezeOptions", (('squeezeDims', [2]),)))
    op("CONCATENATION", [a, low], np.concatenate([values_a, low_values], axis=2), ConcatenationAttributes(axis=2))
    op("PACK", [a, low], np.stack([values_a, low_values], axis=2), PackAttributes(values_count=2, axis=2))
    op("BROADCAST_TO", [b, ints(*SHAPE)], np.broadcast_to(values_b, SHAPE))
    op("REVERSE_V2", [a, ints(1, 2)], values_a[:, ::-1, ::-1, :])
    op("ZEROS_LIKE", [a], np.zeros(SHAPE, np.int64))
    passed = m.tensor(SHAPE, "bool")
    m.op("LOGICAL_NOT", [flags], [passed])
    path = m.save(tmp_path / "int64.tflite", [flags], [passed, *outputs, *checks])
    _, *results = _check(path, seeds=(0,))
    _varied(results[: len(outputs)], at_least=2)
    assert all(np.all(same) for same in results[len(outputs) :])


def test_bool_byte_copies_and_reverse_v2_bit_exact(tmp_path):
    """The byte copies TFLM's reference runs on bool data: SLICE (int32 and int64 begin and size), STRIDED_SLICE
    (negative stride, shrink), CONCATENATION, RESHAPE, SQUEEZE, BROADCAST_TO (an int64 shape) and REVERSE_V2; and REVERSE_V2 on every other type it
    reverses, along one axis, the first, and two adjacent axes given out of order (TFLM sorts them)."""
    m = TinyModel()
    x, small = m.tensor(SHAPE, "bool"), m.tensor((3, 1, 5), "bool")
    inputs, outputs = [x, small], []

    def op(opcode, inputs, shape, attributes=None):
        y = m.tensor(shape, "bool")
        m.op(opcode, inputs, [y], attributes)
        outputs.append(y)
        return y

    def ints(*values):
        return m.tensor((len(values),), "int32", data=list(values))

    op("SLICE", [x, ints(1, 0, 1, 2), ints(1, -1, 2, 3)], (1, 3, 2, 3))
    op(
        "SLICE",
        [x, m.tensor((4,), "int64", data=[0, 1, 0, 1]), m.tensor((4,), "int64", data=[2, 2, -1, 3])],
        (2, 2, 4, 3),
    )
    op(
        "STRIDED_SLICE",
        [x, ints(0, 2, 3, 0), ints(2, 0, 0, 5), ints(1, -1, -2, 2)],
        (2, 2, 2, 3),
        StridedSliceAttributes(begin_mask=1, end_mask=1),
    )
    op(
        "STRIDED_SLICE",
        [x, ints(1, 0, 0, 4), ints(2, 3, 4, 5), ints(1, 1, 1, 1)],
        (3, 4),
        StridedSliceAttributes(shrink_axis_mask=0b1001),
    )
    op("CONCATENATION", [x, x], (2, 6, 4, 5), ConcatenationAttributes(axis=1))
    flat = op("RESHAPE", [small, ints(1, 15)], (1, 15))
    op("SQUEEZE", [flat], (15,), UnreadAttributes("SqueezeOptions", (('squeezeDims', [0]),)))
    op("BROADCAST_TO", [small, m.tensor((4,), "int64", data=list(SHAPE))], SHAPE)
    op("REVERSE_V2", [x, ints(-1)], SHAPE)
    bools = len(outputs)
    quant = {"int8": (0.05, -3), "uint8": (0.05, 128), "int16": (0.05, 0), "int32": (), "float32": ()}
    for dtype, params in quant.items():
        data = m.tensor(SHAPE, dtype, *params)
        inputs.append(data)
        for axes in ([3], [0], [2, 1]):
            y = m.tensor(SHAPE, dtype, *params)
            m.op("REVERSE_V2", [data, ints(*axes)], [y])
            outputs.append(y)
    path = m.save(tmp_path / "bool_reverse.tflite", inputs, outputs)
    results = _check(path, seeds=(0,))
    _varied(results[:bools], at_least=2)
    _varied(results[bools:])


def test_floor_div_and_floor_mod_bit_exact(tmp_path):
    """FLOOR_DIV and FLOOR_MOD on float32 with broadcasting, divisors of both signs (none zero: TFLM fails on
    those) and dividends that are exact multiples."""
    m = TinyModel()
    x = m.tensor(SHAPE, "float32")
    gain = m.tensor((1,), "float32", data=[20.0])
    wide = m.tensor(SHAPE, "float32")
    m.op("MUL", [x, gain], [wide], MulAttributes(fused_activation=Activation.NONE))
    divisor = m.tensor(
        (4, 5), "float32", data=np.array([-3.0, -1.5, -0.25, 0.5, 0.7, 1.0, 2.0, 2.5, 3.0, 7.0] * 2).reshape(4, 5)
    )
    outputs = []
    for opcode, (first, second) in (
        ("FLOOR_DIV", (wide, divisor)),
        ("FLOOR_MOD", (wide, divisor)),
        ("FLOOR_MOD", (divisor, divisor)),
    ):
        y = m.tensor(SHAPE if first is wide else (4, 5), "float32")
        m.op(opcode, [first, second], [y])
        outputs.append(y)
    path = m.save(tmp_path / "floor_div_mod.tflite", [x], outputs)
    *varied, zeros = _check(path, seeds=(0,))
    _varied(varied)
    assert not np.any(zeros)


def test_run_time_indices_and_shapes_bit_exact(tmp_path):
    """DYNAMIC_UPDATE_SLICE on every type TFLM updates, at start indices that are a model input (the full int32
    range: clamped at both ends) and int64 constants, and an update as large as the operand; BROADCAST_ARGS of
    a computed shape (SHAPE) and of int64 constants; EMBEDDING_LOOKUP of float32 and int8 rows and int8 rows
    dequantized to float32."""
    m = TinyModel()
    starts = m.tensor((4,), "int32")
    inputs, outputs, checks = [starts], [], []
    quant = {"float32": (), "int8": (0.05, -3), "int16": (0.05, 0), "int32": ()}
    for dtype, params in quant.items():
        operand, update = m.tensor(SHAPE, dtype, *params), m.tensor((1, 2, 3, 2), dtype, *params)
        inputs += [operand, update]
        for indices in (starts, m.tensor((4,), "int64", data=[1, -7, 1, 2])):
            y = m.tensor(SHAPE, dtype, *params)
            m.op("DYNAMIC_UPDATE_SLICE", [operand, update, indices], [y])
            outputs.append(y)
    y = m.tensor(SHAPE, "float32")
    m.op("DYNAMIC_UPDATE_SLICE", [inputs[1], inputs[1], m.tensor((4,), "int32", data=[1, 1, 1, 1])], [y])
    outputs.append(y)
    shape = m.tensor((4,), "int32")
    m.op("SHAPE", [inputs[1]], [shape], UnreadAttributes("ShapeOptions", (('outType', 2),)))
    broadcast = m.tensor((4,), "int32")
    m.op("BROADCAST_ARGS", [shape, m.tensor((2,), "int32", data=[4, 1])], [broadcast])
    outputs.append(broadcast)
    wide = m.tensor((3,), "int64")
    m.op(
        "BROADCAST_ARGS", [m.tensor((3,), "int64", data=[1, 1 << 30, 1]), m.tensor((2,), "int64", data=[1, 7])], [wide]
    )
    same = m.tensor((3,), "bool")
    m.op("EQUAL", [wide, m.tensor((3,), "int64", data=[1, 1 << 30, 7])], [same])
    checks.append(same)
    rows = m.tensor((5,), "int32", data=[3, 0, 3, 1, 2])
    for dtype, out_type, params in (
        ("float32", "float32", ()),
        ("int8", "int8", (0.05, -3)),
        ("int8", "float32", (0.05, 0)),
    ):
        value = m.tensor((4, 3, 5), dtype, *params)
        inputs.append(value)
        y = m.tensor((5, 3, 5), out_type, *(params if out_type == dtype else ()))
        m.op("EMBEDDING_LOOKUP", [rows, value], [y])
        outputs.append(y)
    path = m.save(tmp_path / "run_time_indices.tflite", inputs, outputs + checks)
    results = _check(path, seeds=(0,))
    _varied(results[: len(outputs)])
    assert all(np.all(c) for c in results[len(outputs) :])


# ---- random models per family ----------------------------------------------------------------------------------

# opcode -> (arity, attributes drawn from the generator); element-wise, any broadcastable shapes
RANDOM_FAMILIES = {
    "activations": {
        "RELU": (1, None),
        "RELU6": (1, None),
        "TANH": (1, None),
        "LOGISTIC": (1, None),
        "ELU": (1, None),
        "HARD_SWISH": (1, None),
        "LEAKY_RELU": (1, lambda rng: LeakyReluAttributes(alpha=float(rng.uniform(-1, 2)))),
        "PRELU": (2, None),
    },
    "math": {
        "ADD": (2, lambda rng: AddAttributes(fused_activation=Activation(int(rng.choice([0, 1, 3]))))),
        "SUB": (2, lambda rng: SubAttributes(fused_activation=Activation(int(rng.choice([0, 1, 3]))))),
        "MUL": (2, lambda rng: MulAttributes(fused_activation=Activation.NONE)),
        "MAXIMUM": (2, None),
        "MINIMUM": (2, None),
        "SQUARED_DIFFERENCE": (2, None),
        "ABS": (1, None),
    },
}


def _random_model(m: TinyModel, family: str, dtype: str, rng: np.random.Generator) -> tuple[list[int], list[int]]:
    """Eight operators of `family` drawn at random, each on tensors drawn from those made so far (the second
    input of a binary operator broadcast from a random sub-shape), quantization parameters drawn too."""

    def quant():
        if dtype == "float32":
            return ()
        scale = float(rng.choice([0.004, 0.02, 0.05, 0.3]) * rng.uniform(0.8, 1.25))
        return scale, int(rng.integers(-100, 100))

    inputs = [m.tensor(SHAPE, dtype, *quant()), m.tensor(SHAPE, dtype, *quant())]
    pool, outputs = list(inputs), []
    ops = RANDOM_FAMILIES[family]
    for _ in range(8):
        opcode = str(rng.choice(sorted(ops)))
        arity, draw = ops[opcode]
        first = pool[int(rng.integers(len(pool)))]
        operands = [first]
        if arity == 2:
            keep = rng.integers(0, 2, size=len(SHAPE)).astype(bool)
            shape = tuple(n if k else 1 for n, k in zip(SHAPE, keep))[int(rng.integers(0, 3)) :]
            operands.append(
                m.tensor(
                    shape or (1,),
                    dtype,
                    *quant(),
                    data=(
                        rng.integers(-128, 128, size=shape or (1,))
                        if dtype == "int8"
                        else rng.uniform(-2, 2, size=shape or (1,))
                    ),
                )
            )
        out_quant = (1 / 256, -128) if opcode == "LOGISTIC" and dtype == "int8" else quant()
        y = m.tensor(SHAPE, dtype, *out_quant)
        m.op(opcode, operands, [y], draw(rng) if draw else None)
        pool.append(y)
        outputs.append(y)
    return inputs, outputs


@pytest.mark.parametrize("family", sorted(RANDOM_FAMILIES))
@pytest.mark.parametrize("dtype", ["int8", "float32"])
def test_random_models_per_family_bit_exact(tmp_path, family, dtype):
    rng = np.random.default_rng(list(f"{family}/{dtype}".encode()))  # a seed per case, stable across runs
    m = TinyModel()
    inputs, outputs = _random_model(m, family, dtype, rng)
    path = m.save(tmp_path / f"random_{family}_{dtype}.tflite", inputs, outputs)
    _check(path, seeds=(0,))


# ---- the support table, errors and --check --------------------------------------------------------------------


def test_operators_tflm_lacks_are_refused_with_the_reason(tmp_path):
    m = TinyModel()
    x = m.tensor((1, 2, 2, 1), "float32")
    y = m.tensor((1, 2, 2, 1), "float32")
    z = m.tensor((1, 2, 2, 1), "float32")
    m.op("RELU_N1_TO_1", [x], [y])
    m.op("L2_POOL_2D", [y], [z], Pool2DAttributes(padding=Padding.SAME, stride=(1, 1), filter=(1, 1)))
    path = m.save(tmp_path / "clip.tflite", [x], [z])
    blockers = check_model(load_model(path))
    assert [str(b) for b in blockers] == [
        f"operator 0 (RELU_N1_TO_1 float32 -> float32): {NOT_IN_TFLM['RELU_N1_TO_1']}",
        "operator 1 (L2_POOL_2D float32 -> float32): no kernel in the lowtide runtime",
    ]
    assert "RELU_N1_TO_1" not in KERNELS


def test_types_tflm_leaves_undefined_are_refused_with_the_reason(tmp_path):
    """int16 GREATER (TFLM never sets its rescaling) and an int8 DIV whose rescale makes TFLM's shifts undefined."""
    m = TinyModel()
    a, b = m.tensor((1, 4), "int16", 1 / 4096, 0), m.tensor((1, 4), "int16", 1 / 4096, 0)
    greater = m.tensor((1, 4), "bool")
    m.op("GREATER", [a, b], [greater])
    x, y = m.tensor((1, 4), "int8", 0.05, 0), m.tensor((1, 4), "int8", 0.05, 0)
    quotient = m.tensor((1, 4), "int8", 0.5, 0)  # 0.05 / (0.05 x 0.5) = 2: below 64
    m.op("DIV", [x, y], [quotient], DivAttributes(fused_activation=Activation.NONE))
    path = m.save(tmp_path / "undefined.tflite", [a, b, x, y], [greater, quotient])
    assert [str(b) for b in check_model(load_model(path))] == [
        f"operator 0 (GREATER int16, int16 -> bool): {UNDEFINED_IN_TFLM[('GREATER', 'int16->bool')]}",
        f"operator 1 (DIV int8, int8 -> int8): input1 scale / (input2 scale x output scale) is 2: {DIV_INT8_RANGE}",
    ]


def test_check_lists_every_blocker_as_json(tmp_path):
    from typer.testing import CliRunner

    from lowtide.cli import app, compile_cmd  # noqa: F401  (registers the command)

    m = TinyModel()
    x = m.tensor((1, 4), "int16", 0.1, 0)
    y = m.tensor((1, 4), "int16", 0.1, 0)
    z = m.tensor((1, 4), "int16", 0.1, 0)
    m.op("HARD_SWISH", [x], [y])
    m.op("RELU", [y], [z])  # compiles: not a blocker
    path = m.save(tmp_path / "blocked.tflite", [x], [z])
    result = CliRunner().invoke(app, ["compile", str(path), "--check", "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    assert report["compiles"] is False
    assert report["blockers"] == [
        {
            "op_index": 0,
            "opcode": "HARD_SWISH",
            "input_types": ["int16"],
            "output_types": ["int16"],
            "reason": "no int16 kernel (supported: int8, float32)",
        }
    ]


def test_docs_support_table_is_generated_from_the_code():
    import runpy

    script = runpy.run_path(str(Path(__file__).resolve().parents[1] / "scripts" / "operators_doc.py"))
    assert script["DOC"].read_text() == script["document"](), "run python scripts/operators_doc.py"


@pytest.mark.parametrize("scale, zero_point", [(0.05, 3), (1 / 16, -128), (0.0123, 100), (0.5, 0), (0.002, -7)])
def test_int8_logistic_and_tanh_tables_equal_tflm_on_every_input(tmp_path, scale, zero_point):
    """`sigmoid_table_int8` (the int8 LOGISTIC and TANH kernels are its lookups) against the host TFLM's
    gemmlowp arithmetic on all 256 int8 inputs, for input scales whose rescale multiplier and saturation radius
    differ; the compiled model on the same inputs is those lookups."""
    m = TinyModel()
    x = m.tensor((1, 256), "int8", scale, zero_point)
    logistic, tanh = m.tensor((1, 256), "int8", 1 / 256, -128), m.tensor((1, 256), "int8", 1 / 128, 0)
    m.op("LOGISTIC", [x], [logistic])
    m.op("TANH", [x], [tanh])
    path = m.save(tmp_path / "sigmoids.tflite", [x], [logistic, tanh])
    values = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)
    want_logistic, want_tanh = oracle.run(path.read_bytes(), [values]).outputs
    for want, is_tanh in ((want_logistic, False), (want_tanh, True)):
        table = np.array(sigmoid_table_int8(scale, zero_point, is_tanh), dtype=np.int8)
        assert np.array_equal(table[values.astype(np.uint8)], want)
    assert len(np.unique(want_logistic)) > 10 and len(np.unique(want_tanh)) > 10  # not all saturated
    result = verify_compiled(load_model(path), seed=0, sanitize=True)
    assert result.passed, result.outputs
