"""Many environments of one task at once: one snapshot (setup once), one sandbox per environment.

Rollout workers share a pool: each takes an idle environment for an episode and gives it back. Every environment
holds one warm sandbox (one uid slot of the sandbox's slots) for its life, so the pool's size is bounded the same
way as a sandbox pool's: by default one per CPU, never more than the sandbox slots.
"""

from __future__ import annotations

import contextlib
import os
import queue
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from evalsi.sandbox import MAX_SANDBOXES
from evalsi_harness._environment import Snapshot
from evalsi_harness._task import Task, load_task
from evalsi_harness.gym import TaskEnv

T = TypeVar("T")
R = TypeVar("R")


class TaskEnvPool:
    """``size`` environments of one task (default: one per CPU) over one snapshot; a context manager.

    Args:
        task: The task, or its YAML file.
        size: How many environments; one per CPU when None.

    Raises:
        ValueError: ``size`` is not between 1 and the number of sandbox slots.

    """

    def __init__(self, task: Task | str | Path, size: int | None = None) -> None:
        self.task = task if isinstance(task, Task) else load_task(task)
        self.size = size or os.cpu_count() or 1
        if not 1 <= self.size < MAX_SANDBOXES:
            raise ValueError(f"size must be between 1 and {MAX_SANDBOXES - 1} (one sandbox each), got {self.size}")
        self.snapshot = Snapshot(self.task)
        self.envs: list[TaskEnv] = []
        self._idle: queue.Queue[TaskEnv] = queue.Queue()
        try:
            for _ in range(self.size):
                env = TaskEnv(self.task, snapshot=self.snapshot)
                self.envs.append(env)
                self._idle.put(env)
        except BaseException:
            self.close()
            raise
        self._executor = ThreadPoolExecutor(self.size, thread_name_prefix=f"evalsi-task-{self.task.name}")

    @contextlib.contextmanager
    def acquire(self, timeout: float | None = None) -> Iterator[TaskEnv]:
        """An idle environment for the length of the block (waits for one; ``queue.Empty`` past ``timeout``).

        Args:
            timeout: Seconds to wait for one; None waits for as long as it takes.

        """
        env = self._idle.get(timeout=timeout)
        try:
            yield env
        finally:
            self._idle.put(env)

    def map(self, fn: Callable[[TaskEnv, T], R], items: Sequence[T]) -> list[R]:
        """``fn(env, item)`` for every item, on as many environments at once as the pool has, in order.

        Args:
            fn: What to run on an environment, given one item.
            items: The items.

        Returns:
            ``fn``'s results, in the items' order.

        """

        def one(item: T) -> R:
            with self.acquire() as env:
                return fn(env, item)

        return list(self._executor.map(one, items))

    def close(self) -> None:
        """Stop every environment and remove the snapshot."""
        executor = getattr(self, "_executor", None)
        if executor is not None:
            executor.shutdown(wait=True)
        for env in self.envs:
            env.close()
        self.snapshot.close()

    def __enter__(self) -> TaskEnvPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
