"""The lowtide measurement protocol's one definition: its version, limits, codes and every message's layout.

Three checked-in artifacts are generated from it, and tests/test_protocol.py fails when one of them and this
definition disagree:

- firmware/protocol/lt_protocol.h: the board's constants and the byte offset of every fixed field (C);
- host/lowtide/device/protocol_messages.py: the host's enums and one frozen dataclass per message, whose
  `encode()` and `decode()` pack and unpack the fields named here, in this order;
- the tables of docs/protocol.md, between its `<!-- generated: NAME -->` and `<!-- end generated -->` markers.

    python -m lowtide.device.protocol_spec     # regenerates all three in place (run from a checkout)
"""

from __future__ import annotations

import re
import struct
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lowtide.storage import write_atomically

VERSION = 2
MAX_PAYLOAD = 1000  # bytes of payload in one frame, on both sides
UNKNOWN_U32 = 0xFFFFFFFF  # "this board cannot measure this figure"
UNKNOWN_U64 = 0xFFFFFFFFFFFFFFFF
STRING_MAX_BYTES = 255  # a length-prefixed string: a u8 length, then that many bytes of UTF-8
FRAME_HEADER_BYTES = 2  # type, seq
FRAME_CRC_BYTES = 4
MAX_RAW_FRAME = FRAME_HEADER_BYTES + MAX_PAYLOAD + FRAME_CRC_BYTES
# COBS adds one code byte per started run of 254 bytes; +1 for the 0x00 delimiter: 1011, a 1 KB receive buffer.
MAX_ENCODED_FRAME = MAX_RAW_FRAME + MAX_RAW_FRAME // 254 + 1 + 1


@dataclass(frozen=True)
class Code:
    name: str
    value: int
    doc: str = ""


@dataclass(frozen=True)
class CodeTable:
    """Named values of one kind: an IntEnum (or IntFlag) on the host, an enum of `c_prefix` constants in C."""

    python_name: str
    c_prefix: str
    codes: tuple[Code, ...]
    is_flags: bool = False

    def __getitem__(self, name: str) -> int:
        return next(code.value for code in self.codes if code.name == name)

    def listing(self) -> str:
        """The values in prose, as a field's description lists them."""

        def one(code: Code) -> str:
            key = f"bit {code.value.bit_length() - 1}" if self.is_flags else str(code.value)
            return f"{key} {code.name}" + (f" ({code.doc})" if code.doc else "")

        return "; ".join(one(code) for code in self.codes) + ("; other bits 0" if self.is_flags else "")


# The replies of a request, as the message-type table says them; board-to-host messages have none.
REPLIES = {"HELLO_REQUEST": "HELLO", "SET_INPUT": "INPUT_ACK", "RUN": "PROGRESS*, then RESULT", "READ": "DATA"}
MESSAGE_TYPES = CodeTable(
    "MessageType",
    "LT_MSG_",
    (
        # host -> board
        Code("HELLO_REQUEST", 0x01),
        Code("SET_INPUT", 0x02),
        Code("RUN", 0x03),
        Code("READ", 0x04),
        # board -> host
        Code("HELLO", 0x81),
        Code("INPUT_ACK", 0x82),
        Code("PROGRESS", 0x83),
        Code("RESULT", 0x84),
        Code("DATA", 0x85),
        Code("LOG", 0x86),
        Code("ERROR", 0x87),
    ),
)
ERROR_CODES = CodeTable(
    "ErrorCode",
    "LT_ERR_",
    (
        Code("BAD_FRAME", 1, "the board dropped a damaged frame; sent with sequence number 0; the host re-sends"),
        Code("BAD_MESSAGE", 2, "unknown or host-bound message type, or a payload that does not fit its layout"),
        Code("BAD_INDEX", 3, "input or output index out of range"),
        Code(
            "BAD_RANGE",
            4,
            "offset or length outside the tensor or region, wrong total size, or a region the board lacks",
        ),
        Code("MODEL_NOT_READY", 5, "the model's tensors could not be allocated"),
        Code("INVOKE_FAILED", 6, "`Invoke()` returned an error"),
        Code("NO_RESULT", 7, "READ before any RUN completed"),
        Code(
            "BAD_ARGUMENT", 8, "an argument out of range (RUN with 0 iterations, or more than HELLO's max iterations)"
        ),
        Code("INTERNAL", 9, "anything else"),
    ),
)
LOG_LEVELS = CodeTable("LogLevel", "LT_LOG_", (Code("DEBUG", 0), Code("INFO", 1), Code("WARNING", 2), Code("ERROR", 3)))
READ_REGIONS = CodeTable(
    "ReadRegion",
    "LT_REGION_",
    (
        Code("OUTPUT", 1, "an output tensor"),
        Code("OP_CYCLES", 2, "per-operator counts, one u64 per operator"),
    ),
)
# What RESULT's counter figures count (HELLO's `counter`): real cycles at clock_hz, instructions an emulator
# retired (no pipeline, cache or wait states: a regression figure), or nothing.
COUNTERS = CodeTable(
    "Counter",
    "LT_COUNTER_",
    (
        Code("NONE", 0, "no counter"),
        Code("CYCLES", 1, "CPU cycles at the clock"),
        Code(
            "INSTRUCTIONS",
            2,
            "instructions an emulator retired; QEMU: no pipeline, cache or wait states, a regression figure, not time",
        ),
    ),
)
HELLO_FLAGS = CodeTable("HelloFlag", "LT_HELLO_FLAG_", (Code("MODEL_READY", 0x01, "tensors allocated"),), is_flags=True)
RUN_FLAGS = CodeTable(
    "RunFlag", "LT_RUN_FLAG_", (Code("PROFILE_OPS", 0x01, "per-operator counts, if the board can"),), is_flags=True
)
CODE_TABLES = (MESSAGE_TYPES, ERROR_CODES, LOG_LEVELS, READ_REGIONS, COUNTERS, HELLO_FLAGS, RUN_FLAGS)

