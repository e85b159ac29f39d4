"""The composition rules: per-component scores -> one total per rollout.

The rules, in order (checked by the shared vectors in ``testdata/reward_vectors.json``):

1. Every component is scored.
2. An errored component with ``onError: raise`` fails the whole batch (:class:`RewardBatchError`).
3. An errored component with ``onError: none`` makes the total ``None`` (status ``no_total``).
4. A gate that scored below its ``threshold``, was skipped or errored makes the total ``floor`` (status ``gated``).
5. Otherwise the total is the sum of ``weight × value`` over components that were not skipped; ``onError: zero``
   counts an error as 0; pass/fail counts as 1 or 0; skipped components add nothing (no renormalisation).
6. ``clip: [low, high]`` bounds the total last (also a floor).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from evalsi.errors import DataError, RewardBatchError
from evalsi.evaluators import Score
from evalsi.specs import OnError

RewardStatus = Literal["ok", "gated", "no_total"]
"""How a rollout's total came about: ``ok`` (the weighted sum), ``gated`` (a gate failed, was skipped or errored:
the total is the spec's ``floor``) or ``no_total`` (a component under ``onError: none`` errored)."""


@dataclass(frozen=True, slots=True)
class ComponentRule:
    """What composition needs to know of one component."""

    name: str
    weight: float = 1.0
    gate: bool = False
    threshold: float = 1.0
    on_error: OnError = "raise"


@dataclass(frozen=True, slots=True)
class RewardResult:
    """The reward of one rollout: the total (None when there is none), its status, and every component's score."""

    total: float | None
    status: RewardStatus
    components: dict[str, Score]
    latency_ms: float | None = field(default=None, compare=False)
    """Milliseconds this rollout's components took, summed (a cached score costs 0; a component that scores a
    batch at once gives each rollout an equal share of its call). None where it was not measured (a server). A
    measurement, not part of the result's value: two results differing only here are equal."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form: ``{total, status, components: {name: {value, status, reason}}}``."""
        return {
            "total": self.total,
            "status": self.status,
            "components": {name: score.to_dict() for name, score in self.components.items()},
        }


def check_raise(rules: Sequence[ComponentRule], scores: Sequence[Sequence[Score]]) -> None:
    """Rule 2: fail the batch on the first rollout (lowest index) with an error under ``onError: raise``.

    ``scores`` is indexed ``[component][rollout]``.
    """
    first: tuple[int, str, str] | None = None
    for rule, column in zip(rules, scores, strict=True):
        if rule.on_error != "raise":
            continue
        for index, score in enumerate(column):
            if score.status == "error":
                if first is None or index < first[0]:
                    first = (index, rule.name, score.reason or "no reason given")
                break
    if first is not None:
        raise RewardBatchError(*first)


def compose_one(
    rules: Sequence[ComponentRule], scores: Sequence[Score], floor: float, clip: tuple[float, float] | None
) -> RewardResult:
    """Rules 3-6 for one rollout whose scores (in rule order) hold no ``raise`` error.

    Args:
        rules: Each component's weight, gate and error rule.
        scores: The rollout's scores, in rule order.
        floor: The total when a gate fails.
        clip: ``[low, high]`` bounds of the total; None for none.

    """
    breakdown = {rule.name: score for rule, score in zip(rules, scores, strict=True)}
    gated = False
    total = 0.0
    for rule, score in zip(rules, scores, strict=True):
        status = score.status
        if status == "error":
            if rule.on_error == "none":
                return RewardResult(None, "no_total", breakdown)
            if rule.on_error == "raise":
                raise RewardBatchError(-1, rule.name, score.reason or "no reason given")
        if rule.gate and (status != "ok" or (score.numeric or 0.0) < rule.threshold):
            gated = True
        if status == "ok":
            total += rule.weight * (score.numeric or 0.0)
    if gated:
        total = floor
    if clip is not None:
        total = min(max(total, clip[0]), clip[1])
    return RewardResult(total, "gated" if gated else "ok", breakdown)


def compose_batch(
    rules: Sequence[ComponentRule],
    scores: Sequence[Sequence[Score]],
    floor: float = 0.0,
    clip: tuple[float, float] | None = None,
) -> list[RewardResult]:
    """Compose every rollout of a batch; ``scores`` is indexed ``[component][rollout]``.

    Args:
        rules: Each component's weight, gate and error rule.
        scores: Scores indexed ``[component][rollout]``.
        floor: The total of a rollout whose gate failed.
        clip: ``[low, high]`` bounds of the total; None for none.

    Raises:
        RewardBatchError: A component errored under ``onError: raise`` (the whole batch fails).
        DataError: A total is not a finite number (weights × values overflowed), naming the rollout.

    """
    check_raise(rules, scores)
    if not scores:
        return []
    count = len(scores[0])
    results = [compose_one(rules, [column[i] for column in scores], floor, clip) for i in range(count)]
    for index, result in enumerate(results):
        if result.total is not None and not math.isfinite(result.total):
            raise DataError(
                f"the total is {result.total!r}: weight × value went past the range of a float; "
                "use smaller weights or values (or bound the total with clip)",
                index=index,
            )
    return results
