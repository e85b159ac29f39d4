"""``contains``: the completion contains a given text, or the reference."""

from __future__ import annotations

from evalsi.evaluators._base import Evaluator, Params, ScoreContext
from evalsi.evaluators._registry import register
from evalsi.evaluators._score import Score
from evalsi.records import Record, reference_options


class ContainsParams(Params):
    """What to look for."""

    text: str | list[str] | None = None
    """The text to find (any of a list); when unset, the reference is looked for."""
    ignore_case: bool = False
    """Match case-insensitively."""


@register
class Contains(Evaluator[ContainsParams]):
    """Pass when the completion contains ``text`` (or the reference, when ``text`` is unset)."""

    name = "contains"
    summary = "The completion contains `text`, or the reference when `text` is unset."
    params_model = ContainsParams
    reads = ("completion", "reference")

    def score(self, record: Record, params: ContainsParams, ctx: ScoreContext) -> Score:
        """Pass/fail; skipped when there is nothing to look for."""
        needles = reference_options(params.text if params.text is not None else record.reference)
        if not needles:
            return Score.skipped("no `text` param and no reference")
        haystack = record.completion_text
        if params.ignore_case:
            haystack = haystack.casefold()
            needles = [n.casefold() for n in needles]
        return Score.ok(any(n in haystack for n in needles))