_FORMATS = {"u8": "B", "u16": "H", "u32": "I", "u64": "Q", "sha256": "32s"}
_UNKNOWN = {"u32": "UNKNOWN_U32", "u64": "UNKNOWN_U64"}


@dataclass(frozen=True)
class Field:
    """One field of a message's fixed head."""

    name: str  # the host's attribute and the C offset macro's name; a flags field's attribute is per flag
    type: Literal["u8", "u16", "u32", "u64", "sha256"]
    doc: str
    values: CodeTable | None = None  # the codes the field carries (listed in its description)
    checked: bool = False  # decoding turns the value into the table's enum and rejects values not in it
    unknown: bool = False  # all ones means "this board cannot measure it": None on the host

    @property
    def size(self) -> int:
        return struct.calcsize("<" + _FORMATS[self.type])

    @property
    def description(self) -> str:
        return f"{self.doc}: {self.values.listing()}" if self.values else self.doc


@dataclass(frozen=True)
class Tail:
    """What follows a message's fixed head. `kind` is one of
    - "bytes": the rest of the payload, raw; "text": the rest of the payload, UTF-8 (cut to fit a frame);
    - "strings": one length-prefixed string per name (cut to STRING_MAX_BYTES), then nothing;
    - "entries": the rest of the payload is head field `count` entries of the layout `entry`."""

    kind: Literal["bytes", "text", "strings", "entries"]
    names: tuple[str, ...]
    doc: tuple[str, ...]
    entry: str = ""
    count: str = ""


@dataclass(frozen=True)
class Layout:
    """A message's fixed head and its tail, or (with no type code) an entry inside another message."""

    name: str
    fields: tuple[Field, ...]
    tail: Tail | None = None
    class_name: str = ""
    versioned: bool = False  # the first field is the protocol version, at this place in every version

    @property
    def format(self) -> str:
        return "<" + "".join(_FORMATS[f.type] for f in self.fields)

    @property
    def size(self) -> int:
        return struct.calcsize(self.format)

    @property
    def python_name(self) -> str:
        return self.class_name or "".join(part.capitalize() for part in self.name.split("_"))

    @property
    def max_tail_bytes(self) -> int:
        """What fits in one frame after the fixed head."""
        return MAX_PAYLOAD - self.size

    @property
    def limit_name(self) -> str:
        """The name of the tail's limit (`MAX_CHUNK`, `MAX_TEXT_BYTES`, `MAX_OUTPUTS`), "" for none."""
        if self.tail is None or self.tail.kind == "strings":
            return ""
        if self.tail.kind == "entries":
            return "MAX_" + self.tail.names[0].upper()
        return "MAX_CHUNK" if self.tail.kind == "bytes" else "MAX_TEXT_BYTES"

    @property
    def limit(self) -> int:
        if self.tail is not None and self.tail.kind == "entries":
            return self.max_tail_bytes // LAYOUTS[self.tail.entry].size
        return self.max_tail_bytes

    def offset(self, name: str) -> int:
        at = 0
        for f in self.fields:
            if f.name == name:
                return at
            at += f.size
        raise KeyError(name)


