"""``evalsi_callback``: checkpoint evaluation inside a transformers ``Trainer`` (TRL's trainers take it too).

Example::

    from evalsi.training import CheckpointEvaluator, LoRA
    from evalsi.training.callback import evalsi_callback

    evaluator = CheckpointEvaluator("forgetting.yaml", training_run="grpo-1",
                                    serving=LoRA("http://localhost:8000/v1"), regression=["math-equiv:0.02"])
    trainer = GRPOTrainer(..., callbacks=[evalsi_callback(evaluator, stop_on_regression=True)])

What it does, on the main process (``state.is_world_process_zero``) only:

- On each save, ``output_dir/checkpoint-N`` is evaluated: on a background thread, one at a time and in order,
  or inside the save with ``wait=True``.
- ``every=N`` also evaluates every N steps between saves (the model is saved under
  ``output_dir/evalsi-eval/step-N`` for it); ``before_training`` evaluates the model before the first step
  (as the base, step None; not on a run resumed from a checkpoint), ``after_training`` the model after the
  last one. Those copies are deleted once evaluated (``keep_copies=True`` keeps them; a copy whose evaluation
  failed is kept, to evaluate it again).
- Each evaluation is logged once, as its own log entry attributed to its checkpoint's step (see
  :func:`trainer_logs`): at the end of the training step in which it finished, or during the save with
  ``wait=True``, and at the end of training for those still pending. The entry goes to every callback's
  ``on_log`` (so to each reporting integration: W&B, TensorBoard, MLflow...) with the checkpoint's step as
  ``state.global_step``, and to ``state.log_history``.
- Training stops at the next step after a regression (``stop_on_regression``) or once ``stop_file`` exists (the
  file ``evalsi checkpoints watch --stop-file`` writes). ``evalsi_callback(None, stop_file=PATH)`` only watches it.
- Pending evaluations finish before ``train()`` returns.
- With ``monitor=`` (the :class:`~evalsi.monitors.Monitor` given to the reward functions), each evaluation's
  held-out values (``heldout_metric``, ``<spec>/<metric>``; by default the first spec's first metric) are paired
  with the first evaluation's: ``monitor/reward_vs_heldout`` is logged with the evaluation, and training stops
  once the monitor writes its stop file (the monitor's ``stop_file`` is watched).

``save_total_limit`` deletes old checkpoints inside the next save, which can be before a queued one is evaluated:
with it set, the callback evaluates inside the save (``wait=True``) or refuses to start.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import logging
import shutil
import sys
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from evalsi.monitors import Monitor, metrics
from evalsi.training._monitoring import heldout_values
from evalsi.training._runner import CheckpointEvaluatorLike, CheckpointRunner, Step, StepOutcome

log = logging.getLogger("evalsi.training")

__all__ = ["evalsi_callback", "trainer_logs"]

COPIES_DIR = "evalsi-eval"
"""Under the trainer's ``output_dir``: the models evalsi saves itself (``every``, before and after training)."""


def _transformers() -> Any:
    try:
        return importlib.import_module("transformers")
    except ModuleNotFoundError:
        raise ModuleNotFoundError("evalsi_callback needs transformers: pip install 'evalsi[trl]'") from None


def evalsi_callback(
    evaluator: CheckpointEvaluatorLike | None,
    stop_file: str | Path | None = None,
    stop_on_regression: bool = False,
    wait: bool = False,
    every: int | None = None,
    before_training: bool = False,
    after_training: bool = False,
    raise_errors: bool = False,
    keep_copies: bool = False,
    monitor: Monitor | None = None,
    heldout_metric: str | None = None,
) -> Any:
    """A ``transformers.TrainerCallback`` that evaluates checkpoints with ``evaluator`` (see the module doc).

    Args:
        evaluator: What evaluates a checkpoint directory (``evaluate(path, step)``); None only watches
            ``stop_file``.
        stop_file: Stop training at the next step once this file exists.
        stop_on_regression: Stop training at the next step after an evaluation found a regression.
        wait: Evaluate inside the save; training waits for each evaluation.
        every: Also evaluate every this many steps (between saves too).
        before_training: Evaluate the model before the first step, as the base (step None); not when training
            resumes from a checkpoint, whose model is not the one training began with.
        after_training: Evaluate the model after the last step.
        raise_errors: Fail ``train()`` at its end when an evaluation failed (by default: logged and kept).
        keep_copies: Keep the models saved under ``output_dir/evalsi-eval`` for ``every``, ``before_training``
            and ``after_training`` (by default each is deleted once it is evaluated).
        monitor: The training monitors the reward functions feed: each evaluation's held-out values go to them,
            and their stop file is watched (when ``stop_file`` is not given).
        heldout_metric: ``<spec>/<metric>`` the monitors pair across evaluations (default: the first).

    Raises:
        ValueError: ``every`` is not a positive number, or no evaluator is given and there is nothing to watch.

    """
    if every is not None and every < 1:
        raise ValueError(f"every must be a positive number of steps, got {every}")
    if stop_file is None and monitor is not None and monitor.stop_file is not None:
        stop_file = monitor.stop_file
    if evaluator is None and stop_file is None:
        raise ValueError("give an evaluator, or a stop_file to watch (evalsi_callback(None, stop_file=PATH))")
    base = _transformers().TrainerCallback
    callback_class = type("EvalsiCallback", (_EvalsiCallbackMixin, base), {"__doc__": _EvalsiCallbackMixin.__doc__})
    return callback_class(
        evaluator,
        stop_file,
        stop_on_regression,
        wait,
        every,
        before_training,
        after_training,
        raise_errors,
        keep_copies,
        monitor,
        heldout_metric,
    )


