"""pass@k and pass^k: worked examples, agreement with exact binomials, and the identities they obey."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalsi.stats import exact_pass_at_k, pass_at_k, pass_at_k_estimate, pass_pow_k, pass_pow_k_estimate


@st.composite
def nck(draw: st.DrawFn, max_n: int = 60) -> tuple[int, int, int]:
    n = draw(st.integers(1, max_n))
    c = draw(st.integers(0, n))
    k = draw(st.integers(1, n))
    return n, c, k


def test_worked_examples() -> None:
    # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    # C(3,2)/C(5,2) = 3/10
    assert pass_pow_k(5, 3, 2) == pytest.approx(0.3)
    assert pass_at_k(10, 0, 3) == 0.0
    assert pass_at_k(10, 8, 3) == 1.0  # n - c = 2 < k: every draw of 3 holds a correct one
    assert pass_pow_k(10, 2, 3) == 0.0
    assert pass_pow_k(10, 10, 10) == 1.0


@given(nck())
def test_matches_exact_binomials(case: tuple[int, int, int]) -> None:
    n, c, k = case
    assert pass_at_k(n, c, k) == pytest.approx(exact_pass_at_k(n, c, k), abs=1e-9)
    assert pass_pow_k(n, c, k) == pytest.approx(math.comb(c, k) / math.comb(n, k), abs=1e-9)


@given(nck())
def test_pass_pow_k_is_pass_at_k_of_the_failures(case: tuple[int, int, int]) -> None:
    n, c, k = case
    # all k correct  <=>  no incorrect sample among k
    assert pass_pow_k(n, c, k) == pytest.approx(1.0 - pass_at_k(n, n - c, k), abs=1e-9)
    assert 0.0 <= pass_pow_k(n, c, k) <= pass_at_k(n, c, k) + 1e-12 and pass_at_k(n, c, k) <= 1.0


@given(nck())
def test_k_of_one_is_the_fraction_correct(case: tuple[int, int, int]) -> None:
    n, c, _ = case
    assert pass_at_k(n, c, 1) == pytest.approx(c / n)
    assert pass_pow_k(n, c, 1) == pytest.approx(c / n)


@given(nck())
def test_monotone_in_k_and_c(case: tuple[int, int, int]) -> None:
    n, c, k = case
    if k < n:
        assert pass_at_k(n, c, k + 1) >= pass_at_k(n, c, k) - 1e-12
        assert pass_pow_k(n, c, k + 1) <= pass_pow_k(n, c, k) + 1e-12
    if c < n:
        assert pass_at_k(n, c + 1, k) >= pass_at_k(n, c, k) - 1e-12


@given(st.integers(1000, 20000), st.data())
def test_large_n_is_stable(n: int, data: st.DataObject) -> None:
    c = data.draw(st.integers(0, n))
    k = data.draw(st.integers(1, min(n, 512)))
    value = pass_at_k(n, c, k)
    assert 0.0 <= value <= 1.0 and math.isfinite(value)
    assert 0.0 <= pass_pow_k(n, c, k) <= 1.0


@pytest.mark.parametrize(("n", "c", "k"), [(3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4)])
def test_invalid_counts_raise(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)
    with pytest.raises(ValueError):
        pass_pow_k(n, c, k)


def test_estimates_average_records_and_skip_short_ones() -> None:
    counts = [(4, 1), (4, 4), (2, 1)]  # the last has fewer than k=3 samples
    est = pass_at_k_estimate(counts, 3)
    assert est.n == 2
    assert est.mean == pytest.approx((pass_at_k(4, 1, 3) + 1.0) / 2)
    assert pass_pow_k_estimate(counts, 3).mean == pytest.approx((0.0 + 1.0) / 2)
