"""Evaluating checkpoints from inside a training loop: one background thread, one checkpoint at a time, in order.

The trainer hands each saved checkpoint to :meth:`CheckpointRunner.submit` and goes on training; the runner
evaluates them in the order they were saved. With ``wait=True`` ``submit`` returns only once that checkpoint
is evaluated. :meth:`drain` waits for every pending evaluation (call it before training returns).
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from evalsi.training._evaluator import StepResult

log = logging.getLogger(__name__)


class Evaluator(Protocol):
    """Anything that evaluates a checkpoint at a step (``CheckpointEvaluator`` does)."""

    def evaluate(self, checkpoint: str | Path, step: int | None = None) -> StepResult:
        """Evaluate one checkpoint."""
        ...


@dataclass
class Submitted:
    """A checkpoint handed to the runner, and what became of it."""

    checkpoint: Path
    step: int
    result: StepResult | None = None
    error: str | None = None


class CheckpointRunner:
    """Evaluates submitted checkpoints on one background thread, in submission order."""

    def __init__(self, evaluator: Evaluator, *, wait: bool = False) -> None:
        self.evaluator = evaluator
        self.wait = wait
        self.done: list[Submitted] = []
        self._queue: queue.Queue[Submitted | None] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def regressed(self) -> bool:
        """Whether an evaluated checkpoint regressed."""
        with self._lock:
            return any(s.result is not None and s.result.regressed for s in self.done)

    def submit(self, checkpoint: str | Path, step: int) -> Submitted:
        """Queue a checkpoint (and, with ``wait``, evaluate it before returning)."""
        item = Submitted(Path(checkpoint), step)
        if self.wait:
            self._evaluate(item)
            return item
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._work, name="evalsi-checkpoints", daemon=True)
            self._thread.start()
        self._queue.put(item)
        return item

    def drain(self, timeout: float | None = None) -> list[Submitted]:
        """Wait until every submitted checkpoint is evaluated; returns them all, in order."""
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout)
        with self._lock:
            return list(self.done)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            self._evaluate(item)

    def _evaluate(self, item: Submitted) -> None:
        try:
            item.result = self.evaluator.evaluate(item.checkpoint, item.step)
        except Exception as exc:  # an evaluation failure must not kill the training run
            item.error = f"{type(exc).__name__}: {exc}"
            log.error("evaluating %s (step %s) failed: %s", item.checkpoint, item.step, item.error)
        with self._lock:
            self.done.append(item)