_DATA = Layout(
    "DATA",
    (
        Field("region", "u8", "region", READ_REGIONS),
        Field("index", "u16", "index"),
        Field("offset", "u32", "offset of these bytes"),
        Field("total_bytes", "u32", "total size of the region"),
    ),
    Tail("bytes", ("data",), ("the bytes",)),
)
LAYOUTS = {
    layout.name: layout
    for layout in (
        Layout("HELLO_REQUEST", ()),
        Layout(
            "HELLO",
            (
                Field("protocol_version", "u16", f"protocol version ({VERSION})"),
                Field("flags", "u8", "flags", HELLO_FLAGS),
                Field("input_count", "u8", "number of model inputs"),
                Field("output_count", "u8", "number of model outputs"),
                Field(
                    "clock_hz",
                    "u32",
                    "CPU clock in Hz, as the board file's `clock_hz` states it (the host checks the "
                    "two agree); 0 = unknown",
                ),
                Field("counter", "u8", "counter: what RESULT's counter figures count", COUNTERS, checked=True),
                Field(
                    "max_iterations",
                    "u32",
                    "max iterations: the most measured invocations one RUN may ask for (the C "
                    "server keeps 256 samples for the median: 256; host-tflm: 0xFFFFFFFF, no "
                    "limit). The host refuses a larger RUN before sending it",
                ),
                Field(
                    "max_payload", "u16", f"max payload: the largest frame payload the board accepts ({MAX_PAYLOAD})"
                ),
                Field("arena_capacity_bytes", "u32", "tensor arena capacity in bytes"),
                Field("model_size_bytes", "u32", "model size in bytes"),
                Field(
                    "model_sha256",
                    "sha256",
                    "SHA-256 of the .tflite file the board runs (the host refuses a board running another model)",
                ),
            ),
            Tail(
                "strings",
                ("board", "runtime"),
                (
                    "board name (e.g. `host-tflm`, `qemu-mps2-an386`, `nucleo-f746zg`)",
                    "runtime (e.g. `tflite-micro 2024-05 cmsis-nn`)",
                ),
            ),
            versioned=True,
        ),
        Layout(
            "SET_INPUT",
            (
                Field("index", "u8", "input index"),
                Field("total_bytes", "u32", "total size of the input tensor in bytes (the board checks it)"),
                Field("offset", "u32", "offset of this chunk in the tensor"),
            ),
            Tail("bytes", ("data",), ("the chunk's bytes",)),
        ),
        Layout(
            "INPUT_ACK",
            (
                Field("index", "u8", "input index"),
                Field("offset", "u32", "offset of the chunk received"),
                Field("length", "u16", "its length"),
            ),
        ),
        Layout(
            "RUN",
            (
                Field("warmup", "u32", "warm-up invocations (not timed)"),
                Field("iterations", "u32", "measured invocations, >= 1"),
                Field("flags", "u8", "flags", RUN_FLAGS),
            ),
        ),
        Layout(
            "READ",
            (
                Field("region", "u8", "region", READ_REGIONS),
                Field("index", "u16", "index: the output index for region OUTPUT; 0 for region OP_CYCLES"),
                Field("offset", "u32", "offset"),
                Field(
                    "max_length",
                    "u16",
                    f"maximum length wanted (the board sends at most {_DATA.max_tail_bytes}, what fits in one DATA)",
                ),
            ),
        ),
        _DATA,
        Layout(
            "PROGRESS",
            (
                Field("done", "u32", "invocations finished, warm-up included"),
                Field("total", "u32", "invocations in total"),
            ),
        ),
        Layout(
            "RESULT",
            (
                Field("warmup", "u32", "warm-up invocations run"),
                Field("iterations", "u32", "measured invocations run"),
                Field(
                    "arena_planned_bytes",
                    "u32",
                    "planned arena: the non-persistent head the runtime's memory planner laid out, bytes",
                    unknown=True,
                ),
                Field(
                    "arena_used_bytes",
                    "u32",
                    "arena used as the allocator reports it (`MicroInterpreter::arena_used_bytes()`), bytes",
                    unknown=True,
                ),
                Field(
                    "arena_high_water_bytes",
                    "u32",
                    "painted high-water mark: bytes of the arena found written after "
                    "the runs (firmware fills the arena with a pattern before "
                    "`AllocateTensors` and scans for the first and last changed "
                    "byte), bytes",
                    unknown=True,
                ),
                Field(
                    "stack_high_water_bytes",
                    "u32",
                    "stack high-water mark: the deepest the stack went over the RUN's "
                    "invocations (painted before each), bytes",
                    unknown=True,
                ),
                Field("stack_size_bytes", "u32", "stack size: the linker script's stack region, bytes", unknown=True),
                Field(
                    "counter_min",
                    "u64",
                    "counter per invocation (HELLO's counter: cycles or instructions), minimum",
                    unknown=True,
                ),
                Field("counter_median", "u64", "counter, median", unknown=True),
                Field("counter_max", "u64", "counter, maximum", unknown=True),
                Field(
                    "us_min",
                    "u32",
                    "microseconds of real time per invocation, minimum (from the cycles at the clock "
                    "where the counter counts cycles)",
                    unknown=True,
                ),
                Field("us_median", "u32", "microseconds, median", unknown=True),
                Field("us_max", "u32", "microseconds, maximum", unknown=True),
                Field(
                    "op_cycles_count",
                    "u16",
                    "number of per-operator counter entries readable with READ region OP_CYCLES (0 = no profile)",
                ),
                Field("output_count", "u8", "number of outputs K"),
            ),
            Tail("entries", ("outputs",), ("per output",), entry="RESULT_OUTPUT", count="output_count"),
        ),
        Layout(
            "RESULT_OUTPUT",
            (
                Field("nbytes", "u32", "size in bytes"),
                Field("crc32", "u32", "zlib/IEEE CRC32 of its bytes (the output digest)"),
            ),
            class_name="OutputSummary",
        ),
        Layout("LOG", (Field("level", "u8", "level", LOG_LEVELS),), Tail("text", ("text",), ("text",))),
        Layout(
            "ERROR",
            (
                Field("code", "u16", "error code (below)"),
                Field("request_type", "u8", "type of the request that failed (0 for BAD_FRAME)"),
            ),
            Tail("text", ("text",), ("text for a person",)),
        ),
    )
}
MESSAGES = tuple(LAYOUTS[code.name] for code in MESSAGE_TYPES.codes)

