"""Sandbox slots (uids) are unique across processes, whatever each process's temporary folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalsi.sandbox._host import SLOT_LOCK_DIRS, running_as_root, slot_lock_dir

HOLD = """
import sys
from evalsi.sandbox._host import acquire_slot
print(acquire_slot(), flush=True)
sys.stdin.read()
"""

pytestmark = pytest.mark.skipif(not running_as_root(), reason="slot locks are taken only when evalsi runs as root")


def test_two_processes_with_different_temp_folders_never_share_a_slot(tmp_path: Path) -> None:
    holders = []
    try:
        for name in ("a", "b"):
            folder = tmp_path / name
            folder.mkdir()
            env = {**os.environ, "TMPDIR": str(folder)}
            holders.append(
                subprocess.Popen(
                    [sys.executable, "-c", HOLD], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
                )
            )
        slots = [int(holder.stdout.readline()) for holder in holders if holder.stdout is not None]
        assert len(slots) == 2 and slots[0] != slots[1]
    finally:
        for holder in holders:
            holder.communicate("", timeout=60)


def test_slot_locks_live_in_a_fixed_machine_wide_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert slot_lock_dir() in SLOT_LOCK_DIRS
