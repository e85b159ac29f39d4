"""Every public callable with parameters says what they are: an ``Args:`` section in its Google-style docstring.

The public API is the names in each listed package's ``__all__`` and the public methods of its classes (and a
class's own ``__init__``, documented in the class docstring or its own). A method with no docstring of its own
inherits the one it overrides, as ``inspect.getdoc`` and the API reference do. Add a package to ``PACKAGES`` once
its docstrings are complete.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pytest

PACKAGES = [
    "evalsi",
    "evalsi.engine",
    "evalsi.errors",
    "evalsi.evaluators",
    "evalsi.evaluators.judge",
    "evalsi.evaluators.rl.math_equiv",
    "evalsi.monitors",
    "evalsi.ray",
    "evalsi.ray.openrlhf",
    "evalsi.ray.verl",
    "evalsi.records",
    "evalsi.rewards",
    "evalsi.rewards.openrlhf",
    "evalsi.rewards.probes",
    "evalsi.rewards.serve",
    "evalsi.rewards.trl",
    "evalsi.rewards.verl",
    "evalsi.runs",
    "evalsi.sandbox",
    "evalsi.server",
    "evalsi.specs",
    "evalsi.stats",
    "evalsi.testing",
    "evalsi.training",
    "evalsi.training.callback",
    "evalsi.view",
    "evalsi_harness",
    "evalsi_harness.gym",
]


def public_callables(module_name: str) -> Iterator[tuple[str, Callable[..., Any], str | None]]:
    """Each exported function, each public method evalsi defines on an exported class, with its docstring."""
    module = importlib.import_module(module_name)
    for name in exported_names(module_name):
        value = getattr(module, name)
        if inspect.isfunction(value):
            yield f"{module_name}.{name}", value, value.__doc__
        elif inspect.isclass(value):
            yield from methods(f"{module_name}.{name}", value)


def exported_names(module_name: str) -> list[str]:
    """A package's ``__all__``; for a module without one (``evalsi.errors``), the public names it defines."""
    module = importlib.import_module(module_name)
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == module_name
    ]


def methods(where: str, cls: type) -> Iterator[tuple[str, Callable[..., Any], str | None]]:
    for attribute, raw in vars(cls).items():
        if attribute.startswith("_") and attribute != "__init__":
            continue
        function = raw.__func__ if isinstance(raw, classmethod | staticmethod) else raw
        if not inspect.isfunction(function) or not function.__module__.startswith("evalsi"):
            continue
        if function.__code__.co_filename.startswith("<"):
            continue  # written by @dataclass, documented by the class's fields
        if attribute == "__init__":
            yield f"{where}.__init__", function, "\n".join(filter(None, [cls.__doc__, function.__doc__]))
        else:
            yield f"{where}.{attribute}", function, inspect.getdoc(getattr(cls, attribute))


def has_parameters(function: Callable[..., Any]) -> bool:
    parameters = inspect.signature(function).parameters
    return any(name not in {"self", "cls"} for name in parameters)


@pytest.mark.parametrize("module_name", PACKAGES)
def test_public_callables_document_their_arguments(module_name: str) -> None:
    missing = [
        where
        for where, function, doc in public_callables(module_name)
        if has_parameters(function) and "Args:" not in (doc or "")
    ]
    assert missing == [], "add an Args: section to each"


def documented_arguments(doc: str) -> list[str]:
    """The parameter names an ``Args:`` section lists (``*args`` and ``**kwargs`` without their stars)."""
    lines = doc.expandtabs().splitlines()
    start = next((at for at, line in enumerate(lines) if line.strip() == "Args:"), None)
    if start is None:
        return []
    indent = len(lines[start]) - len(lines[start].lstrip()) + 4
    names = []
    for line in lines[start + 1 :]:
        depth = len(line) - len(line.lstrip())
        if line.strip() and depth < indent:
            break
        if line.strip() and depth == indent:
            names.append(line.strip().split(":", 1)[0].split(" ", 1)[0].lstrip("*"))
    return names


@pytest.mark.parametrize("module_name", PACKAGES)
def test_documented_arguments_match_the_signature(module_name: str) -> None:
    mismatched = []
    for where, function, doc in public_callables(module_name):
        if "Args:" not in (doc or ""):
            continue
        parameters = [name for name in inspect.signature(function).parameters if name not in {"self", "cls"}]
        if sorted(documented_arguments(doc or "")) != sorted(parameters):
            mismatched.append((where, parameters, documented_arguments(doc or "")))
    assert mismatched == [], "make each Args: section list exactly the parameters"


def test_documented_arguments_are_read_from_the_args_section() -> None:
    doc = """Do it.

    Args:
        value: The number,
            over two lines.
        *rest: More.
        **options: Settings.

    Raises:
        ValueError: never.

    """
    assert documented_arguments(doc) == ["value", "rest", "options"]
    assert documented_arguments("No sections.") == []


def test_a_callable_without_args_is_reported() -> None:
    def undocumented(value: int) -> int:
        """Double ``value``."""
        return 2 * value

    def documented(value: int) -> int:
        """Double a number.

        Args:
            value: The number.

        """
        return 2 * value

    assert has_parameters(undocumented)
    assert "Args:" not in (undocumented.__doc__ or "")
    assert "Args:" in (documented.__doc__ or "")


def test_the_check_sees_methods_and_functions() -> None:
    found = {where for name in PACKAGES for where, _, _ in public_callables(name)}
    assert {"evalsi.stats.wilson", "evalsi.evaluators.Evaluator.score", "evalsi.sandbox.Sandbox.__init__"} <= found
