"""``CheckpointRunner``: evaluations of checkpoints on one background thread, one at a time, in submission order.

Training hands a checkpoint over and carries on; the runner evaluates it while the next steps train. A failed
evaluation is logged and kept (``failures``), never dropped silently, and stops nothing unless the runner was made
with ``raise_errors=True``. ``drain()`` waits for everything submitted: the trainer hooks call it before training
returns, on an exception too, so no evaluation is lost when a script ends.

With an evaluator that has a cadence (a :class:`~evalsi.training.CheckpointEvaluator` whose run specs set
``every``), a step no spec is due at is not evaluated (nor served), and the last step submitted is the final one:
when training ends (``close``), the specs it was not due for are evaluated at it too.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Protocol, runtime_checkable

from evalsi.errors import EvalsiError

log = logging.getLogger("evalsi.training")

Step = int | None
"""A training step, or None for the model before training (the base)."""


@runtime_checkable
class StepOutcome(Protocol):
    """What the hooks read of an evaluation's result."""

    @property
    def regressed(self) -> bool:
        """Whether a regression gate failed at this step."""
        ...

    def log_metrics(self) -> Mapping[str, float]:
        """The step's metrics under the names a trainer logs them (``eval/<spec>/<metric>``)."""
        ...


class CheckpointEvaluatorLike(Protocol):
    """Anything that evaluates a checkpoint: :class:`evalsi.training.CheckpointEvaluator`, or your own."""

    def evaluate(self, checkpoint: str | Path, step: Step) -> StepOutcome:
        """Evaluate the checkpoint saved at ``checkpoint`` for training step ``step``."""
        ...


@runtime_checkable
class CadencedEvaluator(Protocol):
    """An evaluator whose specs are due at some steps only (``every``), and all of them at the final step."""

    def due(self, step: Step, *, final: bool = False) -> list[str]:
        """The specs due at ``step`` (every spec when ``final``)."""
        ...

    def evaluate(self, checkpoint: str | Path, step: Step, *, final: bool = False) -> StepOutcome:
        """Evaluate the specs due at ``step`` (all of them when ``final``)."""
        ...


@dataclass(frozen=True)
class EvaluationFailure:
    """An evaluation that raised: which step, which checkpoint, and the exception."""

    step: Step
    checkpoint: str
    error: BaseException

    def __str__(self) -> str:
        step = "base" if self.step is None else self.step
        return f"step {step} ({self.checkpoint}): {type(self.error).__name__}: {self.error}"


class CheckpointEvaluationError(EvalsiError, RuntimeError):
    """One or more checkpoint evaluations failed (raised by ``drain`` only with ``raise_errors=True``).

    Args:
        failures: Each failed evaluation, with its step, checkpoint and error.

    """

    def __init__(self, failures: list[EvaluationFailure]) -> None:
        self.failures = failures
        listed = "; ".join(str(f) for f in failures)
        super().__init__(f"{len(failures)} checkpoint evaluation(s) failed: {listed}")


_Job = tuple[str, Step, bool, "Future[StepOutcome]"]
"""A checkpoint, its step, whether it is the final step, and the future of its outcome."""
_STOP = None


