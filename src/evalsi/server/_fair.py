"""Fair shares of a thread pool: one project's slow work cannot occupy every worker.

A :class:`FairPool` runs at most ``share`` tasks of one project at once; the project's further tasks wait in
its own queue, holding no thread, so another project's tasks still find a free worker however many calls the
first one has queued (a never-answering upstream holds at most its project's share). A queued task whose future
is cancelled is dropped without running.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
_Task = tuple["Future[Any]", Callable[..., Any], tuple[Any, ...]]


def share_of(workers: int, fraction: float) -> int:
    """Tasks one project may run at once in a pool of ``workers``: at least one."""
    return max(1, min(workers, int(workers * fraction)))


class FairPool:
    """A thread pool of ``workers`` threads where each project runs at most ``share`` tasks at once."""

    def __init__(self, workers: int, share: int, name: str) -> None:
        self.workers = workers
        self.share = share
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix=name)
        self._lock = threading.Lock()
        self._running: dict[str, int] = {}
        self._queued: dict[str, deque[_Task]] = {}

    def submit(self, project: str, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Run ``fn(*args)`` for ``project`` once it is under its share (its queue is first in, first out)."""
        future: Future[T] = Future()
        task: _Task = (future, fn, args)
        with self._lock:
            running = self._running.get(project, 0)
            if running >= self.share:
                self._queued.setdefault(project, deque()).append(task)
                return future
            self._running[project] = running + 1
        try:
            inner = self._pool.submit(self._run, project, task)
        except RuntimeError:  # shut down
            self._finished(project)
            future.cancel()
            return future
        inner.add_done_callback(lambda done: future.cancel() if done.cancelled() else None)
        return future

    def running(self, project: str) -> int:
        """Tasks of ``project`` running now (or handed to a thread)."""
        with self._lock:
            return self._running.get(project, 0)

    def queued(self, project: str) -> int:
        """Tasks of ``project`` waiting for its share."""
        with self._lock:
            return len(self._queued.get(project, ()))

    def for_project(self, project: str) -> Executor:
        """An executor that submits every task as ``project``'s."""
        return _ProjectExecutor(self, project)

    def _run(self, project: str, task: _Task | None) -> None:
        """Run the task, then the project's next queued ones on this thread while it has any."""
        while task is not None:
            future, fn, args = task
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args)
                except BaseException as exc:
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            task = self._next(project)

    def _next(self, project: str) -> _Task | None:
        with self._lock:
            queue = self._queued.get(project)
            while queue:
                task = queue.popleft()
                if not task[0].cancelled():
                    return task
            self._queued.pop(project, None)
            self._finished_locked(project)
            return None

    def _finished(self, project: str) -> None:
        with self._lock:
            self._finished_locked(project)

    def _finished_locked(self, project: str) -> None:
        left = self._running.get(project, 1) - 1
        if left > 0:
            self._running[project] = left
        else:
            self._running.pop(project, None)

    def shutdown(self) -> None:
        """Drop queued tasks and stop taking new ones; running tasks finish on their threads (not waited for)."""
        with self._lock:
            queued = [task for queue in self._queued.values() for task in queue]
            self._queued.clear()
        for future, _, _ in queued:
            future.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)


class _ProjectExecutor(Executor):
    """One project's view of a :class:`FairPool` (what :class:`evalsi.engine.Pools` takes)."""

    def __init__(self, pool: FairPool, project: str) -> None:
        self._fair = pool
        self._project = project

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Submit ``fn`` as this project's task."""
        if kwargs:
            return self._fair.submit(self._project, lambda: fn(*args, **kwargs))
        return self._fair.submit(self._project, fn, *args)
