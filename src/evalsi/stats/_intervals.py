"""95% confidence intervals that stay inside the possible range and hold at small n.

The textbook interval ``mean ± t·se`` leaves the range a mean can take when the mean is near its edge or the
sample is small (``[0.19, 1.06]`` for a proportion of 8 records), and its coverage there is far from 95%. The
intervals here do not:

- ``wilson``: the Wilson score interval, for means of 0/1 values with one value per record (a proportion). It
  lies within [0, 1] by construction and covers close to 95% from n = 8 on.
- ``bootstrap``: for every other mean (continuous scores, or several samples per record), the records are
  resampled with replacement (all the samples of a record together, so a record counts as one unit) and the
  interval is the expanded percentile interval of the resampled means (Hesterberg 2015: the percentiles are
  moved out by ``sqrt(n/(n−1))·t`` so that small samples are not too narrow). A resampled mean is a mean of
  observed values, so the interval never leaves the range the values came from.
- ``newcombe``: for the paired difference of two proportions (each record 0/1 in both runs), Newcombe's hybrid
  score interval for paired data (Newcombe 1998, method 10): Wilson intervals of both proportions combined with
  the correlation of the pairs. It lies within [−1, 1].
- ``paired-bootstrap``: for other paired differences, the bootstrap above over the per-record differences
  (records resampled, so each record's pair stays together).
- ``normal`` and ``paired-normal``: past :data:`BOOTSTRAP_MAX_RECORDS` records, where the bootstrap's
  distribution is normal to within its own Monte Carlo error, ``mean ± z·se`` (the cluster-robust standard
  error), kept within the observed range as the bootstrap would be.

The bootstrap draws from a generator seeded with a constant, so the same values in the same order always give
the same interval.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

Z975 = 1.959963984540054
"""The 97.5% quantile of the standard normal distribution."""

BOOTSTRAP_REPLICATES = 1000
"""Resamples drawn for a bootstrap interval."""

BOOTSTRAP_MAX_RECORDS = 500
"""Past this many records (clusters), the normal interval stands in for the bootstrap (see the module doc)."""

BOOTSTRAP_SEED = 20240531
"""The bootstrap generator's seed: the same values give the same interval on every run."""

METHODS = {
    "wilson": "Wilson score interval",
    "bootstrap": "bootstrap over records (expanded percentile)",
    "normal": "normal interval, within the observed range",
    "newcombe": "Newcombe's paired score interval",
    "paired-bootstrap": "paired bootstrap over records (expanded percentile)",
    "paired-normal": "paired normal interval, within the observed range",
}
"""Every interval method by its name, as a reader would want it explained."""

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