GENERATED_BY = "GENERATED by `python -m lowtide.device.protocol_spec` from host/lowtide/device/protocol_spec.py"


# --- C ----------------------------------------------------------------------------------------------------------------


def c_header() -> str:
    """firmware/protocol/lt_protocol.h: the constants and the byte offset of every fixed field."""
    lines = [
        f"/* {GENERATED_BY}: do not",
        " * edit. The lowtide protocol's codes and message layouts (docs/protocol.md); all fields little-endian. */",
        "#ifndef LT_PROTOCOL_H",
        "#define LT_PROTOCOL_H",
        "",
        f"#define LT_PROTOCOL_VERSION {VERSION}u",
        f"#define LT_PROTOCOL_MAX_PAYLOAD {MAX_PAYLOAD}u",
        f"#define LT_UNKNOWN_U64 0x{UNKNOWN_U64:X}ull /* a u64 figure this board cannot measure */",
        f"#define LT_STRING_MAX_BYTES {STRING_MAX_BYTES}u /* a u8 length, then that many bytes of UTF-8 */",
        "",
        "/* A frame: COBS(type | seq | payload | CRC32 LE), then a 0x00 delimiter. */",
        f"#define LT_FRAME_HEADER_BYTES {FRAME_HEADER_BYTES}u /* type, seq */",
        f"#define LT_FRAME_CRC_BYTES {FRAME_CRC_BYTES}u",
        f"#define LT_FRAME_MAX_RAW {MAX_RAW_FRAME}u /* before COBS */",
        f"#define LT_FRAME_MAX_ENCODED {MAX_ENCODED_FRAME}u /* COBS code bytes and the delimiter included */",
        "",
    ]
    for table in CODE_TABLES:
        lines.append("enum {")
        lines += [f"  {table.c_prefix}{code.name} = 0x{code.value:02X}," for code in table.codes]
        lines += ["};", ""]
    for layout in LAYOUTS.values():
        lines.append(f"/* {layout.name}" + (f"; then {_tail_summary(layout)}" if layout.tail else "") + " */")
        for f in layout.fields:
            lines.append(f"#define LT_{layout.name}_{f.name.upper()}_AT {layout.offset(f.name)}u /* {f.type} */")
            if f.type == "sha256":
                lines.append(f"#define LT_{layout.name}_{f.name.upper()}_BYTES {f.size}u")
        lines.append(f"#define LT_{layout.name}_FIXED_BYTES {layout.size}u")
        if layout.limit_name:
            lines.append(f"#define LT_{layout.name}_{layout.limit_name} {layout.limit}u /* what fits in one frame */")
        lines.append("")
    lines.append("#endif /* LT_PROTOCOL_H */")
    return "\n".join(lines) + "\n"


