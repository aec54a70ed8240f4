"""`lowtide measure` against the host-tflm board: a real TFLM interpreter in a subprocess, over a real TCP socket or
pty, through the same transport code a board on a serial port uses. Figures are checked against the oracle; links
that lose, repeat or damage bytes, boards that never answer, restart or speak another version are checked to end in
correct figures or a clear error within the timeout; no board process outlives its measurement."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import SHARED_MODELS, shared_model_names
from lowtide import oracle
from lowtide.device.boards import BOARDS, Board, HostTflmBoard, register_board
from lowtide.device.measure import MeasureResult
from lowtide.device.protocol import (
    BOOT_SEQ,
    PROTOCOL_VERSION,
    Counter,
    FrameDecoder,
    Hello,
    MessageType,
    encode_frame,
    encode_message,
)
from lowtide.device.transport import Link, open_link
from lowtide.errors import LowtideError
from lowtide.memory import tflm_plan
from lowtide.pipeline.firmware import host_program
from lowtide.pipeline.measure import measure
from lowtide.settings import read_settings
from lowtide.validation import load_model

PERSON = SHARED_MODELS / "tflm_person_detect.tflite"  # 9 KB input: ten SET_INPUT chunks
HELLO_WORLD = SHARED_MODELS / "tflm_hello_world_int8.tflite"
CLI = [sys.executable, "-c", "import lowtide.cli.measure_cmd; from lowtide.cli import main; main()", "measure"]


def board_processes() -> list[int]:
    """host-tflm processes on this machine (any parent): none may be left behind by a measurement."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if b"lowtide.pipeline.host_tflm" in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
    return found


@pytest.fixture(autouse=True)
def no_orphans():
    before = set(board_processes())
    yield
    deadline = time.monotonic() + 5  # a board that was told to stop may take a moment to go
    while left := [p for p in set(board_processes()) - before if _state(p) not in ("Z", "gone")]:
        assert time.monotonic() < deadline, f"host-tflm board processes {left} outlived their measurement"
        time.sleep(0.1)


def expected_figures(path: Path, seed: int = 0) -> tuple[int, int]:
    graph = load_model(path)
    run = oracle.run(path.read_bytes(), oracle.random_inputs(graph, seed))
    return run.total_bytes, tflm_plan(graph).head_bytes


def check_against_oracle(result: MeasureResult, path: Path, iterations: int) -> None:
    total, planned = expected_figures(path, result.seed)
    assert result.arena_used_bytes == total
    assert result.arena_planned_bytes == planned
    assert result.board_planned_bytes == oracle.run(path.read_bytes()).head_bytes
    assert result.arena_high_water_bytes is None
    assert result.outputs_match is True and result.mismatched_outputs == ()
    assert result.latency.unit == "us" and result.latency.iterations == iterations
    assert 0 <= result.latency.min <= result.latency.median <= result.latency.max
    assert result.board == "host-tflm" and result.runtime.startswith("tflite-micro")
    assert result.model_sha256 == load_model(path).sha256


@pytest.mark.parametrize("port", [None, "pty"], ids=["tcp", "pty"])
def test_measure_reports_tflm_figures_and_matching_outputs(port):
    result = measure(PERSON, "host-tflm", port, iterations=3, warmup=1, timeout=30, seed=5)
    check_against_oracle(result, PERSON, iterations=3)
    assert result.port.startswith("socket://127.0.0.1:") if port is None else result.port.startswith("/dev/pts/")
    assert (result.damaged_frames, result.resends) == (0, 0)


