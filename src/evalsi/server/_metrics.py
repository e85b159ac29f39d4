"""Prometheus metrics of the Reward (``evalsi_reward_*``) and Run (``evalsi_run_*``) Services, a registry per server.

Label values come from bounded sets the server knows: protocols, result codes, cache tiers, projects (from the
operator's tokens), registered evaluator names and the Run Service's methods; never a name a request chooses
(such as a component's, a run's or a label's).
"""

from __future__ import annotations

from functools import partial
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

M = TypeVar("M", Counter, Gauge, Histogram)

RUN_METHODS = frozenset({"CreateRun", "GetRun", "ListRuns", "CompareRuns", "DeleteRun"})
"""The Run Service's methods: the values of the ``method`` label (anything else is counted as ``other``)."""
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    """Every metric the server exports; one instance per server, so tests can run several in one process."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._children: dict[tuple[Any, ...], Any] = {}
        r = self.registry
        counter, gauge = partial(Counter, registry=r), partial(Gauge, registry=r)
        histogram = partial(Histogram, registry=r)
        self.calls = counter(
            "evalsi_reward_calls", "ScoreRewards calls by protocol and result code.", ["protocol", "code"]
        )
        self.call_seconds = histogram(
            "evalsi_reward_call_seconds",
            "Wall time of a ScoreRewards call, waiting included.",
            ["protocol"],
            buckets=_LATENCY_BUCKETS,
        )
        self.rollouts = counter(
            "evalsi_reward_rollouts",
            "Rollouts scored, by project and result status (failed: the batch failed).",
            ["project", "status"],
        )
        self.component_seconds = histogram(
            "evalsi_reward_component_seconds",
            "Wall time of one component over one batch (cache look-ups included).",
            ["evaluator"],
            buckets=_LATENCY_BUCKETS,
        )
        self.component_errors = counter(
            "evalsi_reward_component_errors", "Component scores with status error, by evaluator.", ["evaluator"]
        )
        self.cache_hits = counter("evalsi_reward_cache_hits", "Component score cache hits by tier.", ["tier"])
        self.cache_misses = counter("evalsi_reward_cache_misses", "Component score cache misses by tier.", ["tier"])
        self.inflight = gauge("evalsi_reward_inflight_rollouts", "Rollouts being scored, by project.", ["project"])
        self.waiting = gauge(
            "evalsi_reward_waiting_rollouts", "Rollouts waiting for capacity (back-pressure), by project.", ["project"]
        )
        self.request_bytes = gauge(
            "evalsi_reward_request_bytes", "Bytes of JSON request bodies held (read, or admitted to be read)."
        )
        self.requests_waiting_to_read = gauge(
            "evalsi_reward_requests_waiting_to_read",
            "Calls waiting for rewards.max_inflight_bytes before their body is read.",
        )
        self.spec_cache_bytes = gauge(
            "evalsi_reward_spec_cache_bytes",
            "Estimated memory of the bound specs kept for reuse, by project.",
            ["project"],
        )
        self.cancelled = counter(
            "evalsi_reward_cancelled_calls", "Calls whose caller went away while their batch was being scored."
        )
        self.shared_cache_pruned = counter(
            "evalsi_reward_shared_cache_pruned", "Shared cache entries deleted after rewards.shared_cache_ttl."
        )
        self.run_calls = counter(
            "evalsi_run_calls", "Run Service calls by method, protocol and result code.", ["method", "protocol", "code"]
        )
        self.run_call_seconds = histogram(
            "evalsi_run_call_seconds",
            "Wall time of a Run Service call from its request read to its answer, by method and protocol.",
            ["method", "protocol"],
            buckets=_LATENCY_BUCKETS,
        )
        self.run_replays = counter(
            "evalsi_run_create_replays",
            "CreateRun calls answered with the run an earlier call with the same requestId stored (a retry).",
        )

    def child(self, metric: M, *values: str) -> M:
        """``metric.labels(*values)``, kept: the hot paths count every call, and ``labels`` checks and locks each time.

        Label values come from bounded sets (see the module's docstring), so the children kept are too.
        """
        key = (id(metric), *values)
        found = self._children.get(key)
        if found is None:
            found = self._children.setdefault(key, metric.labels(*values))
        return found  # type: ignore[no-any-return]

    def on_run_call(self, method: str, protocol: str, code: str, seconds: float | None = None) -> None:
        """Count one Run Service call (``seconds`` None: refused before it started, so not timed)."""
        name = method if method in RUN_METHODS else "other"
        self.run_calls.labels(name, protocol, code).inc()
        if seconds is not None:
            self.run_call_seconds.labels(name, protocol).observe(seconds)

    def on_lookup(self, tier: str, hits: int, misses: int) -> None:
        """Count one cache look-up (the hook of :class:`~evalsi.server.rewards._shared_cache.TieredCache`)."""
        if hits:
            self.child(self.cache_hits, tier).inc(hits)
        if misses:
            self.child(self.cache_misses, tier).inc(misses)

    def on_gauge(self, gauge: str, project: str, delta: int) -> None:
        """Move the waiting or in-flight gauge of a project (the hook of the admission gates)."""
        self.child(self.waiting if gauge == "waiting" else self.inflight, project).inc(delta)

    def on_spec_cache_bytes(self, project: str, delta: int) -> None:
        """Move the bytes of a project's kept bound specs (:class:`~evalsi.server.rewards._spec_cache.BoundSpecs`)."""
        self.spec_cache_bytes.labels(project).inc(delta)

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
