"""``field-score``: a score already present in the rollout (a precomputed reward, or a test vector)."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field

from evalsi.evaluators._base import Evaluator, Params, ScoreContext
from evalsi.evaluators._registry import register
from evalsi.evaluators._score import STATUSES, Score
from evalsi.records import Record


class FieldScoreParams(Params):
    """Which metadata field holds the score."""

    field: str = Field(min_length=1)
    """The rollout field: a number, a bool, or ``{value, status, reason}``. Absent or null: skipped."""


@register
class FieldScore(Evaluator[FieldScoreParams]):
    """Reads a score from a rollout field: numbers and bools as they are, or a full ``{value, status, reason}``."""

    name = "field-score"
    summary = "A score already in the rollout: a number, a bool, or {value, status, reason}."
    params_model = FieldScoreParams
    reads = ("metadata",)

    def cache_fields(self, params: FieldScoreParams) -> tuple[str, ...]:
        """Only the named field matters."""
        return (f"metadata.{params.field}",)

    def score(self, record: Record, params: FieldScoreParams, ctx: ScoreContext) -> Score:
        """The field's value as a Score."""
        raw = record.metadata.get(params.field)
        if raw is None:
            return Score.skipped(f"the rollout has no {params.field!r} field")
        if isinstance(raw, bool | int | float):
            return Score.ok(raw if isinstance(raw, bool) else float(raw))
        if isinstance(raw, Mapping):
            status = raw.get("status", "ok")
            reason = raw.get("reason")
            if status not in STATUSES:
                return Score.error(f"{params.field}.status must be one of {', '.join(STATUSES)}, got {status!r}")
            if status == "skipped":
                return Score.skipped(reason or "skipped")
            if status == "error":
                return Score.error(reason or "error")
            value = raw.get("value")
            if not isinstance(value, bool | int | float):
                return Score.error(f"{params.field}.value must be a number or a bool, got {value!r}")
            return Score.ok(value if isinstance(value, bool) else float(value), reason)
        return Score.error(f"{params.field} must be a number, a bool or {{value, status, reason}}, got {raw!r}")
