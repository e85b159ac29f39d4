"""Finding the ``@evaluation_test`` functions of a project, for commands given no ``--entry``.

The project's test files (``test_*.py`` and ``*_test.py``, as pytest collects them, among the files
``evalsi evaluators upload`` would pack) are read, never imported, so no code of the project runs and its
requirements need not be installed. A module-level function counts when a decorator calls or names
``evaluation_test`` (``@evaluation_test(...)``, ``@evalsi.testing.evaluation_test(...)``). Several found: on a
terminal the command asks which one; elsewhere (a script, CI) it fails listing them, to be named with ``--entry``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import typer

from evalsi.cli._archive import project_files
from evalsi.cli._console import fail, stderr


def find_entries(root: Path) -> list[str]:
    """Every evaluation test under ``root`` as ``path/to/test_file.py::function``, by path, then line."""
    entries: list[str] = []
    for relative in sorted(project_files(root), key=lambda path: path.as_posix()):
        name = relative.name
        if relative.suffix != ".py" or not (name.startswith("test_") or name.endswith("_test.py")):
            continue
        try:
            tree = ast.parse((root / relative).read_bytes(), filename=str(relative))
        except (SyntaxError, ValueError, OSError):
            continue  # pytest would report it; it is no entry to offer
        entries += [
            f"{relative.as_posix()}::{node.name}"
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and any(map(_is_evaluation_test, node.decorator_list))
        ]
    return entries


def _is_evaluation_test(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(target, ast.Name):
        return target.id == "evaluation_test"
    return isinstance(target, ast.Attribute) and target.attr == "evaluation_test"


def interactive() -> bool:
    """Whether a person is at the terminal to answer a question (stdin and stderr are terminals)."""
    return sys.stdin.isatty() and sys.stderr.isatty()


def choose_entry(root: Path, *, where: str, yes: bool = False, confirm_one: bool = True) -> str:
    """The entry to use when none was given.

    The only one found is used (on a terminal, asked to confirm first when ``confirm_one`` and not ``yes``);
    among several, a person at a terminal chooses, unless ``yes`` says nobody is to be asked.

    Raises:
        typer.Exit: None found; several found with ``yes`` or without a terminal (the message lists them); or
            the only one was declined (exit 2).

    """
    found = find_entries(root)
    if not found:
        fail(f"no @evaluation_test in the test files (test_*.py, *_test.py) of {where}; name one with --entry")
    asking = interactive() and not yes
    if len(found) == 1:
        entry = found[0]
        if asking and confirm_one and not typer.confirm(f"Use the evaluation test {entry}?", default=True, err=True):
            fail("no evaluation test chosen; name one with --entry")
        stderr.print(f"evaluation test: {entry}", highlight=False)
        return entry
    listing = "\n".join(f"  {number}. {entry}" for number, entry in enumerate(found, start=1))
    if not asking:
        fail(f"{len(found)} evaluation tests in {where}; choose one with --entry FILE::TEST:\n{listing}")
    stderr.print(f"{len(found)} evaluation tests in {where}:\n{listing}", highlight=False)
    while True:
        number = int(typer.prompt(f"Which one (1-{len(found)})", type=int, err=True))
        if 1 <= number <= len(found):
            return found[number - 1]
        stderr.print(f"choose a number from 1 to {len(found)}", highlight=False)