def test_cli_json_prints_one_object_with_the_documented_fields():
    run = subprocess.run(
        [
            *CLI,
            str(PERSON),
            "--board",
            "host-tflm",
            "--iterations",
            "2",
            "--warmup",
            "0",
            "--seed",
            "3",
            "--timeout",
            "30",
            "--json",
        ],
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    total, planned = expected_figures(PERSON, seed=3)
    assert data["board"] == "host-tflm" and data["runtime"].startswith("tflite-micro")
    assert (data["arena_used_bytes"], data["arena_planned_bytes"]) == (total, planned)
    assert data["arena_high_water_bytes"] is None
    assert data["latency"]["unit"] == "us" and data["latency"]["iterations"] == 2
    assert data["latency"]["min"] <= data["latency"]["median"] <= data["latency"]["max"]
    assert data["outputs_match"] is True


def test_cli_table_and_one_line_errors():
    run = subprocess.run(
        [*CLI, str(HELLO_WORLD), "--iterations", "2", "--timeout", "30"],
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "120"},
    )
    assert run.returncode == 0, run.stderr
    assert "arena used" in run.stdout and f"{expected_figures(HELLO_WORLD)[0]:,} B" in run.stdout
    assert "cannot paint" in run.stdout and "yes" in run.stdout
    bad = subprocess.run(
        [*CLI, str(HELLO_WORLD), "--board", "stm32-nonexistent"],
        capture_output=True,
        check=False,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2
    message = bad.stderr.strip()
    assert message.startswith("lowtide: error: unknown board 'stm32-nonexistent'; known boards: ")
    assert "host-tflm" in message and "serial" in message and len(message.splitlines()) == 1


@pytest.mark.slow
@pytest.mark.parametrize("name", shared_model_names())
def test_every_shared_model_measures_as_the_oracle_says(name):
    path = SHARED_MODELS / f"{name}.tflite"
    result = measure(path, "host-tflm", iterations=1, warmup=0, timeout=60)
    check_against_oracle(result, path, iterations=1)


def test_large_input_is_sent_in_chunks_quickly():
    path = SHARED_MODELS / "mcunetv2_large.tflite"  # a 602,112-byte float input: 608 chunks
    upload: list[float] = []

    def progress(phase: str, done: int, total: int) -> None:
        if phase == "upload":
            upload.append(time.monotonic())
            assert total == 602_112

    result = measure(path, "host-tflm", iterations=1, warmup=0, timeout=60, progress=progress)
    assert len(upload) == -(-602_112 // 991)
    assert upload[-1] - upload[0] < 10.0  # measured: 0.1 s over localhost TCP
    check_against_oracle(result, path, iterations=1)


# --- links that misbehave --------------------------------------------------------------------------------------------


class FaultyLink:
    """Passes bytes both ways, dropping, repeating or bit-flipping each with the given odds (seeded)."""

    def __init__(self, inner: Link, drop: float, duplicate: float, corrupt: float, seed: int = 1):
        self.inner, self.name = inner, inner.name
        self.odds = (drop, duplicate, corrupt)
        self.rng = random.Random(seed)
        self.faults = 0

    def _mangle(self, data: bytes) -> bytes:
        drop, duplicate, corrupt = self.odds
        out = bytearray()
        for byte in data:
            roll = self.rng.random()
            if roll < drop:
                self.faults += 1
                continue
            if roll < drop + duplicate:
                self.faults += 1
                out.append(byte)
            elif roll < drop + duplicate + corrupt:
                self.faults += 1
                byte ^= 1 << self.rng.randrange(8)
            out.append(byte)
        return bytes(out)

    def write(self, data: bytes) -> None:
        self.inner.write(self._mangle(data))

    def read(self, timeout: float) -> bytes:
        return self._mangle(self.inner.read(timeout))

    def close(self) -> None:
        self.inner.close()


class WrappedHostTflm(Board):
    """host-tflm seen through a link wrapper: how the tests put faults between host and board."""

    description = "test only"

    def __init__(self, name: str, wrap):
        self.name, self.wrap, self.links = name, wrap, []

    def lock_resource(self, port, settings):
        return None

    @contextlib.contextmanager
    def connect(self, connection):
        # Not a HostTflmBoard, so the pipeline hands it no program: it gets the one the host-tflm board would.
        program = host_program(connection.model_path, connection.port)
        with HostTflmBoard().connect(dataclasses.replace(connection, image=program)) as link:
            wrapped = self.wrap(link)
            self.links.append(wrapped)
            yield wrapped


@pytest.fixture
def wrapped_board():
    names = []

    def make(wrap) -> WrappedHostTflm:
        board = WrappedHostTflm(f"test-wrapped-{len(names)}", wrap)
        register_board(board)
        names.append(board.name)
        return board

    yield make
    for name in names:
        BOARDS.pop(name)


def test_a_link_that_drops_repeats_and_corrupts_bytes_still_gives_correct_figures(wrapped_board):
    board = wrapped_board(lambda link: FaultyLink(link, drop=2e-4, duplicate=2e-4, corrupt=2e-4, seed=7))
    result = measure(PERSON, board.name, iterations=3, warmup=1, timeout=10, seed=2)
    check_against_oracle(result, PERSON, iterations=3)
    assert board.links[0].faults > 0 and result.resends > 0  # the faults happened, and were recovered from


def test_a_link_too_damaged_to_use_fails_within_the_timeout_naming_the_port(wrapped_board):
    board = wrapped_board(lambda link: FaultyLink(link, drop=0.02, duplicate=0.02, corrupt=0.02, seed=3))
    timeout = 3.0
    start = time.monotonic()
    with pytest.raises(LowtideError) as error:
        measure(PERSON, board.name, iterations=1, timeout=timeout)
    waited = time.monotonic() - start
    message = str(error.value)
    assert message.startswith("socket://127.0.0.1:") and f"within {timeout:g} s" in message
    assert "damaged frames received" in message
    assert waited < timeout + 15  # board start-up plus one bounded wait, not a retry loop without end


class InjectedReset:
    """Delivers extra unasked HELLOs (the board 'restarting') once the host has started sending inputs."""

    def __init__(self, inner: Link, resets: int):
        self.inner, self.name, self.resets = inner, inner.name, resets
        self.hello: bytes | None = None
        self.hello_requests = 0
        self._pending = b""
        self._decoder = FrameDecoder()

    def write(self, data: bytes) -> None:
        for frame in self._decoder.feed(data):
            self.hello_requests += frame.type == MessageType.HELLO_REQUEST
            if frame.type == MessageType.SET_INPUT and self.resets and self.hello:
                self.resets -= 1
                self.inner.write(data)
                self._pending = self.hello
                return
        self.inner.write(data)

    def read(self, timeout: float) -> bytes:
        pending, self._pending = self._pending, b""
        data = self.inner.read(timeout)
        for frame in FrameDecoder().feed(data):
            if frame.type == MessageType.HELLO and frame.seq == BOOT_SEQ:
                self.hello = encode_message(Hello.decode(frame.payload), BOOT_SEQ)
        return pending + data

    def close(self) -> None:
        self.inner.close()


def test_a_board_reset_mid_session_restarts_the_measurement_once(wrapped_board):
    board = wrapped_board(lambda link: InjectedReset(link, resets=1))
    result = measure(PERSON, board.name, iterations=2, timeout=10)
    check_against_oracle(result, PERSON, iterations=2)
    assert board.links[0].hello_requests == 2


def test_a_board_that_keeps_resetting_is_an_error(wrapped_board):
    board = wrapped_board(lambda link: InjectedReset(link, resets=2))
    with pytest.raises(LowtideError, match="board restarted \\(sent a new HELLO\\) while sending input 0"):
        measure(PERSON, board.name, iterations=1, timeout=10)


@contextlib.contextmanager
def fake_board(reply: bytes | None):
    """A TCP 'board' on localhost that reads everything and answers each frame with `reply` (None: never answers)."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve():
        server.settimeout(10)
        with contextlib.suppress(OSError), server.accept()[0] as conn:
            conn.settimeout(0.1)
            while not stop.is_set():
                try:
                    data = conn.recv(4096)
                except TimeoutError:
                    continue
                if not data:
                    return
                if reply is not None and b"\x00" in data:
                    conn.sendall(b"\x00garbage before the reply\x00" + reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"socket://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        server.close()
        thread.join(timeout=5)


def test_a_board_that_never_answers_is_a_clear_error_within_the_timeout():
    with fake_board(reply=None) as url:
        start = time.monotonic()
        with pytest.raises(LowtideError) as error:
            measure(HELLO_WORLD, "serial", url, timeout=1.5)
        waited = time.monotonic() - start
    assert str(error.value).startswith(f"{url}: no HELLO from the board within 1.5 s while waiting for the board")
    assert 1.5 <= waited < 4.0


def test_a_board_of_another_protocol_version_is_named_as_such():
    future_hello = encode_frame(MessageType.HELLO, 1, (PROTOCOL_VERSION + 1).to_bytes(2, "little") + b"later layout")
    with fake_board(reply=future_hello) as url, pytest.raises(LowtideError) as error:
        measure(HELLO_WORLD, "serial", url, timeout=5)
    assert f"board speaks protocol version {PROTOCOL_VERSION + 1}, this host speaks {PROTOCOL_VERSION}" in str(
        error.value
    )


def test_a_version_1_board_gets_one_line_naming_both_versions_and_the_fix():
    """v1 firmware's HELLO (its own layout after the version) ends the measurement at once."""
    v1_hello = struct.pack("<HBBBIII32s", 1, 1, 1, 1, 0, 1 << 16, 1000, bytes(32)) + b"\x04fake\x04none"
    run = subprocess.run  # the CLI, for the one line the user sees
    with fake_board(reply=encode_frame(MessageType.HELLO, 1, v1_hello)) as url:
        done = run(
            [*CLI, str(HELLO_WORLD), "--board", "serial", "--port", url, "--timeout", "5"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        f"lowtide: error: {url}: board speaks protocol version 1, this host speaks "
        f"{PROTOCOL_VERSION}; rebuild and flash the board's firmware with this lowtide"
    )


def test_a_run_over_the_limit_the_board_states_in_hello_is_refused_before_it_is_sent():
    model = load_model(HELLO_WORLD)
    limited = Hello(
        PROTOCOL_VERSION,
        True,
        1,
        1,
        0,
        Counter.NONE,
        4,
        1000,
        1 << 16,
        1000,
        bytes.fromhex(model.sha256),
        "fake",
        "none",
    )
    with (
        fake_board(reply=encode_message(limited, 1)) as url,
        pytest.raises(LowtideError, match="runs at most 4 measured invocations at a time .* fewer than 5"),
    ):
        measure(HELLO_WORLD, "serial", url, iterations=5, timeout=5)


def test_a_board_running_another_model_is_refused():
    other = Hello(PROTOCOL_VERSION, True, 1, 1, 0, Counter.NONE, 256, 1000, 1 << 16, 1000, bytes(32), "fake", "none")
    with (
        fake_board(reply=encode_message(other, 1)) as url,
        pytest.raises(LowtideError, match="board runs another model"),
    ):
        measure(HELLO_WORLD, "serial", url, timeout=5)


def test_serial_board_needs_a_port_and_a_missing_device_is_named():
    with pytest.raises(LowtideError, match="needs --port"):
        measure(HELLO_WORLD, "serial")
    with pytest.raises(LowtideError, match="^/dev/ttyNOSUCH0: cannot open board port"):
        measure(HELLO_WORLD, "serial", "/dev/ttyNOSUCH0")


@pytest.mark.parametrize("port", ["tcp:0", "pty"])
def test_killing_the_host_mid_run_leaves_no_board_process(port):
    # A long run: the host is killed with SIGKILL (no cleanup code runs); the board sees its stdin close and exits.
    # Over a pty nothing else would tell it: writes into a pty nobody reads only fail once its buffer is full.
    host = subprocess.Popen(
        [*CLI, str(PERSON), "--port", port, "--iterations", "100000", "--timeout", "30", "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        children: list[int] = []
        while not children and time.monotonic() < deadline:
            children = [pid for pid in board_processes() if _parent(pid) == host.pid]
            time.sleep(0.1)
        assert children, "the host never started its board"
        time.sleep(3)  # let it get into the run
        host.send_signal(signal.SIGKILL)
        host.wait(timeout=10)
        deadline = time.monotonic() + 30  # the board finishes at most the invocation it is in
        while any(Path(f"/proc/{pid}").exists() and _state(pid) != "Z" for pid in children):
            assert time.monotonic() < deadline, "the board process outlived its host"
            time.sleep(0.1)
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()


def _parent(pid: int) -> int | None:
    with contextlib.suppress(OSError):
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return None


def _state(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return "gone"


def test_a_link_without_a_descriptor_waits_no_longer_than_asked_and_passes_bytes_through():
    link = open_link("loop://")  # pyserial's loopback has no file descriptor: the polling path
    try:
        start = time.monotonic()
        assert link.read(0.2) == b""
        assert 0.19 <= time.monotonic() - start < 1.0
        link.write(b"abc\x00def")
        received = b""
        deadline = time.monotonic() + 2
        while len(received) < 7 and time.monotonic() < deadline:
            received += link.read(0.5)
        assert received == b"abc\x00def"
    finally:
        link.close()


def test_a_board_that_hangs_up_is_an_error_naming_the_port():
    server = socket.create_server(("127.0.0.1", 0))
    url = f"socket://127.0.0.1:{server.getsockname()[1]}"
    link = open_link(url)
    try:
        server.accept()[0].close()
        with pytest.raises(LowtideError, match=f"^{url}: reading from the board failed: .*socket disconnected"):
            link.read(5.0)
    finally:
        link.close()
        server.close()


def test_a_board_whose_arena_is_too_small_says_so_and_refuses_to_run():
    from lowtide.device.protocol import Error, ErrorCode, Frame, Log, Run, decode_message
    from lowtide.pipeline.host_tflm import TflmBoard

    board = TflmBoard(PERSON.read_bytes(), str(PERSON), read_settings(), arena_bytes=4096)
    assert board.hello().model_ready is False
    boot = [decode_message(f) for f in FrameDecoder().feed(board.boot_frames())]
    assert isinstance(boot[1], Log) and "model not ready" in boot[1].text
    sent: list[bytes] = []
    board.handle(Frame(MessageType.RUN, 5, Run(0, 1).encode()), sent.append)
    (reply,) = [decode_message(f) for f in FrameDecoder().feed(b"".join(sent))]
    assert isinstance(reply, Error) and reply.code == ErrorCode.MODEL_NOT_READY
