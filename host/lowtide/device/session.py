"""The host side of the protocol: requests with bounded waits, safe retries and resynchronisation.

Every request is re-sent with the same sequence number when its reply is overdue or a damaged frame arrives; the
board answers a repeated request from its reply cache, so re-sending never repeats an effect (docs/protocol.md,
"Retries"). Nothing waits longer than `timeout` seconds for the board to show a sign of life.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from typing import TypeVar

from lowtide.device.protocol import (
    BOOT_SEQ,
    DELIMITER,
    PROTOCOL_VERSION,
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
    Progress,
    ProtocolError,
    Read,
    Result,
    Run,
    SetInput,
    VersionMismatch,
    decode_message,
    describe_error,
    encode_message,
)
from lowtide.device.transport import Link
from lowtide.errors import LowtideError

log = logging.getLogger("lowtide.device")
Reply = TypeVar("Reply", bound=Message)
ProgressCallback = Callable[[int, int], None]  # (done, total)
_LOG_LEVELS: dict[int, int] = {
    LogLevel.DEBUG: logging.DEBUG,
    LogLevel.INFO: logging.INFO,
    LogLevel.WARNING: logging.WARNING,
    LogLevel.ERROR: logging.ERROR,
}


class BoardReset(LowtideError):
    """The board announced itself again (a HELLO with sequence number 0) in the middle of a session."""


class DeviceSession:
    def __init__(self, link: Link, timeout: float = 10.0):
        if timeout <= 0:
            raise LowtideError(f"timeout must be positive, not {timeout}")
        self.link = link
        self.timeout = timeout
        # Re-send an unanswered request a few times within the timeout; never more often than a slow UART needs.
        self.resend_interval = max(min(timeout / 4, 1.0), 0.05)
        self._decoder = FrameDecoder()
        self._frames: collections.deque[Frame] = collections.deque()
        self._seq = BOOT_SEQ
        self.resends = 0
        self.logs: list[Log] = []

    @property
    def damaged_frames(self) -> int:
        return self._decoder.damaged_frames

    def _next_seq(self) -> int:
        self._seq = self._seq % 255 + 1  # 1..255: sequence number 0 belongs to the board's unasked HELLO
        return self._seq

    def _fail(self, message: str) -> LowtideError:
        return LowtideError(message, self.link.name)

    def _receive(self, until: float) -> Frame | None:
        """The next intact frame, or None when `until` (a monotonic time) passes first."""
        while not self._frames:
            remaining = until - time.monotonic()
            if remaining <= 0:
                return None
            damaged = self._decoder.damaged_frames
            self._frames.extend(self._decoder.feed(self.link.read(remaining)))
            if self._decoder.damaged_frames != damaged:
                return None  # tell the caller at once: the damaged frame may have been its reply
        return self._frames.popleft()

    def request(
        self, message: Message, expect: type[Reply], what: str, on_progress: ProgressCallback | None = None
    ) -> Reply:
        seq = self._next_seq()
        frame_bytes = DELIMITER + encode_message(message, seq)  # the leading 0x00 ends any garbage the board holds
        give_up = time.monotonic() + self.timeout
        acknowledged = False  # a PROGRESS for this request shows the board has it: stop re-sending until silence
        self.link.write(frame_bytes)
        resend_at = time.monotonic() + self.resend_interval
        while True:
            now = time.monotonic()
            if now >= give_up:
                raise self._fail(
                    f"no {expect.TYPE.name} from the board within {self.timeout:g} s while {what}"
                    f" (sent {1 + self.resends} times, {self.damaged_frames} damaged frames received)"
                )
            frame = self._receive(min(give_up, resend_at) if not acknowledged else give_up)
            if frame is None:
                if time.monotonic() < give_up:
                    self.resends += 1
                    self.link.write(frame_bytes)
                    resend_at = time.monotonic() + self.resend_interval
                continue
            try:
                reply = decode_message(frame)
            except VersionMismatch as exc:
                fix = (
                    "rebuild and flash the board's firmware with this lowtide"
                    if exc.version < PROTOCOL_VERSION
                    else "update lowtide to the board firmware's version"
                )
                raise self._fail(f"{exc}; {fix}") from None
            except ProtocolError as exc:
                log.debug("%s: ignoring malformed message: %s", self.link.name, exc)
                continue
            if isinstance(reply, Log):
                self.logs.append(reply)
                log.log(_LOG_LEVELS.get(reply.level, logging.INFO), "%s: %s", self.link.name, reply.text)
                continue
            if isinstance(reply, Hello) and frame.seq == BOOT_SEQ and not isinstance(message, HelloRequest):
                raise BoardReset(f"board restarted (sent a new HELLO) while {what}", self.link.name)
            if isinstance(reply, Error) and frame.seq == BOOT_SEQ and reply.code == ErrorCode.BAD_FRAME:
                self.resends += 1
                self.link.write(frame_bytes)  # the board saw a damaged frame, likely our request: send it again now
                resend_at = time.monotonic() + self.resend_interval
                continue
            if frame.seq != seq and not (isinstance(message, HelloRequest) and frame.seq == BOOT_SEQ):
                continue  # a late or repeated answer to an earlier request
            if isinstance(reply, Progress):
                acknowledged = True
                give_up = time.monotonic() + self.timeout  # the board is alive: the silence bound starts again
                if on_progress:
                    on_progress(reply.done, reply.total)
                continue
            if isinstance(reply, Error):
                raise self._fail(f"board rejected the request while {what}: {describe_error(reply)}")
            if isinstance(reply, expect):
                return reply
            log.debug("%s: unexpected %s for seq %d", self.link.name, type(reply).__name__, seq)

    # --- the requests a measurement makes -----------------------------------------------------------------------

    def hello(self) -> Hello:
        return self.request(HelloRequest(), Hello, "waiting for the board to say HELLO")

    def set_input(self, index: int, data: bytes, on_progress: ProgressCallback | None = None) -> None:
        for offset in range(0, max(len(data), 1), SetInput.MAX_CHUNK):
            chunk = data[offset : offset + SetInput.MAX_CHUNK]
            ack = self.request(
                SetInput(index, len(data), offset, chunk),
                InputAck,
                f"sending input {index} (bytes {offset}..{offset + len(chunk)} of {len(data)})",
            )
            if (ack.index, ack.offset, ack.length) != (index, offset, len(chunk)):
                raise self._fail(
                    f"board acknowledged input {ack.index} bytes {ack.offset}+{ack.length}, "
                    f"expected input {index} bytes {offset}+{len(chunk)}"
                )
            if on_progress:
                on_progress(offset + len(chunk), len(data))

    def run(
        self, warmup: int, iterations: int, profile_ops: bool = False, on_progress: ProgressCallback | None = None
    ) -> Result:
        result = self.request(
            Run(warmup, iterations, profile_ops),
            Result,
            f"running {warmup} warm-up + {iterations} measured invocations",
            on_progress,
        )
        if (result.warmup, result.iterations) != (warmup, iterations):
            raise self._fail(f"board ran {result.warmup}+{result.iterations} invocations, asked {warmup}+{iterations}")
        return result

    def read(self, region: int, index: int, nbytes: int) -> bytes:
        data = bytearray()
        while len(data) < nbytes:
            chunk = self.request(
                Read(region, index, len(data), min(Data.MAX_CHUNK, nbytes - len(data))),
                Data,
                f"reading region {region} index {index} at byte {len(data)}",
            )
            if (chunk.region, chunk.index, chunk.offset) != (region, index, len(data)) or not chunk.data:
                raise self._fail(
                    f"board sent region {chunk.region} index {chunk.index} at {chunk.offset} "
                    f"({len(chunk.data)} bytes), asked region {region} index {index} at {len(data)}"
                )
            if chunk.total_bytes != nbytes:
                raise self._fail(
                    f"board holds {chunk.total_bytes} bytes in region {region} index {index}, expected {nbytes}"
                )
            data += chunk.data
        return bytes(data[:nbytes])
