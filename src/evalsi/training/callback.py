"""A Hugging Face ``TrainerCallback`` (TRL's trainers too): evaluate each saved checkpoint, stop on a regression.

``on_save`` fires after the checkpoint ``<output_dir>/checkpoint-<global_step>`` is written, on every rank; only
the world-process-zero rank submits it. Training stops at the next step after a regression
(``stop_on_regression``) or once ``stop_file`` exists (written by ``evalsi checkpoints watch --stop-file`` or
anything else). Pending evaluations finish before ``train()`` returns. ``transformers`` is imported when the
callback is made, not when this module is.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from evalsi.training._runner import CheckpointRunner, Evaluator


def evalsi_callback(evaluator: Evaluator | None, *, stop_on_regression: bool = False,
                    stop_file: str | Path | None = None, wait: bool = False) -> Any:
    """A ``transformers.TrainerCallback`` that evaluates every save with ``evaluator`` (None: only the stop file).

    Raises:
        ImportError: transformers is not installed.

    """
    from transformers import TrainerCallback

    runner = CheckpointRunner(evaluator, wait=wait) if evaluator is not None else None
    stop_path = Path(stop_file) if stop_file is not None else None

    class EvalsiCallback(TrainerCallback):  # type: ignore[misc]
        """Submits saves to a :class:`CheckpointRunner`; asks the trainer to stop on a regression."""

        def __init__(self) -> None:
            self.runner = runner

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if runner is not None and state.is_world_process_zero:
                runner.submit(os.path.join(args.output_dir, f"checkpoint-{state.global_step}"), state.global_step)
            return control

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            stop = stop_on_regression and runner is not None and runner.regressed
            if stop or (stop_path is not None and stop_path.exists()):
                control.should_training_stop = True
            return control

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if runner is not None:
                runner.drain()
            return control

    return EvalsiCallback()
