"""pass@k and pass^k from ``n`` samples of which ``c`` are correct (Chen et al., 2021).

pass@k is the probability that at least one of ``k`` samples drawn without replacement is correct, estimated
without bias as ``1 − C(n−c, k) / C(n, k)``; pass^k is the probability that all ``k`` are:
``C(c, k) / C(n, k)``.
Both are computed as running products, never as binomials, so ``n`` in the thousands neither overflows nor
loses precision.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from evalsi.stats._mean import Estimate, estimate


def _check(n: int, c: int, k: int) -> None:
    if n < 0 or c < 0 or c > n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if k < 1 or k > n:
        raise ValueError(f"k must be between 1 and n (the samples per record), got k={k}, n={n}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one record: ``1 − C(n−c, k)/C(n, k) = 1 − Π_{i=n−c+1}^{n} (1 − k/i)``.

    Args:
        n: Samples drawn.
        c: Samples correct.
        k: The k of pass@k.

    Raises:
        ValueError: ``c`` is outside ``[0, n]`` or ``k`` outside ``[1, n]``.

    Example:
        >>> pass_at_k(4, 1, 2)
        0.5

    """
    _check(n, c, k)
    if k == 1:
        return c / n  # exact, where the product form would round
    if n - c < k:
        return 1.0  # every draw of k samples holds a correct one
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def pass_pow_k(n: int, c: int, k: int) -> float:
    """pass^k for one record: ``C(c, k)/C(n, k) = Π_{i=0}^{k−1} (c−i)/(n−i)``, all ``k`` samples correct.

    Args:
        n: Samples drawn.
        c: Samples correct.
        k: The k of pass^k.

    Raises:
        ValueError: ``c`` is outside ``[0, n]`` or ``k`` outside ``[1, n]``.

    Example:
        >>> pass_pow_k(4, 2, 2)
        0.16666666666666666

    """
    _check(n, c, k)
    if c < k:
        return 0.0
    product = 1.0
    for i in range(k):
        product *= (c - i) / (n - i)
    return product


def pass_at_k_estimate(counts: Sequence[tuple[int, int]], k: int) -> Estimate:
    """Mean pass@k over records, each given as ``(n, c)``, skipping records with under ``k`` samples.

    Args:
        counts: ``(n, c)`` per record.
        k: The k of pass@k.

    """
    return estimate([pass_at_k(n, c, k) for n, c in counts if n >= k])


def pass_pow_k_estimate(counts: Sequence[tuple[int, int]], k: int) -> Estimate:
    """Mean pass^k over records, each given as ``(n, c)``, skipping records with under ``k`` samples.

    Args:
        counts: ``(n, c)`` per record.
        k: The k of pass^k.

    """
    return estimate([pass_pow_k(n, c, k) for n, c in counts if n >= k])


def exact_pass_at_k(n: int, c: int, k: int) -> float:
    """pass@k with exact binomials (for tests and small ``n``): ``1 − C(n−c, k)/C(n, k)``.

    Args:
        n: Samples drawn.
        c: Samples correct.
        k: The k of pass@k.

    """
    _check(n, c, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)
