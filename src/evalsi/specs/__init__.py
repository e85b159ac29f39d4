"""Spec resources (``apiVersion: evals.si/v1alpha1``): loading with file/line/field errors, and their models."""

from typing import TYPE_CHECKING, Any

from evalsi._util.public import lazy_names, publish
from evalsi.specs._model import SpecModel
from evalsi.specs._resource import (
    API_VERSION,
    Resource,
    describe_pydantic_error,
    document_from_mapping,
    load_resources,
    parse_resources,
    select_resource,
)
from evalsi.specs._reward import (
    CacheSpec,
    ComponentSpec,
    OnError,
    RewardSpec,
    RewardSpecBody,
    SandboxSpec,
)
from evalsi.specs._run import (
    LOGGER_NAMES,
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
from evalsi.specs._yaml import Document, format_path

if TYPE_CHECKING:
    from evalsi.specs._task import (
        CheckerSpec,
        EpisodeLimitsSpec,
        LimitsSpec,
        SetupSpec,
        StepLimitsSpec,
        TaskSpec,
        TaskSpecBody,
        check_image,
        check_platform,
        check_relative_path,
        load_task_spec,
        task_spec_from_mapping,
    )

__all__ = [
    "API_VERSION",
    "LOGGER_NAMES",
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
    "SpecModel",
    "StepLimitsSpec",
    "TargetSpec",
    "TaskSpec",
    "TaskSpecBody",
    "TensorBoardLoggerSpec",
    "WandbLoggerSpec",
    "check_image",
    "check_platform",
    "check_relative_path",
    "describe_pydantic_error",
    "document_from_mapping",
    "format_path",
    "load_resources",
    "load_task_spec",
    "parse_resources",
    "select_resource",
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
    "check_image",
    "check_platform",
    "check_relative_path",
    "load_task_spec",
    "task_spec_from_mapping",
)
_lazy = lazy_names(__name__, dict.fromkeys(_TASK_NAMES, "evalsi.specs._task"))


def __getattr__(name: str) -> Any:
    """The Task resource's models and loaders (agent tasks), imported on first use: runs and rewards never need them."""
    return _lazy(name)
