"""Statistics of runs: means with standard errors and 95% intervals, pass@k and pass^k, paired comparisons.

Pure functions with no I/O (property-tested with Hypothesis). Every 95% interval stays within the range its
mean can take and holds at small n: Wilson's for proportions, Newcombe's for paired differences of proportions,
a bootstrap over records otherwise; each estimate names its method (``Estimate.method``), and
``tests/stats/test_coverage.py`` checks by simulation that they cover 95% of the time.

Example:
    >>> from evalsi.stats import estimate, pass_at_k
    >>> round(estimate([1.0, 0.0, 1.0, 1.0]).mean, 2)
    0.75
    >>> pass_at_k(n=10, c=10, k=5)
    1.0

"""

from evalsi._util.public import publish
from evalsi.stats._compare import (
    Direction,
    Flip,
    McNemar,
    PairedComparison,
    mcnemar_exact,
    paired_comparison,
    paired_interval,
    record_means,
)
from evalsi.stats._intervals import (
    BOOTSTRAP_MAX_RECORDS,
    METHODS,
    Z975,
    Interval,
    bootstrap,
    describe_method,
    newcombe_paired,
    t_quantile_975,
    wilson,
)
from evalsi.stats._mean import (
    EMPTY,
    Estimate,
    clustered_estimate,
    estimate,
    is_proportion,
    mean,
    standard_error,
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
    "BOOTSTRAP_MAX_RECORDS",
    "EMPTY",
    "METHODS",
    "Z975",
    "Direction",
    "Estimate",
    "Flip",
    "Interval",
    "McNemar",
    "PairedComparison",
    "RegressionRule",
    "bootstrap",
    "clustered_estimate",
    "describe_method",
    "estimate",
    "exact_pass_at_k",
    "is_proportion",
    "is_regression",
    "mcnemar_exact",
    "mean",
    "newcombe_paired",
    "paired_comparison",
    "paired_interval",
    "pass_at_k",
    "pass_at_k_estimate",
    "pass_pow_k",
    "pass_pow_k_estimate",
    "record_means",
    "regressed",
    "standard_error",
    "t_quantile_975",
    "wilson",
]

publish(__name__)
