"""Regression gates: parsing METRIC[:MAX_DROP] and the rule (CI of step − base below 0, drop > MAX_DROP)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalsi.stats import EMPTY, RegressionRule, estimate, is_regression, paired_comparison, regressed


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("math-equiv:0.02", RegressionRule("math-equiv", 0.02)),
        ("exact-match", RegressionRule("exact-match", 0.0)),
        ("pass@4/code:0.1", RegressionRule("pass@4/code", 0.1)),
        ("ns:metric", RegressionRule("ns:metric", 0.0)),
        (" acc:0 ", RegressionRule("acc", 0.0)),
    ],
)
def test_parse(text: str, rule: RegressionRule) -> None:
    assert RegressionRule.parse(text) == rule


@pytest.mark.parametrize("text", ["", ":0.1", "acc:-0.1", "acc:nan", "acc:inf"])
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="MAX_DROP"):
        RegressionRule.parse(text)


def test_rule_needs_significance_and_a_large_enough_drop() -> None:
    base = {f"r{i}": [1.0] for i in range(40)}
    step = {f"r{i}": [0.0 if i < 8 else 1.0] for i in range(40)}  # 8 of 40 lost: drop 0.2
    comparison = paired_comparison(base, step)
    assert comparison.difference.ci_high < 0
    assert regressed(comparison, RegressionRule("m", 0.1))
    assert not regressed(comparison, RegressionRule("m", 0.2))  # the drop must exceed MAX_DROP
    noisy = paired_comparison(base, {f"r{i}": [0.0 if i < 1 else 1.0] for i in range(40)})
    assert not noisy.significant and not regressed(noisy, RegressionRule("m", 0.0))
    better = paired_comparison(step, base)
    assert better.significant and not regressed(better, RegressionRule("m"))


def test_no_interval_is_no_regression() -> None:
    assert not is_regression(EMPTY)
    assert not is_regression(estimate([-1.0]))  # one record: no interval


@given(st.lists(st.floats(-1, 1, allow_nan=False), min_size=2, max_size=40), st.floats(0, 1))
def test_regression_implies_a_significant_drop_beyond_max(diffs: list[float], max_drop: float) -> None:
    est = estimate(diffs)
    if is_regression(est, max_drop):
        assert est.ci_high < 0 and -est.mean > max_drop
    elif not math.isnan(est.ci_high) and est.ci_high < 0:
        assert -est.mean <= max_drop
