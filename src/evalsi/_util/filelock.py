"""An exclusive lock on a file, held across processes, so that one of them builds what the others then reuse."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created when missing) for the ``with`` block; wait for it first.

    The lock goes with the file descriptor: it is released when the block ends, or when the process dies.

    Args:
        path: The lock file, such as ``cache/.<key>.lock``.

    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
