"""One small model per operator the compiler lowers, each holding the operator once on inputs of a fixed shape:
the cases of tests/test_declared_shapes.py, which tests/test_fuzz_models.py mutates too."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lowtide.model.attributes import (
    Activation,
    AddAttributes,
    Attributes,
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
    ResizeAttributes,
    ResizeBilinearAttributes,
    SoftmaxAttributes,
    SpaceToDepthAttributes,
    SplitAttributes,
    SplitVAttributes,
    StridedSliceAttributes,
    SubAttributes,
    TransposeConvAttributes,
    UnpackAttributes,
    UnreadAttributes,
    VarHandleAttributes,
)
from lowtide.model.schema import TYPE_CODES
from support.models import ACT_TANH, TinyModel, lstm, svdf_model

SHAPE = (1, 4, 4, 3)

Case = Callable[[TinyModel], tuple[list[int], list[int]]]


def float_tensor(m: TinyModel, shape=SHAPE) -> int:
    return m.tensor(shape, "float32")


def _ints(m: TinyModel, values, dtype: str = "int32") -> int:
    values = np.asarray(values)
    return m.tensor(values.shape, dtype, data=values)


def _unary(
    opcode: str, source: str = "float32", target: str | None = None, attributes: Attributes | None = None
) -> Case:
    def case(m):
        x = m.tensor(SHAPE, source, 0.05 if source == "int8" else None)
        y = m.tensor(SHAPE, target or source, 0.05 if (target or source) == "int8" else None)
        m.op(opcode, [x], [y], attributes)
        return [x], [y]

    return case


def _binary(
    opcode: str, target: str = "float32", source: str = "float32", attributes: Attributes | None = None
) -> Case:
    def case(m):
        a, b = m.tensor(SHAPE, source), m.tensor((1, 1, 1, 3), source)
        y = m.tensor(SHAPE, target)
        m.op(opcode, [a, b], [y], attributes)
        return [a, b], [y]

    return case


def _with_constants(
    opcode: str, out_shape, constants, attributes: Attributes | None = None, source=SHAPE, out_type: str = "float32"
) -> Case:
    """`opcode` on a float input of shape `source` and the constant int32 inputs `constants` after it."""

    def case(m):
        x = float_tensor(m, source)
        y = m.tensor(out_shape, out_type)
        m.op(opcode, [x, *(_ints(m, c) for c in constants)], [y], attributes)
        return [x], [y]

    return case


def _conv(opcode: str, weights) -> Case:
    def case(m):
        x = float_tensor(m)
        rng = np.random.default_rng(0)
        channels = weights[0] if opcode == "CONV_2D" else weights[3]
        w = m.tensor(weights, "float32", data=rng.normal(size=weights))
        bias = m.tensor((channels,), "float32", data=np.zeros(channels))
        y = m.tensor((1, 4, 4, channels), "float32")
        attributes = (
            Conv2DAttributes(padding=Padding.SAME, stride=(1, 1), dilation=(1, 1))
            if opcode == "CONV_2D"
            else DepthwiseConv2DAttributes(padding=Padding.SAME, stride=(1, 1), depth_multiplier=1, dilation=(1, 1))
        )
        m.op(opcode, [x, w, bias], [y], attributes)
        return [x], [y]

    return case


def _pool(opcode: str) -> Case:
    def case(m):
        x, y = float_tensor(m), m.tensor((1, 2, 2, 3), "float32")
        m.op(opcode, [x], [y], Pool2DAttributes(padding=Padding.VALID, stride=(2, 2), filter=(2, 2)))
        return [x], [y]

    return case


def _fully_connected(m):
    x, y = float_tensor(m), m.tensor((1, 5), "float32")
    w = m.tensor((5, 48), "float32", data=np.random.default_rng(0).normal(size=(5, 48)))
    m.op("FULLY_CONNECTED", [x, w, -1], [y], FullyConnectedAttributes())
    return [x], [y]


def _transpose_conv(m):
    x, y = float_tensor(m), m.tensor((1, 8, 8, 2), "float32")
    w = m.tensor((2, 3, 3, 3), "float32", data=np.random.default_rng(0).normal(size=(2, 3, 3, 3)))
    m.op(
        "TRANSPOSE_CONV",
        [_ints(m, [1, 8, 8, 2]), w, x],
        [y],
        TransposeConvAttributes(padding=Padding.SAME, stride=(2, 2)),
    )
    return [x], [y]


def _batch_matmul(m):
    a, b, y = float_tensor(m, (2, 3, 4)), float_tensor(m, (2, 4, 5)), float_tensor(m, (2, 3, 5))
    m.op("BATCH_MATMUL", [a, b], [y], BatchMatMulAttributes())
    return [a, b], [y]


def _several_inputs(opcode: str, count: int, out_shape, attributes: Attributes | None = None) -> Case:
    def case(m):
        xs = [float_tensor(m) for _ in range(count)]
        y = float_tensor(m, out_shape)
        m.op(opcode, xs, [y], attributes)
        return xs, [y]

    return case


def _select_v2(m):
    condition, a, b, y = m.tensor(SHAPE, "bool"), float_tensor(m), float_tensor(m, (1, 1, 1, 3)), float_tensor(m)
    m.op("SELECT_V2", [condition, a, b], [y])
    return [condition, a, b], [y]


def _unpack(m):
    x = float_tensor(m, (2, 4, 3))
    ys = [float_tensor(m, (4, 3)) for _ in range(2)]
    m.op("UNPACK", [x], ys, UnpackAttributes(num=2, axis=0))
    return [x], ys


def _split(m):
    x = float_tensor(m, (1, 4, 4, 6))
    ys = [float_tensor(m) for _ in range(2)]
    m.op("SPLIT", [_ints(m, 3), x], ys, SplitAttributes(num_splits=2))
    return [x], ys


def _split_v(m):
    x = float_tensor(m, (1, 4, 4, 6))
    ys = [float_tensor(m, (1, 4, 4, 2)), float_tensor(m, (1, 4, 4, 4))]
    m.op("SPLIT_V", [x, _ints(m, [2, -1]), _ints(m, 3)], ys, SplitVAttributes(num_splits=2))
    return [x], ys


def _padv2(m):
    x, y = float_tensor(m), float_tensor(m, (1, 6, 6, 3))
    m.op("PADV2", [x, _ints(m, [[0, 0], [1, 1], [1, 1], [0, 0]]), m.tensor((), "float32", data=np.float32(2))], [y])
    return [x], [y]


def _dynamic_update_slice(m):
    x, update, y = float_tensor(m), float_tensor(m, (1, 2, 2, 3)), float_tensor(m)
    m.op("DYNAMIC_UPDATE_SLICE", [x, update, _ints(m, [0, 1, 1, 0])], [y])
    return [x, update], [y]


def _gather_nd(m):
    x, y = float_tensor(m, (4, 3)), float_tensor(m, (2, 3))
    m.op("GATHER_ND", [x, _ints(m, [[2], [0]])], [y])
    return [x], [y]


def _embedding_lookup(m):
    values, y = float_tensor(m, (3, 4)), float_tensor(m, (2, 4))
    m.op("EMBEDDING_LOOKUP", [_ints(m, [1, 0]), values], [y])
    return [values], [y]


def _fill(m):
    value = m.tensor((), "float32")
    y = float_tensor(m, (2, 3))
    m.op("FILL", [_ints(m, [2, 3]), value], [y])
    return [value], [y]


def _broadcast_args(m):
    """The input's shape [2, 3] broadcast with [3]: shapes a model input could not be (random int32s)."""
    x, shape, y = float_tensor(m, (2, 3)), m.tensor((2,), "int32"), m.tensor((2,), "int32")
    m.op("SHAPE", [x], [shape], UnreadAttributes("ShapeOptions", (('outType', TYPE_CODES["int32"]),)))
    m.op("BROADCAST_ARGS", [shape, _ints(m, [3])], [y])
    return [x], [y]