class CheckpointRunner:
    """Evaluates submitted checkpoints one at a time, in order: on a background thread, or inline with ``wait``.

    Args:
        evaluator: What evaluates a checkpoint (``evaluate(checkpoint, step)``).
        wait: Evaluate inside ``submit`` (the trainer waits) instead of on the background thread.
        raise_errors: Make ``drain`` raise :class:`CheckpointEvaluationError` when an evaluation failed. By default
            failures are logged and kept in ``failures``, and training goes on.
        on_result: Called (on the evaluating thread) with ``(step, outcome)`` after each evaluation.

    Example:
        >>> class Count:
        ...     def evaluate(self, checkpoint, step):
        ...         return Outcome(step)
        >>> class Outcome:
        ...     def __init__(self, step): self.step, self.regressed = step, step == 2
        ...     def log_metrics(self): return {"eval/demo/step": float(self.step)}
        >>> with CheckpointRunner(Count()) as runner:
        ...     _ = [runner.submit(f"ckpt-{n}", n) for n in (1, 2, 3)]
        >>> [r.step for _, r in runner.results], runner.regressed
        ([1, 2, 3], True)

    """

    def __init__(
        self,
        evaluator: CheckpointEvaluatorLike,
        *,
        wait: bool = False,
        raise_errors: bool = False,
        on_result: Callable[[Step, StepOutcome], None] | None = None,
    ) -> None:
        self.evaluator = evaluator
        self.wait = wait
        self.raise_errors = raise_errors
        self.on_result = on_result
        self.results: list[tuple[Step, StepOutcome]] = []
        """Every finished evaluation, in order."""
        self.failures: list[EvaluationFailure] = []
        """Every evaluation that raised, in order."""
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._reported = 0
        self._owed: tuple[str, Step] | None = None
        """The last step submitted, when some spec was not due at it: the final step owes that spec."""

    @property
    def regressed(self) -> bool:
        """Whether any finished evaluation found a regression."""
        with self._lock:
            return any(outcome.regressed for _, outcome in self.results)

    @property
    def pending(self) -> int:
        """Evaluations submitted and not finished yet."""
        return self._queue.unfinished_tasks

    def submit(self, checkpoint: str | Path, step: Step) -> Future[StepOutcome]:
        """Queue an evaluation (or run it now, with ``wait``); the future holds its outcome or its exception.

        A step no spec is due at (see the module doc) is not queued: the future holds the evaluator's outcome for
        it, which evaluates nothing, and it is not added to ``results``.

        Args:
            checkpoint: The checkpoint's path.
            step: Its training step; None for the base model.

        """
        future: Future[StepOutcome] = Future()
        due, owed = self._cadence(step)
        with self._lock:
            self._owed = (str(checkpoint), step) if owed else None
        if not due:
            log.info("step %s: no run spec is due at this step; not evaluated", _label(step))
            try:
                future.set_result(self.evaluator.evaluate(str(checkpoint), step))
            except Exception as exc:
                future.set_exception(exc)
            return future
        self._put(str(checkpoint), step, False, future)
        return future

    def _put(self, checkpoint: str, step: Step, final: bool, future: Future[StepOutcome]) -> None:
        if self.wait:
            self._evaluate(checkpoint, step, final, future)
            return
        self._ensure_thread()
        self._queue.put((checkpoint, step, final, future))

    def _cadence(self, step: Step) -> tuple[bool, bool]:
        """Whether any spec is due at ``step``, and whether some spec is not (the final step would owe it)."""
        if not isinstance(self.evaluator, CadencedEvaluator):
            return True, False
        due, every = self.evaluator.due(step), self.evaluator.due(step, final=True)
        return bool(due), len(due) < len(every)

    def finish(self) -> Future[StepOutcome] | None:
        """Training ended: evaluate the last step submitted against the specs that were not due at it.

        ``close`` calls it (not when training failed). Returns the final evaluation's future, or None when the last
        step owed nothing (every spec was due at it, or the evaluator has no cadence).
        """
        with self._lock:
            owed, self._owed = self._owed, None
        if owed is None:
            return None
        future: Future[StepOutcome] = Future()
        self._put(owed[0], owed[1], True, future)
        return future

    def drain(self) -> None:
        """Wait until every submitted evaluation has finished.

        Raises:
            CheckpointEvaluationError: With ``raise_errors``, when an evaluation failed since the last drain.

        """
        if self._thread is not None:
            self._queue.join()
        with self._lock:
            new = self.failures[self._reported :]
            self._reported = len(self.failures)
        if new and self.raise_errors:
            raise CheckpointEvaluationError(new)

    def close(self, *, final: bool = True) -> None:
        """Evaluate what the final step owes (``finish``, unless ``final`` is false), drain, stop the thread.

        Args:
            final: Evaluate what the final step owes before stopping (False: training did not finish).

        """
        try:
            if final:
                self.finish()
            self.drain()
        finally:
            thread = self._thread
            if thread is not None:
                self._queue.put(_STOP)
                thread.join()
                self._thread = None

    def new_results(self, seen: int) -> list[tuple[Step, StepOutcome]]:
        """The results finished after the first ``seen`` (for hooks that log each result once).

        Args:
            seen: How many results the caller has already handled.

        """
        with self._lock:
            return self.results[seen:]

    def __enter__(self) -> CheckpointRunner:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if kind is None:
            self.close()
            return
        # Training failed: still finish what was submitted (its last step was no final one), but let the
        # training error be the one raised.
        try:
            self.close(final=False)
        except CheckpointEvaluationError as exc:
            log.error("%s", exc)

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="evalsi-checkpoints", daemon=True)
                self._thread.start()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                self._evaluate(*item)
            finally:
                self._queue.task_done()

    def _evaluate(self, checkpoint: str, step: Step, final: bool, future: Future[StepOutcome]) -> None:
        try:
            if final and isinstance(self.evaluator, CadencedEvaluator):
                outcome = self.evaluator.evaluate(checkpoint, step, final=True)
            else:
                outcome = self.evaluator.evaluate(checkpoint, step)
        except Exception as exc:  # reported and kept: a failed evaluation must not kill training unasked
            log.error("evaluating checkpoint %s (step %s) failed: %s", checkpoint, _label(step), exc, exc_info=exc)
            with self._lock:
                self.failures.append(EvaluationFailure(step, checkpoint, exc))
            future.set_exception(exc)
            if self.wait and self.raise_errors:
                self.drain()
            return
        with self._lock:
            self.results.append((step, outcome))
        if outcome.regressed:
            log.warning("checkpoint %s (step %s) regressed", checkpoint, _label(step))
        if self.on_result is not None:
            try:
                self.on_result(step, outcome)
            except Exception as exc:
                log.error("the on_result hook failed for step %s: %s", _label(step), exc, exc_info=exc)
        future.set_result(outcome)


def _label(step: Step) -> str:
    return "base" if step is None else str(step)
