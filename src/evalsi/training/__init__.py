"""Evaluating training checkpoints: find them, serve each one, run the run specs on it, compare with the base.

Built on :mod:`evalsi.runs` (which never imports this package). A checkpoint is a directory ``checkpoint-N``,
``global_step_N``, ``global_stepN`` or ``step-N`` (or a ``step-N.pt`` state dictionary); it is evaluated once it
holds a model and has settled. A sharded checkpoint (verl, DeepSpeed ZeRO, PyTorch DCP) is converted first, once.
A serving strategy makes it an OpenAI-compatible endpoint for the length of its evaluation.

Inside training, :class:`CheckpointRunner` evaluates checkpoints on a background thread, one at a time and in
order; :class:`PyTorchCheckpointHook` (plain PyTorch), :func:`lightning_checkpoint_callback` (Lightning) and
:func:`evalsi.training.callback.evalsi_callback` (transformers and TRL trainers) save and hand checkpoints to it.

Example:
    >>> from evalsi.training import parse_step
    >>> parse_step("checkpoint-500")
    500

"""

from evalsi._util.public import publish
from evalsi.training._checkpoints import Checkpoint, ModelKind, discover, parse_step
from evalsi.training._convert import ConversionError
from evalsi.training._curve import Curve, CurvePoint, build_curve
from evalsi.training._evaluator import DEFAULT_LOG_DIR, CheckpointEvaluator, StepResult
from evalsi.training._lightning import lightning_checkpoint_callback
from evalsi.training._plot import PlotError, plot_curve
from evalsi.training._pytorch import PyTorchCheckpointHook
from evalsi.training._runner import (
    CheckpointEvaluationError,
    CheckpointRunner,
    EvaluationFailure,
    StepOutcome,
)
from evalsi.training._separate import exclude_eval_samples
from evalsi.training._serving import Endpoint, LoRA, ModelRef, Served, ServingError, ServingStrategy, UnservableError
from evalsi.training._sharded import Sharded
from evalsi.training._sources import (
    CheckpointSource,
    LocalDirectory,
    LocationError,
    RemoteDirectory,
    SourceError,
    open_source,
)
from evalsi.training._transformers import StateDict, Transformers
from evalsi.training._vllm import VLLM
from evalsi.training._watch import Watcher, WatchReport

__all__ = [
    "DEFAULT_LOG_DIR",
    "VLLM",
    "Checkpoint",
    "CheckpointEvaluationError",
    "CheckpointEvaluator",
    "CheckpointRunner",
    "CheckpointSource",
    "ConversionError",
    "Curve",
    "CurvePoint",
    "Endpoint",
    "EvaluationFailure",
    "LoRA",
    "LocalDirectory",
    "LocationError",
    "ModelKind",
    "ModelRef",
    "PlotError",
    "PyTorchCheckpointHook",
    "RemoteDirectory",
    "Served",
    "ServingError",
    "ServingStrategy",
    "Sharded",
    "SourceError",
    "StateDict",
    "StepOutcome",
    "StepResult",
    "Transformers",
    "UnservableError",
    "WatchReport",
    "Watcher",
    "build_curve",
    "discover",
    "exclude_eval_samples",
    "lightning_checkpoint_callback",
    "open_source",
    "parse_step",
    "plot_curve",
]

publish(__name__)
