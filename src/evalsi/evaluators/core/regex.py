"""``regex``: the completion matches a regular expression."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import field_validator

from evalsi.evaluators._base import Evaluator, Params, ScoreContext
from evalsi.evaluators._registry import register
from evalsi.evaluators._score import Score
from evalsi.evaluators.core._text import valid_regex
from evalsi.records import Record


class RegexParams(Params):
    """The pattern and how it must match."""

    pattern: str
    """A Python regular expression."""
    mode: Literal["search", "match", "fullmatch"] = "search"
    """``search`` anywhere, ``match`` at the start, ``fullmatch`` the whole completion."""
    ignore_case: bool = False
    """Match case-insensitively."""
    dotall: bool = False
    """Let ``.`` match newlines."""
    multiline: bool = False
    """Let ``^`` and ``$`` match at line boundaries."""

    _compiles = field_validator("pattern")(valid_regex)

    def compiled(self) -> re.Pattern[str]:
        """The pattern compiled with the chosen flags."""
        flags = (re.IGNORECASE if self.ignore_case else 0) | (re.DOTALL if self.dotall else 0)
        flags |= re.MULTILINE if self.multiline else 0
        return _compile(self.pattern, flags)


_cache: dict[tuple[str, int], re.Pattern[str]] = {}


def _compile(pattern: str, flags: int) -> re.Pattern[str]:
    key = (pattern, flags)
    compiled = _cache.get(key)
    if compiled is None:
        compiled = _cache[key] = re.compile(pattern, flags)
    return compiled


@register
class Regex(Evaluator[RegexParams]):
    """Pass when the completion matches ``pattern``."""

    name = "regex"
    summary = "The completion matches a regular expression (search, match or fullmatch)."
    params_model = RegexParams
    reads = ("completion",)

    def score(self, record: Record, params: RegexParams, ctx: ScoreContext) -> Score:
        """Pass/fail."""
        matcher = getattr(params.compiled(), params.mode)
        return Score.ok(matcher(record.completion_text) is not None)
