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
  (as the base, step None), ``after_training`` the model after the last one.
- Each result's metrics go into the trainer's own log as ``eval/<spec>/<metric>`` (and so to W&B, TensorBoard
  or MLflow, and ``trainer.state.log_history``).
- Training stops at the next step after a regression (``stop_on_regression``) or once ``stop_file`` exists (the
  file ``evalsi checkpoints watch --stop-file`` writes). ``evalsi_callback(None, stop_file=PATH)`` only watches it.
- Pending evaluations finish before ``train()`` returns.

``save_total_limit`` deletes old checkpoints inside the next save, which can be before a queued one is evaluated:
with it set, the callback evaluates inside the save (``wait=True``) or refuses to start.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalsi.training._runner import CheckpointEvaluatorLike, CheckpointRunner, Step, StepOutcome

log = logging.getLogger("evalsi.training")

__all__ = ["evalsi_callback"]


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
) -> Any:
    """A ``transformers.TrainerCallback`` that evaluates checkpoints with ``evaluator`` (see the module doc).

    Args:
        evaluator: What evaluates a checkpoint directory (``evaluate(path, step)``); None only watches
            ``stop_file``.
        stop_file: Stop training at the next step once this file exists.
        stop_on_regression: Stop training at the next step after an evaluation found a regression.
        wait: Evaluate inside the save; training waits for each evaluation.
        every: Also evaluate every this many steps (between saves too).
        before_training: Evaluate the model before the first step, as the base (step None).
        after_training: Evaluate the model after the last step.
        raise_errors: Fail ``train()`` at its end when an evaluation failed (by default: logged and kept).

    Raises:
        ValueError: ``every`` is not a positive number, or no evaluator is given and there is nothing to watch.

    """
    if every is not None and every < 1:
        raise ValueError(f"every must be a positive number of steps, got {every}")
    if evaluator is None and stop_file is None:
        raise ValueError("give an evaluator, or a stop_file to watch (evalsi_callback(None, stop_file=PATH))")
    base = _transformers().TrainerCallback
    callback_class = type("EvalsiCallback", (_EvalsiCallbackMixin, base), {"__doc__": _EvalsiCallbackMixin.__doc__})
    return callback_class(
        evaluator, stop_file, stop_on_regression, wait, every, before_training, after_training, raise_errors
    )


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
    ) -> None:
        self.evaluator = evaluator
        self.stop_file = None if stop_file is None else Path(stop_file)
        self.stop_on_regression = stop_on_regression
        self.every = every
        self.before_training = before_training
        self.after_training = after_training
        self.runner = None if evaluator is None else CheckpointRunner(evaluator, wait=wait, raise_errors=raise_errors)
        self._submitted: set[Step] = set()
        self._logged = 0

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
        _move_to_front(self)
        if self.before_training and state.is_world_process_zero:
            self._evaluate_model(args, kwargs, None, Path(args.output_dir) / "evalsi-eval" / "base")

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Submit the checkpoint the trainer just wrote."""
        if self.runner is None or not state.is_world_process_zero:
            return
        step = state.global_step
        if step in self._submitted:
            return
        self._submitted.add(step)
        self.runner.submit(Path(args.output_dir) / f"checkpoint-{step}", step)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        """Evaluate every ``every`` steps, ask for a log when results are new, and stop when told to."""
        step = state.global_step
        if self.runner is not None and state.is_world_process_zero:
            saving = bool(getattr(control, "should_save", False)) or _saves_at(args, state, step)
            if self.every and step % self.every == 0 and not saving and step not in self._submitted:
                self._evaluate_model(args, kwargs, step, Path(args.output_dir) / "evalsi-eval" / f"step-{step}")
            if len(self.runner.results) > self._logged:
                control.should_log = True
        if self._should_stop():
            control.should_training_stop = True
        return control

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """Add every newly finished evaluation's metrics to this log entry (and to ``state.log_history``)."""
        if self.runner is None or logs is None:
            return
        fresh = self.runner.new_results(self._logged)
        if not fresh:
            return
        self._logged += len(fresh)
        metrics: dict[str, float] = {}
        for step, outcome in fresh:
            metrics.update(_metrics(outcome))
            if step is None:
                metrics.update({f"{name}/base": value for name, value in _metrics(outcome).items()})
        logs.update(metrics)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(metrics)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The final evaluation, then wait for every pending one."""
        if self.runner is None or not state.is_world_process_zero:
            return
        try:
            if self.after_training and state.global_step not in self._submitted:
                self._evaluate_model(
                    args, kwargs, state.global_step, Path(args.output_dir) / "evalsi-eval" / f"step-{state.global_step}"
                )
        finally:
            self.runner.close()
        fresh = self.runner.new_results(self._logged)
        if fresh:  # finished after the last log of training: they still belong in the history
            self._logged += len(fresh)
            entry: dict[str, Any] = {"step": state.global_step}
            for _, outcome in fresh:
                entry.update(_metrics(outcome))
            state.log_history.append(entry)

    # -- helpers --------------------------------------------------------------------------------------------------

    def _should_stop(self) -> bool:
        if self.stop_file is not None and self.stop_file.exists():
            log.warning("stopping training: the stop file %s exists", self.stop_file)
            return True
        if self.stop_on_regression and self.runner is not None and self.runner.regressed:
            log.warning("stopping training: a checkpoint regressed")
            return True
        return False

    def _evaluate_model(self, args: Any, kwargs: Mapping[str, Any], step: Step, where: Path) -> None:
        """Save the live model (and its tokenizer) to ``where`` and submit it."""
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
        self.runner.submit(where, step)


def _saves_at(args: Any, state: Any, step: int) -> bool:
    """Whether the trainer saves a checkpoint at this step (its flow callback may decide after this one runs)."""
    strategy = getattr(args.save_strategy, "value", args.save_strategy)
    save_steps = getattr(state, "save_steps", 0) or 0
    return strategy == "steps" and save_steps > 0 and step % save_steps == 0


def _metrics(outcome: StepOutcome) -> dict[str, float]:
    return {name: float(value) for name, value in outcome.log_metrics().items()}


def _move_to_front(callback: object) -> None:
    """Put ``callback`` first in the trainer's callback list, so the reporting integrations see what it logs.

    Reporting callbacks (W&B, TensorBoard, MLflow) come before user callbacks and read a log entry as soon as it
    is made; metrics this callback adds to it must be there first. The callback handler is the caller of the
    event (``CallbackHandler.call_event``); it keeps the callback list.
    """
    frame = sys._getframe(2)  # on_train_begin <- call_event (the handler's method)
    while frame is not None:
        handler = frame.f_locals.get("self")
        callbacks = getattr(handler, "callbacks", None)
        if isinstance(callbacks, list) and callback in callbacks:
            callbacks.remove(callback)
            callbacks.insert(0, callback)
            return
        frame = frame.f_back  # type: ignore[assignment]
    log.warning("could not find the trainer's callback list; evaluation metrics reach the log history only")
