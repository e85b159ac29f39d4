"""The 95% intervals: Wilson, Newcombe's paired score interval, the bootstrap over records; each stays in range."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalsi.stats import (
    BOOTSTRAP_MAX_RECORDS,
    Interval,
    bootstrap,
    clustered_estimate,
    describe_method,
    estimate,
    newcombe_paired,
    paired_comparison,
    wilson,
)


def test_wilson_worked_examples() -> None:
    # 7 of 8: the t interval was [0.58, 1.17]; Wilson's stays below 1.
    seven = wilson(7, 8)
    assert (round(seven.low, 4), round(seven.high, 4)) == (0.5291, 0.9776)
    assert wilson(0, 8).low == 0.0 and wilson(8, 8).high == 1.0
    assert wilson(0, 8).high == pytest.approx(0.3244, abs=1e-4)
    assert wilson(8, 8).low == pytest.approx(0.6756, abs=1e-4)
    with pytest.raises(ValueError):
        wilson(9, 8)


def test_newcombe_matches_the_published_example() -> None:
    # Fagerland, Lydersen & Laake, Statistical Analysis of Contingency Tables, ch. 8: complete response before
    # and after consolidation therapy (Cavo et al. 2012), [[59, 6], [16, 80]]: -0.0621 (95% CI -0.1186 to -0.0046).
    interval = newcombe_paired(both=59, b_only=6, a_only=16, neither=80)
    assert (round(interval.low, 4), round(interval.high, 4)) == (-0.1186, -0.0046)
    assert interval.method == "newcombe"


def test_eight_pairs_that_all_improved_stay_below_one() -> None:
    # 3 of 8 passed before, 8 of 8 after: the t interval was [+0.19, +1.06].
    a = {f"r{i}": [1.0 if i < 3 else 0.0] for i in range(8)}
    b = {f"r{i}": [1.0] for i in range(8)}
    d = paired_comparison(a, b).difference
    assert d.mean == pytest.approx(0.625)
    assert d.method == "newcombe"
    assert 0.0 < d.ci_low < d.mean < d.ci_high < 1.0
    assert (d.ci_low, d.ci_high) == _bounds(newcombe_paired(both=3, b_only=5, a_only=0, neither=0))


def _bounds(interval: Interval) -> tuple[float, float]:
    return interval.low, interval.high


def test_a_proportion_near_one_stays_within_zero_and_one() -> None:
    est = estimate([1.0] * 7 + [0.0])  # the t interval was [0.58, 1.17]
    assert est.method == "wilson" and est.ci_high < 1.0
    assert (est.ci_low, est.ci_high) == _bounds(wilson(7, 8))
    assert estimate([1.0] * 8).ci_high == 1.0 and estimate([1.0] * 8).ci_low > 0.6


def test_several_samples_per_record_resample_records_whole() -> None:
    # Four samples per record: the bootstrap resamples records, so the interval is as wide as 3 records allow.
    est = clustered_estimate([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    assert est.method == "bootstrap" and (est.n, est.clusters) == (12, 3)
    assert 0.0 <= est.ci_low < 0.25 and 0.9 < est.ci_high <= 1.0


def test_the_bootstrap_is_reproducible() -> None:
    values = [0.1, 0.4, 0.35, 0.8, 0.05, 0.6, 0.55, 0.2]
    assert estimate(values) == estimate(list(values))
    assert estimate(values).method == "bootstrap"


def test_many_records_use_the_normal_interval_within_the_observed_range() -> None:
    values = [0.0] * (BOOTSTRAP_MAX_RECORDS + 10) + [0.5]
    est = estimate(values)
    assert est.method == "normal"
    assert est.ci_low == 0.0 < est.mean < est.ci_high  # mean - z·se is below 0: kept at the smallest value
    big = {f"r{i}": [0.25 * (i % 5)] for i in range(BOOTSTRAP_MAX_RECORDS + 1)}
    shifted = {k: [min(1.0, v[0] + 0.25)] for k, v in big.items()}
    d = paired_comparison(big, shifted).difference
    assert d.method == "paired-normal" and d.ci_low > 0 and d.ci_high <= 0.25


def test_methods_are_described() -> None:
    for method in ("wilson", "bootstrap", "normal", "newcombe", "paired-bootstrap", "paired-normal"):
        assert describe_method(method) != method
    assert describe_method("unknown") == "unknown"


@given(st.integers(1, 400), st.data())
def test_wilson_stays_in_zero_one_and_holds_the_proportion(n: int, data: st.DataObject) -> None:
    x = data.draw(st.integers(0, n))
    interval = wilson(x, n)
    assert 0.0 <= interval.low <= x / n <= interval.high <= 1.0


@given(st.lists(st.integers(0, 30), min_size=4, max_size=4).filter(lambda c: sum(c) > 0))
def test_newcombe_stays_in_range_and_holds_the_difference(counts: list[int]) -> None:
    both, b_only, a_only, neither = counts
    n = sum(counts)
    d = (b_only - a_only) / n
    interval = newcombe_paired(both, b_only, a_only, neither)
    assert -1.0 <= interval.low <= d + 1e-12 and d - 1e-12 <= interval.high <= 1.0
    mirrored = newcombe_paired(both, a_only, b_only, neither)
    assert mirrored.low == pytest.approx(-interval.high) and mirrored.high == pytest.approx(-interval.low)


scores = st.floats(0, 1, allow_nan=False)


@settings(deadline=None)  # the bootstrap draws 1,000 resamples: slow on a loaded machine
@given(st.lists(st.lists(scores, min_size=1, max_size=4), min_size=2, max_size=30))
def test_any_mean_of_scores_in_zero_one_has_its_interval_in_zero_one(clusters: list[list[float]]) -> None:
    est = clustered_estimate(clusters)
    record_means = [sum(c) / len(c) for c in clusters]
    if est.method == "wilson":  # a proportion: [0, 1], though every record failed (or passed)
        assert 0.0 <= est.ci_low <= est.ci_high <= 1.0
    else:  # a resampled mean is a mean of observed values
        assert min(record_means) - 1e-12 <= est.ci_low <= est.ci_high <= max(record_means) + 1e-12
    assert est.ci_low <= est.mean + 1e-12 and est.mean - 1e-12 <= est.ci_high


@settings(deadline=None)  # the bootstrap draws 1,000 resamples: slow on a loaded machine
@given(st.lists(scores, min_size=2, max_size=30), st.lists(scores, min_size=30, max_size=30))
def test_paired_differences_stay_within_the_observed_differences(a: list[float], b: list[float]) -> None:
    run_a = {f"r{i}": [v] for i, v in enumerate(a)}
    run_b = {f"r{i}": [b[i]] for i in range(len(a))}
    cmp = paired_comparison(run_a, run_b)
    diffs = [b[i] - v for i, v in enumerate(a)]
    d = cmp.difference
    if d.method == "newcombe":
        assert -1.0 <= d.ci_low <= d.ci_high <= 1.0
    else:
        assert min(diffs) - 1e-12 <= d.ci_low <= d.ci_high <= max(diffs) + 1e-12
    mirrored = paired_comparison(run_b, run_a).difference
    assert mirrored.ci_low == pytest.approx(-d.ci_high) and mirrored.ci_high == pytest.approx(-d.ci_low)


def test_bootstrap_with_fewer_than_two_records_has_no_interval() -> None:
    assert math.isnan(bootstrap([0.4]).low)
    assert bootstrap([0.4, 0.4]).low == bootstrap([0.4, 0.4]).high == 0.4
