"""The learning curve: every step's metrics beside the base model's, record by record, with the regressions.

Read from the step results files alone, so the curve is the same whoever evaluated the steps (a watcher, a
trainer callback, ``checkpoints eval``). A change is significant when the paired 95% CI of (step − base)
excludes zero; a regression is a significant drop beyond the rule's ``MAX_DROP``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalsi.errors import DataError
from evalsi.runs import compare_runs, load_results, read_results
from evalsi.stats import EMPTY, Estimate, PairedComparison, RegressionRule, regressed
from evalsi.training._results import step_files


@dataclass
class CurvePoint:
    """One step (or the base) on the curve."""

    step: int | None
    path: Path | str
    """The step's results file, or its run's URL on an evalsi server."""
    complete: bool
    gates_passed: bool
    means: dict[str, Estimate]
    changes: dict[str, PairedComparison] = field(default_factory=dict)
    """Metric -> comparison with the base (absent for the base itself, or without base results)."""
    regressions: list[RegressionRule] = field(default_factory=list)

    @property
    def label(self) -> str:
        """``base`` or the step number."""
        return "base" if self.step is None else str(self.step)

    @property
    def regressed(self) -> bool:
        """Whether a regression rule failed at this step."""
        return bool(self.regressions)

    @property
    def status(self) -> str:
        """``regressed``, ``gate failed``, ``partial`` or ``ok``."""
        if self.regressions:
            return "regressed"
        if not self.complete:
            return "partial"
        return "ok" if self.gates_passed else "gate failed"

    def regressed_on(self, metric: str) -> bool:
        """Whether the metric regressed at this step."""
        return any(r.metric == metric for r in self.regressions)


@dataclass
class Curve:
    """A spec's learning curve over a training run: the base first, then the steps in order."""

    training_run: str
    spec: str
    metrics: list[str]
    points: list[CurvePoint]

    @property
    def base(self) -> CurvePoint | None:
        """The base model's point, when it was evaluated."""
        return next((p for p in self.points if p.step is None), None)

    @property
    def latest(self) -> CurvePoint | None:
        """The highest step evaluated."""
        steps = [p for p in self.points if p.step is not None]
        return steps[-1] if steps else None

    @property
    def failed(self) -> bool:
        """Whether the latest checkpoint regressed or failed its spec's gates (exit code 3)."""
        latest = self.latest
        return latest is not None and latest.status in ("regressed", "gate failed")

    def to_dict(self) -> dict[str, Any]:
        """JSON form: per step and metric, the mean with its interval and the change from the base."""
        points = []
        for point in self.points:
            metrics: dict[str, Any] = {}
            for name in self.metrics:
                est = point.means.get(name, EMPTY)
                change = point.changes.get(name)
                metrics[name] = {
                    "mean": _clean(est.mean),
                    "ciLow": _clean(est.ci_low),
                    "ciHigh": _clean(est.ci_high),
                    "ci": est.to_dict()["ci"],
                    "change": None if change is None else change.difference.to_dict(),
                    "significant": bool(change is not None and change.significant),
                    "regressed": point.regressed_on(name),
                }
            points.append(
                {
                    "step": point.step,
                    "label": point.label,
                    "status": point.status,
                    "path": str(point.path),
                    "metrics": metrics,
                    "regressions": [str(r) for r in point.regressions],
                }
            )
        latest = self.latest
        return {
            "trainingRun": self.training_run,
            "spec": self.spec,
            "metrics": self.metrics,
            "points": points,
            "latest": None if latest is None else latest.label,
            "failed": self.failed,
        }


def _clean(value: float) -> float | None:
    return None if math.isnan(value) else value


def build_curve(
    log_dir: Path, training_run: str, spec: str, metrics: Sequence[str], rules: Sequence[RegressionRule] = ()
) -> Curve:
    """Read a spec's step files for a training run and compare each step with the base.

    Raises:
        DataError: No step of this spec and training run was evaluated under ``log_dir``, or a file is broken.

    """
    files = step_files(log_dir, training_run, spec)
    if not files:
        raise DataError(
            f"no results for spec {spec!r} of training run {training_run!r} under {log_dir} "
            "(evaluate with `evalsi checkpoints eval` or `watch` first, with the same --log-dir)"
        )
    base_path = files.get(None)
    base_run = load_results(base_path) if base_path is not None else None
    points = []
    for step, path in files.items():
        data = read_results(path)
        summary = data.get("summary") or {}
        means = summary_estimates(summary)
        gates = summary.get("gates") or []
        point = CurvePoint(step, path, data.get("status") == "complete", all(g.get("passed") for g in gates), means)
        if step is not None and base_run is not None:
            run = load_results(path)
            shared = [m for m in metrics if m in point.means and base_run is not None]
            point.changes = {c.metric: c.comparison for c in compare_runs(base_run, run, shared or None)}
            point.regressions = [
                r for r in rules if r.metric in point.changes and regressed(point.changes[r.metric], r)
            ]
        points.append(point)
    return Curve(training_run, spec, list(metrics), points)


def summary_estimates(summary: Mapping[str, Any]) -> dict[str, Estimate]:
    """Each metric's mean with its interval, from a results summary."""
    return {name: _estimate(value) for name, value in (summary.get("metrics") or {}).items()}


def _estimate(value: Any) -> Estimate:
    return Estimate.from_dict(value) if isinstance(value, dict) else EMPTY
