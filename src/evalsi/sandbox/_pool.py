"""The sandbox pool: one warm sandbox per core, programs spread over them.

Each sandbox is used by one thread at a time; the threads mostly wait on sockets, so the host's GIL is not the
bottleneck. A sandbox is restarted after ``recycle_after`` programs, and whenever it failed.

A program whose cases would otherwise run one after another on one sandbox while others sit idle (one rollout
scored alone, or a batch of fewer programs than sandboxes) has its cases split over the idle sandboxes: each is
sent its run of consecutive cases from the calling thread, and the answers are read after, so the runs go at
once on as many cores. A batch of at least as many programs as sandboxes gives each program one sandbox.
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
from evalsi.sandbox._sandbox import MAX_CALL_CASES_PER_REQUEST, Case, CaseOutcome, Pending, Sandbox
from evalsi.sandbox._types import Isolation, Limits, RunResult

T = TypeVar("T")
MIN_SHARE = 2
"""The fewest cases a sandbox is given when a program's cases are split: a program of two or three cases stays on
one sandbox, where its cases share a work dir as they run one after another."""


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
        self._width = threading.local()
        """Per thread, the most sandboxes one program may take (set by :meth:`map` for its items)."""

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
        first = self._idle.get()
        taken = [first]
        try:
            self._recycle(first)
            if fresh:
                return self._fresh(first, source, cases, limits, files)
            for sandbox in self._spare(cases):
                taken.append(sandbox)
                self._recycle(sandbox)
            if len(taken) == 1:
                try:
                    return first.run(source, cases, limits, files)
                except SandboxError as exc:
                    return _failed(exc, len(cases))
            return _spread(taken, source, cases, limits, files or {})
        finally:
            for sandbox in taken:
                self._idle.put(sandbox)

    def _recycle(self, sandbox: Sandbox) -> None:
        """Restart a sandbox (at its next use) once it has run ``recycle_after`` programs."""
        if sandbox.programs_run >= self.recycle_after:
            sandbox.close()
            sandbox.programs_run = 0

    def _fresh(
        self, sandbox: Sandbox, source: str | None, cases: list[Case], limits: Limits, files: dict[str, str] | None
    ) -> list[CaseOutcome]:
        """The slow baseline: every case on a sandbox started for it alone."""
        out: list[CaseOutcome] = []
        try:
            for case in cases:
                sandbox.close()
                out.extend(sandbox.run(source, [case], limits, files))
            sandbox.close()
        except SandboxError as exc:
            return _failed(exc, len(cases))
        return out

    def _spare(self, cases: list[Case]) -> list[Sandbox]:
        """Idle sandboxes (none waited for) to share a program's cases with the one it has, within its width."""
        width = min(getattr(self._width, "value", self.size), len(cases) // MIN_SHARE)
        if sum(c.kind == "call" for c in cases) > MAX_CALL_CASES_PER_REQUEST:
            width = 1  # such a program is sent in several requests, one after another: it stays on one sandbox
        spare: list[Sandbox] = []
        while len(spare) < width - 1:
            try:
                spare.append(self._idle.get_nowait())
            except queue.Empty:
                break
        return spare

    def map(self, fn: Callable[[T], list[CaseOutcome]], items: Sequence[T]) -> list[list[CaseOutcome]]:
        """``fn(item)`` for every item, spread over the pool's threads, in order.

        Args:
            fn: What to do with one item (typically a :meth:`run`).
            items: The items.

        """
        if len(items) <= 1:
            return [fn(item) for item in items]
        width = max(1, self.size // len(items))

        def one(item: T) -> list[CaseOutcome]:
            self._width.value = width  # a program takes no more than its part of the pool
            return fn(item)

        return list(self._executor.map(one, items))

    def close(self) -> None:
        """Stop every sandbox."""
        if self._closed:
            return
        self._closed = True
        self._executor.shutdown(wait=True)
        while not self._idle.empty():
            self._idle.get().close()


def _spread(
    sandboxes: list[Sandbox], source: str | None, cases: list[Case], limits: Limits, files: dict[str, str]
) -> list[CaseOutcome]:
    """One program's cases split in order over ``sandboxes``, which run their shares at once; outcomes in order.

    Every share is sent before any answer is read (sandboxes already running first, so a cold one starts while
    they work). A sandbox that cannot start fails its share's cases, as a pool's sandbox fails a whole program.
    """
    shares = _shares(cases, len(sandboxes))
    order = sorted(range(len(sandboxes)), key=lambda i: not sandboxes[i].alive)
    sent: dict[int, Pending] = {}
    results: dict[int, list[CaseOutcome]] = {}
    try:
        for i in order:
            try:
                sent[i] = sandboxes[i].submit(source, shares[i], limits, files, "wipe")
            except SandboxError as exc:
                results[i] = _failed(exc, len(shares[i]))
        for i in order:
            if i in sent:
                results[i] = sandboxes[i].collect(sent[i])
                del sent[i]
                sandboxes[i].programs_run += 1
    finally:
        for i in sent:  # an answer left unread: the sandbox is not reused with it in its channel
            sandboxes[i].close()
    return [outcome for i in range(len(sandboxes)) for outcome in results[i]]


def _shares(cases: list[Case], n: int) -> list[list[Case]]:
    """``cases`` cut in ``n`` runs of consecutive cases, their sizes differing by one at most."""
    size, extra = divmod(len(cases), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (i < extra)
        out.append(cases[start:end])
        start = end
    return out


def _failed(exc: SandboxError, cases: int) -> list[CaseOutcome]:
    failed = RunResult(None, "", "", 0.0, 0.0, "sandbox", detail=str(exc), infrastructure=True)
    return [CaseOutcome(failed) for _ in range(cases)]


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
