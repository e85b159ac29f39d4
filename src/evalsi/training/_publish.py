"""Publishing a file atomically, with the mode the umask gives any new file.

A checkpoint that appears half-written is served half-written; a watcher or an evaluation pod must only ever see
the whole file. It is written beside its final name, flushed to disk, then renamed over it (``os.replace`` is
atomic on one file system), and the directory entry is flushed too. Unlike a ``tempfile`` (always 0600), the
file gets ``0666 & ~umask``, so an evaluation running as another user can read it when the umask allows.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO


@contextlib.contextmanager
def publishing(path: str | Path) -> Iterator[BinaryIO]:
    """Open a file that becomes ``path`` only when the ``with`` block ends without an exception.

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> with publishing(folder / "step-1.bin") as handle:
        ...     _ = handle.write(b"weights")
        >>> (folder / "step-1.bin").read_bytes(), sorted(p.name for p in folder.iterdir())
        (b'weights', ['step-1.bin'])

    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = final.with_name(f".{final.name}.{os.getpid()}.partial")
    # O_EXCL: never write through a file (or symlink) someone else put there; 0o666 lets the umask decide.
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        raise
    _fsync_directory(final.parent)


def publish_with(path: str | Path, write: Callable[[BinaryIO], object]) -> Path:
    """Publish ``path`` atomically, its content written by ``write(handle)``; returns the path."""
    with publishing(path) as handle:
        write(handle)
    return Path(path)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
