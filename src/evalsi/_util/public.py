"""Naming a package's exported classes and functions by the package, not the private module that defines them.

``evalsi.specs.RewardSpec`` is written in ``evalsi.specs._reward``; its ``repr``, pickles and the API reference
should say ``evalsi.specs``, the name a user imports. Pickle finds a class again by ``__module__`` and
``__qualname__``, which holds because the package exports the very object under that name.

``typing.get_type_hints`` (and pydantic, reading a dataclass) evaluates a class's string annotations in the
namespace of ``sys.modules[cls.__module__]``, where the private module's imports are missing; so each moved
class's own annotations are evaluated first, in the module that wrote them.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any


def publish(package: str) -> None:
    """Set ``__module__`` to ``package`` on each class and function in its ``__all__`` defined in a private submodule.

    Call it once, at the end of the package's ``__init__.py``: ``publish(__name__)``. A name another package
    already exports keeps that package's module (packages lower in the layers run this first); so does a name from
    a public module. Names not yet imported (a lazy ``__getattr__``) are left alone.

    Args:
        package: The package's ``__name__``; it must be in ``sys.modules`` and define ``__all__``.

    """
    namespace = vars(sys.modules[package])
    for name in namespace["__all__"]:
        _publish_value(package, namespace.get(name))


def lazy_names(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A package's ``__getattr__`` (PEP 562) that imports each of ``names`` from its submodule on first access.

    For names whose module pulls in what most users of the package never need (an HTTP client, say): ``from
    package import Name`` still works, and the value is published as :func:`publish` does, then kept in the
    package's namespace.

    Args:
        package: The package's ``__name__``.
        names: Each lazy name, and the submodule that defines it.

    Returns:
        The function to assign to the package's ``__getattr__``.

    """

    def load(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        _publish_value(package, value)
        vars(sys.modules[package])[name] = value
        return value

    return load


def _publish_value(package: str, value: Any) -> None:
    """Name ``value`` (a class or function of a private submodule) by ``package``; anything else is left alone."""
    if not (inspect.isclass(value) or inspect.isfunction(value)):
        return
    if not _is_private(value.__module__):
        return
    if inspect.isclass(value):
        _resolve_annotations(value, vars(sys.modules[value.__module__]))
    value.__module__ = package


def _is_private(module: str) -> bool:
    """Whether ``module`` is reached through a private name (``pkg._x`` or ``pkg._x.y``)."""
    return any(part.startswith("_") for part in module.split("."))


def _resolve_annotations(cls: type, module_globals: dict[str, Any]) -> None:
    """Replace the class's own string annotations (and its dataclass fields' types) by the objects they name.

    An annotation that does not evaluate (a name imported only for type checking) stays a string, as before.
    """
    annotations = inspect.get_annotations(cls)
    fields = cls.__dict__.get("__dataclass_fields__", {})
    for attribute, annotation in annotations.items():
        if not isinstance(annotation, str):
            continue
        try:
            resolved = eval(annotation, module_globals, dict(vars(cls)))
        except Exception:  # unresolvable at run time (imported only for type checking): left as written
            continue
        annotations[attribute] = resolved
        if attribute in fields and fields[attribute].type == annotation:
            fields[attribute].type = resolved
    if annotations:
        cls.__annotations__ = annotations
