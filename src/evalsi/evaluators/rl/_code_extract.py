"""The program of a completion: which fenced block of a markdown answer ``code-exec-tests`` runs.

Fences follow CommonMark: a line of three or more backticks or tildes (any indentation), an optional info
string whose first word is the language, and a closing line of the same character at least as long. A fence
left open runs to the end of the text, so a truncated completion still yields its program.

The rule, in order (the last block wins within a tier):

1. a block tagged python (``python``, ``py``, ``python3``, ``py3``, any case, attributes allowed) that defines a
   name the tests call (``entry_point``, ``fn_name``, or a function the asserts call);
2. an untagged block that defines such a name;
3. any block tagged python;
4. any untagged block;
5. a block tagged with another language whose text parses as Python (a mislabelled program);
6. without fences, the whole completion, or, when that is not valid Python, the code between its prose
   (:func:`unfenced_program`).

Models that tag their code tag the solution and leave sample input/output untagged, and a solution is often
followed by a shorter usage example, hence the order.
"""

from __future__ import annotations

import ast
import builtins
import keyword
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_PYTHON_TAGS = frozenset({"python", "py", "python3", "py3"})
_CALLED = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*\(")
_NOT_USER_NAMES = frozenset(dir(builtins)) | frozenset(keyword.kwlist)
"""Names a test calls that no program defines for it: Python's builtins and keywords."""
_CODE_START = re.compile(
    r"^(?:import\s|from\s+[\w.]+\s+import\s|(?:async\s+)?def\s|class\s|@\w|if\s+__name__\s*==|"
    r"[A-Za-z_][\w, ]*=.*(?:\binput\(|\bsys\.stdin|\bopen\(0))"
)
"""A line that opens a program: an import, a definition, or an assignment from the input."""
_MAX_PARSES = 64

Kind = Literal["python", "bare", "other"]


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced block: its kind (by the info string's first word) and its text."""

    kind: Kind
    text: str


def fenced_blocks(text: str) -> list[Block]:
    """Every fenced block of ``text`` in order; an unclosed last fence runs to the end."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opened = _OPEN.match(lines[i])
        if opened is None or (opened["fence"][0] == "`" and "`" in opened["info"]):
            i += 1
            continue
        fence, indent, info = opened["fence"], len(opened["indent"]), opened["info"].strip()
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body: list[str] = []
        i += 1
        while i < len(lines) and not close.match(lines[i]):
            body.append(_dedent(lines[i], indent))
            i += 1
        i += 1  # past the closing fence (or the end)
        content = "\n".join(body)
        blocks.append(Block(_kind(info), content + "\n" if body else ""))
    return blocks


def extract_program(completion: str, names: Iterable[str] = ()) -> str:
    """The program ``code-exec-tests`` runs: the block the module's rule picks, else the whole completion.

    ``names`` are the functions the tests call; a block that defines one of them is preferred.
    """
    blocks = fenced_blocks(completion)
    if not blocks:
        return unfenced_program(completion)
    wanted = [name for name in names if name]
    if wanted:
        for kind in ("python", "bare"):
            found = _last(b for b in blocks if b.kind == kind and _defines_any(b.text, wanted))
            if found is not None:
                return found.text
    for kind in ("python", "bare"):
        found = _last(b for b in blocks if b.kind == kind)
        if found is not None:
            return found.text
    found = _last(b for b in blocks if _parses(b.text))
    return found.text if found is not None else completion


def unfenced_program(completion: str) -> str:
    """A completion without fences: itself when it is valid Python, else its code between prose.

    The code is the longest stretch that starts at a line opening like a program (an import, a ``def`` or
    ``class``, an assignment from ``input()``/``sys.stdin``) and runs to the furthest line that keeps it valid
    Python. A completion whose first line is
    indented continues a prompt's function (HumanEval) and is kept whole. Each failed parse moves the end to
    before the line it failed on, at most ``_MAX_PARSES`` times; then the completion is kept as it is.
    """
    text = completion.replace("\r\n", "\n").replace("\r", "\n")
    if _parses(text):
        return completion
    lines = text.split("\n")
    first = next((line for line in lines if line.strip()), "")
    if first[:1] in (" ", "\t"):
        return completion
    budget = _MAX_PARSES
    best: tuple[int, int] | None = None  # the longest stretch found, as (start, end) line indices
    covered = -1
    for start, line in enumerate(lines):
        if start <= covered or not _CODE_START.match(line):
            continue
        end = len(lines)
        while end > start and budget > 0:
            budget -= 1
            error_line = _first_error_line("\n".join(lines[start:end]))
            if error_line is None:
                if best is None or end - start > best[1] - best[0]:
                    best = (start, end)
                covered = end - 1
                break
            # the code ends before the line the parser stopped at (or, stopping at the end, a line earlier)
            end = min(start + error_line - 1, end - 1)
        if budget == 0:
            break
    if best is None:
        return completion
    return "\n".join(lines[best[0] : best[1]]).rstrip() + "\n"


def _first_error_line(text: str) -> int | None:
    """The 1-based line of the first syntax error in ``text``, or None when it is valid Python."""
    try:
        ast.parse(text)
    except SyntaxError as exc:
        return max(exc.lineno or 1, 1)
    except ValueError:  # a NUL byte
        return 1
    return None


def called_names(meta: Mapping[str, Any], ignore: Collection[str] = _NOT_USER_NAMES) -> list[str]:
    """Names the record's tests call in the program: ``entry_point``, ``fn_name``, and the asserts' functions.

    Args:
        meta: The record's metadata (``entry_point``, ``fn_name``, ``test_list``).
        ignore: Functions an assert may call that the program is not expected to define (builtins, keywords).

    Returns:
        Each name once, in the order first met.

    """
    declared = (meta.get(key) for key in ("entry_point", "fn_name"))
    names = [name for name in declared if isinstance(name, str) and name.isidentifier()]
    asserts = meta.get("test_list")
    if isinstance(asserts, list):
        for line in asserts:
            if isinstance(line, str):
                names += [n for n in _CALLED.findall(line) if n not in ignore]
    return list(dict.fromkeys(names))


def _kind(info: str) -> Kind:
    if not info:
        return "bare"
    tag = re.split(r"[\s{},;]", info.lstrip("{."), maxsplit=1)[0].lower()
    if tag in _PYTHON_TAGS:
        return "python"
    return "bare" if not tag else "other"


def _dedent(line: str, indent: int) -> str:
    """Remove up to ``indent`` leading spaces, as CommonMark does for an indented fence's content."""
    strip = 0
    while strip < indent and strip < len(line) and line[strip] in " \t":
        strip += 1
    return line[strip:]


def _defines_any(text: str, names: list[str]) -> bool:
    return any(
        re.search(rf"^[ \t]*(?:async[ \t]+def|def|class)[ \t]+{re.escape(n)}\b|^{re.escape(n)}[ \t]*=", text, re.M)
        for n in names
    )


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return bool(text.strip())


def _last(blocks: Iterable[Block]) -> Block | None:
    found = None
    for block in blocks:
        found = block
    return found