def _tail_summary(layout: Layout) -> str:
    tail = layout.tail
    assert tail is not None
    if tail.kind == "strings":
        return ", then ".join(tail.names) + ": each a u8 length and that many bytes of UTF-8"
    if tail.kind == "entries":
        return f"{tail.count} {tail.entry} entries"
    return f"{tail.names[0]}: the rest of the payload" + (", UTF-8" if tail.kind == "text" else "")


# --- Python -----------------------------------------------------------------------------------------------------------

_PYTHON_PRELUDE = '''
class ProtocolError(Exception):
    """A frame or payload that does not follow the protocol. Never escapes to the user as such."""


class VersionMismatch(ProtocolError):
    """A HELLO from a board that speaks another protocol version: only its version field can be trusted."""

    def __init__(self, version: int):
        self.version = version
        super().__init__(f"board speaks protocol version {version}, this host speaks {PROTOCOL_VERSION}")


def _head(head: struct.Struct, payload: bytes, message: str, exact: bool) -> tuple[Any, ...]:
    """The fixed head's fields; `exact`: the head is the whole payload."""
    if exact and len(payload) != head.size:
        raise ProtocolError(f"{message} payload of {len(payload)} bytes, expected {head.size}")
    if len(payload) < head.size:
        raise ProtocolError(f"{message} payload too short")
    return head.unpack_from(payload)


def _check_version(payload: bytes, version: struct.Struct, message: str) -> None:
    """The version comes first in every version, so that a board of another version is recognised as such."""
    if len(payload) < version.size:
        raise ProtocolError(f"{message} payload too short")
    (found,) = version.unpack_from(payload)
    if found != PROTOCOL_VERSION:
        raise VersionMismatch(found)


def _member(kind: type[_Code], value: int, what: str) -> _Code:
    try:
        return kind(value)
    except ValueError:
        raise ProtocolError(f"{what} {value} is not one of {[m.name for m in kind]}") from None


def _known(value: int, unknown: int) -> int | None:
    return None if value == unknown else value


def _or_unknown(value: int | None, unknown: int) -> int:
    return unknown if value is None else value


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _encode_string(text: str) -> bytes:
    data = text.encode()[:STRING_MAX_BYTES]
    return bytes([len(data)]) + data


def _decode_string(payload: bytes, at: int, message: str) -> tuple[str, int]:
    """The length-prefixed string at `at`, and where the next field starts."""
    if at >= len(payload) or at + 1 + payload[at] > len(payload):
        raise ProtocolError(f"{message} strings truncated")
    end = at + 1 + payload[at]
    return _text(payload[at + 1 : end]), end
'''


def _python_type(f: Field) -> str:
    if f.type == "sha256":
        return "bytes"
    if f.values is not None and f.checked:
        return f.values.python_name
    return "int | None" if f.unknown else "int"


def _comment(text: str, indent: str) -> list[str]:
    return [f"{indent}#: {line}" for line in textwrap.wrap(text, 116 - len(indent))]


def _quoted(text: str) -> str:
    return '"' + text + '"'


def _call(start: str, arguments: list[str], end: str, indent: str) -> list[str]:
    """`start` arguments `end` on one line, or one argument a line where that would be too long."""
    line = f"{indent}{start}{', '.join(arguments)}{end}"
    if len(line) <= 120:
        return [line]
    return [f"{indent}{start}", *[f"{indent}    {argument}," for argument in arguments], f"{indent}{end}"]


