"""The `host-tflm` board: this machine's build of the real TFLM interpreter, served over the lowtide protocol.

    python -m lowtide.pipeline.host_tflm --model MODEL.tflite --port tcp:0    # or tcp:PORT, or pty

It binds 127.0.0.1 only (or opens a pty), prints one line `LISTENING <url>` on stdout for the host to connect to,
then behaves like a board: a HELLO with sequence number 0 on connect, then requests until the connection closes.
It exits when its standard input reaches end of file, so the process that started it never leaves it behind.

Figures: arena used = TFLM's recording allocator total (`lowtide.oracle.run`), planned = its head; it cannot paint
its arena or stack, so no high-water marks; latency is wall-clock time around `invoke()`, in microseconds; no
counter, no clock (HELLO's clock_hz 0) and no iteration limit (max_iterations 0xFFFFFFFF).
Each RUN's invocations happen in a child process (`lowtide.oracle.isolated`): if TFLM crashes on the inputs it
was sent, the RUN gets an INVOKE_FAILED error saying so, and the board keeps answering.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import select
import socket
import statistics
import sys
import time
import tty
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lowtide import oracle
from lowtide.device.drivers.process import READY_PREFIX
from lowtide.device.protocol import (
    BOOT_SEQ,
    MAX_PAYLOAD,
    PROTOCOL_VERSION,
    UNKNOWN_U32,
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
    Message,
    OutputSummary,
    Progress,
    ProtocolError,
    Read,
    ReadRegion,
    Result,
    Run,
    SetInput,
    decode_message,
    encode_message,
)
from lowtide.errors import LowtideError
from lowtide.model.reader import read_model
from lowtide.settings import Settings, read_settings

BOARD_NAME = "host-tflm"
PROGRESS_INTERVAL_S = 0.25  # at most four PROGRESS frames a second: enough for a progress bar and a liveness check
ACCEPT_TIMEOUT_S = 60.0

Send = Callable[[bytes], None]


class HostGone(Exception):
    """The host disconnected or the process that started this board ended: stop, even in the middle of a RUN."""


@dataclass(frozen=True)
class TensorSlot:
    dtype: np.dtype
    shape: tuple[int, ...]
    nbytes: int


def default_arena_bytes(model: bytes) -> int:
    """Generous: the host has memory to spare, and the recording allocator reports what was actually used."""
    return max(16 * len(model), 64 << 20)


class TflmBoard:
    """The board's request handling, free of any I/O: `handle` gets a checked frame and sends replies via `send`."""

    def __init__(
        self,
        model: bytes,
        path: str,
        settings: Settings,
        arena_bytes: int | None = None,
        host_gone: Callable[[], bool] = lambda: False,
    ):
        self.model, self.path = model, path
        self.tflm_timeout_s = settings.tflm_timeout_s
        self.host_gone = host_gone  # checked between invocations, so that a long RUN ends when nobody waits for it
        self.graph = read_model(model, path)
        self.arena_bytes = arena_bytes or default_arena_bytes(model)
        self.runtime_name = f"tflite-micro {importlib.metadata.version('tflite-micro')} (host, reference kernels)"
        sg = self.graph.main
        self.inputs = tuple(_slot(sg.tensors[i]) for i in sg.inputs)
        self.output_count = len(sg.outputs)
        self.staged_inputs = [bytearray(slot.nbytes) for slot in self.inputs]
        self.outputs: list[bytes] | None = None
        self.not_ready_reason: str | None = None
        self._reply_cache: tuple[tuple[int, int, bytes], bytes] | None = None
        try:
            self.figures = oracle.run(model, arena_size=self.arena_bytes, path=path, settings=settings)
        except LowtideError as exc:
            self.not_ready_reason = exc.message

    def hello(self) -> Hello:
        return Hello(
            protocol_version=PROTOCOL_VERSION,
            model_ready=self.not_ready_reason is None,
            input_count=len(self.inputs),
            output_count=self.output_count,
            clock_hz=0,  # a host CPU's clock says nothing about a microcontroller's
            counter=Counter.NONE,
            max_iterations=UNKNOWN_U32,  # no limit: the samples are kept in a Python list
            max_payload=MAX_PAYLOAD,
            arena_capacity_bytes=min(self.arena_bytes, 0xFFFFFFFE),
            model_size_bytes=self.graph.size_bytes,
            model_sha256=bytes.fromhex(self.graph.sha256),
            board=BOARD_NAME,
            runtime=self.runtime_name,
        )

    def boot_frames(self) -> bytes:
        frames = encode_message(self.hello(), BOOT_SEQ)
        if self.not_ready_reason:
            frames += encode_message(Log(LogLevel.ERROR, f"model not ready: {self.not_ready_reason}"), BOOT_SEQ)
        return frames

    def handle(self, frame: Frame, send: Send) -> None:
        key = (frame.type, frame.seq, frame.payload)
        if self._reply_cache and self._reply_cache[0] == key:
            send(self._reply_cache[1])  # a repeated request: answer again, do not act again
            return
        try:
            request = decode_message(frame)
            reply = self._reply(request, frame.seq, send)
        except ProtocolError as exc:
            reply = Error(ErrorCode.BAD_MESSAGE, frame.type, str(exc))
        encoded = encode_message(reply, frame.seq)
        self._reply_cache = (key, encoded)
        send(encoded)

    def _reply(self, request: Message, seq: int, send: Send) -> Message:
        if isinstance(request, HelloRequest):
            return self.hello()
        if isinstance(request, SetInput):
            return self._set_input(request)
        if isinstance(request, Run):
            return self._run(request, seq, send)
        if isinstance(request, Read):
            return self._read(request)
        return Error(ErrorCode.BAD_MESSAGE, request.TYPE, f"{request.TYPE.name} is not a request")

    def _set_input(self, request: SetInput) -> Message:
        if not 0 <= request.index < len(self.inputs):
            return Error(ErrorCode.BAD_INDEX, request.TYPE, f"model has {len(self.inputs)} inputs")
        staged = self.staged_inputs[request.index]
        end = request.offset + len(request.data)
        if request.total_bytes != len(staged) or end > len(staged):
            return Error(
                ErrorCode.BAD_RANGE,
                request.TYPE,
                f"input {request.index} has {len(staged)} bytes; got {request.total_bytes} total, "
                f"bytes {request.offset}..{end}",
            )
        staged[request.offset : end] = request.data
        return InputAck(request.index, request.offset, len(request.data))

    def _run(self, request: Run, seq: int, send: Send) -> Message:
        if self.not_ready_reason:
            return Error(ErrorCode.MODEL_NOT_READY, request.TYPE, self.not_ready_reason)
        if request.iterations == 0:
            return Error(ErrorCode.BAD_ARGUMENT, request.TYPE, "iterations must be at least 1")
        total = request.warmup + request.iterations
        send(encode_message(Progress(0, total), seq))
        try:
            ran = oracle.isolated(
                lambda child: self._invocations(child, request, seq, send), self.path, self.tflm_timeout_s
            )
        except LowtideError as exc:  # TFLM refused the inputs, failed an operator or crashed: the board lives on
            return Error(ErrorCode.INVOKE_FAILED, request.TYPE, exc.message)
        if ran is None:
            raise HostGone
        durations_ns, self.outputs = ran
        us = sorted(round(ns / 1000) for ns in durations_ns)
        return Result(
            warmup=request.warmup,
            iterations=request.iterations,
            arena_planned_bytes=self.figures.head_bytes,
            arena_used_bytes=self.figures.total_bytes,
            arena_high_water_bytes=None,  # a host process cannot paint and scan its arena the way firmware does
            stack_high_water_bytes=None,
            stack_size_bytes=None,
            counter_min=None,
            counter_median=None,
            counter_max=None,
            us_min=us[0],
            us_median=statistics.median_low(us),
            us_max=us[-1],
            op_cycles_count=0,
            outputs=tuple(OutputSummary(len(o), zlib.crc32(o)) for o in self.outputs),
        )

    def _invocations(
        self, child: oracle.TflmChild, request: Run, seq: int, send: Send
    ) -> tuple[list[int], list[bytes]] | None:
        """In the TFLM child: the RUN's invocations, their durations and the outputs; None if the host is gone.
        PROGRESS frames go straight to the host: the child shares the connection."""
        interpreter = child.interpreter(self.model, self.arena_bytes)
        total = request.warmup + request.iterations
        child.phase(b"I")
        last_progress = time.monotonic()
        durations_ns = []
        for k in range(total):
            if self.host_gone():
                return None
            # Every invocation starts from the same state: variables reset, inputs copied in again (the planner
            # may reuse an input tensor's memory once its last reader has run).
            interpreter.reset()
            for i, (slot, staged) in enumerate(zip(self.inputs, self.staged_inputs)):
                interpreter.set_input(np.frombuffer(staged, dtype=slot.dtype).reshape(slot.shape), i)
            start = time.perf_counter_ns()
            interpreter.invoke()
            elapsed = time.perf_counter_ns() - start
            if k >= request.warmup:
                durations_ns.append(elapsed)
            if time.monotonic() - last_progress >= PROGRESS_INTERVAL_S:
                send(encode_message(Progress(k + 1, total), seq))
                last_progress = time.monotonic()
        return durations_ns, [np.asarray(interpreter.get_output(i)).tobytes() for i in range(self.output_count)]

    def _read(self, request: Read) -> Message:
        if request.region != ReadRegion.OUTPUT:
            return Error(ErrorCode.BAD_RANGE, request.TYPE, f"region {request.region} is not available on this board")
        if self.outputs is None:
            return Error(ErrorCode.NO_RESULT, request.TYPE, "no RUN has completed")
        if not 0 <= request.index < len(self.outputs):
            return Error(ErrorCode.BAD_INDEX, request.TYPE, f"model has {len(self.outputs)} outputs")
        data = self.outputs[request.index]
        if request.offset > len(data):
            return Error(ErrorCode.BAD_RANGE, request.TYPE, f"output {request.index} has {len(data)} bytes")
        length = min(request.max_length, Data.MAX_CHUNK)
        return Data(
            request.region, request.index, request.offset, len(data), data[request.offset : request.offset + length]
        )


