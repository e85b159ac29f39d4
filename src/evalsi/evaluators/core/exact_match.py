"""``exact-match``: the completion equals the reference (or one of several references)."""

from __future__ import annotations

from evalsi.evaluators._base import Evaluator, Params, ScoreContext
from evalsi.evaluators._registry import register
from evalsi.evaluators._score import Score
from evalsi.evaluators.core._text import normalise
from evalsi.records import Record, reference_options


class ExactMatchParams(Params):
    """How strictly to compare."""

    ignore_case: bool = False
    """Compare case-insensitively."""
    strip: bool = True
    """Ignore leading and trailing whitespace."""
    collapse_whitespace: bool = False
    """Treat every run of whitespace as one space."""


@register
class ExactMatch(Evaluator[ExactMatchParams]):
    """Pass when the completion text equals the reference; a list reference passes on any item."""

    name = "exact-match"
    summary = "The completion equals the reference (any item of a list reference)."
    params_model = ExactMatchParams
    reads = ("completion", "reference")

    def score(self, record: Record, params: ExactMatchParams, ctx: ScoreContext) -> Score:
        """Pass/fail; skipped without a reference."""
        refs = reference_options(record.reference)
        if not refs:
            return Score.skipped("no reference")
        options = {
            "ignore_case": params.ignore_case,
            "strip": params.strip,
            "collapse_whitespace": params.collapse_whitespace,
        }
        answer = normalise(record.completion_text, **options)
        return Score.ok(any(answer == normalise(ref, **options) for ref in refs))
