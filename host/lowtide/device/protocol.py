"""The lowtide measurement protocol: messages and their framing (docs/protocol.md is the normative text).

A frame on the wire is COBS(type u8 | seq u8 | payload | CRC32 u32 LE) followed by one 0x00 delimiter. The C
codec in firmware/protocol/frame.c produces and accepts exactly the same bytes; tests check one against the other.
Every message is a frozen dataclass with `to_payload()` and `from_payload()`; `decode_message` turns a checked
frame into one of them and rejects payloads whose length or contents disagree with the layout.
"""

from __future__ import annotations

import enum
import struct
import zlib
from dataclasses import dataclass
from typing import ClassVar

from cobs import cobs

from lowtide.device.protocol_spec import (
    COUNTERS,
    ERROR_CODES,
    HELLO_FLAGS,
    LAYOUTS,
    LOG_LEVELS,
    MAX_PAYLOAD,
    MESSAGE_TYPES,
    READ_REGIONS,
    RUN_FLAGS,
    UNKNOWN_U32,
    UNKNOWN_U64,
    VERSION,
)

PROTOCOL_VERSION = VERSION
HEADER_BYTES = 2  # type, seq
CRC_BYTES = 4
MIN_RAW_FRAME = HEADER_BYTES + CRC_BYTES
MAX_RAW_FRAME = HEADER_BYTES + MAX_PAYLOAD + CRC_BYTES
# COBS adds one code byte per started run of 254 bytes; +1 for the 0x00 delimiter. 1011 fits a 1 KB receive buffer.
MAX_ENCODED_FRAME = MAX_RAW_FRAME + MAX_RAW_FRAME // 254 + 1 + 1
DELIMITER = b"\x00"
BOOT_SEQ = 0  # the sequence number of a HELLO sent unasked, after the board starts or resets


class ProtocolError(Exception):
    """A frame or payload that does not follow the protocol. Never escapes to the user as such."""


class VersionMismatch(ProtocolError):
    """A HELLO from a board that speaks another protocol version: only its version field can be trusted."""

    def __init__(self, version: int):
        self.version = version
        super().__init__(f"board speaks protocol version {version}, this host speaks {PROTOCOL_VERSION}")


MessageType = enum.IntEnum("MessageType", MESSAGE_TYPES)
ErrorCode = enum.IntEnum("ErrorCode", ERROR_CODES)
ReadRegion = enum.IntEnum("ReadRegion", READ_REGIONS)  # OUTPUT: an output tensor; OP_CYCLES: u64 per operator
LogLevel = enum.IntEnum("LogLevel", LOG_LEVELS)
Counter = enum.IntEnum("Counter", COUNTERS)  # what RESULT's counter figures count (HELLO's `counter`)
HELLO_FLAG_MODEL_READY = HELLO_FLAGS["MODEL_READY"]
RUN_FLAG_PROFILE_OPS = RUN_FLAGS["PROFILE_OPS"]


@dataclass(frozen=True)
class Frame:
    type: int
    seq: int
    payload: bytes


