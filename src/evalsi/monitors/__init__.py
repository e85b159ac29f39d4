"""Monitors during training: signs of reward hacking read from every step's per-component rewards.

Pure computation over what a reward adapter sees of each generation batch (totals, per-component values,
completion lengths and texts, groups, sandbox verdicts) and over checkpoint evaluations; a :class:`Monitor`
keeps the history, reports each signal (a value, its threshold, fired or not) and writes the stop file when a
signal named in ``stop_on`` fires.

Example:
    >>> from evalsi.monitors import Monitor, Observation
    >>> monitor = Monitor(weights={"correct": 1.0})
    >>> signals = monitor.observe(Observation(
    ...     totals=[1.0, 0.0], components={"correct": [1.0, 0.0]}, lengths=[3, 5], texts=["a b c", "d e f g h"],
    ...     group_keys=["p", "p"]))
    >>> [s.name for s in signals if s.fired]
    []

"""

from evalsi._util.public import publish
from evalsi.monitors._monitor import (
    SIGNALS,
    Monitor,
    Observation,
    Thresholds,
    metrics,
    parse_stop_on,
    write_monitor_stop_file,
)
from evalsi.monitors._rules import Rule, rule
from evalsi.monitors._signals import (
    VERDICTS,
    Signal,
    component_shares,
    duplicate_fraction,
    groups_of,
    heldout_comparison,
    near_duplicate,
    pearson,
    verdict_of,
    verdict_rates,
    zero_variance_fraction,
)

__all__ = [
    "SIGNALS",
    "VERDICTS",
    "Monitor",
    "Observation",
    "Rule",
    "Signal",
    "Thresholds",
    "component_shares",
    "duplicate_fraction",
    "groups_of",
    "heldout_comparison",
    "metrics",
    "near_duplicate",
    "parse_stop_on",
    "pearson",
    "rule",
    "verdict_of",
    "verdict_rates",
    "write_monitor_stop_file",
    "zero_variance_fraction",
]

publish(__name__)
