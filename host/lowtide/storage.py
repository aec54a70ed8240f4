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
import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import platformdirs

from lowtide.errors import LowtideError
from lowtide.settings import CACHE_DIR_SETTING, read_settings


def cache_root() -> Path:
    """The user cache folder, created and checked writable; one line naming the folder and the problem if not."""
    configured = read_settings().cache_dir
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


def cache_dir(*parts: str) -> Path:
    """A folder in the user cache, created."""
    directory = cache_root().joinpath(*parts)
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


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Holds an flock on `path` (created) until the block ends; the kernel drops it however the holder exits."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def write_atomically(path: Path, content: str | bytes, mode: int = 0o644) -> None:
    """Replace `path` with `content` so that every reader, and every crash, sees the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(content.encode() if isinstance(content, str) else content)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)  # mkstemp makes it 0600
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    # The rename itself must reach the disk too, or a power cut could bring back the old directory entry.
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def publish_directory(staging: Path, target: Path) -> None:
    """Moves a fully written `staging` folder to `target` in one rename (the caller holds target's lock)."""
    if target.exists():
        shutil.rmtree(target)
    os.replace(staging, target)


def folder_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and not p.is_symlink())


def cached_folder(target: Path, fill: Callable[[Path], None]) -> Path:
    """`target` in the cache, made once: `fill` writes it into a staging folder, published by rename under a lock, so
    two runs make it once and an interrupted one leaves nothing that looks made. The caller names `target` by its
    content."""
    with exclusive_lock(target.with_name(target.name + ".lock")):
        if not target.is_dir():
            staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
            try:
                fill(staging)
                publish_directory(staging, target)
            except OSError as exc:
                shutil.rmtree(staging, ignore_errors=True)
                raise cache_error(exc, target) from None
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
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