def _logical(opcode: str) -> Case:
    def case(m):
        a, b, y = m.tensor(SHAPE, "bool"), m.tensor((1, 1, 1, 3), "bool"), m.tensor(SHAPE, "bool")
        m.op(opcode, [a, b], [y])
        return [a, b], [y]

    return case


def _svdf(m):
    inputs, outputs = svdf_model(m, "int16")
    return inputs, outputs[:1]  # operator 0, whose output the second SVDF also reads


def _unidirectional_sequence_lstm(m):
    x = m.tensor((1, 3, 5), "int8", 0.05, 3)
    return [x], [lstm(m, np.random.default_rng(0), x, (1, 3, 5), 4, False, ACT_TANH, 2.0**-11, 0.0, 0)]


def _read_variable(m):
    """VAR_HANDLE, ASSIGN_VARIABLE of the input, READ_VARIABLE of the 48 values back."""
    x, handle, y = float_tensor(m), m.tensor((), "resource"), float_tensor(m)
    m.op("VAR_HANDLE", [], [handle], VarHandleAttributes(container=b'', shared_name=b'state'))
    m.op("ASSIGN_VARIABLE", [handle, x], [])
    m.op("READ_VARIABLE", [handle], [y])
    return [x], [y]


CASES: dict[str, Case] = {
    **{
        opcode: _unary(opcode)
        for opcode in (
            "ABS",
            "CEIL",
            "COS",
            "EXP",
            "FLOOR",
            "LOG",
            "NEG",
            "ROUND",
            "RSQRT",
            "SIN",
            "SQRT",
            "SQUARE",
            "RELU",
            "RELU6",
            "LOGISTIC",
            "TANH",
            "HARD_SWISH",
            "ELU",
            "ZEROS_LIKE",
            "LOG_SOFTMAX",
        )
    },
    "LEAKY_RELU": _unary("LEAKY_RELU", attributes=LeakyReluAttributes(alpha=0.2)),
    "SOFTMAX": _unary("SOFTMAX", attributes=SoftmaxAttributes(beta=1.0)),
    "L2_NORMALIZATION": _unary("L2_NORMALIZATION", attributes=L2NormAttributes()),
    "LOGICAL_NOT": _unary("LOGICAL_NOT", "bool"),
    "QUANTIZE": _unary("QUANTIZE", "float32", "int8"),
    "DEQUANTIZE": _unary("DEQUANTIZE", "int8", "float32"),
    "CAST": _unary("CAST", "float32", "int32"),
    **{
        opcode: _binary(opcode, attributes=cls(fused_activation=Activation.NONE))
        for opcode, cls in (
            ("ADD", AddAttributes),
            ("SUB", SubAttributes),
            ("MUL", MulAttributes),
            ("DIV", DivAttributes),
        )
    },
    **{
        opcode: _binary(opcode)
        for opcode in ("MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "PRELU", "FLOOR_DIV", "FLOOR_MOD")
    },
    **{
        opcode: _binary(opcode, "bool")
        for opcode in ("EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL")
    },
    "LOGICAL_AND": _logical("LOGICAL_AND"),
    "LOGICAL_OR": _logical("LOGICAL_OR"),
    "SELECT_V2": _select_v2,
    "ADD_N": _several_inputs("ADD_N", 2, SHAPE),
    "CONV_2D": _conv("CONV_2D", (2, 3, 3, 3)),
    "DEPTHWISE_CONV_2D": _conv("DEPTHWISE_CONV_2D", (1, 3, 3, 3)),
    "AVERAGE_POOL_2D": _pool("AVERAGE_POOL_2D"),
    "MAX_POOL_2D": _pool("MAX_POOL_2D"),
    "FULLY_CONNECTED": _fully_connected,
    "TRANSPOSE_CONV": _transpose_conv,
    "BATCH_MATMUL": _batch_matmul,
    **{
        opcode: _with_constants(opcode, (1, 1, 1, 3), [[1, 2]], ReducerAttributes(keep_dims=True))
        for opcode in ("MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN")
    },
    "ARG_MAX": _with_constants(
        "ARG_MAX",
        (1, 4, 3),
        [[2]],
        UnreadAttributes("ArgMaxOptions", (('outputType', TYPE_CODES["int32"]),)),
        out_type="int32",
    ),
    "ARG_MIN": _with_constants(
        "ARG_MIN",
        (1, 4, 3),
        [[2]],
        UnreadAttributes("ArgMinOptions", (('outputType', TYPE_CODES["int32"]),)),
        out_type="int32",
    ),
    "CUMSUM": _with_constants("CUMSUM", SHAPE, [2], CumsumAttributes()),
    "REVERSE_V2": _with_constants("REVERSE_V2", SHAPE, [[1]]),
    "DYNAMIC_UPDATE_SLICE": _dynamic_update_slice,
    "CONCATENATION": _several_inputs("CONCATENATION", 2, (1, 4, 4, 6), ConcatenationAttributes(axis=3)),
    "PACK": _several_inputs("PACK", 2, (2, 1, 4, 4, 3), PackAttributes(values_count=2, axis=0)),
    "UNPACK": _unpack,
    "SPLIT": _split,
    "SPLIT_V": _split_v,
    "RESHAPE": _with_constants("RESHAPE", (1, 48), [[1, 48]]),
    "SQUEEZE": _with_constants("SQUEEZE", (4, 4, 3), [], UnreadAttributes("SqueezeOptions", (('squeezeDims', [0]),))),
    "EXPAND_DIMS": _with_constants("EXPAND_DIMS", (1, 1, 4, 4, 3), [[0]]),
    "TRANSPOSE": _with_constants("TRANSPOSE", (1, 4, 4, 3), [[0, 2, 1, 3]]),
    "PAD": _with_constants("PAD", (1, 6, 6, 3), [[[0, 0], [1, 1], [1, 1], [0, 0]]]),
    "PADV2": _padv2,
    "MIRROR_PAD": _with_constants(
        "MIRROR_PAD", (1, 6, 6, 3), [[[0, 0], [1, 1], [1, 1], [0, 0]]], MirrorPadAttributes(mode=MirrorPadMode.REFLECT)
    ),
    "SLICE": _with_constants("SLICE", (1, 2, 2, 3), [[0, 1, 1, 0], [1, 2, 2, -1]]),
    "STRIDED_SLICE": _with_constants(
        "STRIDED_SLICE", (1, 2, 2, 3), [[0, 0, 0, 0], [1, 4, 4, 3], [1, 2, 2, 1]], StridedSliceAttributes()
    ),
    "RESIZE_NEAREST_NEIGHBOR": _with_constants("RESIZE_NEAREST_NEIGHBOR", (1, 8, 8, 3), [[8, 8]], ResizeAttributes()),
    "RESIZE_BILINEAR": _with_constants("RESIZE_BILINEAR", (1, 8, 8, 3), [[8, 8]], ResizeBilinearAttributes()),
    "SPACE_TO_DEPTH": _with_constants("SPACE_TO_DEPTH", (1, 2, 2, 12), [], SpaceToDepthAttributes(block_size=2)),
    "DEPTH_TO_SPACE": _with_constants(
        "DEPTH_TO_SPACE", SHAPE, [], DepthToSpaceAttributes(block_size=2), source=(1, 2, 2, 12)
    ),
    "SPACE_TO_BATCH_ND": _with_constants("SPACE_TO_BATCH_ND", (4, 2, 2, 3), [[2, 2], [[0, 0], [0, 0]]]),
    "BATCH_TO_SPACE_ND": _with_constants("BATCH_TO_SPACE_ND", SHAPE, [[2, 2], [[0, 0], [0, 0]]], source=(4, 2, 2, 3)),
    "GATHER": _with_constants("GATHER", (1, 2, 4, 3), [[2, 0]], GatherAttributes(axis=1)),
    "GATHER_ND": _gather_nd,
    "EMBEDDING_LOOKUP": _embedding_lookup,
    "FILL": _fill,
    "BROADCAST_TO": _with_constants("BROADCAST_TO", (2, 3), [[2, 3]], source=(1, 3)),
    "BROADCAST_ARGS": _broadcast_args,
    "SHAPE": _with_constants(
        "SHAPE", (4,), [], UnreadAttributes("ShapeOptions", (('outType', TYPE_CODES["int32"]),)), out_type="int32"
    ),
    "SVDF": _svdf,
    "UNIDIRECTIONAL_SEQUENCE_LSTM": _unidirectional_sequence_lstm,
    "READ_VARIABLE": _read_variable,
}
