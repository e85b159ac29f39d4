"""Means with standard errors and 95% confidence intervals, clustered by record when it has several samples.

With one value per record the standard error is the textbook ``s / sqrt(n)``. With several samples per record
the samples of one record are not independent (they share a prompt), so the standard error is the
cluster-robust one (clusters = records), which reduces to the textbook formula when every cluster has one
value.

The 95% interval is not ``mean ± t·se``, which leaves the range a mean can take at small n or near an edge
(:mod:`evalsi.stats._intervals`): a proportion (0/1 values, one per record) gets the Wilson score interval; any
other mean the bootstrap over records, which resamples a record's samples together (the normal interval within
the observed range past :data:`~evalsi.stats._intervals.BOOTSTRAP_MAX_RECORDS` records). ``Estimate.method``
names the one used.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evalsi.stats._intervals import BOOTSTRAP_MAX_RECORDS, NO_INTERVAL, Interval, bootstrap, normal_within, wilson


@dataclass(frozen=True, slots=True)
class Estimate:
    """A mean with its standard error and 95% interval, and the method of the interval.

    ``se`` and the interval are ``nan`` when they cannot be estimated (``se`` needs two records, the interval
    two records or a proportion); ``n`` counts values and ``clusters`` counts records. ``method`` names the
    interval (``wilson``, ``bootstrap``, ``normal``, ``newcombe``, ``paired-bootstrap``, ``paired-normal``;
    empty when there is none): :func:`evalsi.stats.describe_method` says it in words.
    """

    mean: float
    se: float
    ci_low: float
    ci_high: float
    n: int
    clusters: int
    method: str = ""

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> Estimate:
        """An estimate from its JSON form (:meth:`to_dict`: a summary's metric, a comparison's difference).

        The interval is read from ``ci`` (``{"low", "high", "method"}``), else from ``ci_low`` and ``ci_high``
        (files written before intervals named their method); a missing number is ``nan``.

        Args:
            value: The JSON form.

        """

        def number(source: Mapping[str, Any], key: str) -> float:
            item = source.get(key)
            return float(item) if isinstance(item, int | float) and not isinstance(item, bool) else math.nan

        def whole(key: str) -> int:
            item = value.get(key)
            return int(item) if isinstance(item, int | float) and not isinstance(item, bool) else 0

        ci = value.get("ci")
        if isinstance(ci, Mapping):
            low, high, method = number(ci, "low"), number(ci, "high"), str(ci.get("method") or "")
        else:
            low, high, method = number(value, "ci_low"), number(value, "ci_high"), ""
        return cls(number(value, "mean"), number(value, "se"), low, high, whole("n"), whole("clusters"), method)

    @property
    def has_interval(self) -> bool:
        """Whether the interval could be estimated."""
        return not (math.isnan(self.ci_low) or math.isnan(self.ci_high))

    def to_dict(self) -> dict[str, object]:
        """JSON form; a ``nan`` becomes ``None``.

        The interval is given twice: as ``ci`` (``{"low", "high", "method"}``, None without one) and, for readers
        of earlier files, as ``ci_low`` and ``ci_high``.
        """

        def clean(x: float) -> float | None:
            return None if math.isnan(x) else x

        return {
            "mean": clean(self.mean),
            "se": clean(self.se),
            "ci_low": clean(self.ci_low),
            "ci_high": clean(self.ci_high),
            "ci": {"low": self.ci_low, "high": self.ci_high, "method": self.method} if self.has_interval else None,
            "n": self.n,
            "clusters": self.clusters,
        }


EMPTY = Estimate(math.nan, math.nan, math.nan, math.nan, 0, 0)
"""The estimate of no values: every number ``nan``, no values and no records."""


def mean(values: Sequence[float]) -> float:
    """The arithmetic mean (``nan`` for no values), summed with ``math.fsum`` so order does not matter.

    Args:
        values: The values.

    """
    return math.fsum(values) / len(values) if values else math.nan


def standard_error(values: Sequence[float]) -> float:
    """The standard error of the mean of independent values: sample standard deviation over ``sqrt(n)``.

    Args:
        values: Independent values.

    """
    n = len(values)
    if n < 2:
        return math.nan
    m = mean(values)
    variance = math.fsum((x - m) ** 2 for x in values) / (n - 1)
    return math.sqrt(variance / n)


def estimate(values: Sequence[float]) -> Estimate:
    """Mean, standard error and 95% interval of independent values (one per record).

    Args:
        values: One value per record.

    Example:
        >>> est = estimate([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0])
        >>> est.method, round(est.ci_low, 3), round(est.ci_high, 3)
        ('wilson', 0.529, 0.978)

    """
    return clustered_estimate([[v] for v in values])


def clustered_estimate(clusters: Sequence[Sequence[float]], *, interval: bool = True) -> Estimate:
    """Mean over every value, with a cluster-robust standard error (one cluster per record) and a 95% interval.

    ``se² = G/(G-1) · Σ_g (Σ_i (x_gi − mean))² / N²`` for ``G`` non-empty clusters and ``N`` values. Empty
    clusters (a record whose samples all errored or were skipped) are ignored. The interval is Wilson's for 0/1
    values one per record, else the bootstrap over records (see the module doc); ``interval=False`` leaves it
    out (``nan``), for a caller that works out its own.

    Args:
        clusters: Each record's values.
        interval: Whether to work out the interval; False leaves it ``nan``.

    """
    groups = [list(g) for g in clusters if len(g) > 0]
    values = [x for g in groups for x in g]
    n, g_count = len(values), len(groups)
    if n == 0:
        return EMPTY
    m = mean(values)
    se = math.nan
    if g_count >= 2:
        residual_sums = math.fsum(math.fsum(x - m for x in g) ** 2 for g in groups)
        se = math.sqrt(g_count / (g_count - 1) * residual_sums) / n
    if not interval:
        return Estimate(m, se, math.nan, math.nan, n, g_count)
    found = _interval(groups, m, se)
    return Estimate(m, se, found.low, found.high, n, g_count, found.method)


def _interval(groups: list[list[float]], m: float, se: float) -> Interval:
    if is_proportion(groups):
        return wilson(sum(1 for g in groups if g[0] == 1.0), len(groups))
    if len(groups) < 2:
        return NO_INTERVAL
    sums = [math.fsum(g) for g in groups]
    counts = [len(g) for g in groups]
    if len(groups) > BOOTSTRAP_MAX_RECORDS:
        record_means = [s / c for s, c in zip(sums, counts, strict=True)]
        return normal_within(m, se, min(record_means), max(record_means))
    return bootstrap(sums, counts)


def is_proportion(groups: Sequence[Sequence[float]]) -> bool:
    """Whether every record holds exactly one value and each is 0 or 1 (a proportion: Wilson's interval).

    Args:
        groups: Each record's values.

    """
    return all(len(g) == 1 and (g[0] == 0.0 or g[0] == 1.0) for g in groups)
