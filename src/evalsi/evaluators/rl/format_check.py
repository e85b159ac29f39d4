"""``format-check``: the completion has the required shape (by default ``<think>…</think><answer>…</answer>``)."""

from __future__ import annotations

from pydantic import field_validator

from evalsi.evaluators._base import Evaluator, Params, ScoreContext
from evalsi.evaluators._patterns import check_pattern, compile_pattern, text_problem
from evalsi.evaluators._registry import register
from evalsi.evaluators._score import Score
from evalsi.records import Record

DEFAULT_PATTERN = r"(?s)\s*<think>.*?</think>\s*<answer>.*?</answer>\s*"


class FormatCheckParams(Params):
    """The required shape."""

    pattern: str = DEFAULT_PATTERN
    """A regular expression (RE2 syntax: linear time, no backreferences or lookaround) the whole completion must
    match."""
    unique_tags: tuple[str, ...] = ()
    """Tags (such as ``think`` or ``answer``) whose opening and closing forms must each appear exactly once."""

    _compiles = field_validator("pattern")(check_pattern)

    @field_validator("unique_tags")
    @classmethod
    def _bare_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for tag in value:
            if not tag or "<" in tag or ">" in tag:
                raise ValueError(f"give bare tag names such as 'answer', not {tag!r}")
        return value


@register
class FormatCheck(Evaluator[FormatCheckParams]):
    """Pass when the whole completion matches ``pattern`` and each of ``unique_tags`` appears exactly once."""

    name = "format-check"
    summary = "The completion matches a regex (default <think>…</think><answer>…</answer>); optional once-only tags."
    params_model = FormatCheckParams
    reads = ("completion",)
    pack = "rl"

    def score(self, record: Record, params: FormatCheckParams, ctx: ScoreContext) -> Score:
        """Pass/fail, with the reason for a failure."""
        text = record.completion_text
        problem = text_problem(text)
        if problem is not None:
            return Score.error(f"format-check: {problem}")
        if compile_pattern(params.pattern).fullmatch(text) is None:
            return Score.ok(False, "the completion does not match the format pattern")
        for tag in params.unique_tags:
            for form in (f"<{tag}>", f"</{tag}>"):
                count = text.count(form)
                if count != 1:
                    return Score.ok(False, f"{form} appears {count} times; it must appear exactly once")
        return Score.ok(True)
