"""Where lowtide keeps what it builds, and how it writes files.

One user cache folder holds everything lowtide builds once and reuses: TFLM's unpacked sources and objects per core,
the 32-bit arena sizer and its figures, the PlatformIO core dir with the offline shims, and firmware projects per
model, runtime and board. It is platformdirs' user cache folder (`~/.cache/lowtide` on Linux), or the folder
`LOWTIDE_CACHE_DIR` names; never a source checkout, so every checkout, virtualenv and CI clone on a machine shares it.
Entries are content-keyed, built under a lock (two runs building the same thing: one builds, the other waits and
reuses it) and published by rename, so an interrupted build never leaves a half-written entry that looks complete.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gzip
import itertools
import os
import shutil
import tarfile
import tempfile
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import platformdirs

from lowtide.errors import LowtideError
from lowtide.settings import CACHE_DIR_SETTING, Settings


def cache_root(settings: Settings) -> Path:
    """The user cache folder, created and checked writable; one line naming the folder and the problem if not."""
    configured = settings.cache_dir
    root = Path(configured).expanduser() if configured else Path(platformdirs.user_cache_dir("lowtide"))
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".probe-"):
            pass
    except OSError as exc:
        raise LowtideError(
            f"the cache folder is not writable ({exc.strerror or exc}); set {CACHE_DIR_SETTING} to a writable folder",
            root,
        ) from None
    return root


def cache_dir(settings: Settings, *parts: str) -> Path:
    """A folder in the user cache, created."""
    directory = cache_root(settings).joinpath(*parts)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LowtideError(f"cannot create a cache folder: {exc.strerror or exc}", directory) from None
    return directory


def cache_error(exc: OSError, path: Path) -> LowtideError:
    """An OSError while writing into the cache, as one line (a full disk says so)."""
    what = "the disk holding the cache is full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
    return LowtideError(
        f"cannot write into the cache: {what} (lowtide cache --clear frees it; {CACHE_DIR_SETTING} moves it)", path
    )


class FileLock:
    """An flock held on an open file; `release` (or the holder's exit, however it exits: the kernel drops it) lets
    the next process in."""

    def __init__(self, path: Path, fd: int):
        self.path = path
        self.fd: int | None = fd

    @property
    def held(self) -> bool:
        return self.fd is not None

    def release(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


_LOCK_POLL_S = 0.05


def lock_file(
    path: Path, timeout: float | None = None, on_busy: Callable[[], None] | None = None, mode: int | None = None
) -> FileLock | None:
    """The one file lock: an exclusive flock on `path` (created, and its folder). With no `timeout` it waits as long
    as it takes; else at most `timeout` seconds, and None if the lock was still held then. `on_busy` is called once
    if the lock is not free at once; `mode`, when given, is set on the file (else it has the umask's permissions)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        if mode is not None:
            with contextlib.suppress(PermissionError):
                os.fchmod(fd, mode)
        deadline = None if timeout is None else time.monotonic() + timeout
        busy = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return FileLock(path, fd)
            except BlockingIOError:
                if not busy and on_busy is not None:
                    on_busy()
                busy = True
            if deadline is None:
                fcntl.flock(fd, fcntl.LOCK_EX)  # nothing to report while waiting: the kernel wakes us
                return FileLock(path, fd)
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(min(_LOCK_POLL_S, max(deadline - time.monotonic(), 0.0)))
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Holds the lock on `path` (`lock_file`, waiting as long as it takes) until the block ends."""
    held = lock_file(path)
    assert held is not None  # no timeout: it waited until it had the lock
    try:
        yield
    finally:
        held.release()


_temporaries = itertools.count()


def _temporary_beside(target: Path) -> Path:
    """A path beside `target` where nothing is, unique to this process and call, named as a temporary."""
    temporary = target.with_name(f".{target.name}.{os.getpid()}-{next(_temporaries)}.tmp")
    _remove(temporary)  # a killed process of the same pid may have left it
    return temporary


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _sync_folder(directory: Path) -> None:
    # A rename must reach the disk too, or a power cut could bring back the old directory entry.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def replacing_all(targets: Iterable[Path], durable: bool = False) -> Iterator[dict[Path, Path]]:
    """The one atomic write. Yields a temporary path beside each target (a file or a folder, where nothing is) for
    the block to write; when the block ends without an error each target is replaced by its temporary in one rename
    (a folder in the way removed first), all or none: if one rename fails, the targets this call created are removed
    again. However it ends, no temporary is left. `durable`: the renames are synced to disk, for files whose loss in
    a power cut would matter (the temporaries' contents the caller syncs)."""
    temporaries = {target: _temporary_beside(target) for target in targets}
    created: list[Path] = []
    try:
        yield temporaries
        for target, temporary in temporaries.items():
            existed = target.exists()
            if temporary.is_dir() and target.is_dir():
                shutil.rmtree(target)
            os.replace(temporary, target)
            if not existed:
                created.append(target)
        if durable:
            for folder in {target.parent for target in temporaries}:
                _sync_folder(folder)
    except BaseException:
        for target in created:
            _remove(target)
        raise
    finally:
        for temporary in temporaries.values():
            _remove(temporary)


@contextlib.contextmanager
def replacing(target: Path, durable: bool = False) -> Iterator[Path]:
    """`replacing_all` of one target: yields the temporary path that replaces `target` if the block succeeds."""
    with replacing_all([target], durable) as temporaries:
        yield temporaries[target]


def write_atomically(path: Path, content: str | bytes, mode: int = 0o644) -> None:
    """Replace `path` with `content` so that every reader, and every crash, sees the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path, durable=True) as temporary:
        with open(temporary, "wb") as stream:
            stream.write(content.encode() if isinstance(content, str) else content)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)


def write_files(files: Mapping[Path, bytes | str]) -> None:
    """Write every file or none (`replacing_all`): the targets are replaced only once every temporary is complete.
    On a failure (disk full, no permission, a directory in the way) no temporary is left, and the targets this call
    created are removed again; LowtideError names the target."""
    target = next(iter(files), Path())
    try:
        with replacing_all(files) as temporaries:
            for target, content in files.items():
                temporaries[target].write_bytes(content.encode() if isinstance(content, str) else content)
    except OSError as exc:
        failed = Path(exc.filename2) if exc.filename2 else target  # a rename names its target second
        raise LowtideError(f"cannot write: {exc.strerror}", failed) from None


def folder_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and not p.is_symlink())


def cached_folder(target: Path, fill: Callable[[Path], None]) -> Path:
    """`target` in the cache, made once: `fill` writes it into a staging folder, published by rename under a lock, so
    two runs make it once and an interrupted one leaves nothing that looks made. The caller names `target` by its
    content."""
    with exclusive_lock(target.with_name(target.name + ".lock")):
        if not target.is_dir():
            try:
                with replacing(target) as staging:
                    staging.mkdir(mode=0o700)  # private to the user, whose cache it is
                    fill(staging)
            except OSError as exc:
                raise cache_error(exc, target) from None
    return target


# What a damaged archive raises while it is read (a truncated or corrupt gzip stream, a bad tar header): the
# archive's fault, where any other OSError is the cache's (a full disk).
_DAMAGED_ARCHIVE = (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile)


def unpacked_archive(archive: Path, target: Path, what: str) -> Path:
    """`archive` (.tar.gz) unpacked once into the cache folder `target` (`cached_folder`); a damaged archive is one
    line naming `what` it is."""

    def fill(staging: Path) -> None:
        try:
            with tarfile.open(archive) as tar:
                tar.extractall(staging, filter="data")
        except _DAMAGED_ARCHIVE as exc:
            detail = str(exc).splitlines()[0].rstrip(":")  # tarfile lists every method it tried, a line each
            raise LowtideError(f"cannot unpack the {what}: {detail}", archive) from None

    return cached_folder(target, fill)