def _slot(tensor) -> TensorSlot:
    return TensorSlot(np.dtype(tensor.dtype), tuple(tensor.shape), tensor.nbytes)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def stdin_closed(stop_fd: int) -> Callable[[], bool]:
    """A check, without waiting, for end of file on `stop_fd`: the process that started us has ended."""
    closed = False

    def check() -> bool:
        nonlocal closed
        while not closed and select.select([stop_fd], [], [], 0)[0]:
            closed = not os.read(stop_fd, 4096)
        return closed

    return check


def serve(board: TflmBoard, fd: int, host_gone: Callable[[], bool], stop_fd: int) -> None:
    """Answer requests on `fd` until it closes, or the host is gone (`stop_fd`, our stdin, is at end of file)."""
    decoder = FrameDecoder()

    def send(data: bytes) -> None:
        _write_all(fd, data)

    try:
        send(board.boot_frames())
        while not host_gone():
            readable, _, _ = select.select([fd, stop_fd], [], [])
            if fd not in readable:
                continue
            data = os.read(fd, 1 << 16)
            if not data:
                return
            damaged = decoder.damaged_frames
            frames = decoder.feed(data)
            if decoder.damaged_frames != damaged:
                send(encode_message(Error(ErrorCode.BAD_FRAME, 0, "damaged frame"), BOOT_SEQ))
            for frame in frames:
                board.handle(frame, send)
    except (HostGone, OSError):
        return  # the connection broke or the host ended: there is nobody left to answer