def t_quantile_975(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom (two-sided 95% intervals).

    A table up to 30, then the Cornish-Fisher expansion around the normal quantile (error below 1e-5 there).

    Args:
        df: Degrees of freedom.

    Raises:
        ValueError: ``df`` is below 1.

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


def describe_method(method: str) -> str:
    """A method's name in words (the name itself when it is not one of :data:`METHODS`).

    Args:
        method: An interval method's name.

    Example:
        >>> describe_method("wilson")
        'Wilson score interval'

    """
    return METHODS.get(method, method)


@dataclass(frozen=True, slots=True)
class Interval:
    """A 95% interval and the method that gave it (``nan`` bounds when it cannot be estimated)."""

    low: float
    high: float
    method: str


NO_INTERVAL = Interval(math.nan, math.nan, "")


def wilson(successes: int, n: int, z: float = Z975) -> Interval:
    """The Wilson score interval of a proportion ``successes / n``.

    ``(p + z²/2n ± z·sqrt(p(1−p)/n + z²/4n²)) / (1 + z²/n)``: within [0, 1], never empty, and it always holds the
    observed proportion.

    Args:
        successes: How many succeeded.
        n: How many were tried.
        z: The normal quantile (1.96 for 95%).

    Raises:
        ValueError: ``n`` is below 1 or ``successes`` outside ``[0, n]``.

    Example:
        >>> interval = wilson(7, 8)
        >>> round(interval.low, 4), round(interval.high, 4)
        (0.5291, 0.9776)

    """
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n >= 1, got successes={successes}, n={n}")
    p = successes / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # The exact ends: 0 successes give a lower end of exactly 0, n successes an upper end of exactly 1.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return Interval(low, high, "wilson")


def newcombe_paired(both: int, b_only: int, a_only: int, neither: int, z: float = Z975) -> Interval:
    """Newcombe's hybrid score interval for the paired difference ``p_B − p_A`` of two proportions.

    Args:
        both: Records that passed in both runs.
        b_only: Records that passed in B only.
        a_only: Records that passed in A only.
        neither: Records that failed in both.
        z: The normal quantile (1.96 for 95%).

    Raises:
        ValueError: A count is negative, or there are no records.

    Example:
        >>> interval = newcombe_paired(both=3, b_only=5, a_only=0, neither=0)
        >>> round(interval.low, 4), round(interval.high, 4)
        (0.1698, 0.8632)

    """
    counts = (both, b_only, a_only, neither)
    if min(counts) < 0 or sum(counts) == 0:
        raise ValueError(f"need non-negative counts and at least one record, got {counts}")
    n = sum(counts)
    x_b, x_a = both + b_only, both + a_only
    p_b, p_a = x_b / n, x_a / n
    low_b, high_b, _ = _bounds(wilson(x_b, n, z))
    low_a, high_a, _ = _bounds(wilson(x_a, n, z))
    phi = 0.0
    margins = (both + b_only) * (a_only + neither) * (both + a_only) * (b_only + neither)
    if margins > 0:
        cross = both * neither - b_only * a_only
        # Newcombe's correction: a positive association counts only beyond n/2, a negative one in full.
        corrected = cross - n / 2 if cross > n / 2 else (cross if cross < 0 else 0.0)
        phi = corrected / math.sqrt(margins)
    d = p_b - p_a
    below = (p_b - low_b) ** 2 - 2 * phi * (p_b - low_b) * (high_a - p_a) + (high_a - p_a) ** 2
    above = (p_a - low_a) ** 2 - 2 * phi * (p_a - low_a) * (high_b - p_b) + (high_b - p_b) ** 2
    return Interval(max(-1.0, d - math.sqrt(max(0.0, below))), min(1.0, d + math.sqrt(max(0.0, above))), "newcombe")


def _bounds(interval: Interval) -> tuple[float, float, str]:
    return interval.low, interval.high, interval.method


def bootstrap(
    sums: Sequence[float],
    counts: Sequence[int] | None = None,
    *,
    replicates: int = BOOTSTRAP_REPLICATES,
    seed: int = BOOTSTRAP_SEED,
    method: str = "bootstrap",
) -> Interval:
    """The expanded percentile bootstrap interval of a mean over records (clusters), records resampled whole.

    Args:
        sums: Each record's sum of values (its value, with one value per record).
        counts: Each record's number of values (default: one each). The mean is ``Σ sums / Σ counts``.
        replicates: Resamples to draw.
        seed: The generator's seed.
        method: The name the interval carries.

    Returns:
        The interval; ``nan`` bounds with fewer than two records.

    """
    g = len(sums)
    if g < 2:
        return NO_INTERVAL
    rng = random.Random(seed)
    # All the draws at once (the same stream as one draw per replicate), each replicate summed over its slice.
    if counts is None or len(set(counts)) == 1:
        per = 1 if counts is None else counts[0]
        drawn = rng.choices([x / per for x in sums], k=g * replicates)
        replicate_means = sorted(sum(drawn[i : i + g]) / g for i in range(0, g * replicates, g))
    else:
        picks = rng.choices(range(g), k=g * replicates)
        drawn_sums = list(map(sums.__getitem__, picks))
        drawn_counts = list(map(counts.__getitem__, picks))
        replicate_means = sorted(
            sum(drawn_sums[i : i + g]) / sum(drawn_counts[i : i + g]) for i in range(0, g * replicates, g)
        )
    tail = NormalDist().cdf(-math.sqrt(g / (g - 1)) * t_quantile_975(g - 1))
    low, high = _tails(replicate_means, tail)
    return Interval(low, high, method)


def _tails(ordered: Sequence[float], q: float) -> tuple[float, float]:
    """The ``q`` and ``1 − q`` quantiles of sorted values, interpolated between order statistics.

    The upper one is taken at the mirrored position, so negated values give exactly the negated interval (a
    comparison of B with A is the mirror of A with B).
    """
    last = len(ordered) - 1
    position = q * last
    below = min(math.floor(position), last)
    weight = position - below
    if weight == 0 or below == last:
        return ordered[below], ordered[last - below]
    low = ordered[below] + (ordered[below + 1] - ordered[below]) * weight
    high = ordered[last - below] - (ordered[last - below] - ordered[last - below - 1]) * weight
    return low, high


def normal_within(mean: float, se: float, low: float, high: float, method: str = "normal") -> Interval:
    """``mean ± z·se``, kept within ``[low, high]`` (the observed range of the records' values)."""
    if math.isnan(se):
        return NO_INTERVAL
    half = Z975 * se
    return Interval(max(low, mean - half), min(high, mean + half), method)
