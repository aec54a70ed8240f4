"""The protocol's messages and framing (docs/protocol.md): the C layout header, the host's message classes and the
document's tables generated from the one definition, round trips of every message type, sizes within a 1 KB receive buffer, a clear error for a board of protocol
version 1, and a frame decoder that survives any byte stream and never accepts a damaged frame."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lowtide.device import protocol_spec
from lowtide.device.protocol import (
    MAX_ENCODED_FRAME,
    MAX_PAYLOAD,
    PROTOCOL_VERSION,
    Counter,
    Data,
    Error,
    ErrorCode,
    Frame,
    FrameDecoder,
    Hello,
    HelloRequest,
    InputAck,
    Log,
    LogLevel,
    MessageType,
    OutputSummary,
    Progress,
    ProtocolError,
    Read,
    ReadRegion,
    Result,
    Run,
    SetInput,
    VersionMismatch,
    decode_frame,
    decode_message,
    encode_frame,
    encode_message,
)

SHA = bytes(range(32))
EVERY_MESSAGE = [
    HelloRequest(),
    Hello(
        PROTOCOL_VERSION,
        True,
        2,
        3,
        480_000_000,
        Counter.CYCLES,
        256,
        1000,
        512 * 1024,
        300_000,
        SHA,
        "stm32h743",
        "tflite-micro cmsis-nn",
    ),
    Hello(PROTOCOL_VERSION, False, 1, 1, 0, Counter.NONE, 0xFFFFFFFF, 1000, 0, 0, SHA, "", ""),
    SetInput(1, 150_528, 990, bytes(range(256)) * 3 + b"\x00" * 223),
    SetInput(0, 0, 0, b""),
    InputAck(1, 990, 991),
    Run(3, 1000, True),
    Run(0, 1, False),
    Read(ReadRegion.OUTPUT, 2, 1978, 989),
    Data(ReadRegion.OP_CYCLES, 0, 8, 1304, b"\x01\x00" * 100),
    Progress(7, 11),
    Result(
        1,
        10,
        55_296,
        85_264,
        60_000,
        1_804,
        65_536,
        1000,
        1500,
        2**40,
        20,
        22,
        36,
        31,
        (OutputSummary(4, 0xDEADBEEF), OutputSummary(1000, 0)),
    ),
    Result(0, 1, None, None, None, None, None, None, None, None, None, None, None, 0, ()),
    Log(LogLevel.WARNING, "arena nearly full: 99 % ✓"),
    Error(ErrorCode.BAD_RANGE, MessageType.SET_INPUT, "input 0 has 9216 bytes"),
]


def frames_of(stream: bytes) -> list[Frame]:
    return FrameDecoder().feed(stream)


@pytest.mark.parametrize("message", EVERY_MESSAGE, ids=lambda m: type(m).__name__)
def test_every_message_round_trips_through_a_frame(message):
    encoded = encode_message(message, seq=200)
    assert encoded.endswith(b"\x00") and b"\x00" not in encoded[:-1]
    assert len(encoded) <= MAX_ENCODED_FRAME
    (frame,) = frames_of(encoded)
    assert (frame.type, frame.seq) == (message.TYPE, 200)
    assert decode_message(frame) == message


def test_the_largest_frame_fits_a_1kb_receive_buffer_and_a_larger_payload_is_refused():
    worst = bytes(range(1, 256)) * 4  # no zero bytes: COBS adds the most code bytes
    encoded = encode_frame(MessageType.DATA, 1, worst[:MAX_PAYLOAD])
    assert len(encoded) <= MAX_ENCODED_FRAME <= 1024
    assert frames_of(encoded)[0].payload == worst[:MAX_PAYLOAD]
    with pytest.raises(ProtocolError):
        encode_frame(MessageType.DATA, 1, bytes(MAX_PAYLOAD + 1))
    assert SetInput.MAX_CHUNK + 9 == MAX_PAYLOAD and Data.MAX_CHUNK + 11 == MAX_PAYLOAD


def test_frame_layout_is_type_seq_payload_crc32_le():
    raw = bytes([0x84, 7]) + b"\x01\x02"
    assert decode_frame(encode_frame(0x84, 7, b"\x01\x02")[:-1]) == Frame(0x84, 7, b"\x01\x02")
    from cobs import cobs

    assert cobs.decode(encode_frame(0x84, 7, b"\x01\x02")[:-1]) == raw + struct.pack("<I", zlib.crc32(raw))


ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = {
    "firmware/protocol/lt_protocol.h": protocol_spec.c_header,
    "host/lowtide/device/protocol_messages.py": protocol_spec.python_module,
    "docs/protocol.md": lambda: protocol_spec.render_docs((ROOT / "docs" / "protocol.md").read_text()),
}


@pytest.mark.parametrize("artifact", ARTIFACTS)
def test_the_checked_in_artifact_is_the_one_the_definition_generates(artifact):
    assert (ROOT / artifact).read_text() == ARTIFACTS[artifact](), (
        f"{artifact} disagrees with host/lowtide/device/protocol_spec.py: regenerate it with "
        "`python -m lowtide.device.protocol_spec`"
    )


def test_the_generator_writes_exactly_the_checked_in_artifacts():
    assert {str(path.relative_to(ROOT)) for path in protocol_spec.generated()} == set(ARTIFACTS)


def test_a_document_without_a_tables_marker_is_refused():
    text = (ROOT / "docs" / "protocol.md").read_text()
    without_result = text.replace("<!-- generated: RESULT ", "<!-- RESULT ")
    with pytest.raises(KeyError, match="RESULT"):
        protocol_spec.render_docs(without_result)


def test_the_documents_tables_state_the_layouts():
    """A few rows as a reader finds them, typed here: the generated tables carry the definition's offsets."""
    text = (ROOT / "docs" / "protocol.md").read_text()
    for row in (
        "| 56 | u8 + text | board name",
        "| 9 | 0..991 | the chunk's bytes |",
        "| 66 | u8 | number of outputs K |",
        "| 67 | 8 x K | per output: u32 size in bytes, u32 zlib/IEEE CRC32 of its bytes (the output digest); "
        "K is at most 116 |",
        "| 0x03 | RUN | host -> board | PROGRESS*, then RESULT |",
        "| frame encoded, with its delimiter | 1011 |",
        "| 5 | MODEL_NOT_READY |",
    ):
        assert row in text


