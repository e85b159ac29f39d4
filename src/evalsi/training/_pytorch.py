"""``PyTorchCheckpointHook``: save a state dictionary atomically and evaluate it, from a plain PyTorch loop.

Example::

    with PyTorchCheckpointHook(evaluator) as hook:
        for step in range(1, steps + 1):
            train_step(...)
            if step % 100 == 0:
                hook.save(model, f"checkpoints/step-{step}.pt", step, optimizer=optimizer)

``log=`` receives each evaluation once, on the training thread, with the checkpoint's step: at the next ``save``
or ``log_results()`` after it finished (with ``wait=True``, inside its own ``save``), and at the end of the
``with`` block for those still pending. For example, TensorBoard::

    writer = SummaryWriter()
    def to_tensorboard(metrics, step):
        for name, value in metrics.items():
            writer.add_scalar(name, value, step)

    with PyTorchCheckpointHook(evaluator, log=to_tensorboard) as hook: ...

(W&B: ``log=lambda metrics, step: wandb.log(metrics)`` with ``wandb.define_metric("eval/*",
step_metric="eval/step")``; MLflow: ``log=lambda metrics, step: mlflow.log_metrics(metrics, step=step)``.)

Under distributed training every rank calls ``save``; only rank zero writes and evaluates (the others return at
once). Sharded training (FSDP) must gather the full state on rank zero before calling it. The file holds
``{"model": ..., "step": ...}`` (and ``"optimizer"`` when given), as training loops save it;
``Transformers(base_model=...)`` serves it (and Lightning's ``.ckpt`` layout, ``{"state_dict": ...}``).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from evalsi.training._publish import publishing
from evalsi.training._runner import CheckpointEvaluatorLike, CheckpointRunner, StepOutcome

log = logging.getLogger("evalsi.training")

LogMetrics = Callable[[dict[str, float], int], None]
"""``log(metrics, step)``: an evaluation's ``eval/<spec>/<metric>`` means and ``eval/step``, at its step."""


def _torch() -> Any:
    try:
        return importlib.import_module("torch")
    except ModuleNotFoundError:
        raise ModuleNotFoundError("PyTorchCheckpointHook needs torch: pip install 'evalsi[torch]'") from None


def global_rank(torch: Any) -> int:
    """The rank of the calling process under ``torch.distributed`` (0 when it is not initialised)."""
    distributed = getattr(torch, "distributed", None)
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        return int(distributed.get_rank())
    return 0


class PyTorchCheckpointHook:
    """Saves state dictionaries atomically and evaluates each one, in the background unless ``wait``.

    Args:
        evaluator: What evaluates a saved checkpoint (``evaluate(path, step)``), e.g. a
            :class:`~evalsi.training.CheckpointEvaluator` serving state dictionaries through ``StateDict``.
        wait: Evaluate inside ``save`` (training waits) instead of on a background thread.
        raise_errors: Raise on exit when an evaluation failed (by default failures are logged and kept).
        log: Called with each evaluation's metrics and its checkpoint's step, once, on the training thread
            (see the module doc).

    """

    def __init__(
        self,
        evaluator: CheckpointEvaluatorLike,
        *,
        wait: bool = False,
        raise_errors: bool = False,
        log: LogMetrics | None = None,
    ) -> None:
        self.runner = CheckpointRunner(evaluator, wait=wait, raise_errors=raise_errors)
        self.log = log
        self._logged = 0

    def save(self, model: Any, path: str | Path, step: int, optimizer: Any = None) -> Path | None:
        """Publish ``model``'s state dictionary at ``path`` and submit it for evaluation (rank zero only).

        Use a new path for every step: a path that is reused may be overwritten while it is still queued.

        Args:
            model: The model (a ``DistributedDataParallel`` wrapper is unwrapped).
            path: Where to write the checkpoint.
            step: The training step.
            optimizer: An optimizer whose state is saved too, if given.

        Returns:
            The path written, or None on a rank other than zero.

        """
        torch = _torch()
        if global_rank(torch) != 0:
            return None
        module = getattr(model, "module", model)  # DistributedDataParallel wraps the model
        payload: dict[str, Any] = {"model": module.state_dict(), "step": step}
        if optimizer is not None:
            payload["optimizer"] = optimizer.state_dict()
        with publishing(path) as handle:
            torch.save(payload, handle)
        self.runner.submit(path, step)
        self.log_results()
        return Path(path)

    def log_results(self) -> None:
        """Hand each evaluation finished since the last call to ``log`` (call it every step to log sooner)."""
        if self.log is None:
            return
        fresh = self.runner.new_results(self._logged)
        self._logged += len(fresh)
        for step, outcome in fresh:
            at = 0 if step is None else step
            metrics = {name: float(value) for name, value in outcome.log_metrics().items()}
            metrics["eval/step"] = float(at)
            try:
                self.log(metrics, at)
            except Exception as exc:  # a logger's failure must not end training, nor lose the other entries
                log.error("logging the evaluation of step %s failed: %s", at, exc, exc_info=exc)

    @property
    def regressed(self) -> bool:
        """Whether an evaluation so far found a regression (check it to stop training)."""
        return self.runner.regressed

    @property
    def results(self) -> list[tuple[int | None, StepOutcome]]:
        """Every finished evaluation, in step order."""
        return list(self.runner.results)

    def drain(self) -> None:
        """Wait for every queued evaluation."""
        self.runner.drain()

    def __enter__(self) -> PyTorchCheckpointHook:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        try:
            self.runner.__exit__(kind, value, traceback)
        finally:
            self.log_results()
