"""Spec resources (``apiVersion: evals.si/v1alpha1``): loading with file/line/field errors, and their models."""

from evalsi.sandbox import Isolation
from evalsi.specs._model import SpecModel
from evalsi.specs._resource import (
    API_VERSION,
    KINDS,
    Resource,
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
    BUILTIN_EVALS,
    DatasetSpec,
    FieldMap,
    GateSpec,
    KSpec,
    PassKSpec,
    RunSpec,
    RunSpecBody,
    SamplingSpec,
    TargetSpec,
)
from evalsi.specs._yaml import Document, format_path, load_yaml_documents, read_yaml_file

__all__ = [
    "API_VERSION",
    "BUILTIN_EVALS",
    "KINDS",
    "CacheSpec",
    "ComponentSpec",
    "DatasetSpec",
    "Document",
    "FieldMap",
    "GateSpec",
    "Isolation",
    "KSpec",
    "OnError",
    "PassKSpec",
    "Resource",
    "RewardSpec",
    "RewardSpecBody",
    "RunSpec",
    "RunSpecBody",
    "SamplingSpec",
    "SandboxSpec",
    "SpecModel",
    "TargetSpec",
    "document_from_mapping",
    "format_path",
    "load_resources",
    "load_yaml_documents",
    "parse_resources",
    "read_yaml_file",
    "select_resource",
]