def test_the_codec_and_the_header_share_every_layout():
    """The Python messages pack exactly the fields the definition lists, at its offsets (HELLO's board name right
    after the fixed head, RESULT's outputs right after its own)."""
    hello = EVERY_MESSAGE[1].encode()
    assert len(hello) == protocol_spec.LAYOUTS["HELLO"].size + 1 + len("stm32h743") + 1 + len("tflite-micro cmsis-nn")
    at = protocol_spec.LAYOUTS["HELLO"].offset
    assert struct.unpack_from("<I", hello, at("max_iterations")) == (256,)
    assert struct.unpack_from("<H", hello, at("max_payload")) == (1000,)
    assert hello[at("counter")] == protocol_spec.COUNTERS["CYCLES"]
    result = EVERY_MESSAGE[11].encode()
    at = protocol_spec.LAYOUTS["RESULT"].offset
    assert struct.unpack_from("<II", result, at("stack_high_water_bytes")) == (1_804, 65_536)
    assert struct.unpack_from("<I", result, protocol_spec.LAYOUTS["RESULT"].size) == (4,)
    assert {m.name: m.value for m in MessageType} == {c.name: c.value for c in protocol_spec.MESSAGE_TYPES.codes}
    assert MessageType.RESULT == 0x84 and Counter.INSTRUCTIONS == 2 and ErrorCode.BAD_ARGUMENT == 8


def test_a_version_1_board_gets_a_clear_version_error():
    """A v1 HELLO as v1 firmware sent it (version 1, then its own layout): the host reads the version and stops."""
    v1_hello = struct.pack("<HBBBIII32s", 1, 1, 1, 1, 1_000_000_000, 4 << 20, 20_000, SHA) + b"\x07qemu-m4\x08compiled"
    with pytest.raises(VersionMismatch, match=f"board speaks protocol version 1, this host speaks {PROTOCOL_VERSION}"):
        decode_message(Frame(MessageType.HELLO, 0, v1_hello))


def test_a_hello_of_another_version_is_recognised_from_its_first_two_bytes():
    future = struct.pack("<H", PROTOCOL_VERSION + 1) + b"whatever a later version carries"
    with pytest.raises(VersionMismatch, match=f"version {PROTOCOL_VERSION + 1}, this host speaks {PROTOCOL_VERSION}"):
        decode_message(Frame(MessageType.HELLO, 0, future))


FIXED_LENGTH = [m for m in EVERY_MESSAGE if isinstance(m, (HelloRequest, Hello, InputAck, Run, Read, Progress, Result))]
VARIABLE_TAIL = {SetInput: 9, Data: 11, Log: 1, Error: 3}  # bytes of fixed header before the variable part


@pytest.mark.parametrize("message", FIXED_LENGTH, ids=lambda m: type(m).__name__)
def test_payloads_of_the_wrong_length_are_rejected(message):
    payload = message.encode()
    for damaged in ([payload[:-1]] if payload else []) + [payload + b"\x00"]:
        with pytest.raises(ProtocolError):
            decode_message(Frame(message.TYPE, 1, damaged))


