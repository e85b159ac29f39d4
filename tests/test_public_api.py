"""The public surface: every package's __all__ is sorted, importable, and names evalsi's own objects."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import pytest

PUBLIC = [
    "evalsi",
    "evalsi.engine",
    "evalsi.evaluators",
    "evalsi.rewards",
    "evalsi.runs",
    "evalsi.server",
    "evalsi.specs",
    "evalsi.stats",
    "evalsi.training",
    "evalsi_harness",
]


@pytest.mark.parametrize("module_name", PUBLIC)
def test_all_is_sorted_and_importable(module_name: str) -> None:
    module = importlib.import_module(module_name)
    names = list(module.__all__)
    assert names == sorted(names, key=isort_style), "sort __all__ as ruff's RUF022 does"
    for name in names:
        value = getattr(module, name)
        if isinstance(value, type) or (callable(value) and hasattr(value, "__code__")) or inspect.ismodule(value):
            owner = value.__name__ if inspect.ismodule(value) else value.__module__
            assert owner.startswith("evalsi"), f"{module_name}.{name} comes from {owner}"


def isort_style(name: str) -> tuple[int, str]:
    """CONSTANTS, then Classes, then functions, each alphabetical."""
    if name.isupper():
        return (0, name)
    return (1, name) if name[0].isupper() else (2, name)


def test_importing_evalsi_is_cheap_and_side_effect_free() -> None:
    code = (
        "import sys, evalsi; "
        "print([m for m in ('sympy', 'math_verify', 'torch', 'fastapi', 'grpc') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# What each package offers its users: a name is added here on purpose, never because another module needed it.
SURFACES: dict[str, list[str]] = {
    "evalsi.training": [
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
    ],
    "evalsi.runs": [
        "BUILTINS",
        "BoundRun",
        "CallableTarget",
        "ComponentScorer",
        "GateResult",
        "Generation",
        "GenerationError",
        "LoadedRun",
        "LoggerError",
        "MetricComparison",
        "MetricInfo",
        "OpenAITarget",
        "RecordResult",
        "ResumeError",
        "RunHeader",
        "RunNotFoundError",
        "RunOutcome",
        "RunResult",
        "RunServiceError",
        "RunSummary",
        "RunVerdict",
        "Runner",
        "RunsClient",
        "SampleResult",
        "Shard",
        "ShardReport",
        "ShardRunner",
        "Summary",
        "Target",
        "compare_runs",
        "load_builtin",
        "load_results",
        "load_run",
        "load_run_result",
        "run_from_mapping",
        "run_shard",
    ],
    "evalsi.specs": [
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
    ],
}


@pytest.mark.parametrize("module_name", sorted(SURFACES))
def test_public_surface_is_the_chosen_one(module_name: str) -> None:
    assert list(importlib.import_module(module_name).__all__) == SURFACES[module_name]
