"""Coverage by simulation: a 95% interval covers the truth in 93–97% of 2,000 simulated runs.

Each simulated run draws its truth near the named value (a proportion drawn uniformly from an interval around
it, as coverage is judged in the literature: at n = 8 the coverage of any interval jumps with the exact
proportion, from 93% at 0.5 to 97.5% at 0.45), then draws the run's records from it and computes the interval
evalsi.stats gives that run. Proportions and paired proportions are drawn as counts and handed to the interval
the run's summary and comparison use (``tests/stats/test_intervals.py`` checks that they do), so 2,000 runs of
500 records take no time; bootstrap intervals are computed from the records themselves. Every generator is
seeded.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from evalsi.stats import Interval, clustered_estimate, estimate, newcombe_paired, paired_comparison, wilson

RUNS = 2000
LOW, HIGH = 0.93, 0.97


def coverage(seed: int, draw: Callable[[random.Random], tuple[float, Interval]]) -> float:
    """The fraction of :data:`RUNS` simulated runs whose interval holds the truth."""
    rng = random.Random(seed)
    hits = 0
    for _ in range(RUNS):
        truth, interval = draw(rng)
        hits += interval.low <= truth <= interval.high
    return hits / RUNS


@pytest.mark.parametrize("n", [8, 30, 500])
@pytest.mark.parametrize(("near", "spread"), [(0.5, 0.1), (0.9, 0.05)])
def test_a_proportion(n: int, near: float, spread: float) -> None:
    def draw(rng: random.Random) -> tuple[float, Interval]:
        p = rng.uniform(near - spread, near + spread)
        return p, wilson(sum(rng.random() < p for _ in range(n)), n)

    assert LOW <= coverage(n * 7 + int(near * 10), draw) <= HIGH


def paired_cells(p_a: float, p_b: float, association: float) -> list[float]:
    """P(both pass), P(only B), P(only A), P(neither): independence mixed with the strongest association."""
    independent = (p_a * p_b, p_b * (1 - p_a), p_a * (1 - p_b), (1 - p_a) * (1 - p_b))
    joint = min(p_a, p_b)
    strongest = (joint, p_b - joint, p_a - joint, 1 - p_a - p_b + joint)
    return [association * s + (1 - association) * i for s, i in zip(strongest, independent, strict=True)]


def paired_draw(n: int, associations: tuple[float, float]) -> Callable[[random.Random], tuple[float, Interval]]:
    """A base near 0.5 and a step up to 0.2 better, records associated between the runs as given."""

    def draw(rng: random.Random) -> tuple[float, Interval]:
        p_a = rng.uniform(0.4, 0.6)
        p_b = p_a + rng.uniform(0.0, 0.2)
        cells = paired_cells(p_a, p_b, rng.uniform(*associations))
        edges = [sum(cells[: i + 1]) for i in range(3)]
        counts = [0, 0, 0, 0]
        for _ in range(n):
            u = rng.random()
            counts[next((i for i, edge in enumerate(edges) if u < edge), 3)] += 1
        return p_b - p_a, newcombe_paired(*counts)

    return draw


@pytest.mark.parametrize("n", [8, 30, 500])
def test_a_paired_difference_of_proportions(n: int) -> None:
    assert LOW <= coverage(n + 1, paired_draw(n, (0.0, 0.5))) <= HIGH


def test_strongly_associated_pairs_at_eight_records_are_never_undercovered() -> None:
    # With few discordant pairs every interval is coarse at n = 8: Newcombe's errs wide, never narrow.
    assert coverage(99, paired_draw(8, (0.5, 0.9))) >= LOW


def beta_score(rng: random.Random) -> float:
    return rng.betavariate(2, 5)  # a bounded continuous score, skewed, mean 2/7


def estimated(
    interval_of: Callable[[random.Random], tuple[float, float, float, str]], method: str
) -> Callable[[random.Random], tuple[float, Interval]]:
    def draw(rng: random.Random) -> tuple[float, Interval]:
        truth, low, high, used = interval_of(rng)
        assert used == method
        return truth, Interval(low, high, used)

    return draw


@pytest.mark.parametrize("n", [8, 30])
def test_a_mean_of_bounded_continuous_scores(n: int) -> None:
    def interval_of(rng: random.Random) -> tuple[float, float, float, str]:
        est = estimate([beta_score(rng) for _ in range(n)])
        return 2 / 7, est.ci_low, est.ci_high, est.method

    assert LOW <= coverage(n + 3, estimated(interval_of, "bootstrap")) <= HIGH


def test_a_mean_over_several_samples_per_record() -> None:
    # 30 records of 4 pass/fail samples, each record with its own pass rate (mean 0.7/1.2): clustered by record.
    def interval_of(rng: random.Random) -> tuple[float, float, float, str]:
        records = []
        for _ in range(30):
            p = rng.betavariate(0.7, 0.5)
            records.append([1.0 if rng.random() < p else 0.0 for _ in range(4)])
        est = clustered_estimate(records)
        return 0.7 / 1.2, est.ci_low, est.ci_high, est.method

    assert LOW <= coverage(5, estimated(interval_of, "bootstrap")) <= HIGH


def test_a_paired_difference_of_continuous_scores() -> None:
    # Each record's score moves by u ~ U(-0.1, 0.2) from base to step: the true difference is 0.05.
    def interval_of(rng: random.Random) -> tuple[float, float, float, str]:
        base = {f"r{i}": [beta_score(rng)] for i in range(30)}
        step = {k: [v[0] + rng.uniform(-0.1, 0.2)] for k, v in base.items()}
        d = paired_comparison(base, step).difference
        return 0.05, d.ci_low, d.ci_high, d.method

    assert LOW <= coverage(6, estimated(interval_of, "paired-bootstrap")) <= HIGH