def _python_class(layout: Layout) -> list[str]:
    tail = layout.tail
    name = layout.name
    lines = ["", "", "@dataclass(frozen=True)", f"class {layout.python_name}:"]
    if layout in MESSAGES:
        lines.append(f"    TYPE: ClassVar[MessageType] = MessageType.{name}")
    lines.append(f"    FIXED_BYTES: ClassVar[int] = {layout.size}")
    if layout.limit_name:
        lines.append(f"    {layout.limit_name}: ClassVar[int] = {layout.limit}  # what fits in one frame")
    lines.append(f"    _HEAD: ClassVar[struct.Struct] = struct.Struct({_quoted(layout.format)})")
    if layout.versioned:
        version_format = _quoted("<" + _FORMATS[layout.fields[0].type])
        lines.append(f"    _VERSION: ClassVar[struct.Struct] = struct.Struct({version_format})")
    # RESULT's output_count: a head field the host sees as the length of its entries
    count, entries = (tail.count, tail.names[0]) if tail and tail.kind == "entries" else ("", "")

    attributes: list[tuple[str, str, str]] = []  # name, type, description
    for f in layout.fields:
        if f.values is not None and f.values.is_flags:
            attributes += [
                (code.name.lower(), "bool", f"{f.name} bit {code.value.bit_length() - 1}: {code.doc}")
                for code in f.values.codes
            ]
        elif f.name != count:
            attributes.append((f.name, _python_type(f), f.description))
    if tail:
        python_type = (
            f"tuple[{LAYOUTS[tail.entry].python_name}, ...]"
            if tail.kind == "entries"
            else "bytes"
            if tail.kind == "bytes"
            else "str"
        )
        attributes += [(attribute, python_type, doc) for attribute, doc in zip(tail.names, tail.doc, strict=True)]
    optional = 0  # trailing flags may be left out: they are off
    while optional < len(attributes) and attributes[len(attributes) - 1 - optional][1] == "bool":
        optional += 1
    lines.append("")
    for i, (attribute, python_type, doc) in enumerate(attributes):
        lines += _comment(doc, "    ")
        lines.append(f"    {attribute}: {python_type}" + (" = False" if i >= len(attributes) - optional else ""))
    if not attributes:
        lines.append("    # no fields: the payload is empty")

    head_values, flag_lines = [], []
    for f in layout.fields:
        if f.values is not None and f.values.is_flags:
            bits = " | ".join(
                f"({f.values.python_name}.{code.name} if self.{code.name.lower()} else 0)" for code in f.values.codes
            )
            flag_lines.append(f"        {f.name} = {bits}")
            head_values.append(f.name)
        elif f.name == count:
            head_values.append(f"len(self.{entries})")
        elif f.unknown:
            head_values.append(f"_or_unknown(self.{f.name}, {_UNKNOWN[f.type]})")
        else:
            head_values.append(f"self.{f.name}")
    tail_bytes = ""
    if tail and tail.kind == "bytes":
        tail_bytes = f" + self.{tail.names[0]}"
    elif tail and tail.kind == "text":
        tail_bytes = f" + self.{tail.names[0]}.encode()[: self.{layout.limit_name}]"
    elif tail and tail.kind == "strings":
        tail_bytes = "".join(f" + _encode_string(self.{attribute})" for attribute in tail.names)
    elif tail and tail.kind == "entries":
        tail_bytes = f' + b"".join(entry.encode() for entry in self.{tail.names[0]})'
    lines += ["", "    def encode(self) -> bytes:", *flag_lines]
    if tail_bytes:
        lines += _call("head = self._HEAD.pack(", head_values, ")", "        ")
        lines.append(f"        return head{tail_bytes}")
    else:
        lines += _call("return self._HEAD.pack(", head_values, ")", "        ")

    lines += ["", "    @classmethod", f"    def decode(cls, payload: bytes) -> {layout.python_name}:"]
    if layout.versioned:
        lines.append(f"        _check_version(payload, cls._VERSION, {_quoted(name)})")
    head = f"_head(cls._HEAD, payload, {_quoted(name)}, exact={tail is None})"
    if len(layout.fields) == 1:
        lines.append(f"        ({layout.fields[0].name},) = {head}")
    elif layout.fields:
        lines += _call("(", [f.name for f in layout.fields], f") = {head}", "        ")
    else:
        lines.append(f"        {head}")
    arguments = []
    for f in layout.fields:
        if f.values is not None and f.values.is_flags:
            arguments += [
                f"{code.name.lower()}=bool({f.name} & {f.values.python_name}.{code.name})" for code in f.values.codes
            ]
        elif f.name == count:
            continue
        elif f.values is not None and f.checked:
            arguments.append(f"{f.name}=_member({f.values.python_name}, {f.name}, {_quoted(name + ' ' + f.name)})")
        elif f.unknown:
            arguments.append(f"{f.name}=_known({f.name}, {_UNKNOWN[f.type]})")
        else:
            arguments.append(f"{f.name}={f.name}")
    if tail and tail.kind in ("bytes", "text"):
        rest = "payload[cls.FIXED_BYTES :]"
        arguments.append(f"{tail.names[0]}=" + (f"_text({rest})" if tail.kind == "text" else rest))
    elif tail and tail.kind == "strings":
        at = "cls.FIXED_BYTES"
        for attribute in tail.names:
            lines.append(f"        {attribute}, at = _decode_string(payload, {at}, {_quoted(name)})")
            arguments.append(f"{attribute}={attribute}")
            at = "at"
        lines += [
            "        if at != len(payload):",
            f'            raise ProtocolError("{name} payload has trailing bytes")',
        ]
    elif tail and tail.kind == "entries":
        entry, attribute = LAYOUTS[tail.entry].python_name, tail.names[0]
        lines += [
            f"        if len(payload) != cls.FIXED_BYTES + {count} * {entry}.FIXED_BYTES:",
            f'            raise ProtocolError(f"{name} payload of {{len(payload)}} bytes for {{{count}}} {attribute}")',
            f"        {attribute} = tuple(",
            f"            {entry}.decode(payload[at : at + {entry}.FIXED_BYTES])",
            f"            for at in range(cls.FIXED_BYTES, len(payload), {entry}.FIXED_BYTES)",
            "        )",
        ]
        arguments.append(f"{attribute}={attribute}")
    lines += _call("return cls(", arguments, ")", "        ")
    return lines


