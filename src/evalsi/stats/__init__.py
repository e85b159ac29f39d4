"""Statistics of runs: means with standard errors and 95% intervals, pass@k and pass^k, paired comparisons.

Pure functions with no I/O (property-tested with Hypothesis).

Example:
    >>> from evalsi.stats import estimate, pass_at_k
    >>> round(estimate([1.0, 0.0, 1.0, 1.0]).mean, 2)
    0.75
    >>> pass_at_k(n=10, c=10, k=5)
    1.0

"""

from evalsi.stats._compare import (
    Direction,
    Flip,
    McNemar,
    PairedComparison,
    mcnemar_exact,
    paired_comparison,
    record_means,
)
from evalsi.stats._mean import (
    EMPTY,
    Z975,
    Estimate,
    clustered_estimate,
    estimate,
    mean,
    standard_error,
    t_quantile_975,
)
from evalsi.stats._passk import (
    exact_pass_at_k,
    pass_at_k,
    pass_at_k_estimate,
    pass_pow_k,
    pass_pow_k_estimate,
)
from evalsi.stats._regression import RegressionRule, is_regression, regressed

__all__ = [
    "EMPTY",
    "Z975",
    "Direction",
    "Estimate",
    "Flip",
    "McNemar",
    "PairedComparison",
    "RegressionRule",
    "clustered_estimate",
    "estimate",
    "exact_pass_at_k",
    "is_regression",
    "mcnemar_exact",
    "mean",
    "paired_comparison",
    "pass_at_k",
    "pass_at_k_estimate",
    "pass_pow_k",
    "pass_pow_k_estimate",
    "record_means",
    "regressed",
    "standard_error",
    "t_quantile_975",
]
