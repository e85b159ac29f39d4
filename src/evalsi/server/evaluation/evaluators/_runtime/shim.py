"""``evalsi.testing`` as an uploaded evaluator sees it in the sandbox: the decorator records, nothing runs.

On the server an evaluation test is only a scoring function: its rows come from a dataset (or a reward
request) with the assistant's reply already in them, so rollout processors, thresholds and completion params
are accepted and kept, never used. Only the ``mode`` matters, which says how the function takes rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

DECLARATION = "__evalsi_evaluation_test__"
"""The attribute the decorator sets on the scoring function: ``{"mode": ...}``."""
MODES = ("pointwise", "groupwise", "all")

__all__ = [
    "EvaluationFailed",
    "EvaluationSetupError",
    "NoOp",
    "NoOpRolloutProcessor",
    "Remote",
    "RolloutProcessor",
    "SingleTurn",
    "SingleTurnRolloutProcessor",
    "Threshold",
    "evaluation_test",
]


class EvaluationSetupError(ValueError):
    """An evaluation test is declared wrongly."""


class EvaluationFailed(AssertionError):
    """An evaluation test's aggregate did not meet its pass rule (never raised on the server)."""


class RolloutProcessor:
    """A rollout processor as declared: kept, never run (the server scores the replies the rows hold)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args
        self.kwargs = kwargs


class SingleTurn(RolloutProcessor):
    """Stands in for the single-turn rollout processor."""


class NoOp(RolloutProcessor):
    """Stands in for the pre-generated rows processor."""


class Remote(RolloutProcessor):
    """Stands in for the remote rollout processor."""


SingleTurnRolloutProcessor = SingleTurn
"""Eval Protocol's name of the single-turn processor."""
NoOpRolloutProcessor = NoOp
"""Eval Protocol's name of the pre-generated rows processor."""


class Threshold:
    """A pass rule as declared (unused on the server)."""

    def __init__(self, success: float, standard_error: float | None = None) -> None:
        self.success = success
        self.standard_error = standard_error


class _EvaluationTest:
    """``@evaluation_test(...)``: marks the function with its mode and returns it unchanged."""

    def __call__(self, function: Callable[..., Any] | None = None, /, **settings: Any) -> Any:
        mode = settings.get("mode", "pointwise")
        if mode not in MODES:
            raise EvaluationSetupError(f"mode must be one of {', '.join(MODES)} (got {mode!r})")

        def decorate(scoring: Callable[..., Any]) -> Callable[..., Any]:
            setattr(scoring, DECLARATION, {"mode": mode})
            return scoring

        return decorate if function is None else decorate(function)

    def from_spec(self, *args: Any, **kwargs: Any) -> Any:
        """Not available here: a RewardSpec is scored by the server itself."""
        raise EvaluationSetupError(
            "evaluation_test.from_spec(...) cannot be uploaded as an evaluator: score the RewardSpec itself "
            "with the server's Reward Service"
        )


evaluation_test = _EvaluationTest()
