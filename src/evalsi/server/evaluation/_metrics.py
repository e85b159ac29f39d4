"""Prometheus counters of evaluator builds and evaluation jobs, in the server's registry (``/metrics``).

Labels are states only (never a project or an id a caller chose): ``evalsi_evaluator_builds_total{state}``
(ACTIVE, BUILD_FAILED), ``evalsi_evaluation_jobs_total{state}`` (COMPLETED, FAILED, CANCELLED) and the gauge
``evalsi_evaluation_jobs_running``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class EvaluationMetrics:
    """The counters, registered once per server."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.builds = Counter(
            "evalsi_evaluator_builds", "Evaluator builds finished, by final state", ["state"], registry=registry
        )
        self.jobs = Counter(
            "evalsi_evaluation_jobs", "Evaluation jobs finished, by final state", ["state"], registry=registry
        )
        self.running = Gauge("evalsi_evaluation_jobs_running", "Evaluation jobs running now", registry=registry)