def trainer_logs(step: Step, outcome: StepOutcome) -> dict[str, float]:
    """One evaluation as a transformers log entry: ``eval_<spec>/<metric>`` and ``eval_step``.

    transformers names its own evaluation metrics ``eval_<name>`` in logs and ``state.log_history``, and its
    reporting callbacks (W&B, TensorBoard, Comet...) show them as ``eval/<name>``; evalsi's metrics follow the same
    rule, so they appear as ``eval/<spec>/<metric>`` beside ``eval/loss`` (MLflow keeps the names as given).
    ``eval_step`` is the checkpoint's step (0 for the base model), an explicit x-axis for plots, e.g. W&B's
    ``define_metric("eval/*", step_metric="eval/step")``.

    Args:
        step: The checkpoint's step (0 for the base model).
        outcome: The evaluation's outcome.

    Example:
        >>> class Outcome:
        ...     regressed = False
        ...     def log_metrics(self): return {"eval/math/math-equiv": 0.75}
        >>> trainer_logs(200, Outcome())
        {'eval_math/math-equiv': 0.75, 'eval_step': 200.0}

    """
    logs = {f"eval_{name.removeprefix('eval/')}": float(value) for name, value in outcome.log_metrics().items()}
    logs["eval_step"] = float(_at(step))
    return logs


def _at(step: Step) -> int:
    """The training step an evaluation is attributed to: the checkpoint's, 0 for the base model."""
    return 0 if step is None else step