def python_module() -> str:
    """host/lowtide/device/protocol_messages.py: the enums, limits and message classes."""
    lines = [
        f'"""{GENERATED_BY}: do not edit.',
        "",
        "The lowtide protocol's codes and messages (docs/protocol.md): one frozen dataclass per message, whose",
        "`encode()` gives its payload and whose `decode()` reads one, rejecting a payload whose length or contents",
        'disagree with the layout. Framing and the message dispatch are in lowtide.device.protocol."""',
        "",
        "from __future__ import annotations",
        "",
        "import enum",
        "import struct",
        "from dataclasses import dataclass",
        "from typing import Any, ClassVar, TypeVar",
        "",
        f"PROTOCOL_VERSION = {VERSION}",
        f"MAX_PAYLOAD = {MAX_PAYLOAD}",
        f"UNKNOWN_U32 = 0x{UNKNOWN_U32:X}",
        f"UNKNOWN_U64 = 0x{UNKNOWN_U64:X}",
        f"STRING_MAX_BYTES = {STRING_MAX_BYTES}",
        f"FRAME_HEADER_BYTES = {FRAME_HEADER_BYTES}",
        f"FRAME_CRC_BYTES = {FRAME_CRC_BYTES}",
        f"MAX_RAW_FRAME = {MAX_RAW_FRAME}",
        f"MAX_ENCODED_FRAME = {MAX_ENCODED_FRAME}  # with its 0x00 delimiter",
    ]
    for table in CODE_TABLES:
        lines += ["", "", f"class {table.python_name}(enum.{'IntFlag' if table.is_flags else 'IntEnum'}):"]
        for code in table.codes:
            lines += _comment(code.doc, "    ") if code.doc else []
            lines.append(f"    {code.name} = 0x{code.value:02X}")
    lines += ["", "", '_Code = TypeVar("_Code", bound=enum.IntEnum)', ""]
    lines += _PYTHON_PRELUDE.rstrip("\n").split("\n")
    for layout in sorted(LAYOUTS.values(), key=lambda layout: layout in MESSAGES):  # entries before their messages
        lines += _python_class(layout)
    classes = [layout.python_name for layout in MESSAGES]
    lines += [
        "",
        "",
        f"Message = {' | '.join(classes)}",
        "MESSAGE_CLASSES: dict[int, type[Message]] = {cls.TYPE: cls for cls in (",
        *textwrap.wrap(", ".join(classes) + ",", 116, initial_indent="    ", subsequent_indent="    "),
        ")}",
    ]
    return "\n".join(lines) + "\n"


# --- docs/protocol.md -------------------------------------------------------------------------------------------------


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["|" + "|".join(f" {cell} " if cell else " " for cell in row) + "|" for row in rows]
    return "\n".join(lines)


def _size(f: Field) -> str:
    return str(f.size) if f.type == "sha256" else f.type


