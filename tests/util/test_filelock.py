"""The exclusive file lock: held for the block, refused to every other opener meanwhile, released after."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import pytest

from evalsi._util.filelock import exclusive_lock


def _free(path: Path) -> bool:
    """Whether another open file description could take the lock now, without waiting."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def test_the_lock_is_held_for_the_block_and_released_after(tmp_path: Path) -> None:
    path = tmp_path / ".key.lock"
    with exclusive_lock(path):
        assert path.exists()
        assert not _free(path)
    assert _free(path)


def test_the_lock_is_released_when_the_block_raises(tmp_path: Path) -> None:
    path = tmp_path / ".key.lock"
    with pytest.raises(RuntimeError), exclusive_lock(path):
        raise RuntimeError("failed while holding the lock")
    assert _free(path)


def test_a_second_holder_waits_for_the_first(tmp_path: Path) -> None:
    path = tmp_path / ".key.lock"
    order: list[str] = []
    waiting = threading.Event()

    def second() -> None:
        waiting.set()
        with exclusive_lock(path):
            order.append("second")

    with exclusive_lock(path):
        thread = threading.Thread(target=second)
        thread.start()
        assert waiting.wait(10)
        # While the lock is held, the second holder must still be waiting, however long it is given.
        thread.join(0.5)
        assert thread.is_alive() and order == []
        order.append("first")
    thread.join(10)
    assert not thread.is_alive()
    assert order == ["first", "second"]
