"""Applying a test's scoring function to rollouts, by mode, and checking what it gives back."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

from evalsi.testing._config import EvaluationSetupError, Mode
from evalsi.testing._row import EvaluationRow

ScoringFunction = Callable[..., Any]
"""``pointwise``: ``(row) -> row``; ``groupwise`` and ``all``: ``(rows) -> rows``."""


def check_signature(function: ScoringFunction, mode: Mode) -> None:
    """Refuse a scoring function that cannot take what its mode passes (one row, or a list of rows).

    Raises:
        EvaluationSetupError: The function does not take exactly one positional argument.

    """
    parameters = [
        p
        for p in inspect.signature(function).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    if len(parameters) != 1:
        takes = "one row (EvaluationRow)" if mode == "pointwise" else "one list of rows (list[EvaluationRow])"
        raise EvaluationSetupError(
            f"{function.__qualname__}: a {mode} evaluation test takes {takes}; it has "
            f"{len(parameters)} required positional parameters"
        )


def score_rollouts(function: ScoringFunction, mode: Mode, rollouts: list[EvaluationRow]) -> list[EvaluationRow]:
    """Every rollout with its score.

    Failed rollouts score 0 with their error as the reason; the rest are passed to ``function`` one at a time
    (``pointwise``), per input row and run (``groupwise``), or all at once (``all``).

    A row whose ``evaluation_result.is_score_valid`` is False scores 0, its reason saying so.

    Raises:
        EvaluationSetupError: The function returned something other than rows, or left a score unset or
            outside [0, 1].

    """
    failed = [r for r in rollouts if r.rollout_error is not None]
    for row in failed:
        row.score, row.reason = 0.0, f"rollout failed: {row.rollout_error}"
    done = [r for r in rollouts if r.rollout_error is None]
    scored: list[EvaluationRow] = []
    if mode == "pointwise":
        for row in done:
            returned = function(row)
            scored.append(row if returned is None else _one(returned, function))
    elif mode == "groupwise":
        groups: dict[tuple[str, int], list[EvaluationRow]] = {}
        for row in done:
            groups.setdefault((row.row_id, row.run), []).append(row)
        for group in groups.values():
            scored.extend(_many(function(group), group, function))
    else:
        scored.extend(_many(function(done), done, function))
    for row in scored:
        _check_score(row, function)
    return failed + scored


def _one(value: Any, function: ScoringFunction) -> EvaluationRow:
    if not isinstance(value, EvaluationRow):
        raise EvaluationSetupError(
            f"{function.__qualname__} returned {type(value).__name__}; a pointwise test returns the row it scored"
        )
    return value


def _many(value: Any, given: Sequence[EvaluationRow], function: ScoringFunction) -> list[EvaluationRow]:
    if value is None:
        return list(given)
    if not isinstance(value, list) or not all(isinstance(v, EvaluationRow) for v in value):
        raise EvaluationSetupError(f"{function.__qualname__} must return the list of rows it scored")
    return value


def _check_score(row: EvaluationRow, function: ScoringFunction) -> None:
    result = row.evaluation_result
    if not result.is_score_valid:  # the function could not score the row: it counts as 0, saying why
        why = result.reason or result.error or "no reason given"
        row.score, row.reason = 0.0, f"the scoring function marked the score invalid: {why}"
        return
    if row.score is None:
        raise EvaluationSetupError(f"{function.__qualname__} did not set `score` on row {row.row_id!r}")
    score = float(row.score)
    if not (math.isfinite(score) and 0.0 <= score <= 1.0):
        raise EvaluationSetupError(
            f"{function.__qualname__} gave row {row.row_id!r} the score {row.score!r}; scores are within [0, 1]"
        )
    row.score = score
