"""`Score`: what an evaluator says about one record. A failure is data (status ``error``), never an exception."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Status = Literal["ok", "skipped", "error"]
"""How a score came about: ``ok`` (a value), ``skipped`` (nothing to check, such as no reference; it adds nothing
to a total) or ``error`` (the evaluator could not score; the component's ``onError`` decides)."""
STATUSES: tuple[Status, ...] = ("ok", "skipped", "error")
"""Every :data:`Status`."""


@dataclass(frozen=True, slots=True)
class Score:
    """One evaluator's verdict on one record.

    ``value`` is a number or a pass/fail bool when ``status`` is ``ok``; it is ``None`` for ``skipped`` (the
    evaluator does not apply: no reference, no test cases) and for ``error`` (it could not decide).
    """

    value: float | bool | None
    status: Status = "ok"
    reason: str | None = None
    details: Mapping[str, Any] | None = None

    @classmethod
    def ok(cls, value: float | bool, reason: str | None = None, details: Mapping[str, Any] | None = None) -> Score:
        """A decided score. A non-finite number is turned into an error: it cannot be a reward.

        Args:
            value: The score: a number, or a bool for pass/fail.
            reason: Why, in a few words.
            details: Further data for breakdowns and debugging.

        """
        if not isinstance(value, bool) and not math.isfinite(value):
            return cls.error(f"evaluator returned a non-finite value ({value})", details)
        return cls(value, "ok", reason, details)

    @classmethod
    def skipped(cls, reason: str, details: Mapping[str, Any] | None = None) -> Score:
        """The evaluator does not apply to this record; it adds nothing to a reward.

        Args:
            reason: Why the evaluator does not apply.
            details: Further data for debugging.

        """
        return cls(None, "skipped", reason, details)

    @classmethod
    def error(cls, reason: str, details: Mapping[str, Any] | None = None) -> Score:
        """The evaluator could not decide; the spec's ``onError`` says what that means for the reward.

        Args:
            reason: What went wrong.
            details: Further data for debugging.

        """
        return cls(None, "error", reason, details)

    @property
    def numeric(self) -> float | None:
        """The value as a number (pass/fail counts as 1 or 0), or None when there is no value."""
        if self.value is None:
            return None
        return float(self.value)

    def __reduce__(self) -> tuple[type[Score], tuple[Any, ...]]:
        """Pickle as a constructor call: several times faster than a slotted dataclass's per-field state.

        Scores cross process boundaries in bulk (a Ray reward pool's actors send each chunk's scores back).
        """
        return (Score, (self.value, self.status, self.reason, self.details))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form used in outputs: ``{value, status, reason}`` plus ``details`` when present."""
        out: dict[str, Any] = {"value": self.value, "status": self.status, "reason": self.reason}
        if self.details:
            out["details"] = dict(self.details)
        return out
