"""Spec resources (``apiVersion: evals.si/v1alpha1``): loading with file/line/field errors, and their models."""

from evalsi._util.public import publish
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
from evalsi.specs._yaml import Document

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
