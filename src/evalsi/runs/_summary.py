"""From per-sample scores to a run's metrics: means with clustered CIs, pass@k, pass^k, and gates.

Metric names: a component's name is its mean over samples (clustered by record); ``pass@K/<component>`` and
``pass^K/<component>`` are the mean over records of the unbiased per-record estimates. A sample counts as
correct for pass@k when its value reaches the component's threshold (pass/fail counts as 1 or 0).
An errored score counts as 0 under ``onError: zero`` and is left out under ``none``; skipped scores are
always left out.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalsi.evaluators import Score
from evalsi.runs._results import RecordResult
from evalsi.specs import GateSpec, OnError, PassKSpec
from evalsi.stats import Estimate, clustered_estimate, estimate, pass_at_k, pass_pow_k


@dataclass(frozen=True)
class MetricInfo:
    """A scored metric (a component) and the value at which one of its samples counts as correct."""

    name: str
    threshold: float = 1.0


@dataclass(frozen=True)
class GateResult:
    """One gate's verdict."""

    metric: str
    value: float | None
    min: float | None
    max: float | None
    passed: bool
    reason: str = ""


@dataclass
class RunSummary:
    """Every metric's estimate, score status counts per component, and the gates."""

    metrics: dict[str, Estimate]
    counts: dict[str, Counter[str]] = field(default_factory=dict)
    gates: list[GateResult] = field(default_factory=list)
    unscored: dict[str, str] = field(default_factory=dict)
    """Metric -> why none of its scores has a value (the commonest reason of its skipped or errored scores)."""

    @property
    def gates_passed(self) -> bool:
        """Whether every gate passed (true when there are none)."""
        return all(g.passed for g in self.gates)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "metrics": {name: est.to_dict() for name, est in self.metrics.items()},
            "counts": {name: dict(c) for name, c in self.counts.items()},
            "gates": [g.__dict__ for g in self.gates],
            "unscored": dict(self.unscored),
        }


def sample_value(score: Score | None, on_error: OnError) -> float | None:
    """A score as a number for the means, or None when it is left out."""
    if score is None or score.status == "skipped":
        return None
    if score.status == "error":
        return 0.0 if on_error == "zero" else None
    return score.numeric


def record_values(record: RecordResult, metric: str, on_error: OnError) -> list[float]:
    """The values of one record's samples for a metric, after the ``onError`` policy."""
    values = (sample_value(s.scores.get(metric), on_error) for s in record.samples)
    return [v for v in values if v is not None]


def correct_counts(record: RecordResult, metric: MetricInfo, on_error: OnError) -> tuple[int, int]:
    """``(n, c)``: the samples with a value, and those reaching the metric's threshold."""
    values = record_values(record, metric.name, on_error)
    return len(values), sum(1 for v in values if v >= metric.threshold)


def pass_k_names(pass_k: PassKSpec) -> list[tuple[str, str, int]]:
    """``(name, metric, k)`` of every pass@k and pass^k metric the spec asks for, pass@k first."""
    out: list[tuple[str, str, int]] = []
    for symbol, spec in (("@", pass_k.at_k), ("^", pass_k.pow_k)):
        if spec is not None:
            out.extend((f"pass{symbol}{k}/{m}", m, k) for m in spec.metrics for k in sorted(set(spec.k)))
    return out


def per_record_pass_k(record: RecordResult, name: str, metric: MetricInfo, k: int, on_error: OnError) -> float | None:
    """One record's pass@k or pass^k estimate, or None when it has fewer than ``k`` decided samples."""
    n, c = correct_counts(record, metric, on_error)
    if n < k:
        return None
    return pass_at_k(n, c, k) if name.startswith("pass@") else pass_pow_k(n, c, k)


def summarize(
    records: Sequence[RecordResult],
    metrics: Sequence[MetricInfo],
    pass_k: PassKSpec,
    gates: Sequence[GateSpec],
    on_error: OnError,
) -> RunSummary:
    """Estimates of every metric over the records, and the gates' verdicts.

    Args:
        records: The run's finished records.
        metrics: The run's metrics.
        pass_k: Which pass@k and pass^k estimates to add.
        gates: The run's gates.
        on_error: How an errored score counts (``zero``, ``none`` or ``raise``).

    """
    estimates: dict[str, Estimate] = {}
    counts: dict[str, Counter[str]] = {}
    unscored: dict[str, str] = {}
    for metric in metrics:
        estimates[metric.name] = clustered_estimate([record_values(r, metric.name, on_error) for r in records])
        statuses: Counter[str] = Counter()
        reasons: Counter[str] = Counter()
        for record in records:
            scores = [s.scores[metric.name] for s in record.samples if metric.name in s.scores]
            statuses.update(score.status for score in scores)
            reasons.update(
                f"{score.status}: {score.reason or 'no reason given'}" for score in scores if score.status != "ok"
            )
        counts[metric.name] = statuses
        if reasons and not statuses["ok"]:
            unscored[metric.name] = reasons.most_common(1)[0][0]
    by_name = {m.name: m for m in metrics}
    for name, metric_name, k in pass_k_names(pass_k):
        values = (per_record_pass_k(r, name, by_name[metric_name], k, on_error) for r in records)
        estimates[name] = within_unit_interval(estimate([v for v in values if v is not None]))
    return RunSummary(estimates, counts, [check_gate(g, estimates) for g in gates], unscored)


def within_unit_interval(est: Estimate) -> Estimate:
    """A probability's interval clipped to [0, 1]: the t interval around a mean near 1 can pass it."""
    if math.isnan(est.ci_low):
        return est
    return dataclasses.replace(est, ci_low=max(0.0, est.ci_low), ci_high=min(1.0, est.ci_high))


def check_gate(gate: GateSpec, estimates: Mapping[str, Estimate]) -> GateResult:
    """A gate passes when its metric's mean lies within ``[min, max]``; no value fails it."""
    est = estimates.get(gate.metric)
    value = None if est is None or math.isnan(est.mean) else est.mean
    if value is None:
        return GateResult(gate.metric, None, gate.min, gate.max, False, "no value (nothing was scored)")
    if gate.min is not None and value < gate.min:
        return GateResult(gate.metric, value, gate.min, gate.max, False, f"{value:.4f} < min {gate.min:g}")
    if gate.max is not None and value > gate.max:
        return GateResult(gate.metric, value, gate.min, gate.max, False, f"{value:.4f} > max {gate.max:g}")
    return GateResult(gate.metric, value, gate.min, gate.max, True)
