"""Evaluating training checkpoints, from a watcher or from inside the training loop.

Inside training: :class:`CheckpointRunner` evaluates checkpoints on a background thread, one at a time and in
order; :class:`PyTorchCheckpointHook` (plain PyTorch), :func:`lightning_checkpoint_callback` (Lightning) and
:func:`evalsi.training.callback.evalsi_callback` (transformers and TRL trainers) save and hand checkpoints to it.
"""

from evalsi.training._lightning import lightning_checkpoint_callback
from evalsi.training._publish import publish_with, publishing
from evalsi.training._pytorch import PyTorchCheckpointHook
from evalsi.training._runner import (
    CheckpointEvaluationError,
    CheckpointEvaluatorLike,
    CheckpointRunner,
    EvaluationFailure,
    StepOutcome,
)
from evalsi.training._separate import eval_sample_keys, exclude_eval_samples

__all__ = [
    "CheckpointEvaluationError",
    "CheckpointEvaluatorLike",
    "CheckpointRunner",
    "EvaluationFailure",
    "PyTorchCheckpointHook",
    "StepOutcome",
    "eval_sample_keys",
    "exclude_eval_samples",
    "lightning_checkpoint_callback",
    "publish_with",
    "publishing",
]
