"""The evaluator registry: built-in packs, plus third-party packs through the ``evalsi.evaluators`` entry point.

Built-ins are imported on first use, so ``import evalsi`` stays cheap; entry points are loaded on a registry
miss and when listing. A broken plugin is reported with a warning, never a crash of unrelated work.

A pack has one shape, built in or installed: a module whose evaluator classes carry ``@register``. A built-in is
named here by that module; an installed pack's ``evalsi.evaluators`` entry point names the module (importing it
registers its evaluators) or a single ``Evaluator`` subclass (registered when loaded).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import threading
import warnings
from importlib.metadata import entry_points
from typing import Any, TypeVar

from evalsi.errors import EvalsiError, UnknownEvaluatorError
from evalsi.evaluators._base import Evaluator, Params

ENTRY_POINT_GROUP = "evalsi.evaluators"
"""The entry point group under which third-party packs register their ``Evaluator`` subclasses."""

BUILTIN_MODULES: dict[str, str] = {
    "exact-match": "evalsi.evaluators.core.exact_match",
    "contains": "evalsi.evaluators.core.contains",
    "regex": "evalsi.evaluators.core.regex",
    "json-schema": "evalsi.evaluators.core.json_schema",
    "field-score": "evalsi.evaluators.core.field_score",
    "multiple-choice": "evalsi.evaluators.core.multiple_choice",
    "format-check": "evalsi.evaluators.rl.format_check",
    "math-equiv": "evalsi.evaluators.rl.math_equiv",
    "overlong-penalty": "evalsi.evaluators.rl.overlong_penalty",
    "code-exec-tests": "evalsi.evaluators.rl.code_exec_tests",
    "reward-model": "evalsi.evaluators.rl.reward_model",
    "llm-judge": "evalsi.evaluators.judge",
    "task-checker": "evalsi_harness.evaluator",  # agent tasks live in the second package of the distribution
    "evaluation-test": "evalsi.testing._evaluator",
}
"""Where each built-in evaluator lives; a name is listed only once its module exists."""

_classes: dict[str, type[Evaluator[Any]]] = {}
_instances: dict[str, Evaluator[Any]] = {}
_lock = threading.RLock()
_entry_points_loaded = False

E = TypeVar("E", bound=type[Evaluator[Any]])


class PluginValidationError(EvalsiError, TypeError):
    """A registered evaluator class does not satisfy the Evaluator contract."""


def register(cls: E) -> E:
    """Class decorator: validate an evaluator class and register it under its ``name``."""
    _validate(cls)
    with _lock:
        existing = _classes.get(cls.name)
        if existing is not None and existing is not cls and existing.__qualname__ != cls.__qualname__:
            raise PluginValidationError(
                f"evaluator name {cls.name!r} is taken by {existing.__module__}.{existing.__qualname__}"
            )
        _classes[cls.name] = cls
    return cls


def _validate(cls: type[Any]) -> None:
    where = f"{cls.__module__}.{cls.__qualname__}"
    if not (isinstance(cls, type) and issubclass(cls, Evaluator)):
        raise PluginValidationError(f"{where} must subclass evalsi.evaluators.Evaluator")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise PluginValidationError(f"{where} must set a non-empty class attribute `name`")
    if not isinstance(getattr(cls, "summary", None), str):
        raise PluginValidationError(f"{where} must set a one-line class attribute `summary`")
    if not (isinstance(cls.params_model, type) and issubclass(cls.params_model, Params)):
        raise PluginValidationError(f"{where}.params_model must subclass evalsi.evaluators.Params")
    if cls.score is Evaluator.score and cls.score_batch is Evaluator.score_batch:
        raise PluginValidationError(f"{where} must implement score() or score_batch()")


def get_evaluator(name: str) -> Evaluator[Any]:
    """The shared instance of the evaluator registered as ``name``.

    Raises:
        UnknownEvaluatorError: No such evaluator; the error suggests the closest names.

    """
    with _lock:
        instance = _instances.get(name)
        if instance is not None:
            return instance
        cls = _find_class(name)
        instance = cls()
        _instances[name] = instance
        return instance


def evaluator_class(name: str) -> type[Evaluator[Any]]:
    """The class registered as ``name`` (no instance is made)."""
    with _lock:
        return _find_class(name)


def _find_class(name: str) -> type[Evaluator[Any]]:
    cls = _classes.get(name)
    if cls is None and name in BUILTIN_MODULES:
        importlib.import_module(BUILTIN_MODULES[name])
        cls = _classes.get(name)
    if cls is None:
        _load_entry_points()
        cls = _classes.get(name)
    if cls is None:
        raise UnknownEvaluatorError(name, difflib.get_close_matches(name, available_names(), n=3, cutoff=0.5))
    return cls


def _builtin_names() -> list[str]:
    """Built-in names whose module is present in this installation."""
    return [name for name, module in BUILTIN_MODULES.items() if importlib.util.find_spec(module) is not None]


def available_names() -> list[str]:
    """Every registered name: built-ins and installed packs."""
    _load_entry_points()
    return sorted(set(_builtin_names()) | set(_classes))


def all_evaluators() -> list[type[Evaluator[Any]]]:
    """Every evaluator class, built-ins imported, sorted by pack then name."""
    with _lock:
        for name in _builtin_names():
            if name not in _classes:
                importlib.import_module(BUILTIN_MODULES[name])
        _load_entry_points()
        return sorted(_classes.values(), key=lambda c: (c.pack, c.name))


def _load_entry_points() -> None:
    global _entry_points_loaded
    with _lock:
        if _entry_points_loaded:
            return
        _entry_points_loaded = True
        for point in entry_points(group=ENTRY_POINT_GROUP):
            try:
                loaded = point.load()
                if isinstance(loaded, type):
                    register(loaded)
            except Exception as exc:  # one broken pack must not break every other evaluator
                warnings.warn(
                    f"evaluator pack {point.name!r} ({point.value}) failed to load: {exc}", RuntimeWarning, stacklevel=2
                )


def close_all() -> None:
    """Close every evaluator instance (worker pools, clients); used at process exit and in tests."""
    with _lock:
        for instance in _instances.values():
            instance.close()
        _instances.clear()