def encode_frame(message_type: int, seq: int, payload: bytes) -> bytes:
    if len(payload) > MAX_PAYLOAD:
        raise ProtocolError(f"payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    raw = struct.pack("<BB", message_type, seq) + payload
    raw += struct.pack("<I", zlib.crc32(raw))
    return cobs.encode(raw) + DELIMITER


def decode_frame(encoded: bytes) -> Frame:
    """Decode the bytes between two delimiters (without them). Raises ProtocolError on any damage."""
    if len(encoded) > MAX_ENCODED_FRAME - 1:
        raise ProtocolError("frame longer than the protocol allows")
    try:
        raw = cobs.decode(encoded)
    except cobs.DecodeError as exc:
        raise ProtocolError(f"bad COBS encoding: {exc}") from None
    if not MIN_RAW_FRAME <= len(raw) <= MAX_RAW_FRAME:
        raise ProtocolError(f"frame of {len(raw)} bytes")
    body, (crc,) = raw[:-CRC_BYTES], struct.unpack("<I", raw[-CRC_BYTES:])
    if zlib.crc32(body) != crc:
        raise ProtocolError("CRC mismatch")
    return Frame(body[0], body[1], bytes(body[HEADER_BYTES:]))


class FrameDecoder:
    """Splits a byte stream into frames at 0x00. Damaged or oversized frames are counted and skipped, so a receiver
    resynchronises at the next delimiter whatever garbage came before it."""

    def __init__(self) -> None:
        self._pending = bytearray()
        self._overflowed = False
        self.damaged_frames = 0

    def feed(self, data: bytes) -> list[Frame]:
        frames = []
        start = 0
        while True:
            end = data.find(0, start)
            chunk = data[start:] if end < 0 else data[start:end]
            if not self._overflowed:
                self._pending += chunk
                if len(self._pending) > MAX_ENCODED_FRAME - 1:
                    # Keep no more than one frame's worth: the rest of this one is garbage until the next delimiter.
                    self._overflowed = True
                    self._pending.clear()
            if end < 0:
                return frames
            if self._overflowed:
                self.damaged_frames += 1
            elif self._pending:  # an empty frame is a bare delimiter, sent to flush the receiver
                try:
                    frames.append(decode_frame(bytes(self._pending)))
                except ProtocolError:
                    self.damaged_frames += 1
            self._pending.clear()
            self._overflowed = False
            start = end + 1


# --- messages -------------------------------------------------------------------------------------------------------


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _unpack_head(fmt: str, payload: bytes, name: str) -> tuple[tuple, bytes]:
    """A fixed-layout head followed by variable bytes: (head fields, the rest)."""
    fixed = struct.calcsize(fmt)
    if len(payload) < fixed:
        raise ProtocolError(f"{name} payload too short")
    return struct.unpack_from(fmt, payload), payload[fixed:]


def _unpack(fmt: str, payload: bytes, name: str) -> tuple:
    if len(payload) != struct.calcsize(fmt):
        raise ProtocolError(f"{name} payload of {len(payload)} bytes, expected {struct.calcsize(fmt)}")
    return struct.unpack(fmt, payload)


@dataclass(frozen=True)
class HelloRequest:
    TYPE: ClassVar[MessageType] = MessageType.HELLO_REQUEST

    def to_payload(self) -> bytes:
        return b""

    @classmethod
    def from_payload(cls, payload: bytes) -> HelloRequest:
        _unpack("<", payload, "HELLO_REQUEST")
        return cls()


@dataclass(frozen=True)
class Hello:
    TYPE: ClassVar[MessageType] = MessageType.HELLO
    _FIXED: ClassVar[str] = LAYOUTS["HELLO"].format

    protocol_version: int
    model_ready: bool
    input_count: int
    output_count: int
    clock_hz: int  # the CPU clock; 0 = unknown
    counter: Counter  # what RESULT's counter figures count
    max_iterations: int  # the most measured invocations one RUN may ask for
    max_payload: int  # the largest frame payload the board accepts
    arena_capacity_bytes: int
    model_size_bytes: int
    model_sha256: bytes  # 32 bytes, SHA-256 of the .tflite the board runs
    board: str
    runtime: str

    def to_payload(self) -> bytes:
        board, runtime = self.board.encode()[:255], self.runtime.encode()[:255]
        flags = HELLO_FLAG_MODEL_READY if self.model_ready else 0
        return (
            struct.pack(
                self._FIXED,
                self.protocol_version,
                flags,
                self.input_count,
                self.output_count,
                self.clock_hz,
                self.counter,
                self.max_iterations,
                self.max_payload,
                self.arena_capacity_bytes,
                self.model_size_bytes,
                self.model_sha256,
            )
            + bytes([len(board)])
            + board
            + bytes([len(runtime)])
            + runtime
        )

    @classmethod
    def from_payload(cls, payload: bytes) -> Hello:
        fixed = struct.calcsize(cls._FIXED)
        if len(payload) < 2:
            raise ProtocolError("HELLO payload too short")
        # The version comes first in every version, so that a board of another version is recognised as such.
        (version,) = struct.unpack_from("<H", payload)
        if version != PROTOCOL_VERSION:
            raise VersionMismatch(version)
        if len(payload) < fixed + 2:
            raise ProtocolError("HELLO payload too short")
        version, flags, n_in, n_out, hz, counter, max_iterations, max_payload, capacity, size, sha = (
            struct.unpack_from(cls._FIXED, payload))
        try:
            counter = Counter(counter)
        except ValueError:
            raise ProtocolError(f"HELLO counter kind {counter} is not one of {list(COUNTERS)}") from None
        pos = fixed
        strings = []
        for _ in range(2):
            if pos >= len(payload) or pos + 1 + payload[pos] > len(payload):
                raise ProtocolError("HELLO strings truncated")
            strings.append(_text(payload[pos + 1 : pos + 1 + payload[pos]]))
            pos += 1 + payload[pos]
        if pos != len(payload):
            raise ProtocolError("HELLO payload has trailing bytes")
        return cls(version, bool(flags & HELLO_FLAG_MODEL_READY), n_in, n_out, hz, counter, max_iterations,
                   max_payload, capacity, size, sha, *strings)


@dataclass(frozen=True)
class SetInput:
    TYPE: ClassVar[MessageType] = MessageType.SET_INPUT
    _FIXED: ClassVar[str] = LAYOUTS["SET_INPUT"].format
    MAX_CHUNK: ClassVar[int] = MAX_PAYLOAD - LAYOUTS["SET_INPUT"].size

    index: int
    total_bytes: int  # size of the whole input tensor, checked by the board
    offset: int
    data: bytes

    def to_payload(self) -> bytes:
        return struct.pack(self._FIXED, self.index, self.total_bytes, self.offset) + self.data

    @classmethod
    def from_payload(cls, payload: bytes) -> SetInput:
        head, rest = _unpack_head(cls._FIXED, payload, "SET_INPUT")
        return cls(*head, rest)


@dataclass(frozen=True)
class InputAck:
    TYPE: ClassVar[MessageType] = MessageType.INPUT_ACK
    _FIXED: ClassVar[str] = LAYOUTS["INPUT_ACK"].format

    index: int
    offset: int
    length: int

    def to_payload(self) -> bytes:
        return struct.pack(self._FIXED, self.index, self.offset, self.length)

    @classmethod
    def from_payload(cls, payload: bytes) -> InputAck:
        return cls(*_unpack(cls._FIXED, payload, "INPUT_ACK"))


@dataclass(frozen=True)
class Run:
    TYPE: ClassVar[MessageType] = MessageType.RUN
    _FIXED: ClassVar[str] = LAYOUTS["RUN"].format

    warmup: int
    iterations: int
    profile_ops: bool = False

    def to_payload(self) -> bytes:
        return struct.pack(self._FIXED, self.warmup, self.iterations, RUN_FLAG_PROFILE_OPS if self.profile_ops else 0)

    @classmethod
    def from_payload(cls, payload: bytes) -> Run:
        warmup, iterations, flags = _unpack(cls._FIXED, payload, "RUN")
        return cls(warmup, iterations, bool(flags & RUN_FLAG_PROFILE_OPS))


@dataclass(frozen=True)
class Read:
    TYPE: ClassVar[MessageType] = MessageType.READ
    _FIXED: ClassVar[str] = LAYOUTS["READ"].format
    MAX_CHUNK: ClassVar[int] = MAX_PAYLOAD - LAYOUTS["DATA"].size  # what fits in one DATA reply

    region: int
    index: int
    offset: int
    max_length: int

    def to_payload(self) -> bytes:
        return struct.pack(self._FIXED, self.region, self.index, self.offset, self.max_length)

    @classmethod
    def from_payload(cls, payload: bytes) -> Read:
        return cls(*_unpack(cls._FIXED, payload, "READ"))


@dataclass(frozen=True)
class Data:
    TYPE: ClassVar[MessageType] = MessageType.DATA
    _FIXED: ClassVar[str] = LAYOUTS["DATA"].format

    region: int
    index: int
    offset: int
    total_bytes: int
    data: bytes

    def to_payload(self) -> bytes:
        return struct.pack(self._FIXED, self.region, self.index, self.offset, self.total_bytes) + self.data

    @classmethod
    def from_payload(cls, payload: bytes) -> Data:
        head, rest = _unpack_head(cls._FIXED, payload, "DATA")
        return cls(*head, rest)


@dataclass(frozen=True)
class Progress:
    TYPE: ClassVar[MessageType] = MessageType.PROGRESS
    _FIXED: ClassVar[str] = LAYOUTS["PROGRESS"].format

    done: int  # invocations finished, warm-up included
    total: int

    def to_payload(self) -> bytes:
        return struct.pack(self._FIXED, self.done, self.total)

    @classmethod
    def from_payload(cls, payload: bytes) -> Progress:
        return cls(*_unpack(cls._FIXED, payload, "PROGRESS"))


@dataclass(frozen=True)
class OutputSummary:
    nbytes: int
    crc32: int  # zlib/IEEE CRC32 of the output tensor's bytes


@dataclass(frozen=True)
class Result:
    TYPE: ClassVar[MessageType] = MessageType.RESULT
    _FIXED: ClassVar[str] = LAYOUTS["RESULT"].format
    _OUTPUT: ClassVar[str] = LAYOUTS["RESULT_OUTPUT"].format

    warmup: int
    iterations: int
    arena_planned_bytes: int | None  # the runtime's planned (non-persistent) arena head
    arena_used_bytes: int | None  # what the allocator reports as used (MicroInterpreter::arena_used_bytes)
    arena_high_water_bytes: int | None  # painted-arena high-water mark; None where the board cannot paint
    stack_high_water_bytes: int | None  # deepest stack use over the RUN (painted); None where unknown
    stack_size_bytes: int | None
    counter_min: int | None  # per invocation, in HELLO's counter unit (cycles or instructions); None: no counter
    counter_median: int | None
    counter_max: int | None
    us_min: int | None  # per invocation, microseconds of real time; None on an emulator, whose time is not real
    us_median: int | None
    us_max: int | None
    op_cycles_count: int  # entries readable from ReadRegion.OP_CYCLES; 0 = no per-operator profile
    outputs: tuple[OutputSummary, ...]

    def to_payload(self) -> bytes:
        def u32(v):
            return UNKNOWN_U32 if v is None else v

        def u64(v):
            return UNKNOWN_U64 if v is None else v

        head = struct.pack(
            self._FIXED,
            self.warmup,
            self.iterations,
            *(u32(v) for v in (self.arena_planned_bytes, self.arena_used_bytes, self.arena_high_water_bytes,
                               self.stack_high_water_bytes, self.stack_size_bytes)),
            *(u64(v) for v in (self.counter_min, self.counter_median, self.counter_max)),
            *(u32(v) for v in (self.us_min, self.us_median, self.us_max)),
            self.op_cycles_count,
            len(self.outputs),
        )
        return head + b"".join(struct.pack(self._OUTPUT, o.nbytes, o.crc32) for o in self.outputs)

    @classmethod
    def from_payload(cls, payload: bytes) -> Result:
        fixed, per_output = struct.calcsize(cls._FIXED), struct.calcsize(cls._OUTPUT)
        if len(payload) < fixed:
            raise ProtocolError("RESULT payload too short")
        values = struct.unpack_from(cls._FIXED, payload)
        count = values[-1]
        if len(payload) != fixed + count * per_output:
            raise ProtocolError(f"RESULT payload of {len(payload)} bytes for {count} outputs")
        outputs = tuple(
            OutputSummary(*struct.unpack_from(cls._OUTPUT, payload, fixed + i * per_output)) for i in range(count)
        )
        figures32 = [None if v == UNKNOWN_U32 else v for v in values[2:7]]
        counters = [None if v == UNKNOWN_U64 else v for v in values[7:10]]
        us = [None if v == UNKNOWN_U32 else v for v in values[10:13]]
        return cls(values[0], values[1], *figures32, *counters, *us, values[13], outputs)


@dataclass(frozen=True)
class Log:
    TYPE: ClassVar[MessageType] = MessageType.LOG

    level: int
    text: str

    def to_payload(self) -> bytes:
        return bytes([self.level]) + self.text.encode()[: MAX_PAYLOAD - 1]

    @classmethod
    def from_payload(cls, payload: bytes) -> Log:
        if not payload:
            raise ProtocolError("LOG payload empty")
        return cls(payload[0], _text(payload[1:]))


@dataclass(frozen=True)
class Error:
    TYPE: ClassVar[MessageType] = MessageType.ERROR
    _FIXED: ClassVar[str] = LAYOUTS["ERROR"].format

    code: int
    request_type: int  # type of the request that failed, 0 if none
    text: str

    def to_payload(self) -> bytes:
        return struct.pack(self._FIXED, self.code, self.request_type) + self.text.encode()[: MAX_PAYLOAD - 3]

    @classmethod
    def from_payload(cls, payload: bytes) -> Error:
        head, rest = _unpack_head(cls._FIXED, payload, "ERROR")
        return cls(*head, _text(rest))

    def describe(self) -> str:
        try:
            name = ErrorCode(self.code).name
        except ValueError:
            name = f"code {self.code}"
        return f"{name}: {self.text}" if self.text else name


Message = HelloRequest | Hello | SetInput | InputAck | Run | Read | Data | Progress | Result | Log | Error
MESSAGE_CLASSES: dict[int, type] = {
    cls.TYPE: cls for cls in (HelloRequest, Hello, SetInput, InputAck, Run, Read, Data, Progress, Result, Log, Error)
}


def encode_message(message: Message, seq: int) -> bytes:
    return encode_frame(message.TYPE, seq, message.to_payload())


def decode_message(frame: Frame) -> Message:
    cls = MESSAGE_CLASSES.get(frame.type)
    if cls is None:
        raise ProtocolError(f"unknown message type 0x{frame.type:02x}")
    try:
        return cls.from_payload(frame.payload)
    except struct.error as exc:
        raise ProtocolError(f"{cls.TYPE.name} payload: {exc}") from None
