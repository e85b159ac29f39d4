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

from evalsi.training._checkpoints import (
    STATE_DICT_SUFFIXES,
    Checkpoint,
    ModelFiles,
    ModelKind,
    SettleTracker,
    Signature,
    discover,
    find_model,
    parse_step,
    signature,
)
from evalsi.training._convert import DEFAULT_CONVERT_DIR, ConversionError, convert_checkpoint
from evalsi.training._curve import Curve, CurvePoint, build_curve
from evalsi.training._evaluator import (
    DEFAULT_LOG_DIR,
    CheckpointEvaluator,
    SpecStep,
    StepResult,
    compare_with_base,
    describe_result,
)
from evalsi.training._lightning import lightning_checkpoint_callback
from evalsi.training._plot import PlotError, cell_text, curve_html, plot_curve
from evalsi.training._publish import publish_with, publishing
from evalsi.training._pytorch import PyTorchCheckpointHook
from evalsi.training._results import checkpoint_metadata, is_complete, run_dir, step_file, step_files
from evalsi.training._runner import (
    CheckpointEvaluationError,
    CheckpointEvaluatorLike,
    CheckpointRunner,
    EvaluationFailure,
    StepOutcome,
)
from evalsi.training._separate import eval_sample_keys, exclude_eval_samples
from evalsi.training._server_runs import ServerOutcome, ServerRuns, build_server_curve, step_label
from evalsi.training._serving import (
    Endpoint,
    LoRA,
    ModelRef,
    Served,
    ServingError,
    ServingStrategy,
    UnservableError,
    api_root,
    check_servable,
    model_ref,
    serving_advice,
)
from evalsi.training._sharded import Sharded, ShardedFormat, conversion_command, find_sharded
from evalsi.training._sources import (
    CheckpointSource,
    LocalDirectory,
    LocationError,
    RemoteDirectory,
    SourceError,
    is_remote,
    open_source,
)
from evalsi.training._transformers import OpenAICompatibleServer, StateDict, Transformers, load_state_dict
from evalsi.training._vllm import VLLM, free_port, stop_process
from evalsi.training._watch import WatchDisplay, Watcher, WatchReport, write_stop_file

__all__ = [
    "DEFAULT_CONVERT_DIR",
    "DEFAULT_LOG_DIR",
    "STATE_DICT_SUFFIXES",
    "VLLM",
    "Checkpoint",
    "CheckpointEvaluationError",
    "CheckpointEvaluator",
    "CheckpointEvaluatorLike",
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
    "ModelFiles",
    "ModelKind",
    "ModelRef",
    "OpenAICompatibleServer",
    "PlotError",
    "PyTorchCheckpointHook",
    "RemoteDirectory",
    "Served",
    "ServerOutcome",
    "ServerRuns",
    "ServingError",
    "ServingStrategy",
    "SettleTracker",
    "Sharded",
    "ShardedFormat",
    "Signature",
    "SourceError",
    "SpecStep",
    "StateDict",
    "StepOutcome",
    "StepResult",
    "Transformers",
    "UnservableError",
    "WatchDisplay",
    "WatchReport",
    "Watcher",
    "api_root",
    "build_curve",
    "build_server_curve",
    "cell_text",
    "check_servable",
    "checkpoint_metadata",
    "compare_with_base",
    "conversion_command",
    "convert_checkpoint",
    "curve_html",
    "describe_result",
    "discover",
    "eval_sample_keys",
    "exclude_eval_samples",
    "find_model",
    "find_sharded",
    "free_port",
    "is_complete",
    "is_remote",
    "lightning_checkpoint_callback",
    "load_state_dict",
    "model_ref",
    "open_source",
    "parse_step",
    "plot_curve",
    "publish_with",
    "publishing",
    "run_dir",
    "serving_advice",
    "signature",
    "step_file",
    "step_files",
    "step_label",
    "stop_process",
    "write_stop_file",
]
