"""``lightning_checkpoint_callback``: Lightning's ``ModelCheckpoint`` that evaluates every checkpoint it writes.

Evaluation starts after the real save (``ModelCheckpoint._save_checkpoint`` has written the file; a callback's
``on_save_checkpoint`` runs before that), on global rank zero only. It drains at the end of training and when
training fails. In the background mode every checkpoint is kept (``save_top_k=-1``, no ``save_last``), so
top-k retention cannot delete a file that is still queued for evaluation.

Each evaluation goes to every logger of the trainer (``trainer.loggers``) once, at the checkpoint's step:
``eval/<spec>/<metric>`` and ``eval/step``, logged on the training thread at the end of the batch in which it
finished (with ``wait=True``, the batch that saved it), and at the end of training (or when it fails) for those
still pending.

Example::

    callback = lightning_checkpoint_callback(
        evaluator, dirpath="checkpoints", every_n_train_steps=100, save_on_train_epoch_end=False,
    )
    trainer = lightning.Trainer(callbacks=[callback])
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType
from typing import Any

from evalsi.training._runner import CheckpointEvaluatorLike, CheckpointRunner, Step, StepOutcome

log = logging.getLogger("evalsi.training")


def lightning_module() -> ModuleType:
    """``lightning.pytorch`` when the ``lightning`` package is installed, else ``pytorch_lightning``."""
    for name in ("lightning.pytorch", "pytorch_lightning"):
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    raise ModuleNotFoundError(
        "lightning_checkpoint_callback needs PyTorch Lightning: pip install 'evalsi[lightning]' (or pytorch-lightning)"
    )


def lightning_checkpoint_callback(
    evaluator: CheckpointEvaluatorLike,
    *,
    wait: bool = False,
    raise_errors: bool = False,
    stop_on_regression: bool = False,
    **checkpoint_options: Any,
) -> Any:
    """A ``ModelCheckpoint`` (same options) that evaluates each checkpoint after it is written.

    Args:
        evaluator: What evaluates a saved ``.ckpt`` (``evaluate(path, step)``).
        wait: Evaluate inside the save (training waits); otherwise on a background thread, in order.
        raise_errors: Fail training at its end when an evaluation failed (by default: logged and kept).
        stop_on_regression: Stop training at the next step after an evaluation found a regression.
        checkpoint_options: Passed to ``ModelCheckpoint`` (``dirpath``, ``every_n_train_steps``, ...).

    Raises:
        ValueError: Background mode with a retention that can delete a queued checkpoint (``save_top_k`` other
            than -1, or ``save_last``).

    """
    pl = lightning_module()
    if not wait:
        top_k = checkpoint_options.get("save_top_k", -1)
        if top_k != -1 or checkpoint_options.get("save_last"):
            raise ValueError(
                "evaluating in the background keeps every checkpoint (save_top_k=-1, no save_last) so that a queued "
                f"one cannot be deleted before it is evaluated; got save_top_k={top_k}, "
                f"save_last={checkpoint_options.get('save_last')!r}. Use wait=True to evaluate during the save."
            )
        checkpoint_options["save_top_k"] = -1
    callback_class = _evaluating_checkpoint_class(pl)
    return callback_class(evaluator, wait, raise_errors, stop_on_regression, **checkpoint_options)


def logger_metrics(step: Step, outcome: StepOutcome) -> dict[str, float]:
    """One evaluation as a Lightning logger's metrics: ``eval/<spec>/<metric>`` and ``eval/step``.

    ``eval/step`` is the checkpoint's step (0 for the base model), an explicit x-axis for plots (W&B's
    ``define_metric("eval/*", step_metric="eval/step")``); the metrics are also logged at that step.

    Example:
        >>> class Outcome:
        ...     regressed = False
        ...     def log_metrics(self): return {"eval/math/math-equiv": 0.75}
        >>> logger_metrics(200, Outcome())
        {'eval/math/math-equiv': 0.75, 'eval/step': 200.0}

    """
    metrics = {name: float(value) for name, value in outcome.log_metrics().items()}
    metrics["eval/step"] = float(_at(step))
    return metrics


def _at(step: Step) -> int:
    return 0 if step is None else step


_classes: dict[str, type[Any]] = {}


def _evaluating_checkpoint_class(pl: ModuleType) -> type[Any]:
    """The ``ModelCheckpoint`` subclass for this Lightning package (made once; it depends on which is installed)."""
    cached = _classes.get(pl.__name__)
    if cached is not None:
        return cached
    base: type[Any] = pl.callbacks.ModelCheckpoint

    class EvaluatingModelCheckpoint(base):  # type: ignore[misc]
        """``ModelCheckpoint`` that submits each written checkpoint to a :class:`CheckpointRunner`."""

        def __init__(
            self,
            evaluator: CheckpointEvaluatorLike,
            wait: bool,
            raise_errors: bool,
            stop_on_regression: bool,
            **options: Any,
        ) -> None:
            super().__init__(**options)
            self.runner = CheckpointRunner(evaluator, wait=wait, raise_errors=raise_errors)
            self.stop_on_regression = stop_on_regression
            self._logged = 0

        def _save_checkpoint(self, trainer: Any, filepath: str) -> None:
            super()._save_checkpoint(trainer, filepath)
            if trainer.is_global_zero:
                self.runner.submit(filepath, trainer.global_step)

        def on_train_batch_end(self, trainer: Any, *args: Any, **kwargs: Any) -> None:
            super().on_train_batch_end(trainer, *args, **kwargs)
            if trainer.is_global_zero:
                self._log_results(trainer)
            if self.stop_on_regression and self.runner.regressed:
                trainer.should_stop = True

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            super().on_train_end(trainer, pl_module)
            if trainer.is_global_zero:
                try:
                    self.runner.close()
                finally:
                    self._log_results(trainer)

        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            super().on_exception(trainer, pl_module, exception)
            if trainer.is_global_zero:
                try:
                    self.runner.__exit__(type(exception), exception, exception.__traceback__)
                finally:
                    self._log_results(trainer)

        def _log_results(self, trainer: Any) -> None:
            """Log each evaluation finished since the last call to every logger, at its checkpoint's step."""
            fresh = self.runner.new_results(self._logged)
            self._logged += len(fresh)
            for step, outcome in fresh:
                metrics = logger_metrics(step, outcome)
                for logger in trainer.loggers:
                    try:
                        logger.log_metrics(metrics, step=_at(step))
                        logger.save()
                    except Exception as exc:  # a logger's failure must not end training, nor lose other entries
                        log.error("logging the evaluation of step %s failed: %s", _at(step), exc, exc_info=exc)

    _classes[pl.__name__] = EvaluatingModelCheckpoint
    return EvaluatingModelCheckpoint
