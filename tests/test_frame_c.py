"""The C frame codec (firmware/protocol/frame.c) against the Python one: built on this machine with gcc under
AddressSanitizer and UBSan, frames cross in both directions byte for byte, damaged streams are never accepted, and
a bounded fuzz run (hypothesis-fed; libFuzzer too where clang has it) finds no crash or failed check."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lowtide.device.protocol import MAX_PAYLOAD, Frame, FrameDecoder, encode_frame

FIRMWARE = Path(__file__).resolve().parents[1] / "firmware" / "protocol"
SLOW_OK = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def tools(tmp_path_factory) -> Path:
    if shutil.which("gcc") is None or shutil.which("make") is None:
        pytest.fail("gcc and make are needed to build firmware/protocol on the host")
    out = tmp_path_factory.mktemp("frame_c")
    build = subprocess.run(
        ["make", "-C", str(FIRMWARE), "CC=gcc", f"OUT={out}", "all"], capture_output=True, check=False, text=True
    )
    assert build.returncode == 0, build.stderr
    return out


def c_encode(tools: Path, type_: int, seq: int, payload: bytes) -> bytes:
    run = subprocess.run(
        [tools / "frame_tool", "encode", str(type_), str(seq)], input=payload, capture_output=True, check=False
    )
    assert run.returncode == 0, run.stderr.decode()
    return run.stdout


def c_decode(tools: Path, stream: bytes) -> list[Frame | None]:
    run = subprocess.run([tools / "frame_tool", "decode"], input=stream, capture_output=True, check=False)
    assert run.returncode == 0, run.stderr.decode()
    frames: list[Frame | None] = []
    for line in run.stdout.decode().splitlines():
        fields = line.split()
        frames.append(
            Frame(int(fields[1]), int(fields[2]), bytes.fromhex(fields[3] if len(fields) > 3 else ""))
            if fields[0] == "OK"
            else None
        )
    return frames


EDGE_PAYLOADS = [
    b"",
    b"\x00",
    b"\x00" * 1000,
    bytes(range(1, 255)),
    bytes(range(1, 255)) + b"\x00",
    bytes([1]) * 252,
    bytes([1]) * 253,
    bytes([1]) * 254,
    bytes(range(1, 256)) * 3 + bytes(range(1, 236)),
]


@pytest.mark.parametrize("payload", EDGE_PAYLOADS, ids=lambda p: f"{len(p)}B")
def test_c_encoder_writes_the_python_encoders_bytes(tools, payload):
    assert c_encode(tools, 0x84, 9, payload) == encode_frame(0x84, 9, payload)


def test_c_encoder_refuses_a_payload_over_the_limit(tools):
    run = subprocess.run(
        [tools / "frame_tool", "encode", "1", "1"], input=bytes(MAX_PAYLOAD + 1), capture_output=True, check=False
    )
    assert run.returncode == 1 and b"does not fit" in run.stderr


@settings(SLOW_OK, max_examples=40)
@given(st.integers(0, 255), st.integers(0, 255), st.binary(max_size=MAX_PAYLOAD))
def test_frames_cross_between_c_and_python(tools, type_, seq, payload):
    from_c = c_encode(tools, type_, seq, payload)
    assert FrameDecoder().feed(from_c) == [Frame(type_, seq, payload)]
    assert c_decode(tools, encode_frame(type_, seq, payload)) == [Frame(type_, seq, payload)]


@settings(SLOW_OK, max_examples=60)
@given(
    st.lists(
        st.tuples(st.integers(0, 255), st.integers(0, 255), st.binary(max_size=MAX_PAYLOAD)), min_size=1, max_size=3
    ),
    st.data(),
)
def test_c_decoder_agrees_with_python_on_damaged_streams(tools, originals, data):
    stream = bytearray(b"".join(encode_frame(*f) for f in originals))
    for _ in range(data.draw(st.integers(1, 3))):
        position = data.draw(st.integers(0, len(stream) - 1))
        stream[position] ^= 1 << data.draw(st.integers(0, 7))
    garbage = data.draw(st.binary(max_size=1200))
    received = garbage + b"\x00" + bytes(stream) + b"\x00"
    python_decoder = FrameDecoder()
    python_frames = python_decoder.feed(received)
    c_results = c_decode(tools, received)
    assert [f for f in c_results if f is not None] == python_frames
    assert c_results.count(None) == python_decoder.damaged_frames
    remaining = iter([Frame(*f) for f in originals])
    assert all(any(frame == w for w in remaining) for frame in python_frames)  # only what was sent, in order


def test_c_decoder_resynchronises_after_an_overlong_run(tools):
    good = encode_frame(0x83, 3, struct.pack("<II", 1, 2))
    stream = b"\x05" * 5000 + b"\x00" + good
    assert c_decode(tools, stream) == [None, Frame(0x83, 3, struct.pack("<II", 1, 2))]


@settings(SLOW_OK, max_examples=200)
@given(st.lists(st.binary(max_size=2100), min_size=1, max_size=20))
def test_fuzz_target_under_sanitizers_on_hypothesis_inputs(tools, inputs):
    records = b"".join(struct.pack("<I", len(i)) + i for i in inputs)
    run = subprocess.run([tools / "fuzz_main"], input=records, capture_output=True, check=False, timeout=60)
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    assert run.stdout.decode().strip() == f"{len(inputs)} inputs ok"


def test_libfuzzer_run_finds_nothing(tmp_path):
    if shutil.which("clang") is None:
        pytest.skip("clang is not installed (apt-get install clang libclang-rt-14-dev); the gcc harness above runs")
    build = subprocess.run(
        ["make", "-C", str(FIRMWARE), f"OUT={tmp_path}", f"{tmp_path}/fuzz_libfuzzer"],
        capture_output=True,
        check=False,
        text=True,
    )
    if build.returncode != 0 and "libclang_rt.fuzzer" in build.stderr:
        pytest.skip("clang has no libFuzzer runtime (apt-get install libclang-rt-14-dev)")
    assert build.returncode == 0, build.stderr
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i, payload in enumerate(EDGE_PAYLOADS):
        (corpus / f"seed{i}").write_bytes(encode_frame(0x84, i, payload))
    run = subprocess.run(
        [tmp_path / "fuzz_libfuzzer", "-runs=100000", "-max_total_time=20", "-max_len=2100", "-seed=1", str(corpus)],
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Done" in run.stderr
