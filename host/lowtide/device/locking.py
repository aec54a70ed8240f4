"""Locks that keep two runs (measurements, test sessions) off one board, and off one baselines file, at once.

A lock is storage's one file lock (`storage.lock_file`, an `fcntl.flock`) on a file in the lock directory:
`$LOWTIDE_LOCK_DIR`, else /tmp/lowtide-locks. Not $XDG_RUNTIME_DIR: that is per user, and a board on a CI runner is
shared between the runner's user and whoever logs in to debug it. The kernel drops a flock when its holder exits,
however it exits, so a killed run never leaves a stale lock behind. The holder writes its pid, command line and
start time into the file, so that whoever waits can say who is in the way.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from lowtide.errors import LowtideError
from lowtide.settings import DEFAULT_LOCK_DIR
from lowtide.storage import FileLock, lock_file


class LockTimeout(LowtideError):
    """Another process held the lock for longer than the caller was willing to wait."""


@dataclass(frozen=True)
class LockHolder:
    pid: int
    command: str
    since: str  # ISO 8601, UTC

    def describe(self) -> str:
        return f"pid {self.pid} ({self.command}), since {self.since}"


def lock_path(resource: str, lock_dir: Path) -> Path:
    """The lock file of `resource` in `lock_dir` (the settings'): readable name, plus a digest so that two resources
    never share a file."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", resource).strip("_")[:80]
    digest = hashlib.sha256(resource.encode()).hexdigest()[:12]
    return lock_dir / f"{readable}-{digest}.lock"


def port_resource(port: str) -> str:
    """One name per device: /dev/serial/by-id/... and the /dev/ttyACM0 it points to are the same board."""
    if port.startswith("/") and os.path.exists(port):
        return os.path.realpath(port)
    return port


def read_holder(path: Path) -> LockHolder | None:
    """Who holds (or last held) the lock in `path`, as it wrote itself down; None if it has not yet."""
    try:
        data = json.loads(path.read_text())
        return LockHolder(int(data["pid"]), str(data["command"]), str(data["since"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def acquire(
    resource: str,
    timeout: float,
    what: str,
    on_wait: Callable[[LockHolder | None], None] | None = None,
    *,
    lock_dir: Path,
) -> FileLock:
    """Lock `resource` (its file in `lock_dir`), waiting at most `timeout` seconds. `what` names the resource in the
    error, e.g. "board serial on /dev/ttyACM0"; `on_wait` is called once, with the current holder, if the lock is not
    free at once."""
    path = lock_path(resource, lock_dir)
    _make_lock_dir(path.parent)
    # Another user's run must be able to take this lock later: the file is everyone's to open.
    held = lock_file(path, timeout, (lambda: on_wait(read_holder(path))) if on_wait else None, mode=0o666)
    if held is None:
        holder = read_holder(path)
        raise LockTimeout(
            f"{what} is in use by another run ({holder.describe() if holder else 'holder unknown'}); "
            f"gave up after waiting {timeout:g} s (lock file {path})"
        )
    assert held.fd is not None
    _write_holder(held.fd)
    return held


@contextlib.contextmanager
def locked(
    resource: str,
    timeout: float,
    what: str,
    on_wait: Callable[[LockHolder | None], None] | None = None,
    *,
    lock_dir: Path,
) -> Iterator[FileLock]:
    held = acquire(resource, timeout, what, on_wait, lock_dir=lock_dir)
    try:
        yield held
    finally:
        held.release()


def _make_lock_dir(directory: Path) -> None:
    if directory.is_dir():
        return
    directory.mkdir(parents=True, exist_ok=True)
    if directory == DEFAULT_LOCK_DIR:
        with contextlib.suppress(PermissionError):
            os.chmod(directory, 0o1777)  # like /tmp: every user may add lock files, none may remove another's


def _write_holder(fd: int) -> None:
    holder = {
        "pid": os.getpid(),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:200] if sys.argv else "python",
        "since": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(holder).encode(), 0)
