"""Each monitor's documented threshold as a rule a reader of the logs can draw: where, and which way it fires.

The logs carry a signal's value and whether it fired, not its threshold; a chart of ``monitor/<signal>`` draws
the rule beside the value. Three kinds: the value reaching a level (``at_least``), the value falling to a level
(``at_most``: the held-out difference), and the value rising by an amount over the run's baseline (``rise``: the
truncation and duplicate rates, whose baseline the logs do not carry).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from evalsi.monitors._monitor import Thresholds

Kind = Literal["at_least", "at_most", "rise"]


@dataclass(frozen=True, slots=True)
class Rule:
    """When one monitor fires: its threshold, the :class:`Thresholds` field it comes from, and which way."""

    signal: str
    threshold: float
    field: str
    kind: Kind
    text: str
    """The rule in words, as the documentation's table says it (``≥ 0.9``, ``risen ≥ 0.2 over the baseline's``)."""


_FIELDS: dict[str, tuple[str, Kind]] = {
    "component_dominance": ("dominance", "at_least"),
    "length_drift": ("length_ratio", "at_least"),
    "length_reward_correlation": ("length_correlation", "at_least"),
    "truncation_rate": ("truncation_rise", "rise"),
    "duplicate_completions": ("duplicate_rise", "rise"),
    "zero_variance_groups": ("zero_variance", "at_least"),
    "sandbox_verdicts": ("verdict_rise", "at_least"),
    "reward_vs_heldout": ("heldout_margin", "at_most"),
}


def rule(signal: str, thresholds: Thresholds | None = None) -> Rule | None:
    """The rule of a monitor named as it is logged (``monitor/<signal>``); None for a name that has none.

    ``monitor/sandbox/<verdict>`` (a verdict's rate) has no threshold of its own: the ``sandbox_verdicts`` signal
    reads their rises.

    Args:
        signal: The monitor's name without the ``monitor/`` prefix.
        thresholds: The thresholds in force; the defaults when None.

    Example:
        >>> rule("length_drift").text
        '≥ 1.5 (length_ratio)'
        >>> rule("sandbox/timeout") is None
        True

    """
    if signal not in _FIELDS:
        return None
    t = thresholds or Thresholds()
    field, kind = _FIELDS[signal]
    value = float(getattr(t, field))
    if kind == "rise":
        text = f"risen ≥ {value:g} over the baseline's ({field})"
    elif kind == "at_most":
        text = f"≤ {value:g} ({field}) while the train reward rose ≥ {t.reward_gain:g} (reward_gain)"
    else:
        text = f"≥ {value:g} ({field})"
    return Rule(signal, value, field, kind, text)