@pytest.mark.parametrize(
    "message", [m for m in EVERY_MESSAGE if type(m) in VARIABLE_TAIL], ids=lambda m: type(m).__name__
)
def test_payloads_cut_inside_their_fixed_header_are_rejected(message):
    header = VARIABLE_TAIL[type(message)]
    with pytest.raises(ProtocolError):
        decode_message(Frame(message.TYPE, 1, message.encode()[: header - 1]))


def test_a_hello_with_an_unknown_counter_kind_is_a_protocol_error():
    payload = bytearray(EVERY_MESSAGE[1].encode())
    payload[protocol_spec.LAYOUTS["HELLO"].offset("counter")] = 7
    with pytest.raises(ProtocolError, match="HELLO counter 7 is not one of"):
        decode_message(Frame(MessageType.HELLO, 1, bytes(payload)))


def test_texts_and_strings_are_cut_to_fit_and_unknown_figures_are_all_ones():
    assert len(Log(LogLevel.INFO, "x" * 2000).encode()) == MAX_PAYLOAD
    assert len(Error(ErrorCode.INTERNAL, 0, "é" * 1000).encode()) == MAX_PAYLOAD
    hello = Hello(PROTOCOL_VERSION, True, 1, 1, 0, Counter.NONE, 1, 1000, 0, 0, SHA, "b" * 300, "r")
    assert decode_message(Frame(MessageType.HELLO, 1, hello.encode())).board == "b" * 255
    unknown = EVERY_MESSAGE[12].encode()
    assert unknown[8:28] == b"\xff" * 20 and unknown[28:52] == b"\xff" * 24 and unknown[52:64] == b"\xff" * 12


def test_unknown_type_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="0x42"):
        decode_message(Frame(0x42, 1, b""))


def test_decoder_resynchronises_after_garbage_an_overlong_run_and_a_truncated_frame():
    good = [encode_message(Progress(i, 9), i) for i in range(1, 4)]
    stream = (
        b"boot banner \xff\xfe garbage\x00"
        + good[0]
        + bytes([7]) * (MAX_ENCODED_FRAME + 50)  # no delimiter for longer than any frame
        + b"\x00"
        + good[1][: len(good[1]) // 2]  # a frame cut off by a reset ...
        + good[2]  # ... runs into the next one: both parts are one damaged frame
        + b"\x00\x00"
        + good[2]
    )
    decoder = FrameDecoder()
    frames = decoder.feed(stream)
    assert [decode_message(f) for f in frames] == [Progress(1, 9), Progress(3, 9)]
    assert decoder.damaged_frames == 3


def test_decoder_accepts_a_stream_split_at_every_byte():
    stream = b"".join(encode_message(m, i + 1) for i, m in enumerate(EVERY_MESSAGE))
    decoder = FrameDecoder()
    frames = [f for i in range(len(stream)) for f in decoder.feed(stream[i : i + 1])]
    assert [decode_message(f) for f in frames] == EVERY_MESSAGE
    assert decoder.damaged_frames == 0


frames_strategy = st.lists(
    st.tuples(st.integers(0, 255), st.integers(0, 255), st.binary(max_size=MAX_PAYLOAD)), min_size=1, max_size=4
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=4000))
def test_decoder_survives_any_bytes(data):
    decoder = FrameDecoder()
    for frame in decoder.feed(data):  # random bytes pass the CRC with odds of 2**-32 per frame
        assert len(frame.payload) <= MAX_PAYLOAD
        assert encode_frame(frame.type, frame.seq, frame.payload)[:-1] in data


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames_strategy, st.data())
def test_decoder_never_accepts_a_damaged_frame(originals, data):
    stream = bytearray(b"".join(encode_frame(*f) for f in originals))
    damage = data.draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
    position = data.draw(st.integers(0, len(stream) - 1))
    if damage == "flip":
        stream[position] ^= 1 << data.draw(st.integers(0, 7))
    elif damage == "truncate":
        del stream[position:]
    elif damage == "insert":
        stream[position:position] = data.draw(st.binary(min_size=1, max_size=8))
    else:
        del stream[position]
    decoder = FrameDecoder()
    accepted = decoder.feed(bytes(stream) + b"\x00")
    wanted = [Frame(*f) for f in originals]
    # Each frame that comes out is one that went in, in order; damage costs at most the frames it touched.
    remaining = iter(wanted)
    assert all(any(frame == w for w in remaining) for frame in accepted)  # a subsequence of what was sent
    original = b"".join(encode_frame(*f) for f in originals)
    # Damage costs at least one frame, unless it only touched delimiters at the end (which the test appends again)
    # or inserted zero bytes between frames (harmless empty frames).
    if damage != "insert" and bytes(stream).rstrip(b"\x00") != original.rstrip(b"\x00"):
        assert len(accepted) < len(originals)
