"""The monitor signals, as pure functions of one training batch or of a window of batches.

Each function returns plain numbers; :mod:`evalsi.monitors._monitor` keeps the history, compares a recent
window with the first batches of the run (the baseline) and decides whether a signal fired.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from evalsi.stats import PairedComparison, paired_comparison

VERDICTS = ("timeout", "cpu", "memory", "output", "crash", "sandbox")
"""Sandbox verdicts counted by the verdict-mix signal (a wrong answer and a pass are not counted)."""

_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Signal:
    """One monitor's reading at one step.

    ``value`` is None when the signal does not apply to this run (a spec with a single weighted component has no
    dominance; a reward without code-running components has no sandbox verdicts).
    """

    name: str
    value: float | None
    threshold: float
    fired: bool
    detail: str = ""
    level: float | None = None
    """Where the signal fires on its value's scale, when that is not ``threshold`` itself: a rise over the run's
    baseline fires at the baseline plus ``threshold``."""

    @property
    def line(self) -> float:
        """The level the value is compared with: ``level`` when set, else ``threshold``."""
        return self.threshold if self.level is None else self.level


def mean_or_none(values: Sequence[float]) -> float | None:
    """The mean, None for no values."""
    return sum(values) / len(values) if values else None


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson's correlation of two equally long sequences; None when either is constant or shorter than 2.

    Args:
        xs: The first sequence.
        ys: The second, as long as ``xs``.

    Raises:
        ValueError: The sequences differ in length.

    """
    n = len(xs)
    if n != len(ys):
        raise ValueError(f"pearson needs sequences of one length, got {n} and {len(ys)}")
    if n < 2:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx <= 0.0 or syy <= 0.0:
        return None
    return sxy / math.sqrt(sxx * syy)


def component_shares(
    totals: Sequence[float | None],
    components: Mapping[str, Sequence[float | None]],
    weights: Mapping[str, float],
) -> dict[str, float]:
    """Each weighted component's share of the variance of the total: ``cov(weight × value, total) / var(total)``.

    Shares of a plain weighted sum add up to 1 (gates and clipping make them approximate). Rows without a total
    are left out; a component that was skipped or errored on a row counts 0 there (it added nothing to the total).
    Components of weight 0 are left out. Empty when the total does not vary.

    Args:
        totals: The total reward of each rollout.
        components: Each component's value per rollout (None: skipped or errored).
        weights: Each component's weight in the spec.

    Returns:
        ``{component: share}`` for every component of non-zero weight.

    """
    rows = [i for i, total in enumerate(totals) if total is not None]
    if len(rows) < 2:
        return {}
    ts = [float(totals[i]) for i in rows]  # type: ignore[arg-type]
    mt = sum(ts) / len(ts)
    var = sum((t - mt) ** 2 for t in ts)
    if var <= 1e-12:
        return {}
    shares: dict[str, float] = {}
    for name, values in components.items():
        weight = weights.get(name, 0.0)
        if weight == 0.0:
            continue
        cs = [weight * float(values[i]) if values[i] is not None else 0.0 for i in rows]  # type: ignore[arg-type]
        mc = sum(cs) / len(cs)
        shares[name] = sum((c - mc) * (t - mt) for c, t in zip(cs, ts, strict=True)) / var
    return shares


def groups_of(keys: Sequence[object]) -> list[list[int]]:
    """The groups of a batch: runs of consecutive rows with equal keys (a GRPO batch repeats each prompt).

    Args:
        keys: One group key (such as the prompt) per row, in batch order.

    Returns:
        Each group's row indices.

    """
    out: list[list[int]] = []
    for index, key in enumerate(keys):
        if out and keys[out[-1][0]] == key:
            out[-1].append(index)
        else:
            out.append([index])
    return out


def zero_variance_fraction(totals: Sequence[float | None], groups: Sequence[Sequence[int]]) -> float | None:
    """The fraction of groups (of 2 rollouts or more with a total) whose totals are all equal.

    A GRPO advantage is the reward minus its group's mean: such a group teaches nothing.

    Args:
        totals: One total per row, None where a rollout has none.
        groups: Each group's row indices (:func:`groups_of`).

    """
    counted = 0
    flat = 0
    for group in groups:
        values = [totals[i] for i in group if totals[i] is not None]
        if len(values) < 2:
            continue
        counted += 1
        if max(values) - min(values) <= 1e-9:  # type: ignore[type-var,operator]
            flat += 1
    return flat / counted if counted else None


