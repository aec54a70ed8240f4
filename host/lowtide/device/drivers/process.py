"""A board that is a process on this machine (host-tflm): the program it is handed (`HostProgram`) started, its
announced URL read, and always ended.

The process prints one line `LISTENING <url>` when it is ready, and exits when its standard input reaches end of
file, so that the process that started it never leaves it behind; `stop_process` also terminates and then kills it.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

from lowtide.errors import LowtideError

READY_PREFIX = "LISTENING "
STOP_GRACE_S = 5.0


@dataclass(frozen=True)
class HostProgram:
    """The image of a board that is a process on this machine: the command line that starts it, the model and
    the port it serves on included."""

    argv: tuple[str, ...]


@contextlib.contextmanager
def board_process(program: HostProgram, what: str, timeout: float) -> Iterator[str]:
    """Starts `program` and yields the URL it announces within `timeout` seconds; ends it on exit."""
    with tempfile.TemporaryFile() as stderr_file:
        try:
            process = subprocess.Popen(program.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr_file)
        except OSError as exc:
            raise LowtideError(f"cannot start {what}: {exc.strerror or exc}") from None
        try:
            yield _read_ready_line(process, stderr_file, timeout, what)
        finally:
            stop_process(process)


def last_line(stream) -> str:
    """The last line a process wrote to `stream` (a temporary file), for an error message."""
    stream.seek(0)
    lines = stream.read().decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else "no message"


def _read_ready_line(process: subprocess.Popen, stderr_file, timeout: float, what: str) -> str:
    assert process.stdout is not None
    fd = process.stdout.fileno()
    line = b""
    deadline = time.monotonic() + timeout
    while not line.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LowtideError(f"{what} did not start within {timeout:g} s")
        readable, _, _ = select.select([fd], [], [], remaining)
        if readable:
            chunk = os.read(fd, 1024)
            if not chunk:
                process.wait(timeout=STOP_GRACE_S)
                raise LowtideError(f"{what} exited with status {process.returncode}: {last_line(stderr_file)}")
            line += chunk
    text = line.decode("utf-8", "replace").strip()
    if not text.startswith(READY_PREFIX):
        raise LowtideError(f"{what} printed {text!r}, expected '{READY_PREFIX}<url>'")
    return text[len(READY_PREFIX) :]


def stop_process(process: subprocess.Popen) -> None:
    """End a board process (host-tflm, an emulator): closing its stdin asks it to exit; terminate, then kill, if
    it does not."""
    for stream in (process.stdin, process.stdout):
        if stream:
            stream.close()
    for ask in (None, process.terminate, process.kill):
        if ask:
            ask()
        try:
            process.wait(timeout=STOP_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue
