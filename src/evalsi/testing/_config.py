"""An evaluation test's settings: the pass threshold, and the environment variables that override settings in CI.

Only these variables change what an evaluation test does (values are validated, errors name the variable):

=========================== ==================================================================================
``EVALSI_PASSED_THRESHOLD`` a number (``0.8``) or JSON ``{"success": 0.8, "standard_error": 0.05}``
``EVALSI_NUM_RUNS``         repetitions of every rollout (a positive integer)
``EVALSI_MAX_ROWS``         use only the first N rows of the dataset (a positive integer, or ``all``)
``EVALSI_COMPLETION_PARAMS`` JSON: one object, or a list of objects (two or more make a comparison)
``EVALSI_RESULTS_DB``       where results are stored (default ``.evalsi/results.sqlite`` under the current dir)
=========================== ==================================================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from evalsi.errors import EvalsiError

Mode = Literal["pointwise", "groupwise", "all"]
Aggregation = Literal["mean", "max", "min"]


class EvaluationSetupError(EvalsiError, ValueError):
    """An evaluation test is declared wrongly, or an environment override is invalid."""


@dataclass(frozen=True)
class Threshold:
    """The pass rule: the aggregate score reaches ``success``, and its standard error is at most ``standard_error``.

    A standard error that cannot be estimated (fewer than two rows) does not meet a standard-error condition.
    """

    success: float
    standard_error: float | None = None

    @classmethod
    def parse(cls, value: float | Mapping[str, Any] | Threshold | None, where: str) -> Threshold | None:
        """A threshold from a number, a ``{success, standard_error}`` mapping, or None.

        Args:
            value: The threshold as the decorator was given it.
            where: The test's name, for error messages.

        Raises:
            EvaluationSetupError: Not a number in [0, 1] or such a mapping (``where`` names the setting).

        """
        if value is None or isinstance(value, Threshold):
            return value
        if isinstance(value, bool):
            raise EvaluationSetupError(f"{where}: a threshold is a number or {{success, standard_error}}")
        if isinstance(value, int | float):
            return cls(_unit(float(value), f"{where}"))
        if isinstance(value, Mapping):
            unknown = set(value) - {"success", "standard_error"}
            if unknown or "success" not in value:
                raise EvaluationSetupError(
                    f"{where}: expected {{success, standard_error}}, got keys {sorted(map(str, value))}"
                )
            error = value.get("standard_error")
            return cls(
                _unit(float(value["success"]), f"{where}.success"),
                None if error is None else _unit(float(error), f"{where}.standard_error"),
            )
        raise EvaluationSetupError(f"{where}: a threshold is a number or {{success, standard_error}}")

    def passes(self, score: float, standard_error: float) -> bool:
        """Whether an aggregate score (with its standard error) passes.

        Args:
            score: The aggregate score.
            standard_error: Its standard error.

        """
        if score < self.success:
            return False
        return self.standard_error is None or standard_error <= self.standard_error  # nan compares false

    def describe(self) -> str:
        """``score >= 0.8`` or ``score >= 0.8 and standard error <= 0.05``."""
        text = f"score >= {self.success:g}"
        return text if self.standard_error is None else f"{text} and standard error <= {self.standard_error:g}"


def _unit(value: float, where: str) -> float:
    if not 0.0 <= value <= 1.0:
        raise EvaluationSetupError(f"{where} must be within [0, 1], got {value:g}")
    return value


def env_threshold(default: Threshold | None) -> Threshold | None:
    """``EVALSI_PASSED_THRESHOLD`` when set, else ``default``."""
    raw = os.environ.get("EVALSI_PASSED_THRESHOLD")
    if raw is None:
        return default
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise EvaluationSetupError(
            f"EVALSI_PASSED_THRESHOLD={raw!r} is neither a number nor JSON {{success, standard_error}}"
        ) from None
    return Threshold.parse(value, "EVALSI_PASSED_THRESHOLD")


def env_positive(name: str, default: int | None, *, allow_all: bool = False) -> int | None:
    """A positive integer from the environment variable ``name`` (``all`` means no limit), else ``default``."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    if allow_all and raw.strip().lower() == "all":
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        valid = "a positive integer or 'all'" if allow_all else "a positive integer"
        raise EvaluationSetupError(f"{name}={raw!r} must be {valid}")
    return value


def env_completion_params(default: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``EVALSI_COMPLETION_PARAMS`` (a JSON object or list of objects) when set, else ``default``."""
    raw = os.environ.get("EVALSI_COMPLETION_PARAMS")
    if raw is None:
        return [dict(p) for p in default]
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise EvaluationSetupError(f"EVALSI_COMPLETION_PARAMS is not JSON: {exc}") from None
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(item, dict) for item in items):
        raise EvaluationSetupError("EVALSI_COMPLETION_PARAMS must be a JSON object or a list of objects")
    return items
