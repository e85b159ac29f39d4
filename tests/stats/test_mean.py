"""Means, standard errors and clustered 95% intervals."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalsi.stats import clustered_estimate, estimate, mean, standard_error, t_quantile_975

finite = st.floats(-1e6, 1e6, allow_nan=False)
values_2 = st.lists(finite, min_size=2, max_size=50)


def test_worked_example() -> None:
    est = estimate([1.0, 0.0, 1.0, 1.0])
    assert est.mean == 0.75
    assert est.se == pytest.approx(0.25)  # s^2 = 0.25, se = sqrt(0.25 / 4)
    # A proportion: Wilson's interval (z = 1.96), where mean ± t·se gave [-0.046, 1.546], outside [0, 1].
    z2 = 1.959963984540054**2
    centre = (0.75 + z2 / 8) / (1 + z2 / 4)
    half = math.sqrt(z2) * math.sqrt(0.75 * 0.25 / 4 + z2 / 64) / (1 + z2 / 4)
    assert est.ci_low == pytest.approx(centre - half) == pytest.approx(0.3006, abs=1e-4)
    assert est.ci_high == pytest.approx(centre + half) == pytest.approx(0.9544, abs=1e-4)
    assert est.method == "wilson"
    assert (est.n, est.clusters) == (4, 4)
    assert est.to_dict()["ci"] == {"low": est.ci_low, "high": est.ci_high, "method": "wilson"}


def test_clustered_worked_example() -> None:
    # Two records, two samples each: only two independent units, not four.
    est = clustered_estimate([[1.0, 1.0], [0.0, 0.0]])
    assert est.mean == 0.5
    assert est.se == pytest.approx(0.5)
    assert est.se > estimate([1.0, 1.0, 0.0, 0.0]).se
    assert (est.n, est.clusters) == (4, 2)


def test_t_quantiles_known_values() -> None:
    assert t_quantile_975(1) == pytest.approx(12.706, abs=1e-3)
    assert t_quantile_975(30) == pytest.approx(2.042, abs=1e-3)
    assert t_quantile_975(31) == pytest.approx(2.0395, abs=1e-4)
    assert t_quantile_975(120) == pytest.approx(1.9799, abs=1e-4)
    assert t_quantile_975(10**6) == pytest.approx(1.95996, abs=1e-4)
    with pytest.raises(ValueError):
        t_quantile_975(0)


def test_degenerate_inputs() -> None:
    assert math.isnan(estimate([]).mean)
    one = estimate([0.3])
    assert one.mean == 0.3 and math.isnan(one.se) and math.isnan(one.ci_low) and one.method == ""
    assert one.to_dict()["ci"] is None
    assert math.isnan(standard_error([1.0]))
    assert clustered_estimate([[], [1.0], []]).clusters == 1
    assert estimate([0.3]).to_dict()["se"] is None


@settings(deadline=None)  # the bootstrap draws 1,000 resamples: slow on a loaded machine
@given(values_2)
def test_standard_error_matches_statistics(values: list[float]) -> None:
    expected = statistics.stdev(values) / math.sqrt(len(values))
    assert standard_error(values) == pytest.approx(expected, rel=1e-6, abs=1e-9)
    assert estimate(values).se == pytest.approx(expected, rel=1e-6, abs=1e-9)


@settings(deadline=None)  # the bootstrap draws 1,000 resamples: slow on a loaded machine
@given(values_2)
def test_interval_contains_the_mean(values: list[float]) -> None:
    est = estimate(values)
    assert est.ci_low <= est.mean + 1e-9 and est.mean - 1e-9 <= est.ci_high
    assert est.mean == pytest.approx(mean(values))


@settings(deadline=None)  # the bootstrap draws 1,000 resamples: slow on a loaded machine
@given(st.integers(2, 8), st.lists(st.lists(finite, min_size=1, max_size=1), min_size=2, max_size=20))
def test_equal_clusters_reduce_to_record_means(size: int, seeds: list[list[float]]) -> None:
    # Equal-size clusters: the cluster-robust SE is the plain SE of the per-record means.
    clusters = [[s[0] + j for j in range(size)] for s in seeds]
    record_means = [mean(c) for c in clusters]
    est = clustered_estimate(clusters)
    assert est.mean == pytest.approx(mean(record_means), rel=1e-9, abs=1e-6)
    assert est.se == pytest.approx(standard_error(record_means), rel=1e-6, abs=1e-6)


@settings(deadline=None)  # the bootstrap draws 1,000 resamples: slow on a loaded machine
@given(st.lists(st.lists(finite, min_size=1, max_size=4), min_size=2, max_size=15), st.randoms())
def test_cluster_order_does_not_matter(clusters: list[list[float]], rnd: object) -> None:
    shuffled = list(clusters)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    a, b = clustered_estimate(clusters), clustered_estimate(shuffled)
    assert a.mean == pytest.approx(b.mean, rel=1e-9, abs=1e-9)
    assert a.se == pytest.approx(b.se, rel=1e-6, abs=1e-6)


@settings(deadline=None)  # the bootstrap draws 1,000 resamples: slow on a loaded machine
@given(values_2, finite)
def test_shifting_values_moves_the_mean_not_the_error(values: list[float], shift: float) -> None:
    a, b = estimate(values), estimate([v + shift for v in values])
    assert b.mean == pytest.approx(a.mean + shift, rel=1e-9, abs=1e-6)
    assert b.se == pytest.approx(a.se, rel=1e-6, abs=1e-3)
