"""The exception tree drawn in ``evalsi.errors`` is the tree the code defines: every class, its place, its module."""

from __future__ import annotations

import importlib
import pkgutil
import re

import evalsi
import evalsi.errors
import evalsi_harness
from evalsi.errors import EvalsiError

_LINE = re.compile(r"^(?P<indent>[│ ]*)[├└]── (?P<name>\w+)(?:\((?P<bases>[\w, ]+)\))?\s+(?P<module>[\w.]+)\s")


def _import_everything() -> None:
    for package in (evalsi, evalsi_harness):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith("__main__") or "._proto" in info.name or ".migrations" in info.name:
                continue  # __main__ runs the CLI; generated protobuf and migration scripts define no errors
            importlib.import_module(info.name)


def _subclasses(cls: type) -> set[type]:
    found: set[type] = set(cls.__subclasses__())
    for sub in list(found):
        found |= _subclasses(sub)
    return found


def _drawn_tree() -> dict[str, tuple[str, list[str], str]]:
    """Each drawn class: its parent in the drawing, the other bases in parentheses, and the module named."""
    tree: dict[str, tuple[str, list[str], str]] = {}
    parents = ["EvalsiError"]
    for line in (evalsi.errors.__doc__ or "").splitlines():
        match = _LINE.match(line.removeprefix("    "))
        if match is None:
            continue
        depth = len(match["indent"]) // 4
        del parents[depth + 1 :]
        bases = [b.strip() for b in (match["bases"] or "").split(",") if b.strip()]
        tree[match["name"]] = (parents[depth], bases, match["module"])
        parents.append(match["name"])
    return tree


def test_every_evalsi_error_is_drawn_where_it_is_in_the_code() -> None:
    _import_everything()
    drawn = _drawn_tree()
    classes = {cls.__name__: cls for cls in _subclasses(EvalsiError)}
    assert sorted(drawn) == sorted(classes), "the tree in evalsi/errors.py's docstring must list every EvalsiError"
    for name, cls in classes.items():
        parent, others, module = drawn[name]
        evalsi_bases = [b for b in cls.__bases__ if issubclass(b, EvalsiError)]
        assert parent == evalsi_bases[0].__name__, f"{name} is drawn under {parent}"
        expected = [b.__name__ for b in cls.__bases__ if b is not evalsi_bases[0] and b is not EvalsiError]
        assert others == expected, f"{name} is drawn with bases {others}, defined with {expected}"
        assert getattr(importlib.import_module(module), name) is cls, f"{name} cannot be imported from {module}"
