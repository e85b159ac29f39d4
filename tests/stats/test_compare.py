"""Paired comparison of two runs: differences, intervals, McNemar's exact test and flips."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalsi.stats import mcnemar_exact, paired_comparison, record_means, standard_error


def test_worked_example_pass_fail() -> None:
    a = {"r1": [1.0], "r2": [0.0], "r3": [1.0], "r4": [1.0], "only-a": [1.0]}
    b = {"r1": [1.0], "r2": [1.0], "r3": [0.0], "r4": [0.0], "only-b": [0.0]}
    cmp = paired_comparison(a, b)
    assert cmp.pairs == 4
    assert (cmp.only_a, cmp.only_b) == (1, 1)
    assert cmp.mean_a == 0.75 and cmp.mean_b == 0.5
    assert cmp.difference.mean == pytest.approx(-0.25)
    # differences [0, 1, -1, -1]: mean -0.25, s^2 = 2.75 / 3, se = sqrt(s^2 / 4)
    assert cmp.difference.se == pytest.approx(math.sqrt(2.75 / 3 / 4))
    assert cmp.mcnemar is not None
    assert (cmp.mcnemar.a_only, cmp.mcnemar.b_only) == (2, 1)
    assert cmp.mcnemar.p_value == pytest.approx(1.0)
    flipped = {(f.key, f.direction) for f in cmp.flips}
    assert flipped == {("r2", "improved"), ("r3", "regressed"), ("r4", "regressed")}
    assert not cmp.significant


def test_samples_are_averaged_per_record_first() -> None:
    a = {"r1": [1.0, 0.0, 0.0, 0.0], "r2": [1.0, 1.0]}
    b = {"r1": [1.0, 1.0], "r2": [1.0, 1.0, 1.0, 0.0]}
    assert record_means(a) == {"r1": 0.25, "r2": 1.0}
    cmp = paired_comparison(a, b)
    assert cmp.difference.mean == pytest.approx(((1.0 - 0.25) + (0.75 - 1.0)) / 2)
    assert cmp.mcnemar is None and cmp.flips == []  # fractional per-record values: not a pass/fail metric


def test_a_consistent_large_drop_is_significant() -> None:
    a = {f"r{i}": [1.0] for i in range(40)}
    b = {f"r{i}": [1.0 if i < 10 else 0.0] for i in range(40)}
    cmp = paired_comparison(a, b)
    assert cmp.significant and cmp.difference.ci_high < 0
    assert cmp.mcnemar is not None and cmp.mcnemar.p_value < 1e-8


def test_mcnemar_worked_examples() -> None:
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(1, 9) == pytest.approx(2 * (1 + 10) / 1024)
    assert mcnemar_exact(0, 5) == pytest.approx(0.0625)
    assert mcnemar_exact(3, 3) == 1.0
    assert 0.0 < mcnemar_exact(5000, 5300) < 1.0  # large counts do not overflow
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)


@given(st.integers(0, 60), st.integers(0, 60))
def test_mcnemar_matches_exact_binomial_and_is_symmetric(x: int, y: int) -> None:
    n, low = x + y, min(x, y)
    expected = min(Fraction(1), 2 * Fraction(sum(math.comb(n, i) for i in range(low + 1)), 2**n)) if n else 1
    assert mcnemar_exact(x, y) == pytest.approx(float(expected))
    assert mcnemar_exact(x, y) == mcnemar_exact(y, x)


runs = st.dictionaries(
    st.text("abcdef", min_size=1, max_size=3),
    st.lists(st.sampled_from([0.0, 1.0]), min_size=1, max_size=3),
    min_size=0,
    max_size=25,
)


@settings(deadline=None)  # the bootstrap draws 1,000 resamples: slow on a loaded machine
@given(runs, runs)
def test_swapping_runs_negates_the_difference(a: dict[str, list[float]], b: dict[str, list[float]]) -> None:
    ab, ba = paired_comparison(a, b), paired_comparison(b, a)
    assert ab.pairs == ba.pairs
    if ab.pairs:
        assert ab.difference.mean == pytest.approx(-ba.difference.mean)
        assert ab.significant == ba.significant
    if ab.mcnemar is not None and ba.mcnemar is not None:
        assert ab.mcnemar.p_value == ba.mcnemar.p_value
        assert ab.mcnemar.a_only == ba.mcnemar.b_only
    assert len(ab.flips) == len(ba.flips)


@settings(deadline=None)  # the bootstrap draws 1,000 resamples: slow on a loaded machine
@given(runs)
def test_a_run_against_itself_shows_no_change(a: dict[str, list[float]]) -> None:
    cmp = paired_comparison(a, a)
    assert cmp.flips == []
    if cmp.pairs:
        assert cmp.difference.mean == 0.0 and not cmp.significant
    if cmp.mcnemar is not None:
        assert cmp.mcnemar.p_value == 1.0


@settings(deadline=None)  # the bootstrap draws 1,000 resamples: slow on a loaded machine
@given(runs, runs)
def test_difference_error_is_the_paired_standard_error(a: dict[str, list[float]], b: dict[str, list[float]]) -> None:
    cmp = paired_comparison(a, b)
    ma, mb = record_means(a), record_means(b)
    diffs = [mb[k] - ma[k] for k in sorted(ma.keys() & mb.keys())]
    if len(diffs) >= 2:
        assert cmp.difference.se == pytest.approx(standard_error(diffs), abs=1e-12)
