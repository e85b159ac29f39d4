"""Evaluating training checkpoints: find them, serve each one, run the run specs on it, compare with the base.

Built on :mod:`evalsi.runs` (which never imports this package). A checkpoint is a directory ``checkpoint-N``,
``global_step_N`` or ``step-N`` (or a ``step-N.pt`` state dictionary); it is evaluated once it holds a model and
has settled. A serving strategy makes it an OpenAI-compatible endpoint for the length of its evaluation.

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
from evalsi.training._serving import (
    Endpoint,
    LoRA,
    ModelRef,
    Served,
    ServingError,
    ServingStrategy,
    api_root,
    model_ref,
)
from evalsi.training._transformers import OpenAICompatibleServer, Transformers
from evalsi.training._vllm import VLLM, free_port, stop_process

__all__ = [
    "STATE_DICT_SUFFIXES",
    "VLLM",
    "Checkpoint",
    "Endpoint",
    "LoRA",
    "ModelFiles",
    "ModelKind",
    "ModelRef",
    "OpenAICompatibleServer",
    "Served",
    "ServingError",
    "ServingStrategy",
    "SettleTracker",
    "Signature",
    "Transformers",
    "api_root",
    "discover",
    "find_model",
    "free_port",
    "model_ref",
    "parse_step",
    "signature",
    "stop_process",
]
