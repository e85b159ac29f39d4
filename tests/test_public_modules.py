"""Exported classes and functions name the package a user imports them from, and still pickle and type-check."""

from __future__ import annotations

import importlib
import inspect
import pickle
import typing

import pytest

from evalsi.engine import ScoringCancelled
from evalsi.evaluators import PluginValidationError, Score
from evalsi.evaluators.judge import JudgeConfig
from evalsi.sandbox import Limits
from evalsi.specs import RewardSpec
from evalsi.stats import Interval, wilson
from evalsi.testing import EvaluationSetupError

# Packages whose __init__ names its exports by the package (``publish(__name__)`` at its end).
PUBLISHED = [
    "evalsi.engine",
    "evalsi.evaluators",
    "evalsi.evaluators.judge",
    "evalsi.evaluators.rl.math_equiv",
    "evalsi.monitors",
    "evalsi.ray",
    "evalsi.rewards",
    "evalsi.rewards.probes",
    "evalsi.runs",
    "evalsi.sandbox",
    "evalsi.specs",
    "evalsi.stats",
    "evalsi.testing",
    "evalsi.training",
    "evalsi.view",
]


def exported(module_name: str) -> list[tuple[str, object]]:
    """The classes and functions in a package's ``__all__``."""
    module = importlib.import_module(module_name)
    values = [(name, getattr(module, name)) for name in module.__all__]
    return [(name, value) for name, value in values if inspect.isclass(value) or inspect.isfunction(value)]


@pytest.mark.parametrize("module_name", PUBLISHED)
def test_exports_report_a_public_module(module_name: str) -> None:
    private = {
        name: value.__module__
        for name, value in exported(module_name)
        if any(part.startswith("_") for part in value.__module__.split("."))
    }
    assert private == {}


def test_a_class_reports_the_package_that_exports_it() -> None:
    assert RewardSpec.__module__ == "evalsi.specs"
    assert Score.__module__ == "evalsi.evaluators"
    assert wilson.__module__ == "evalsi.stats"
    assert repr(Score(value=1.0)).startswith("Score(")


@pytest.mark.parametrize(
    "value",
    [
        Score(value=0.5, status="ok", reason="half"),
        Interval(low=0.1, high=0.9, method="wilson"),
        Limits(),
        JudgeConfig(model="m", base_url="http://127.0.0.1:1/v1"),
        RewardSpec.model_validate({"name": "r", "spec": {"components": [{"ref": "exact-match", "weight": 2.0}]}}),
        PluginValidationError("bad plugin"),
        ScoringCancelled("gone"),
        EvaluationSetupError("no endpoint"),
        wilson,
    ],
    ids=lambda value: type(value).__name__,
)
def test_exported_objects_pickle_through_the_public_module(value: object) -> None:
    data = pickle.dumps(value)
    module = type(value).__module__ if not inspect.isfunction(value) else value.__module__
    assert module.encode() in data
    copy = pickle.loads(data)
    if isinstance(value, BaseException):
        assert type(copy) is type(value)
        assert copy.args == value.args
    else:
        assert copy == value


@pytest.mark.parametrize("module_name", PUBLISHED)
def test_type_hints_of_exported_classes_still_resolve(module_name: str) -> None:
    # get_type_hints reads a class's string annotations in sys.modules[cls.__module__], now the package.
    for _name, value in exported(module_name):
        if inspect.isclass(value):
            typing.get_type_hints(value)
