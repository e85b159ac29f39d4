"""The sandbox pool: one warm sandbox per core, programs spread over them.

Each sandbox is used by one thread at a time; the threads mostly wait on sockets, so the host's GIL is not the
bottleneck. A sandbox is restarted after ``recycle_after`` programs, and whenever it failed.
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from evalsi.errors import SandboxError
from evalsi.sandbox._ladder import RUNGS
from evalsi.sandbox._sandbox import Case, CaseOutcome, Sandbox
from evalsi.sandbox._types import Isolation, Limits, RunResult

T = TypeVar("T")


class SandboxPool:
    """``size`` sandboxes of one rung (default: one per CPU), started lazily."""

    def __init__(self, rung: Isolation, size: int | None = None, recycle_after: int = 1000) -> None:
        """Make a pool of sandboxes at one rung, started as they are needed.

        Args:
            rung: The isolation rung.
            size: How many sandboxes; None for the number of CPUs.
            recycle_after: Programs after which a sandbox is restarted.

        """
        self.rung = RUNGS[rung]
        self.size = max(1, size or os.cpu_count() or 1)
        self.recycle_after = recycle_after
        self._idle: queue.Queue[Sandbox] = queue.Queue()
        for _ in range(self.size):
            self._idle.put(Sandbox(self.rung))
        self._executor = ThreadPoolExecutor(self.size, thread_name_prefix=f"evalsi-sandbox-{rung}")
        self._closed = False

    def run(
        self,
        source: str | None,
        cases: list[Case],
        limits: Limits,
        files: dict[str, str] | None = None,
        *,
        fresh: bool = False,
    ) -> list[CaseOutcome]:
        """Run one program's cases on an idle sandbox (blocks until one is free).

        ``fresh`` is the slow baseline: a new sandbox and interpreter for every case.

        Args:
            source: The program's source; None when ``files`` hold it.
            cases: The test cases, run in order.
            limits: Limits per case.
            files: Further files written into the work dir.
            fresh: Run on a sandbox that has never run anything.

        """
        sandbox = self._idle.get()
        try:
            if sandbox.programs_run >= self.recycle_after:
                sandbox.close()
                sandbox.programs_run = 0
            try:
                if not fresh:
                    return sandbox.run(source, cases, limits, files)
                out: list[CaseOutcome] = []
                for case in cases:
                    sandbox.close()
                    out.extend(sandbox.run(source, [case], limits, files))
                sandbox.close()
                return out
            except SandboxError as exc:
                failed = RunResult(None, "", "", 0.0, 0.0, "sandbox", detail=str(exc), infrastructure=True)
                return [CaseOutcome(failed) for _ in cases]
        finally:
            self._idle.put(sandbox)

    def map(self, fn: Callable[[T], list[CaseOutcome]], items: Sequence[T]) -> list[list[CaseOutcome]]:
        """``fn(item)`` for every item, spread over the pool's threads, in order.

        Args:
            fn: What to do with one item (typically a :meth:`run`).
            items: The items.

        """
        if len(items) <= 1:
            return [fn(item) for item in items]
        return list(self._executor.map(fn, items))

    def close(self) -> None:
        """Stop every sandbox."""
        if self._closed:
            return
        self._closed = True
        self._executor.shutdown(wait=True)
        while not self._idle.empty():
            self._idle.get().close()


_pools: dict[tuple[Isolation, int], SandboxPool] = {}
_lock = threading.Lock()


def shared_pool(rung: Isolation, size: int | None = None) -> SandboxPool:
    """The process-wide pool for a rung (closed at exit).

    Args:
        rung: The isolation rung.
        size: The pool's size when this call creates it; None for the number of CPUs.

    """
    key = (rung, size or 0)
    with _lock:
        pool = _pools.get(key)
        if pool is None or pool._closed:
            pool = _pools[key] = SandboxPool(rung, size)
        return pool


@atexit.register
def close_shared_pools() -> None:
    """Stop every shared pool's sandboxes (at exit, and in tests)."""
    with _lock:
        for pool in _pools.values():
            pool.close()
        _pools.clear()