def _announce(url: str) -> None:
    print(f"{READY_PREFIX}{url}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lowtide.pipeline.host_tflm", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--port", default="tcp:0", help="tcp:PORT (127.0.0.1; 0 = any free port) or pty")
    parser.add_argument("--arena-bytes", type=int, default=None)
    args = parser.parse_args(argv)
    settings = read_settings()  # this process's edge: the environment its parent handed on
    stop_fd = sys.stdin.fileno()
    host_gone = stdin_closed(stop_fd)
    if args.port == "pty":
        master, slave = os.openpty()
        tty.setraw(slave)  # no echo, no newline translation: the pty must pass bytes through untouched
        _announce(os.ttyname(slave))
        board = TflmBoard(args.model.read_bytes(), str(args.model), settings, args.arena_bytes, host_gone)
        serve(board, master, host_gone, stop_fd)
        return 0
    if not args.port.startswith("tcp:") or not args.port[4:].isdigit():
        parser.error(f"--port must be tcp:PORT or pty, not {args.port!r}")
    with socket.create_server(("127.0.0.1", int(args.port[4:]))) as server:
        _announce(f"socket://127.0.0.1:{server.getsockname()[1]}")
        board = TflmBoard(args.model.read_bytes(), str(args.model), settings, args.arena_bytes, host_gone)
        deadline = time.monotonic() + ACCEPT_TIMEOUT_S
        while not select.select([server], [], [], 0.1)[0]:
            if host_gone() or time.monotonic() > deadline:
                return 1
        connection, _ = server.accept()
    with connection:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        serve(board, connection.fileno(), host_gone, stop_fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
