"""Field descriptions from attribute docstrings, each module's source parsed once.

A string written under an annotated attribute describes it (``evalsi evaluators describe`` shows it, JSON schemas
carry it), as pydantic's ``use_attribute_docstrings`` does. Before Python 3.13 pydantic finds each class's source by
walking the interpreter's frames, resolving the real path of every module loaded so far and tokenizing the class's
block: about 1.5 ms a model, a sixth of the start-up of ``evalsi run``. Here a model's module is parsed once, on the
first model it defines; the models defer building their schema to first use, so descriptions set when the class is
made reach the schema as pydantic's own would.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import linecache
import sys
import threading
from typing import Any

from pydantic import BaseModel

_Docs = dict[str, str]
_BLOCKS = (ast.stmt, ast.excepthandler, ast.match_case)
"""What a statement holds that may hold a class statement."""
_modules: dict[str, dict[str, list[tuple[frozenset[int], _Docs]]]] = {}
_lock = threading.Lock()


def describe_fields(model: type[BaseModel]) -> None:
    """Give each field of ``model`` written in its class body without a description the docstring under it.

    Call it from ``__pydantic_init_subclass__`` of a base whose config sets ``defer_build=True`` (and not
    ``use_attribute_docstrings``), so that the schema, built on first use, carries the descriptions.

    Args:
        model: The model class just made.

    """
    docs = attribute_docstrings(model)
    if not docs:
        return
    for name, info in model.__pydantic_fields__.items():
        if info.description is None and name in docs:
            info.description = docs[name]


def attribute_docstrings(cls: type) -> dict[str, str]:
    """``{attribute: docstring}`` for each annotated attribute of ``cls``'s own body followed by a string.

    Empty when the class has no source (made by ``type()``, or in an interactive session).

    Args:
        cls: A class, usually one just made.

    Returns:
        Each attribute's docstring, cleaned as :func:`inspect.cleandoc` does.

    """
    module = sys.modules.get(cls.__module__)
    filename = getattr(module, "__file__", None)
    if not isinstance(filename, str):
        return {}
    candidates = _classes_of(filename).get(cls.__qualname__, [])
    if len(candidates) == 1:
        return candidates[0][1]
    line = _defining_line(cls.__module__)  # the same name defined twice (under an `if`): the one being made
    for lines, docs in candidates:
        if line in lines:
            return docs
    return {}


def _classes_of(filename: str) -> dict[str, list[tuple[frozenset[int], _Docs]]]:
    """Every class of a source file by qualified name: the lines its definition starts on, and its docstrings."""
    with _lock:
        found = _modules.get(filename)
        if found is None:
            found = _modules[filename] = _index(filename)
        return found


def _index(filename: str) -> dict[str, list[tuple[frozenset[int], _Docs]]]:
    try:
        tree = ast.parse("".join(linecache.getlines(filename)))
    except (SyntaxError, ValueError):
        return {}
    classes: dict[str, list[tuple[frozenset[int], _Docs]]] = {}

    def visit(nodes: list[ast.AST], prefix: str) -> None:
        for node in nodes:
            if isinstance(node, ast.ClassDef):
                starts = frozenset({node.lineno, *(d.lineno for d in node.decorator_list)})
                classes.setdefault(prefix + node.name, []).append((starts, _docstrings(node.body)))
                visit(list(node.body), f"{prefix}{node.name}.")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(list(node.body), f"{prefix}{node.name}.<locals>.")
            else:  # a class under an if, a try, a with, a loop or a match case keeps the same qualified name
                visit([c for c in ast.iter_child_nodes(node) if isinstance(c, _BLOCKS)], prefix)

    visit(list(tree.body), "")
    return classes


def _docstrings(body: list[ast.stmt]) -> _Docs:
    """A string statement right after ``name: type [= value]`` documents ``name``."""
    docs: _Docs = {}
    for previous, node in itertools.pairwise(body):
        if (
            isinstance(previous, ast.AnnAssign)
            and isinstance(previous.target, ast.Name)
            and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            docs[previous.target.id] = inspect.cleandoc(node.value.value)
    return docs


def _defining_line(module: str) -> int:
    """The line of the ``class`` statement of ``module`` that is running (0 when none is).

    The innermost frame running ``module``'s code, past the ``__pydantic_init_subclass__`` hooks (a base defined in
    the same module as the model runs one).
    """
    frame: Any = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == module and frame.f_code.co_name != "__pydantic_init_subclass__":
            return int(frame.f_lineno)
        frame = frame.f_back
    return 0
