"""The lowtide measurement protocol: framing and message dispatch (docs/protocol.md is the normative text).

A frame on the wire is COBS(type u8 | seq u8 | payload | CRC32 u32 LE) followed by one 0x00 delimiter. The C
codec in firmware/protocol/frame.c produces and accepts exactly the same bytes; tests check one against the other.
The messages, codes and limits are generated from the protocol's one definition (protocol_spec.py) into
protocol_messages.py and are importable from here; `decode_message` turns a checked frame into one of them.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from cobs import cobs

from lowtide.device.protocol_messages import (
    FRAME_CRC_BYTES,
    FRAME_HEADER_BYTES,
    MAX_ENCODED_FRAME,
    MAX_PAYLOAD,
    MAX_RAW_FRAME,
    MESSAGE_CLASSES,
    PROTOCOL_VERSION,
    UNKNOWN_U32,
    UNKNOWN_U64,
    Counter,
    Data,
    Error,
    ErrorCode,
    Hello,
    HelloFlag,
    HelloRequest,
    InputAck,
    Log,
    LogLevel,
    Message,
    MessageType,
    OutputSummary,
    Progress,
    ProtocolError,
    Read,
    ReadRegion,
    Result,
    Run,
    RunFlag,
    SetInput,
    VersionMismatch,
)

__all__ = [
    "BOOT_SEQ",
    "DELIMITER",
    "MAX_ENCODED_FRAME",
    "MAX_PAYLOAD",
    "MAX_RAW_FRAME",
    "MESSAGE_CLASSES",
    "MIN_RAW_FRAME",
    "PROTOCOL_VERSION",
    "UNKNOWN_U32",
    "UNKNOWN_U64",
    "Counter",
    "Data",
    "Error",
    "ErrorCode",
    "Frame",
    "FrameDecoder",
    "Hello",
    "HelloFlag",
    "HelloRequest",
    "InputAck",
    "Log",
    "LogLevel",
    "Message",
    "MessageType",
    "OutputSummary",
    "Progress",
    "ProtocolError",
    "Read",
    "ReadRegion",
    "Result",
    "Run",
    "RunFlag",
    "SetInput",
    "VersionMismatch",
    "decode_frame",
    "decode_message",
    "describe_error",
    "encode_frame",
    "encode_message",
]

MIN_RAW_FRAME = FRAME_HEADER_BYTES + FRAME_CRC_BYTES
DELIMITER = b"\x00"
BOOT_SEQ = 0  # the sequence number of a HELLO sent unasked, after the board starts or resets


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
    encoded: bytes = cobs.encode(raw)
    return encoded + DELIMITER


def decode_frame(encoded: bytes) -> Frame:
    """Decode the bytes between two delimiters (without them). Raises ProtocolError on any damage."""
    if len(encoded) > MAX_ENCODED_FRAME - 1:
        raise ProtocolError("frame longer than the protocol allows")
    try:
        raw: bytes = cobs.decode(encoded)
    except cobs.DecodeError as exc:
        raise ProtocolError(f"bad COBS encoding: {exc}") from None
    if not MIN_RAW_FRAME <= len(raw) <= MAX_RAW_FRAME:
        raise ProtocolError(f"frame of {len(raw)} bytes")
    body, (crc,) = raw[:-FRAME_CRC_BYTES], struct.unpack("<I", raw[-FRAME_CRC_BYTES:])
    if zlib.crc32(body) != crc:
        raise ProtocolError("CRC mismatch")
    return Frame(body[0], body[1], bytes(body[FRAME_HEADER_BYTES:]))


class FrameDecoder:
    """Splits a byte stream into frames at 0x00. Damaged or oversized frames are counted and skipped, so a receiver
    resynchronises at the next delimiter whatever garbage came before it."""

    def __init__(self) -> None:
        self._pending = bytearray()
        self._overflowed = False
        self.damaged_frames = 0

    def feed(self, data: bytes) -> list[Frame]:
        frames: list[Frame] = []
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


def encode_message(message: Message, seq: int) -> bytes:
    return encode_frame(message.TYPE, seq, message.encode())


def decode_message(frame: Frame) -> Message:
    cls = MESSAGE_CLASSES.get(frame.type)
    if cls is None:
        raise ProtocolError(f"unknown message type 0x{frame.type:02x}")
    return cls.decode(frame.payload)


def describe_error(error: Error) -> str:
    """An ERROR as a person reads it: its code's name and its text."""
    try:
        name = ErrorCode(error.code).name
    except ValueError:
        name = f"code {error.code}"
    return f"{name}: {error.text}" if error.text else name
