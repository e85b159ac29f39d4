"""``overlong-penalty``: DAPO's soft overlong penalty on the completion's length in tokens."""

from __future__ import annotations

from pydantic import Field, model_validator

from evalsi.evaluators._base import Evaluator, Params, ScoreContext
from evalsi.evaluators._registry import register
from evalsi.evaluators._score import Score
from evalsi.records import Record


class OverlongPenaltyParams(Params):
    """The length budget."""

    max_length: int = Field(default=20480, gt=0)
    """Completions of this many tokens or more get the full penalty, −1."""
    buffer: int = Field(default=4096, gt=0)
    """The penalty starts ``buffer`` tokens before ``max_length`` and grows linearly."""

    @model_validator(mode="after")
    def _buffer_fits(self) -> OverlongPenaltyParams:
        if self.buffer > self.max_length:
            raise ValueError(f"buffer ({self.buffer}) must not exceed max_length ({self.max_length})")
        return self


def overlong_penalty(length: int, max_length: int, buffer: int) -> float:
    """0 up to ``max_length − buffer`` tokens, then linear down to −1 at ``max_length`` (and −1 beyond)."""
    expected = max_length - buffer
    if length <= expected:
        return 0.0
    return max(-1.0, (expected - length) / buffer)


@register
class OverlongPenalty(Evaluator[OverlongPenaltyParams]):
    """A value in [−1, 0] from ``completion_tokens`` (or ``len(completion_ids)``); skipped without a token count."""

    name = "overlong-penalty"
    summary = "DAPO's soft overlong penalty: 0 up to max_length − buffer, linear to −1 at max_length."
    params_model = OverlongPenaltyParams
    reads = ("completion_tokens",)
    pack = "rl"

    def score(self, record: Record, params: OverlongPenaltyParams, ctx: ScoreContext) -> Score:
        """The penalty; skipped when the rollout carries no token count."""
        if record.completion_tokens is None:
            return Score.skipped("no completion_tokens or completion_ids in the rollout")
        return Score.ok(overlong_penalty(record.completion_tokens, params.max_length, params.buffer))
