"""Checkpoint results on an evalsi server: each step of each spec is a run there, found again by its labels.

Labels: ``training-run`` (the training run's name), ``training-step`` (``base`` or the step number) and
``spec`` (the run spec's name). The newest run with a step's labels is that step's result, so a step evaluated
again (after a partial run) replaces the earlier one. Comparisons with the base are the server's
(``CompareRuns``), and the curve read from the server is the one the step files give.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalsi.errors import DataError
from evalsi.runs import RunResult, RunsClient
from evalsi.runs._curve import Curve, CurvePoint, summary_estimates
from evalsi.stats import PairedComparison, RegressionRule

TRAINING_RUN = "training-run"
TRAINING_STEP = "training-step"
SPEC = "spec"


def step_label(step: int | None) -> str:
    """``base`` or the step number, as the ``training-step`` label holds it."""
    return "base" if step is None else str(step)


@dataclass
class ServerOutcome:
    """A step's result for one spec, as the server holds it."""

    run_id: str | None
    status: str
    gates_passed: bool
    comparisons: dict[str, PairedComparison] = field(default_factory=dict)
    regressions: list[RegressionRule] = field(default_factory=list)
    summary: dict[str, Any] | None = None


def _gates_passed(run: dict[str, Any]) -> bool:
    return all(g.get("passed") for g in (run.get("summary") or {}).get("gates") or [])


class ServerRuns:
    """One training run's steps on an evalsi server."""

    def __init__(self, client: RunsClient, training_run: str) -> None:
        self.client = client
        self.training_run = training_run

    def labels(self, spec: str, step: int | None) -> dict[str, str]:
        """The labels of a step's run."""
        return {TRAINING_RUN: self.training_run, TRAINING_STEP: step_label(step), SPEC: spec}

    def latest(self, spec: str, step: int | None) -> dict[str, Any] | None:
        """The newest run of this step and spec."""
        return self.client.latest_run(self.labels(spec, step))

    def is_complete(self, spec: str, step: int | None) -> bool:
        """Whether the server holds a complete run of this step and spec."""
        run = self.latest(spec, step)
        return run is not None and run.get("status") == "complete"

    def store(self, results: Path | RunResult, spec: str, step: int | None) -> dict[str, Any]:
        """Store a step's results (its file, or the results just written to it) as a run with the step's labels."""
        if isinstance(results, RunResult):
            return self.client.create_run(results.to_json(), self.labels(spec, step))
        return self.client.upload(results, self.labels(spec, step))

    def outcome(
        self, spec: str, step: int | None, rules: Sequence[RegressionRule], metrics: Sequence[str] = ()
    ) -> ServerOutcome:
        """The step's status and gates, and the server's comparison with the base for ``metrics`` and the rules."""
        run = self.latest(spec, step)
        if run is None:
            return ServerOutcome(None, "missing", True)
        out = ServerOutcome(run["id"], str(run.get("status", "complete")), _gates_passed(run))
        out.summary = dict(run.get("summary") or {})
        wanted = list(dict.fromkeys([*metrics, *(r.metric for r in rules)]))
        base = self.latest(spec, None) if step is not None and wanted else None
        reported = set(out.summary.get("metrics") or {})
        if base is not None:
            reported &= set((base.get("summary") or {}).get("metrics") or {})
        shared = [m for m in wanted if m in reported]
        if base is not None and shared:
            gated = [str(r) for r in rules if r.metric in shared]
            compared, failed = self.client.comparisons(base["id"], run["id"], shared, gated)
            out.comparisons = {c.metric: c.comparison for c in compared}
            out.regressions = [r for r in rules if str(r) in failed]
        return out


def build_server_curve(
    client: RunsClient, training_run: str, spec: str, metrics: Sequence[str], rules: Sequence[RegressionRule] = ()
) -> Curve:
    """A spec's learning curve from the server's runs, compared with the base through ``CompareRuns``.

    Args:
        client: The server's Run Service.
        training_run: The training run's name.
        spec: The run spec's name.
        metrics: The metrics to show and compare with the base.
        rules: Regression rules to check each step against.

    Raises:
        DataError: The server holds no run of this spec and training run.

    """
    newest: dict[int | None, dict[str, Any]] = {}
    for run in client.list_runs({TRAINING_RUN: training_run, SPEC: spec}):  # newest first
        label = (run.get("labels") or {}).get(TRAINING_STEP, "")
        step = None if label == "base" else int(label) if label.isdigit() else -1
        if step != -1 and step not in newest:
            newest[step] = run
    if not newest:
        raise DataError(
            f"no runs of spec {spec!r} for training run {training_run!r} on {client.server} "
            "(evaluate with `evalsi checkpoints eval` or `watch` first, with the same --server)"
        )
    base = newest.get(None)
    points = []
    for step in sorted(newest, key=lambda s: -1 if s is None else s):
        run = newest[step]
        summary = run.get("summary") or {}
        means = summary_estimates(summary)
        point = CurvePoint(
            step,
            client.url(f"/v1alpha1/runs/{run['id']}"),
            run.get("status") == "complete",
            _gates_passed(run),
            means,
        )
        if step is not None and base is not None:
            shared = [m for m in metrics if m in point.means]
            gated = [str(r) for r in rules if r.metric in shared]
            compared, failed = client.comparisons(base["id"], run["id"], shared, gated)
            point.changes = {c.metric: c.comparison for c in compared}
            point.regressions = [r for r in rules if str(r) in failed]
        points.append(point)
    return Curve(training_run, spec, list(metrics), points)
