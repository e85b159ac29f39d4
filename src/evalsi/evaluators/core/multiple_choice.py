r"""``multiple-choice``: the completion's final answer letter equals the reference letter (GPQA style).

The answer is taken from the last ``Answer: X`` line, else ``\boxed{X}``, else "the answer is (X)"; a
completion that names no letter fails with a reason, it is not skipped (the model was asked to answer).
"""

from __future__ import annotations

import functools
import re

from pydantic import Field

from evalsi.evaluators._base import Evaluator, Params, ScoreContext
from evalsi.evaluators._registry import register
from evalsi.evaluators._score import Score
from evalsi.records import Record


class MultipleChoiceParams(Params):
    """The letters an answer may be."""

    letters: str = Field(default="ABCD", min_length=2, max_length=64)
    """The option letters, in order."""


@functools.lru_cache(maxsize=16)
def _patterns(letters: str) -> tuple[re.Pattern[str], ...]:
    # The letter itself is case-sensitive: "the answer is a ..." must not read as option A. No two adjacent
    # quantifiers can match the same characters, so a long run of spaces in a completion is read in linear time.
    letter = "((?-i:[" + re.escape(letters) + "]))"
    return (
        re.compile(r"(?i)answer\s*(?:is\s*)?[:：][*_$\\{(\[\s]*(?:\\text\{)?" + letter + r"\b"),
        re.compile(r"\\boxed\{\s*(?:\\text\{)?\(?" + letter + r"\)?"),
        re.compile(r"(?i)answer\s+is[*_$(\[\s]*" + letter + r"\b"),
    )


def extract_letter(text: str, letters: str) -> str | None:
    r"""The last answer letter the text commits to: ``Answer: X``, else ``\boxed{X}``, else "answer is X"."""
    for pattern in _patterns(letters):
        found = pattern.findall(text)
        if found:
            return str(found[-1]).upper()
    return None


@register
class MultipleChoice(Evaluator[MultipleChoiceParams]):
    """Pass when the extracted answer letter equals the reference letter."""

    name = "multiple-choice"
    summary = "The final answer letter ('Answer: X', \\boxed{X}) equals the reference letter."
    params_model = MultipleChoiceParams
    reads = ("completion", "reference")
    pack = "core"

    def score(self, record: Record, params: MultipleChoiceParams, ctx: ScoreContext) -> Score:
        """Pass/fail; skipped without a reference letter."""
        reference = str(record.reference).strip().upper() if record.reference is not None else ""
        if not reference:
            return Score.skipped("no reference letter")
        if len(reference) != 1 or reference not in params.letters.upper():
            return Score.error(f"reference {record.reference!r} is not one of {params.letters}")
        letter = extract_letter(record.completion_text, params.letters.upper())
        if letter is None:
            return Score.ok(False, "no answer letter found")
        return Score.ok(letter == reference, f"answered {letter}")
