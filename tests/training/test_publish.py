"""Atomic publishing: the final name appears only complete, with the umask's mode, and a failure leaves nothing."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from evalsi.training._publish import publishing


def test_the_file_appears_only_when_complete(tmp_path: Path) -> None:
    target = tmp_path / "ckpt" / "step-1.pt"
    seen_during: list[bool] = []
    with publishing(target) as handle:
        handle.write(b"x" * 1000)
        seen_during.append(target.exists())
    assert seen_during == [False]
    assert target.read_bytes() == b"x" * 1000
    assert [p.name for p in target.parent.iterdir()] == ["step-1.pt"]


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_the_mode_is_what_the_umask_gives_a_new_file(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        with publishing(tmp_path / "step-2.pt") as handle:
            handle.write(b"w")
        (tmp_path / "plain").write_bytes(b"w")
    finally:
        os.umask(old)
    published = stat.S_IMODE((tmp_path / "step-2.pt").stat().st_mode)
    assert published == stat.S_IMODE((tmp_path / "plain").stat().st_mode) == 0o666 & ~umask


def test_a_failed_write_leaves_neither_the_file_nor_a_partial(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), publishing(tmp_path / "step-3.pt") as handle:
        handle.write(b"half")
        raise RuntimeError("disk full")
    assert list(tmp_path.iterdir()) == []


def test_replacing_an_existing_file_is_atomic_for_readers(tmp_path: Path) -> None:
    target = tmp_path / "latest.pt"
    target.write_bytes(b"A" * 100_000)
    torn: list[bytes] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            data = target.read_bytes()
            if data not in (b"A" * 100_000, b"B" * 100_000):
                torn.append(data[:10])

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(20):
            with publishing(target) as handle:
                for _ in range(10):
                    handle.write(b"B" * 10_000)
    finally:
        stop.set()
        reader.join()
    assert torn == []
