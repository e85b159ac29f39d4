"""Paired comparison of two runs over the same records.

Records are paired by key (a record's ``id``, else its content hash). Each record's samples are averaged
first, so a record counts once whatever its number of samples; the difference ``B − A`` is then estimated
over the paired records. For pass/fail metrics (every paired per-record value is 0 or 1) its 95% interval is
Newcombe's paired score interval, and McNemar's exact test is given too, with the records that flipped; for
other metrics the interval is the paired bootstrap over records (:mod:`evalsi.stats._intervals`). Either stays
within the range a difference can take, at any number of pairs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from evalsi.stats._intervals import BOOTSTRAP_MAX_RECORDS, Interval, bootstrap, newcombe_paired, normal_within
from evalsi.stats._mean import Estimate, clustered_estimate, mean

Direction = Literal["improved", "regressed"]
"""Which way a pass/fail record flipped from A to B."""


@dataclass(frozen=True, slots=True)
class McNemar:
    """McNemar's exact test: ``a_only`` records passed only in A, ``b_only`` only in B."""

    a_only: int
    b_only: int
    p_value: float


@dataclass(frozen=True, slots=True)
class Flip:
    """A pass/fail record whose outcome differs between the runs."""

    key: str
    a: float
    b: float

    @property
    def direction(self) -> Direction:
        """``improved`` when B passes where A failed, else ``regressed``."""
        return "improved" if self.b > self.a else "regressed"


@dataclass(frozen=True)
class PairedComparison:
    """B compared with A over their common records.

    ``difference`` is the mean of per-record ``B − A`` with its standard error and 95% interval (its
    ``method`` says which: ``newcombe``, ``paired-bootstrap`` or ``paired-normal``); ``significant`` means the
    interval excludes zero. ``only_a``/``only_b`` count records present in one
    run only (left out).
    """

    mean_a: float
    mean_b: float
    difference: Estimate
    mcnemar: McNemar | None
    flips: list[Flip] = field(default_factory=list)
    only_a: int = 0
    only_b: int = 0

    @property
    def pairs(self) -> int:
        """How many records were paired."""
        return self.difference.n

    @property
    def significant(self) -> bool:
        """Whether the 95% interval of the difference excludes zero."""
        d = self.difference
        return not math.isnan(d.ci_low) and (d.ci_low > 0 or d.ci_high < 0)


def paired_interval(differences: Sequence[float], plain: Estimate) -> Interval:
    """The 95% interval of the mean of per-record differences: the paired bootstrap (normal past its limit).

    Args:
        differences: Per-record differences.
        plain: Their plain estimate, the fallback past the bootstrap's limit.

    """
    if len(differences) > BOOTSTRAP_MAX_RECORDS:
        return normal_within(plain.mean, plain.se, min(differences), max(differences), "paired-normal")
    return bootstrap(differences, method="paired-bootstrap")


def record_means(values: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """Each record's mean over its samples; records without any value are left out.

    Args:
        values: Each record's sample values, by record id.

    """
    return {key: mean(v) for key, v in values.items() if len(v) > 0}


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value: ``min(1, 2·P(X ≤ min(a_only, b_only)))``, X ~ Bin(a_only+b_only, ½).

    Args:
        a_only: Records only run A got right.
        b_only: Records only run B got right.

    Example:
        >>> mcnemar_exact(0, 5)
        0.0625

    """
    if a_only < 0 or b_only < 0:
        raise ValueError("discordant counts must be non-negative")
    total = a_only + b_only
    if total == 0:
        return 1.0
    low = min(a_only, b_only)
    tail = sum(math.comb(total, i) for i in range(low + 1))
    # Exact integer arithmetic, one division at the end: no overflow for any count.
    p: float = 2 * tail / 2**total
    return min(1.0, p)


def paired_comparison(a: Mapping[str, Sequence[float]], b: Mapping[str, Sequence[float]]) -> PairedComparison:
    """Compare run B with run A, record by record.

    Args:
        a: Per-record sample values of run A, keyed by pairing key.
        b: The same for run B.

    """
    means_a, means_b = record_means(a), record_means(b)
    keys = sorted(means_a.keys() & means_b.keys())
    pa = [means_a[k] for k in keys]
    pb = [means_b[k] for k in keys]
    differences = [y - x for x, y in zip(pa, pb, strict=True)]
    plain = clustered_estimate([[d] for d in differences], interval=False)
    binary = bool(keys) and all(v in (0.0, 1.0) for v in (*pa, *pb))
    test: McNemar | None = None
    flips: list[Flip] = []
    if binary:
        flips = [Flip(k, x, y) for k, x, y in zip(keys, pa, pb, strict=True) if x != y]
        a_only = sum(1 for f in flips if f.a > f.b)
        b_only = len(flips) - a_only
        test = McNemar(a_only, b_only, mcnemar_exact(a_only, b_only))
        both = sum(1 for x, y in zip(pa, pb, strict=True) if x == 1.0 and y == 1.0)
        interval = newcombe_paired(both, b_only, a_only, len(keys) - both - len(flips))
    else:
        interval = paired_interval(differences, plain)
    difference = dataclasses.replace(plain, ci_low=interval.low, ci_high=interval.high, method=interval.method)
    return PairedComparison(
        mean_a=mean(pa),
        mean_b=mean(pb),
        difference=difference,
        mcnemar=test,
        flips=flips,
        only_a=len(means_a.keys() - means_b.keys()),
        only_b=len(means_b.keys() - means_a.keys()),
    )