class _EvalsiCallbackMixin:
    """Evaluates saved checkpoints with evalsi and stops training on a regression or a stop file."""

    def __init__(
        self,
        evaluator: CheckpointEvaluatorLike | None,
        stop_file: str | Path | None,
        stop_on_regression: bool,
        wait: bool,
        every: int | None,
        before_training: bool,
        after_training: bool,
        raise_errors: bool,
        keep_copies: bool = False,
        monitor: Monitor | None = None,
        heldout_metric: str | None = None,
    ) -> None:
        self.evaluator = evaluator
        self.monitor = monitor
        self.heldout_metric = heldout_metric
        # Relative to the working directory the callback was made in, whatever the trainer does to it later.
        self.stop_file = None if stop_file is None else Path(stop_file).absolute()
        self.stop_on_regression = stop_on_regression
        self.every = every
        self.before_training = before_training
        self.after_training = after_training
        self.keep_copies = keep_copies
        self.runner = None if evaluator is None else CheckpointRunner(evaluator, wait=wait, raise_errors=raise_errors)
        self._submitted: set[Step] = set()
        self._logged = 0
        self._handler: Any = None

    # -- events ---------------------------------------------------------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Refuse a retention that can delete a queued checkpoint; go first in the callback list; the baseline."""
        if self.runner is None:
            return
        if getattr(args, "save_total_limit", None) and not self.runner.wait:
            raise ValueError(
                f"save_total_limit={args.save_total_limit} deletes old checkpoints during the next save, which can "
                "be before a queued one is evaluated: use evalsi_callback(..., wait=True), or save_total_limit=None"
            )
        self._handler = _move_to_front(self)
        if self.before_training and state.is_world_process_zero:
            if state.global_step > 0:
                # Resumed from a checkpoint: the model in hand is that checkpoint's, not the one training began
                # with, and it must never be stored as the base (every step is compared with the base).
                log.warning(
                    "not evaluating the base: training resumed at step %d, so the model before training is not at "
                    "hand (the base results stored by the first run are kept)",
                    state.global_step,
                )
                return
            self._evaluate_model(args, kwargs, None, Path(args.output_dir) / COPIES_DIR / "base")
            self._report(args, state, control)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Submit the checkpoint the trainer just wrote (with ``wait``, log its evaluation now)."""
        if self.runner is None or not state.is_world_process_zero:
            return
        step = state.global_step
        if step in self._submitted:
            return
        self._submitted.add(step)
        self.runner.submit(Path(args.output_dir) / f"checkpoint-{step}", step)
        self._report(args, state, control)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        """Evaluate every ``every`` steps, log the evaluations that finished, and stop when told to."""
        step = state.global_step
        if self.runner is not None and state.is_world_process_zero:
            saving = bool(getattr(control, "should_save", False)) or _saves_at(args, state, step)
            if self.every and step % self.every == 0 and not saving and step not in self._submitted:
                self._evaluate_model(args, kwargs, step, Path(args.output_dir) / COPIES_DIR / f"step-{step}")
            self._report(args, state, control)
        if self._should_stop():
            control.should_training_stop = True
        return control

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The final evaluation, then wait for every pending one and log them (before the loggers close)."""
        if self.runner is None or not state.is_world_process_zero:
            return
        try:
            if self.after_training and state.global_step not in self._submitted:
                self._evaluate_model(
                    args, kwargs, state.global_step, Path(args.output_dir) / COPIES_DIR / f"step-{state.global_step}"
                )
        finally:
            try:
                self.runner.close()
            finally:
                self._report(args, state, control)

    # -- helpers --------------------------------------------------------------------------------------------------

    def _report(self, args: Any, state: Any, control: Any) -> None:
        """Log each evaluation finished since the last call, as ``Trainer.log`` would at the checkpoint's step.

        One entry per evaluation, never merged with another: ``state.log_history`` gets it with ``step`` set to
        the checkpoint's step, and every callback's ``on_log`` gets it with a copy of ``state`` whose
        ``global_step`` is that step (the reporting integrations take the step from there). It runs on the
        training thread, as the integrations expect (MLflow's active run is per thread).
        """
        if self.runner is None or not state.is_world_process_zero:
            return
        fresh = self.runner.new_results(self._logged)
        self._logged += len(fresh)
        for step, outcome in fresh:
            logs = trainer_logs(step, outcome)
            logs.update(self._heldout(step, outcome))
            state.log_history.append({**logs, "step": _at(step)})
            if self._handler is None:
                continue
            at_step = copy.copy(state)
            at_step.global_step = _at(step)
            try:
                self._handler.call_event("on_log", args, at_step, control, logs=logs)
            except Exception as exc:  # a logger's failure must not end training, nor lose the other entries
                log.error("logging the evaluation of step %s failed: %s", _at(step), exc, exc_info=exc)

    def _heldout(self, step: Step, outcome: StepOutcome) -> dict[str, float]:
        """Feed an evaluation's held-out values to the monitors; their ``reward_vs_heldout`` as log metrics."""
        if self.monitor is None:
            return {}
        values = heldout_values(outcome, self.heldout_metric)
        if values is None:
            return {}
        return metrics([self.monitor.observe_heldout(_at(step), values)])

    def _should_stop(self) -> bool:
        if self.stop_file is not None and self.stop_file.exists():
            log.warning("stopping training: the stop file %s exists", self.stop_file)
            return True
        if self.stop_on_regression and self.runner is not None and self.runner.regressed:
            log.warning("stopping training: a checkpoint regressed")
            return True
        return False

    def _evaluate_model(self, args: Any, kwargs: Mapping[str, Any], step: Step, where: Path) -> None:
        """Save the live model (and its tokenizer) to ``where`` and submit it; delete the copy once evaluated."""
        assert self.runner is not None
        model = kwargs.get("model")
        if model is None:
            log.error("cannot evaluate step %s: the trainer passed no model to the callback", step)
            return
        where.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(where)
        processor = kwargs.get("processing_class") or kwargs.get("tokenizer")
        if processor is not None and hasattr(processor, "save_pretrained"):
            processor.save_pretrained(where)
        self._submitted.add(step)
        future = self.runner.submit(where, step)
        if not self.keep_copies:
            future.add_done_callback(lambda done: _remove_copy(where, done))


def _remove_copy(where: Path, done: Future[StepOutcome]) -> None:
    """Delete a model copy evalsi saved, once evaluated; keep it when the evaluation failed (to run it again)."""
    if done.exception() is not None:
        log.warning("kept %s: its evaluation failed (evaluate it again with `evalsi checkpoints eval`)", where)
        return
    shutil.rmtree(where, ignore_errors=True)
    with contextlib.suppress(OSError):
        where.parent.rmdir()  # evalsi-eval/, once it holds nothing more


def _saves_at(args: Any, state: Any, step: int) -> bool:
    """Whether the trainer saves a checkpoint at this step (its flow callback may decide after this one runs)."""
    strategy = getattr(args.save_strategy, "value", args.save_strategy)
    save_steps = getattr(state, "save_steps", 0) or 0
    return strategy == "steps" and save_steps > 0 and step % save_steps == 0


def _move_to_front(callback: object) -> Any:
    """Put ``callback`` first in the trainer's callback list, and return the handler that keeps the list.

    At the end of training the reporting callbacks (W&B, TensorBoard, MLflow) close their runs in their own
    ``on_train_end``; going first, this callback logs the last evaluations before that. The handler is the caller
    of the event (``CallbackHandler.call_event``); this callback sends its log entries through it.
    """
    frame = sys._getframe(2)  # on_train_begin <- call_event (the handler's method)
    while frame is not None:
        handler = frame.f_locals.get("self")
        callbacks = getattr(handler, "callbacks", None)
        if isinstance(callbacks, list) and callback in callbacks:
            callbacks.remove(callback)
            callbacks.insert(0, callback)
            return handler
        frame = frame.f_back  # type: ignore[assignment]
    log.warning("could not find the trainer's callback list; evaluation metrics reach the log history only")
    return None
