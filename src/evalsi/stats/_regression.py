"""Regression gates ``METRIC[:MAX_DROP]``: a step regressed when it is significantly and materially worse.

A step regressed on a metric when the paired 95% interval of (step − base) lies wholly below zero and the drop
(base − step, the interval's centre) exceeds ``MAX_DROP`` (default 0). The first condition says the drop is not
noise; the second that it matters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from evalsi.stats._compare import PairedComparison
from evalsi.stats._mean import Estimate


@dataclass(frozen=True, slots=True)
class RegressionRule:
    """One gate: ``metric`` must not drop below the base by more than ``max_drop`` (significantly)."""

    metric: str
    max_drop: float = 0.0

    @classmethod
    def parse(cls, text: str) -> RegressionRule:
        """Read ``METRIC`` or ``METRIC:MAX_DROP`` (the last colon splits: metric names may hold colons).

        Args:
            text: The rule as written on the command line.

        Raises:
            ValueError: The text is empty, or MAX_DROP is not a number >= 0.

        Example:
            >>> RegressionRule.parse("math-equiv:0.02")
            RegressionRule(metric='math-equiv', max_drop=0.02)

        """
        metric, sep, drop = text.strip().rpartition(":")
        if not sep:
            metric, drop = text.strip(), ""
        else:
            try:
                float(drop)
            except ValueError:
                metric, drop = text.strip(), ""  # a colon inside the name, no drop given
        if not metric:
            raise ValueError(f"{text!r} is not METRIC[:MAX_DROP] (e.g. math-equiv:0.02)")
        if not drop:
            return cls(metric, 0.0)
        value = float(drop)
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{text!r}: MAX_DROP must be a number >= 0 (e.g. math-equiv:0.02), got {drop!r}")
        return cls(metric, value)

    def __str__(self) -> str:
        return f"{self.metric}:{self.max_drop:g}"


def is_regression(difference: Estimate, max_drop: float = 0.0) -> bool:
    """Whether a paired difference (step − base) is a regression: CI wholly below 0 and drop > ``max_drop``.

    Args:
        difference: The paired difference, step − base.
        max_drop: The largest drop tolerated.

    Example:
        >>> from evalsi.stats import estimate
        >>> is_regression(estimate([-0.1, -0.12, -0.08, -0.11]), max_drop=0.05)
        True
        >>> is_regression(estimate([-0.1, -0.12, -0.08, -0.11]), max_drop=0.2)
        False

    """
    if math.isnan(difference.ci_high) or math.isnan(difference.mean):
        return False
    return difference.ci_high < 0 and -difference.mean > max_drop


def regressed(comparison: PairedComparison, rule: RegressionRule) -> bool:
    """Whether run B of a paired comparison (B = step, A = base) regressed under ``rule``.

    Args:
        comparison: The paired comparison of base (A) and step (B).
        rule: The metric and the drop it tolerates.

    """
    return is_regression(comparison.difference, rule.max_drop)
