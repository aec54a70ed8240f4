"""Byte links to a board. Every read takes a timeout; nothing here blocks without one.

`open_link` accepts whatever pyserial's `serial_for_url` accepts: device paths (/dev/ttyACM0, COM3), `socket://host:port`
(QEMU's -serial tcp:..., the host-tflm board), `rfc2217://host:port` (network serial servers) and `loop://`.
"""

from __future__ import annotations

import io
import select
from typing import Protocol

import serial

from lowtide.errors import LowtideError

DEFAULT_BAUDRATE = 115200
_READ_CHUNK = 1 << 16
# Links without a pollable file descriptor (rfc2217://, loop://) are polled in slices this long.
_POLL_SLICE_S = 0.02


class Link(Protocol):
    """A bidirectional byte stream to one board."""

    name: str  # what the user knows the link by (the port): used in every error message

    def write(self, data: bytes) -> None: ...

    def read(self, timeout: float) -> bytes:
        """Bytes that arrived within `timeout` seconds (b"" if none). Raises LowtideError if the link is gone."""
        ...

    def close(self) -> None: ...


class SerialLink:
    """A pyserial port. Reads wait on the port's file descriptor where it has one, so that a reply is handed over as
    soon as it arrives rather than at the end of a fixed read timeout."""

    def __init__(self, url: str, baudrate: int = DEFAULT_BAUDRATE, write_timeout: float = 5.0):
        self.name = url
        try:
            self._port = serial.serial_for_url(url, baudrate=baudrate, timeout=0, write_timeout=write_timeout)
        except (serial.SerialException, ValueError, OSError) as exc:
            raise LowtideError(f"cannot open board port: {exc}", url) from None
        try:
            self._fileno: int | None = self._port.fileno()
        except (AttributeError, io.UnsupportedOperation, OSError):
            self._fileno = None
            self._port.timeout = _POLL_SLICE_S

    def write(self, data: bytes) -> None:
        try:
            self._port.write(data)
            self._port.flush()
        except serial.SerialTimeoutException:
            raise LowtideError("board is not accepting data (write timed out)", self.name) from None
        except (serial.SerialException, OSError) as exc:
            raise LowtideError(f"writing to the board failed: {exc}", self.name) from None

    def read(self, timeout: float) -> bytes:
        try:
            if self._fileno is not None:
                ready, _, _ = select.select([self._fileno], [], [], max(timeout, 0.0))
                if not ready:
                    return b""
                # Non-blocking read; pyserial raises if the descriptor was ready but the peer has gone.
                data: bytes = self._port.read(_READ_CHUNK)
                return data
            # No descriptor: wait for one byte at most one slice at a time, then take whatever else is queued.
            first = b""
            remaining = timeout
            while not first and remaining > 0:
                first = self._port.read(1)
                remaining -= _POLL_SLICE_S
            return first + self._port.read(self._port.in_waiting) if first else b""
        except serial.SerialException as exc:
            raise LowtideError(f"reading from the board failed: {exc}", self.name) from None
        except OSError as exc:
            raise LowtideError(f"reading from the board failed: {exc.strerror or exc}", self.name) from None

    def close(self) -> None:
        try:
            self._port.close()
        except (serial.SerialException, OSError):
            pass  # closing a port whose device vanished: nothing left to release


def open_link(url: str, baudrate: int = DEFAULT_BAUDRATE) -> SerialLink:
    return SerialLink(url, baudrate)
