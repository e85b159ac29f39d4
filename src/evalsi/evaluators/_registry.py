"""The evaluator registry: every pack, built in or installed, found through the ``evalsi.evaluators`` entry point.

A pack has one shape: a module whose evaluator classes carry ``@register``. Its ``evalsi.evaluators`` entry
point names the module (importing it registers its evaluators) or a single ``Evaluator`` subclass (registered
when loaded). evalsi's own evaluators are declared the same way in its package metadata, one entry point per
evaluator name, so this module names nothing it would have to import by string.

Nothing is imported until it is asked for, so ``import evalsi`` stays cheap: a miss first loads the entry
point of that very name (how each built-in is declared), then every entry point; listing loads them all. A
broken pack found while looking for another name is reported with a warning, never a crash of unrelated work.
"""

from __future__ import annotations

import difflib
import threading
import warnings
from importlib.metadata import EntryPoint, EntryPoints, entry_points
from typing import Any, TypeVar

from evalsi.errors import EvalsiError, UnknownEvaluatorError
from evalsi.evaluators._base import Evaluator, Params

ENTRY_POINT_GROUP = "evalsi.evaluators"
"""The entry point group under which third-party packs register their ``Evaluator`` subclasses."""

_classes: dict[str, type[Evaluator[Any]]] = {}
_instances: dict[str, Evaluator[Any]] = {}
_lock = threading.RLock()
_entry_points_loaded = False
_points: EntryPoints | None = None
"""The group's entry points, read from package metadata once (a scan of every installed distribution)."""

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

    Args:
        name: The registered name.

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
    """The class registered as ``name`` (no instance is made).

    Args:
        name: The registered name.

    """
    with _lock:
        return _find_class(name)


def _find_class(name: str) -> type[Evaluator[Any]]:
    cls = _classes.get(name)
    if cls is None:
        for point in _group_points().select(name=name):
            _load(point)  # the pack declared under this very name: its own import error is the answer
        cls = _classes.get(name)
    if cls is None:
        _load_entry_points()
        cls = _classes.get(name)
    if cls is None:
        known = available_names()
        if not known:
            raise UnknownEvaluatorError(name, [], hint=_NO_PACKS_HINT)
        raise UnknownEvaluatorError(name, difflib.get_close_matches(name, known, n=3, cutoff=0.5))
    return cls


_NO_PACKS_HINT = (
    f"no evaluator is installed: no distribution declares the {ENTRY_POINT_GROUP!r} entry point, not even evalsi "
    "itself, so its package metadata is missing; install it (`pip install -e .` in a source checkout) rather than "
    "running it from a bare PYTHONPATH"
)


def available_names() -> list[str]:
    """Every registered name: built-ins and installed packs."""
    _load_entry_points()
    return sorted(_classes)


def all_evaluators() -> list[type[Evaluator[Any]]]:
    """Every evaluator class, sorted by pack then name."""
    with _lock:
        _load_entry_points()
        return sorted(_classes.values(), key=lambda c: (c.pack, c.name))


def _group_points() -> EntryPoints:
    global _points
    if _points is None:
        _points = entry_points(group=ENTRY_POINT_GROUP)
    return _points


def _load(point: EntryPoint) -> None:
    """Import the pack an entry point names; a class it names directly is registered here."""
    loaded = point.load()
    if isinstance(loaded, type):
        register(loaded)


def _load_entry_points() -> None:
    global _entry_points_loaded, _points
    with _lock:
        if _entry_points_loaded:
            return
        _entry_points_loaded = True
        _points = entry_points(group=ENTRY_POINT_GROUP)  # read again: a pack may have been installed since
        for point in _points:
            try:
                _load(point)
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
