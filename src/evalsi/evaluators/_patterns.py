r"""Regular expressions from specs, run in time linear in the text whatever the pattern (RE2).

Patterns in a spec (``regex``, ``format-check``, a judge's ``verdict.pattern``, JSON Schema ``pattern`` and
``patternProperties``) are untrusted on a server: with Python's backtracking ``re``, ``(a+)+$`` on a 30-character
text runs for seconds and doubles with each character. They are compiled with RE2 (the ``google-re2`` package),
whose matching time grows linearly with the text, with caps on the pattern and on the text.

Where RE2 differs from Python's ``re`` (each is refused or behaves as listed):

- Backreferences (``\1``, ``(?P=name)``), lookahead and lookbehind (``(?=``, ``(?!``, ``(?<=``, ``(?<!``),
  atomic groups and possessive quantifiers are not supported: such a pattern is a spec error naming the field.
- ``\w``, ``\d``, ``\s`` and ``\b`` are ASCII-only (Python's are Unicode-aware): use ``\pL``, ``\pN`` or
  ``[[:^space:]]``-style classes for other scripts. ``\s`` does not match ``\v``.
- ``$`` without ``(?m)`` matches only at the very end (Python's also matches before a final newline).
- Case folding is simple (``(?i)ß`` does not match ``SS``).
- Counted repetition is limited to 1000 (``a{1001}`` is an error), and a pattern must compile within
  :data:`MAX_MEMORY` bytes.

In-process users (the library, ``evalsi rewards score``) may opt back in to Python's ``re`` for every pattern
with :func:`use_python_regex`; the evalsi server never does, so on a server matching is always linear-time.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import Any, Protocol

import re2

from evalsi._util.lru import ByteLRU

MAX_PATTERN_CHARS = 4096
"""The longest pattern a spec may hold."""

MAX_TEXT_CHARS = 1 << 20
"""The longest text a pattern is run on (about 250k tokens); a longer one gets an error score."""

MAX_MEMORY = 1 << 20
"""RE2's memory budget per compiled pattern (program and lazily built automata)."""

_CACHE_BYTES = 64 << 20
"""What compiled patterns may hold together; each RE2 pattern is counted at its full memory budget."""


class Matcher(Protocol):
    """What evaluators use of a compiled pattern: RE2's and ``re``'s compiled patterns both provide it."""

    @property
    def groups(self) -> int:
        """How many capturing groups the pattern has."""
        ...

    def search(self, text: str) -> Any:
        """The first match anywhere, or None."""
        ...

    def match(self, text: str) -> Any:
        """A match at the start, or None."""
        ...

    def fullmatch(self, text: str) -> Any:
        """A match of the whole text, or None."""
        ...

    def findall(self, text: str) -> list[Any]:
        """Every non-overlapping match (group values when the pattern has groups)."""
        ...

    def finditer(self, text: str) -> Iterator[Any]:
        """Every non-overlapping match, as match objects."""
        ...


_python_regex = False
_switch = threading.Lock()
_cache: ByteLRU[tuple[str, bool], Matcher] = ByteLRU(_CACHE_BYTES)


def use_python_regex(enabled: bool = True) -> bool:
    """In-process only: compile spec patterns with Python's backtracking ``re`` instead of RE2.

    This brings back ``re``'s full syntax (backreferences, lookaround) and its Unicode classes, and with them
    its worst case: a pattern can take time exponential in the text. Only do this when you wrote the specs.
    Patterns are checked when a spec is loaded, so call it before loading. Returns the previous setting.

    Args:
        enabled: True for ``re``, False for RE2 again.

    Example:
        >>> from evalsi.evaluators import use_python_regex
        >>> previous = use_python_regex(True)
        >>> _ = use_python_regex(previous)

    """
    global _python_regex
    with _switch:
        previous, _python_regex = _python_regex, enabled
    return previous


def python_regex_enabled() -> bool:
    """Whether spec patterns compile with Python's ``re`` (see :func:`use_python_regex`)."""
    return _python_regex


def compile_pattern(pattern: str) -> Matcher:
    """``pattern`` compiled by the engine in force, from a cache bounded by bytes.

    Raises:
        ValueError: The pattern is too long, or the engine cannot compile it; the message says why.

    """
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"the pattern has {len(pattern):,} characters; at most {MAX_PATTERN_CHARS:,} are allowed")
    python = _python_regex
    return _cache.get_or_make((pattern, python), lambda: _compile(pattern, python), _size_of)


def check_pattern(value: str) -> str:
    """A pydantic validator: ``value`` compiles (see :func:`compile_pattern`), else a message saying why."""
    compile_pattern(value)
    return value


def text_problem(text: str) -> str | None:
    """Why ``text`` is too long to run a pattern on, or None when it is not."""
    if len(text) > MAX_TEXT_CHARS:
        return f"the text has {len(text):,} characters; patterns run on at most {MAX_TEXT_CHARS:,}"
    return None


def _compile(pattern: str, python: bool) -> Matcher:
    if python:
        try:
            return re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
    options = re2.Options()
    options.log_errors = False
    options.max_mem = MAX_MEMORY
    try:
        compiled: Matcher = re2.compile(pattern, options)
    except re2.error as exc:
        raise ValueError(_explain(pattern, exc)) from None
    return compiled


_UNSUPPORTED = (
    (re.compile(r"\\[1-9]|\(\?P="), "a backreference"),
    (re.compile(r"\(\?<?[=!]"), "a lookahead or lookbehind"),
    (re.compile(r"\(\?>|[*+?}][+]"), "an atomic group or a possessive quantifier"),
)


def _explain(pattern: str, exc: Exception) -> str:
    detail = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
    for probe, feature in _UNSUPPORTED:
        if probe.search(pattern):
            return (
                f"the pattern uses {feature}, which the linear-time regex engine (RE2) does not support; rewrite "
                "it without (patterns run in time linear in the text, so one pattern cannot stall the scorer)"
            )
    if "too large" in detail or "bad repetition" in detail or "repetition size" in detail:
        return f"the pattern is too large for the regex engine ({detail}); counted repeats are capped at 1000"
    return f"not a valid regular expression (RE2 syntax): {detail}"


def _size_of(compiled: Matcher) -> int:
    pattern = str(getattr(compiled, "pattern", ""))
    if isinstance(compiled, re.Pattern):
        return 1024 + 16 * len(pattern)
    return MAX_MEMORY + 4 * len(pattern)
