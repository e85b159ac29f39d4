"""``regex``: the completion matches a regular expression."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from evalsi.evaluators._base import Evaluator, Params, ScoreContext
from evalsi.evaluators._patterns import Matcher, check_pattern, compile_pattern, text_problem
from evalsi.evaluators._registry import register
from evalsi.evaluators._score import Score
from evalsi.records import Record


class RegexParams(Params):
    """The pattern and how it must match."""

    pattern: str
    """A regular expression in RE2 syntax (Python's, less backreferences and lookaround; ``\\w`` and ``\\d`` are
    ASCII): it runs in time linear in the completion."""
    mode: Literal["search", "match", "fullmatch"] = "search"
    """``search`` anywhere, ``match`` at the start, ``fullmatch`` the whole completion."""
    ignore_case: bool = False
    """Match case-insensitively."""
    dotall: bool = False
    """Let ``.`` match newlines."""
    multiline: bool = False
    """Let ``^`` and ``$`` match at line boundaries."""

    _compiles = field_validator("pattern")(check_pattern)

    def compiled(self) -> Matcher:
        """The pattern compiled with the chosen flags (as an inline flag group, which both engines read)."""
        flags = ("i" if self.ignore_case else "") + ("s" if self.dotall else "") + ("m" if self.multiline else "")
        return compile_pattern(f"(?{flags}){self.pattern}" if flags else self.pattern)


@register
class Regex(Evaluator[RegexParams]):
    """Pass when the completion matches ``pattern``."""

    name = "regex"
    summary = "The completion matches a regular expression (search, match or fullmatch)."
    params_model = RegexParams
    reads = ("completion",)

    def score(self, record: Record, params: RegexParams, ctx: ScoreContext) -> Score:
        """Pass/fail; an error when the completion is too long to match."""
        text = record.completion_text
        problem = text_problem(text)
        if problem is not None:
            return Score.error(f"regex: {problem}")
        matcher = getattr(params.compiled(), params.mode)
        return Score.ok(matcher(text) is not None)
