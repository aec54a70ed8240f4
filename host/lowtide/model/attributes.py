"""Typed operator attributes: the builtin options of the operators lowtide reads, in snake_case, one frozen
dataclass per schema options table, built once by the reader (`Operator.attributes`) and turned back into the
schema's table only by the writers (`options_table`).

Every field keeps the value the file stores, even one a kernel refuses (a stride of 0, an unknown padding code):
judging those is the validator's work, which names the schema's own fields in its messages (`schema_fields`).
Options tables lowtide does not read come in as `UnreadAttributes`, which only names the table.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from lowtide.model.schema import fb


class SchemaCode(enum.IntEnum):
    """An enum of the schema whose codes a file may store outside the members (a corrupt or newer model): such a
    code reads as a pseudo-member named UNKNOWN_<code>, so the validator can refuse it by value."""

    @classmethod
    def _missing_(cls, value: object) -> SchemaCode | None:
        if not isinstance(value, int):
            return None
        member = int.__new__(cls, value)
        member._name_ = f"UNKNOWN_{value}"
        member._value_ = value
        return member


class Padding(SchemaCode):
    """schema Padding."""

    SAME = 0
    VALID = 1


class Activation(SchemaCode):
    """schema ActivationFunctionType: the activation an operator fuses into its output."""

    NONE = 0
    RELU = 1
    RELU_N1_TO_1 = 2
    RELU6 = 3
    TANH = 4
    SIGN_BIT = 5


class MirrorPadMode(SchemaCode):
    """schema MirrorPadMode."""

    REFLECT = 0
    SYMMETRIC = 1


def _schema(*names: str, default: Any, convert: Callable[[Any], Any] = lambda v: v) -> Any:
    """A field read from the schema table's `names` (two names: an (h, w) pair from the H and W fields)."""
    return field(default=default, metadata={"schema": names, "convert": convert})


def _pair(*names: str, default: tuple[int, int]) -> Any:
    return _schema(*names, default=default, convert=int)


def _activation() -> Any:
    return _schema("fusedActivationFunction", default=Activation.NONE, convert=Activation)


def _bytes(value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value or b"")


def _ints(value: Any) -> tuple[int, ...] | None:
    return None if value is None else tuple(int(v) for v in value)


@dataclass(frozen=True)
class Attributes:
    """The attributes of one operator; `schema` names the options table they are stored in."""

    schema: ClassVar[str]


