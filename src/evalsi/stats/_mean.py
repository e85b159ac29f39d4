"""Means with standard errors and 95% confidence intervals, clustered by record when it has several samples.

With one value per record this is the textbook estimate: ``se = s / sqrt(n)``. With several samples per record
the samples of one record are not independent (they share a prompt), so the standard error is the
cluster-robust one (clusters = records), which reduces to the textbook formula when every cluster has one
value.
Intervals use Student's t with ``clusters - 1`` degrees of freedom: AIME has 30 records, where a normal
interval would be too narrow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

_T975 = (
    12.7062,
    4.3027,
    3.1824,
    2.7764,
    2.5706,
    2.4469,
    2.3646,
    2.3060,
    2.2622,
    2.2281,
    2.2010,
    2.1788,
    2.1604,
    2.1448,
    2.1314,
    2.1199,
    2.1098,
    2.1009,
    2.0930,
    2.0860,
    2.0796,
    2.0739,
    2.0687,
    2.0639,
    2.0595,
    2.0555,
    2.0518,
    2.0484,
    2.0452,
    2.0423,
)
"""The 97.5% quantile of Student's t for 1..30 degrees of freedom."""

Z975 = 1.959963984540054
"""The 97.5% quantile of the standard normal distribution."""


def t_quantile_975(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom (two-sided 95% intervals).

    A table up to 30, then the Cornish-Fisher expansion around the normal quantile (error below 1e-5 there).
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z, v = Z975, float(df)
    return (
        z
        + (z**3 + z) / (4 * v)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
    )


@dataclass(frozen=True, slots=True)
class Estimate:
    """A mean with its standard error and 95% interval.

    ``se`` and the interval are ``nan`` when they cannot be estimated (fewer than two records); ``n`` counts
    values and ``clusters`` counts records.
    """

    mean: float
    se: float
    ci_low: float
    ci_high: float
    n: int
    clusters: int

    def to_dict(self) -> dict[str, float | int | None]:
        """JSON form; a ``nan`` becomes ``None``."""

        def clean(x: float) -> float | None:
            return None if math.isnan(x) else x

        return {
            "mean": clean(self.mean),
            "se": clean(self.se),
            "ci_low": clean(self.ci_low),
            "ci_high": clean(self.ci_high),
            "n": self.n,
            "clusters": self.clusters,
        }


EMPTY = Estimate(math.nan, math.nan, math.nan, math.nan, 0, 0)


def mean(values: Sequence[float]) -> float:
    """The arithmetic mean (``nan`` for no values), summed with ``math.fsum`` so order does not matter."""
    return math.fsum(values) / len(values) if values else math.nan


def standard_error(values: Sequence[float]) -> float:
    """The standard error of the mean of independent values: sample standard deviation over ``sqrt(n)``."""
    n = len(values)
    if n < 2:
        return math.nan
    m = mean(values)
    variance = math.fsum((x - m) ** 2 for x in values) / (n - 1)
    return math.sqrt(variance / n)


def estimate(values: Sequence[float]) -> Estimate:
    """Mean, standard error and t-based 95% interval of independent values (one per record)."""
    return clustered_estimate([[v] for v in values])


def clustered_estimate(clusters: Sequence[Sequence[float]]) -> Estimate:
    """Mean over every value, with a cluster-robust standard error (one cluster per record).

    ``se² = G/(G-1) · Σ_g (Σ_i (x_gi − mean))² / N²`` for ``G`` non-empty clusters and ``N`` values. Empty
    clusters (a record whose samples all errored or were skipped) are ignored.
    """
    groups = [list(g) for g in clusters if len(g) > 0]
    values = [x for g in groups for x in g]
    n, g_count = len(values), len(groups)
    if n == 0:
        return EMPTY
    m = mean(values)
    if g_count < 2:
        return Estimate(m, math.nan, math.nan, math.nan, n, g_count)
    residual_sums = math.fsum(math.fsum(x - m for x in g) ** 2 for g in groups)
    se = math.sqrt(g_count / (g_count - 1) * residual_sums) / n
    half = t_quantile_975(g_count - 1) * se
    return Estimate(m, se, m - half, m + half, n, g_count)
