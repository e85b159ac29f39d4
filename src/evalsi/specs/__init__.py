"""Spec resources (``apiVersion: evals.si/v1alpha1``): loading with file/line/field errors, and their models."""

from typing import TYPE_CHECKING, Any

from evalsi._util.public import lazy_names, publish
from evalsi.specs._resource import API_VERSION, Resource, load_resources
from evalsi.specs._reward import (
    CacheSpec,
    ComponentSpec,
    OnError,
    RewardSpec,
    RewardSpecBody,
    SandboxSpec,
)
from evalsi.specs._run import (
    DatasetSpec,
    FieldMap,
    GateSpec,
    KSpec,
    LoggersSpec,
    MlflowLoggerSpec,
    PassKSpec,
    RunEvaluatorSpec,
    RunSpec,
    RunSpecBody,
    SamplingSpec,
    TargetSpec,
    TensorBoardLoggerSpec,
    WandbLoggerSpec,
)
from evalsi.specs._yaml import Document

if TYPE_CHECKING:
    from evalsi.specs._task import (
        CheckerSpec,
        EpisodeLimitsSpec,
        LimitsSpec,
        SetupSpec,
        StepLimitsSpec,
        TaskSpec,
        TaskSpecBody,
        load_task_spec,
        task_spec_from_mapping,
    )

__all__ = [
    "API_VERSION",
    "CacheSpec",
    "CheckerSpec",
    "ComponentSpec",
    "DatasetSpec",
    "Document",
    "EpisodeLimitsSpec",
    "FieldMap",
    "GateSpec",
    "KSpec",
    "LimitsSpec",
    "LoggersSpec",
    "MlflowLoggerSpec",
    "OnError",
    "PassKSpec",
    "Resource",
    "RewardSpec",
    "RewardSpecBody",
    "RunEvaluatorSpec",
    "RunSpec",
    "RunSpecBody",
    "SamplingSpec",
    "SandboxSpec",
    "SetupSpec",
    "StepLimitsSpec",
    "TargetSpec",
    "TaskSpec",
    "TaskSpecBody",
    "TensorBoardLoggerSpec",
    "WandbLoggerSpec",
    "load_resources",
    "load_task_spec",
    "task_spec_from_mapping",
]

publish(__name__)

_TASK_NAMES = (
    "CheckerSpec",
    "EpisodeLimitsSpec",
    "LimitsSpec",
    "SetupSpec",
    "StepLimitsSpec",
    "TaskSpec",
    "TaskSpecBody",
    "load_task_spec",
    "task_spec_from_mapping",
)
_lazy = lazy_names(__name__, dict.fromkeys(_TASK_NAMES, "evalsi.specs._task"))


def __getattr__(name: str) -> Any:
    """The Task resource's models and loaders (agent tasks), imported on first use: runs and rewards never need them."""
    return _lazy(name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
