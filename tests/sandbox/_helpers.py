"""Helpers of the sandbox tests: run a program through code-exec-tests, and check that the host is unchanged."""

from __future__ import annotations

import os
import shutil
from collections.abc import Collection, Iterator
from typing import Any

import pytest

from evalsi.evaluators import Score, ScoreContext, get_evaluator
from evalsi.records import from_rollout
from evalsi.sandbox._gvisor import _gvisor_availability
from evalsi.sandbox._host import SANDBOX_UID_BASE


def score(program: str, params: dict[str, Any] | None = None, **metadata: Any) -> Score:
    """code-exec-tests' score of ``program`` with test cases ``metadata``."""
    evaluator = get_evaluator("code-exec-tests")
    record = from_rollout({"completion": program, **metadata})
    (result,) = evaluator.score_batch([record], evaluator.parse_params(params or {}), ScoreContext("tests"))
    return result


def sandbox_processes(uids: Collection[int] | None = None) -> list[int]:
    """Host pids of live (not zombie) processes whose real uid is a sandbox uid (root only), or one of ``uids``.

    Tests run in parallel workers, each with sandboxes of its own: a test that checks what its sandboxes left
    behind passes the uids they used, so another worker's live sandboxes do not count.
    """
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", encoding="utf-8") as fh:
                status = fh.read()
        except OSError:
            continue
        if "\nState:\tZ" in status:
            continue  # dead already, waiting for the host's init to reap it
        for line in status.splitlines():
            if line.startswith("Uid:"):
                uid = int(line.split()[1])
                wanted = uid in uids if uids is not None else SANDBOX_UID_BASE <= uid < SANDBOX_UID_BASE + 1000
                if wanted:
                    found.append(int(name))
    return found


def process_command(pid: int) -> str:
    """The command line of a host process ('' once it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.fixture
def without_runsc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This machine as if gVisor were not installed: ``runsc`` is not found on PATH."""
    real = shutil.which

    def which(name: str, *args: Any, **kwargs: Any) -> str | None:
        return None if name == "runsc" else real(name, *args, **kwargs)

    monkeypatch.setattr(shutil, "which", which)
    _gvisor_availability.cache_clear()
    yield
    _gvisor_availability.cache_clear()