def _layout_table(layout: Layout) -> str:
    rows = [(str(layout.offset(f.name)), _size(f), f.description) for f in layout.fields]
    tail = layout.tail
    if tail and tail.kind in ("bytes", "text"):
        rows.append((str(layout.size), f"0..{layout.max_tail_bytes}", tail.doc[0]))
    elif tail and tail.kind == "strings":
        rows += [
            (str(layout.size) if i == 0 else "..", "u8 + text", f"{doc}, length-prefixed")
            for i, doc in enumerate(tail.doc)
        ]
    elif tail and tail.kind == "entries":
        entry = LAYOUTS[tail.entry]
        parts = ", ".join(f"{_size(f)} {f.description}" for f in entry.fields)
        rows.append((str(layout.size), f"{entry.size} x K", f"{tail.doc[0]}: {parts}; K is at most {layout.limit}"))
    return _table(("offset", "size", "field"), rows)


def docs_tables() -> dict[str, str]:
    """The generated tables of docs/protocol.md, by marker name."""
    tables = {
        "frame": _table(
            ("offset", "size", "field"),
            [
                ("0", "1", "message type (section 3)"),
                ("1", "1", "sequence number"),
                ("2", "N", f"payload, 0 <= N <= {MAX_PAYLOAD}"),
                (
                    "2+N",
                    str(FRAME_CRC_BYTES),
                    "CRC32 of bytes 0 .. 2+N-1 (IEEE 802.3, reflected polynomial 0xEDB88320, "
                    "init and final xor 0xFFFFFFFF: the same as `zlib.crc32`)",
                ),
            ],
        ),
        "limits": _table(
            ("limit", "bytes"),
            [
                ("payload", str(MAX_PAYLOAD)),
                ("frame before encoding (type, seq, payload, CRC32)", str(MAX_RAW_FRAME)),
                ("frame encoded", str(MAX_ENCODED_FRAME - 1)),
                ("frame encoded, with its delimiter", str(MAX_ENCODED_FRAME)),
            ],
        ),
        "message-types": _table(
            ("code", "name", "direction", "reply"),
            [
                (
                    f"0x{code.value:02X}",
                    code.name,
                    "board -> host" if code.value & 0x80 else "host -> board",
                    REPLIES.get(code.name, ""),
                )
                for code in MESSAGE_TYPES.codes
            ],
        ),
        "error-codes": _table(
            ("code", "name", "meaning"), [(str(code.value), code.name, code.doc) for code in ERROR_CODES.codes]
        ),
    }
    tables.update({layout.name: _layout_table(layout) for layout in MESSAGES if layout.fields or layout.tail})
    return tables


_MARKED = re.compile(r"(<!-- generated: ([A-Za-z_-]+) [^>]*-->\n)(.*?)(<!-- end generated -->)", re.S)


def render_docs(text: str) -> str:
    """`text` (docs/protocol.md) with every marked table replaced by the one the definition generates."""
    tables = docs_tables()
    found = set()

    def replace(match: re.Match[str]) -> str:
        name = match.group(2)
        if name not in tables:
            raise KeyError(f"docs/protocol.md marks a table {name!r} the definition does not generate")
        found.add(name)
        return match.group(1) + tables[name] + "\n" + match.group(4)

    rendered = _MARKED.sub(replace, text)
    if missing := set(tables) - found:
        raise KeyError(f"docs/protocol.md has no marker for the tables {sorted(missing)}")
    return rendered


# --- the checked-in artifacts -----------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[3]  # a checkout: host/lowtide/device/protocol_spec.py
C_HEADER = ROOT / "firmware" / "protocol" / "lt_protocol.h"
PYTHON_MODULE = Path(__file__).with_name("protocol_messages.py")
DOCS = ROOT / "docs" / "protocol.md"


def generated() -> dict[Path, str]:
    """Each checked-in artifact and the text the definition gives it."""
    return {C_HEADER: c_header(), PYTHON_MODULE: python_module(), DOCS: render_docs(DOCS.read_text())}


if __name__ == "__main__":
    if not (C_HEADER.parent.is_dir() and DOCS.is_file()):
        sys.stderr.write(
            f"lowtide: error: {ROOT}: not a lowtide checkout (the generator writes its firmware/ and docs/)\n"
        )
        sys.exit(2)
    for path, text in generated().items():
        if not path.is_file() or path.read_text() != text:
            write_atomically(path, text)
            sys.stdout.write(f"wrote {path.relative_to(ROOT)}\n")