@dataclass(frozen=True)
class UnreadAttributes(Attributes):
    """An options table no lowtide stage reads: its name and its fields as the schema has them, for the validator
    and the writers."""

    table: str
    fields: tuple[tuple[str, Any], ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Conv2DAttributes(Attributes):
    schema: ClassVar[str] = "Conv2DOptions"
    padding: Padding = _schema("padding", default=Padding.SAME, convert=Padding)
    stride: tuple[int, int] = _pair("strideH", "strideW", default=(0, 0))
    fused_activation: Activation = _activation()
    dilation: tuple[int, int] = _pair("dilationHFactor", "dilationWFactor", default=(1, 1))
    quantized_bias_type: int = _schema("quantizedBiasType", default=0, convert=int)


@dataclass(frozen=True)
class DepthwiseConv2DAttributes(Attributes):
    schema: ClassVar[str] = "DepthwiseConv2DOptions"
    padding: Padding = _schema("padding", default=Padding.SAME, convert=Padding)
    stride: tuple[int, int] = _pair("strideH", "strideW", default=(0, 0))
    depth_multiplier: int = _schema("depthMultiplier", default=0, convert=int)
    fused_activation: Activation = _activation()
    dilation: tuple[int, int] = _pair("dilationHFactor", "dilationWFactor", default=(1, 1))


@dataclass(frozen=True)
class TransposeConvAttributes(Attributes):
    schema: ClassVar[str] = "TransposeConvOptions"
    padding: Padding = _schema("padding", default=Padding.SAME, convert=Padding)
    stride: tuple[int, int] = _pair("strideH", "strideW", default=(0, 0))
    fused_activation: Activation = _activation()
    quantized_bias_type: int = _schema("quantizedBiasType", default=0, convert=int)


@dataclass(frozen=True)
class Pool2DAttributes(Attributes):
    schema: ClassVar[str] = "Pool2DOptions"
    padding: Padding = _schema("padding", default=Padding.SAME, convert=Padding)
    stride: tuple[int, int] = _pair("strideH", "strideW", default=(0, 0))
    filter: tuple[int, int] = _pair("filterHeight", "filterWidth", default=(0, 0))
    fused_activation: Activation = _activation()


@dataclass(frozen=True)
class FullyConnectedAttributes(Attributes):
    schema: ClassVar[str] = "FullyConnectedOptions"
    fused_activation: Activation = _activation()
    weights_format: int = _schema("weightsFormat", default=0, convert=int)  # 0: DEFAULT; others are shuffled
    keep_num_dims: bool = _schema("keepNumDims", default=False, convert=bool)
    asymmetric_quantize_inputs: bool = _schema("asymmetricQuantizeInputs", default=False, convert=bool)
    quantized_bias_type: int = _schema("quantizedBiasType", default=0, convert=int)


@dataclass(frozen=True)
class ConcatenationAttributes(Attributes):
    schema: ClassVar[str] = "ConcatenationOptions"
    axis: int = _schema("axis", default=0, convert=int)
    fused_activation: Activation = _activation()


@dataclass(frozen=True)
class ReshapeAttributes(Attributes):
    schema: ClassVar[str] = "ReshapeOptions"
    new_shape: tuple[int, ...] | None = _schema("newShape", default=None, convert=_ints)


@dataclass(frozen=True)
class SoftmaxAttributes(Attributes):
    schema: ClassVar[str] = "SoftmaxOptions"
    beta: float = _schema("beta", default=0.0, convert=float)


@dataclass(frozen=True)
class StridedSliceAttributes(Attributes):
    schema: ClassVar[str] = "StridedSliceOptions"
    begin_mask: int = _schema("beginMask", default=0, convert=int)
    end_mask: int = _schema("endMask", default=0, convert=int)
    ellipsis_mask: int = _schema("ellipsisMask", default=0, convert=int)
    new_axis_mask: int = _schema("newAxisMask", default=0, convert=int)
    shrink_axis_mask: int = _schema("shrinkAxisMask", default=0, convert=int)
    offset: bool = _schema("offset", default=False, convert=bool)


@dataclass(frozen=True)
class ResizeAttributes(Attributes):
    """RESIZE_NEAREST_NEIGHBOR's options; `ResizeBilinearAttributes` has the same fields in its own table."""

    schema: ClassVar[str] = "ResizeNearestNeighborOptions"
    align_corners: bool = _schema("alignCorners", default=False, convert=bool)
    half_pixel_centers: bool = _schema("halfPixelCenters", default=False, convert=bool)


@dataclass(frozen=True)
class ResizeBilinearAttributes(ResizeAttributes):
    schema: ClassVar[str] = "ResizeBilinearOptions"


@dataclass(frozen=True)
class PackAttributes(Attributes):
    schema: ClassVar[str] = "PackOptions"
    values_count: int = _schema("valuesCount", default=0, convert=int)
    axis: int = _schema("axis", default=0, convert=int)


@dataclass(frozen=True)
class UnpackAttributes(Attributes):
    schema: ClassVar[str] = "UnpackOptions"
    num: int = _schema("num", default=0, convert=int)
    axis: int = _schema("axis", default=0, convert=int)


@dataclass(frozen=True)
class SplitAttributes(Attributes):
    schema: ClassVar[str] = "SplitOptions"
    num_splits: int = _schema("numSplits", default=0, convert=int)


@dataclass(frozen=True)
class SplitVAttributes(Attributes):
    schema: ClassVar[str] = "SplitVOptions"
    num_splits: int = _schema("numSplits", default=0, convert=int)


@dataclass(frozen=True)
class GatherAttributes(Attributes):
    schema: ClassVar[str] = "GatherOptions"
    axis: int = _schema("axis", default=0, convert=int)
    batch_dims: int = _schema("batchDims", default=0, convert=int)


@dataclass(frozen=True)
class MirrorPadAttributes(Attributes):
    schema: ClassVar[str] = "MirrorPadOptions"
    mode: MirrorPadMode = _schema("mode", default=MirrorPadMode.REFLECT, convert=MirrorPadMode)


@dataclass(frozen=True)
class SpaceToDepthAttributes(Attributes):
    schema: ClassVar[str] = "SpaceToDepthOptions"
    block_size: int = _schema("blockSize", default=0, convert=int)


@dataclass(frozen=True)
class DepthToSpaceAttributes(Attributes):
    schema: ClassVar[str] = "DepthToSpaceOptions"
    block_size: int = _schema("blockSize", default=0, convert=int)


@dataclass(frozen=True)
class BatchMatMulAttributes(Attributes):
    schema: ClassVar[str] = "BatchMatMulOptions"
    adj_x: bool = _schema("adjX", default=False, convert=bool)
    adj_y: bool = _schema("adjY", default=False, convert=bool)
    asymmetric_quantize_inputs: bool = _schema("asymmetricQuantizeInputs", default=False, convert=bool)


@dataclass(frozen=True)
class ReducerAttributes(Attributes):
    schema: ClassVar[str] = "ReducerOptions"
    keep_dims: bool = _schema("keepDims", default=False, convert=bool)


@dataclass(frozen=True)
class CumsumAttributes(Attributes):
    schema: ClassVar[str] = "CumsumOptions"
    exclusive: bool = _schema("exclusive", default=False, convert=bool)
    reverse: bool = _schema("reverse", default=False, convert=bool)


@dataclass(frozen=True)
class LeakyReluAttributes(Attributes):
    schema: ClassVar[str] = "LeakyReluOptions"
    alpha: float = _schema("alpha", default=0.0, convert=float)


@dataclass(frozen=True)
class SvdfAttributes(Attributes):
    schema: ClassVar[str] = "SVDFOptions"
    rank: int = _schema("rank", default=0, convert=int)
    fused_activation: Activation = _activation()
    asymmetric_quantize_inputs: bool = _schema("asymmetricQuantizeInputs", default=False, convert=bool)


@dataclass(frozen=True)
class SequenceLstmAttributes(Attributes):
    schema: ClassVar[str] = "UnidirectionalSequenceLSTMOptions"
    fused_activation: Activation = _activation()
    cell_clip: float = _schema("cellClip", default=0.0, convert=float)
    proj_clip: float = _schema("projClip", default=0.0, convert=float)
    time_major: bool = _schema("timeMajor", default=False, convert=bool)
    asymmetric_quantize_inputs: bool = _schema("asymmetricQuantizeInputs", default=False, convert=bool)
    diagonal_recurrent_tensors: bool = _schema("diagonalRecurrentTensors", default=False, convert=bool)


@dataclass(frozen=True)
class CallOnceAttributes(Attributes):
    schema: ClassVar[str] = "CallOnceOptions"
    init_subgraph: int = _schema("initSubgraphIndex", default=0, convert=int)


@dataclass(frozen=True)
class IfAttributes(Attributes):
    schema: ClassVar[str] = "IfOptions"
    then_subgraph: int = _schema("thenSubgraphIndex", default=0, convert=int)
    else_subgraph: int = _schema("elseSubgraphIndex", default=0, convert=int)


@dataclass(frozen=True)
class WhileAttributes(Attributes):
    schema: ClassVar[str] = "WhileOptions"
    cond_subgraph: int = _schema("condSubgraphIndex", default=0, convert=int)
    body_subgraph: int = _schema("bodySubgraphIndex", default=0, convert=int)


@dataclass(frozen=True)
class VarHandleAttributes(Attributes):
    schema: ClassVar[str] = "VarHandleOptions"
    container: bytes = _schema("container", default=b"", convert=_bytes)
    shared_name: bytes = _schema("sharedName", default=b"", convert=_bytes)


@dataclass(frozen=True)
class AddAttributes(Attributes):
    schema: ClassVar[str] = "AddOptions"
    fused_activation: Activation = _activation()
    pot_scale_int16: bool = _schema("potScaleInt16", default=True, convert=bool)


@dataclass(frozen=True)
class SubAttributes(Attributes):
    schema: ClassVar[str] = "SubOptions"
    fused_activation: Activation = _activation()
    pot_scale_int16: bool = _schema("potScaleInt16", default=True, convert=bool)


@dataclass(frozen=True)
class MulAttributes(Attributes):
    schema: ClassVar[str] = "MulOptions"
    fused_activation: Activation = _activation()


@dataclass(frozen=True)
class DivAttributes(Attributes):
    schema: ClassVar[str] = "DivOptions"
    fused_activation: Activation = _activation()


@dataclass(frozen=True)
class L2NormAttributes(Attributes):
    schema: ClassVar[str] = "L2NormOptions"
    fused_activation: Activation = _activation()


_READ: tuple[type[Attributes], ...] = (
    Conv2DAttributes,
    DepthwiseConv2DAttributes,
    TransposeConvAttributes,
    Pool2DAttributes,
    FullyConnectedAttributes,
    ConcatenationAttributes,
    ReshapeAttributes,
    SoftmaxAttributes,
    StridedSliceAttributes,
    ResizeAttributes,
    ResizeBilinearAttributes,
    PackAttributes,
    UnpackAttributes,
    SplitAttributes,
    SplitVAttributes,
    GatherAttributes,
    MirrorPadAttributes,
    SpaceToDepthAttributes,
    DepthToSpaceAttributes,
    BatchMatMulAttributes,
    ReducerAttributes,
    CumsumAttributes,
    LeakyReluAttributes,
    SvdfAttributes,
    SequenceLstmAttributes,
    CallOnceAttributes,
    IfAttributes,
    WhileAttributes,
    VarHandleAttributes,
    AddAttributes,
    SubAttributes,
    MulAttributes,
    DivAttributes,
    L2NormAttributes,
)
_BY_TABLE: dict[str, type[Attributes]] = {cls.schema: cls for cls in _READ}

A = TypeVar("A", bound=Attributes)


def table_name(attributes: Attributes) -> str:
    """The schema options table `attributes` are stored in, e.g. 'Conv2DOptions'."""
    return attributes.table if isinstance(attributes, UnreadAttributes) else attributes.schema


def read_attributes(options: Any) -> Attributes | None:
    """The attributes of a schema options object (object API, e.g. `Conv2DOptionsT`); None for no options."""
    if options is None:
        return None
    table = type(options).__name__.removesuffix("T")
    cls = _BY_TABLE.get(table)
    if cls is None:
        return UnreadAttributes(table, tuple(vars(options).items()))
    values = {}
    for f in dataclasses.fields(cls):
        names, convert = f.metadata["schema"], f.metadata["convert"]
        raw = [getattr(options, name) for name in names]
        values[f.name] = tuple(convert(v) for v in raw) if len(names) > 1 else convert(raw[0])
    return cls(**values)


def schema_fields(attributes: Attributes) -> dict[str, Any]:
    """The schema's field names with the values `attributes` hold: what the writers store, and the names the
    validator's messages use."""
    if isinstance(attributes, UnreadAttributes):
        return dict(attributes.fields)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(attributes):
        names, value = f.metadata["schema"], getattr(attributes, f.name)
        if len(names) > 1:
            out.update(zip(names, value))
        else:
            out[names[0]] = value
    return out


def options_table(attributes: Attributes) -> tuple[int, Any]:
    """The schema's union tag and options object (object API) that store `attributes`."""
    table = table_name(attributes)
    options = getattr(fb, f"{table}T")()
    for name, value in schema_fields(attributes).items():
        setattr(options, name, _stored(value))
    return getattr(fb.BuiltinOptions, table), options


def _stored(value: Any) -> Any:
    if isinstance(value, bytes) and not value:
        return None  # the schema's absent string
    if isinstance(value, enum.IntEnum):
        return int(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def attributes_as(attributes: Attributes | None, cls: type[A]) -> A:
    """`attributes` when they are a `cls`; otherwise the defaults a kernel reads when the table is absent."""
    return attributes if isinstance(attributes, cls) else cls()


def fused_activation(attributes: Attributes | None) -> Activation:
    """The activation an operator fuses into its output: NONE for operators whose table has no such field."""
    value = getattr(attributes, "fused_activation", Activation.NONE)
    return value if isinstance(value, Activation) else Activation.NONE