def _normalise(text: str) -> str:
    return _SPACE.sub(" ", text).strip().lower()


def _shingles(text: str) -> frozenset[tuple[str, ...]]:
    words = text.split(" ")
    if len(words) < 3:
        return frozenset({tuple(words)})
    return frozenset(tuple(words[i : i + 3]) for i in range(len(words) - 2))


def near_duplicate(a: str, b: str, similarity: float) -> bool:
    """Whether two completions are equal, or near-equal (Jaccard similarity of word 3-grams ≥ ``similarity``).

    Both are compared after collapsing whitespace and lower-casing.

    Args:
        a: One completion.
        b: The other.
        similarity: The Jaccard similarity, 0 to 1, at or above which they count as repeats.

    """
    na, nb = _normalise(a), _normalise(b)
    if na == nb:
        return True
    sa, sb = _shingles(na), _shingles(nb)
    return len(sa & sb) / len(sa | sb) >= similarity


def duplicate_fraction(texts: Sequence[str], groups: Sequence[Sequence[int]], similarity: float) -> float | None:
    """The fraction of completions (in groups of 2 or more) that repeat or nearly repeat one earlier in their group.

    0 when all differ; ``(g − 1) / g`` when a group of ``g`` says one thing ``g`` times.

    Args:
        texts: One completion per row.
        groups: Each group's row indices (:func:`groups_of`).
        similarity: The Jaccard similarity at or above which two completions count as repeats.

    Returns:
        The fraction, None when no group has 2 completions or more.

    """
    counted = 0
    repeats = 0
    for group in groups:
        if len(group) < 2:
            continue
        seen: list[str] = []
        for i in group:
            counted += 1
            if any(near_duplicate(texts[i], earlier, similarity) for earlier in seen):
                repeats += 1
            seen.append(texts[i])
    return repeats / counted if counted else None


def verdict_of(status: str, reason: str | None, details: Mapping[str, object] | None) -> str | None:
    """The sandbox verdict of one code-running component's score, None when the score is not one.

    A code-running score carries ``isolation`` in its details; its first failing case's reason names the
    verdict (``timeout``, ``cpu time limit``, ``memory limit``, ``output limit``, ``crash: ...``). A sandbox that
    failed to run is an error whose reason says so. ``pass`` and ``wrong`` are returned for the other outcomes.

    Args:
        status: The score's status (``ok`` or ``error``).
        reason: The score's reason, if any.
        details: The score's details, if any.

    """
    if status == "error":
        return "sandbox" if reason and "sandbox failed" in reason else None
    if status != "ok" or not details or "isolation" not in details:
        return None
    first = details.get("first_failure")
    why = str(first.get("reason", "")) if isinstance(first, Mapping) else ""
    if not why:
        return "pass"
    for prefix, verdict in (
        ("timeout", "timeout"),
        ("cpu time limit", "cpu"),
        ("memory limit", "memory"),
        ("output limit", "output"),
        ("crash", "crash"),
    ):
        if why.startswith(prefix):
            return verdict
    return "wrong"


def verdict_rates(verdicts: Sequence[str | None]) -> dict[str, float]:
    """The rate of each of :data:`VERDICTS` among the code-running verdicts of a batch (empty when none ran).

    Args:
        verdicts: One verdict per row (:func:`verdict_of`), None where no code ran.

    """
    ran = [v for v in verdicts if v is not None]
    if not ran:
        return {}
    return {name: sum(1 for v in ran if v == name) / len(ran) for name in VERDICTS}


def heldout_comparison(before: Mapping[str, Sequence[float]], after: Mapping[str, Sequence[float]]) -> PairedComparison:
    """A held-out metric at a later checkpoint compared with an earlier one, paired by record.

    Args:
        before: The earlier checkpoint's sample values of each record, keyed by record (pairing) key.
        after: The same at the later checkpoint.

    """
    return paired_comparison(before, after)
