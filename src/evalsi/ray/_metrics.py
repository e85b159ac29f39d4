"""Metrics of a reward pool through ``ray.util.metrics``, named as the evalsi server names its own.

Ray's metrics agent on every node exports them to Prometheus with its ``ray_`` prefix: ``evalsi_reward_*`` of
the server become ``ray_evalsi_reward_*`` here (counters end in ``_total``). Tags are the pool's name, the
actor's index, cache tiers and registered evaluator names: bounded sets, never a value from a rollout.

Besides the exported series, each side keeps its recent latencies in memory so ``RewardPool.stats()`` can give
p50/p99 without a Prometheus server (the bench and the tests read them there).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from typing import Any

from evalsi.engine import ComponentJob
from evalsi.evaluators import Score

LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0]
"""Histogram boundaries in seconds: those of the server's latency histograms."""
RECENT = 4096
"""Latencies kept for quantiles."""


def quantiles(values: Iterable[float]) -> dict[str, float | None]:
    """p50 and p99 (nearest rank) of ``values``; None when there are none."""
    ordered = sorted(values)
    if not ordered:
        return {"p50": None, "p99": None}

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

    return {"p50": rank(0.5), "p99": rank(0.99)}


class _Metrics:
    def __init__(self, defaults: dict[str, str]) -> None:
        from ray.util import metrics

        self._m = metrics
        self._defaults = defaults

    def counter(self, name: str, description: str, tags: tuple[str, ...] = ()) -> Any:
        metric = self._m.Counter(name, description=description, tag_keys=(*self._defaults, *tags))
        metric.set_default_tags(self._defaults)
        return metric

    def gauge(self, name: str, description: str, tags: tuple[str, ...] = ()) -> Any:
        metric = self._m.Gauge(name, description=description, tag_keys=(*self._defaults, *tags))
        metric.set_default_tags(self._defaults)
        return metric

    def histogram(self, name: str, description: str, tags: tuple[str, ...] = ()) -> Any:
        metric = self._m.Histogram(
            name, description=description, boundaries=LATENCY_BUCKETS, tag_keys=(*self._defaults, *tags)
        )
        metric.set_default_tags(self._defaults)
        return metric


class ActorMetrics(_Metrics):
    """One scorer actor's series: rollouts in flight, chunk latency, cache hits by tier, component times."""

    def __init__(self, pool: str, index: int) -> None:
        super().__init__({"pool": pool, "actor": str(index)})
        self.inflight_gauge = self.gauge("evalsi_pool_actor_inflight_rollouts", "Rollouts this actor is scoring.")
        self.chunk_seconds = self.histogram("evalsi_pool_actor_chunk_seconds", "Wall time of one chunk on an actor.")
        self.rollouts = self.counter("evalsi_pool_actor_rollouts", "Rollouts scored by this actor.")
        self.cache_hits = self.counter("evalsi_reward_cache_hits", "Component score cache hits by tier.", ("tier",))
        self.cache_misses = self.counter(
            "evalsi_reward_cache_misses", "Component score cache misses by tier.", ("tier",)
        )
        self.component_seconds = self.histogram(
            "evalsi_reward_component_seconds",
            "Wall time of one component over one chunk (cache look-ups included).",
            ("evaluator",),
        )
        self.component_errors = self.counter(
            "evalsi_reward_component_errors", "Component scores with status error, by evaluator.", ("evaluator",)
        )
        self.recent: deque[float] = deque(maxlen=RECENT)
        self._inflight = 0
        self._counts: dict[str, int] = {}

    def inflight(self, delta: int) -> None:
        """Rollouts entering (positive) or leaving (negative) this actor."""
        self._inflight += delta
        self.inflight_gauge.set(self._inflight)

    def observe_component(self, job: ComponentJob, scores: list[Score], seconds: float) -> None:
        """The engine's ``Pools.observe`` hook: one component's time and errors over a chunk."""
        tags = {"evaluator": job.evaluator.name}
        self.component_seconds.observe(seconds, tags=tags)
        errors = sum(1 for s in scores if s.status == "error")
        if errors:
            self.component_errors.inc(errors, tags=tags)

    def observe_chunk(self, rollouts: int, seconds: float, counts: dict[str, Any]) -> None:
        """A finished chunk: its latency, its rollouts, and the cache counters' growth since the last chunk.

        ``counts`` may hold other figures too: only the ``<tier>_hits`` and ``<tier>_misses`` ones are read.
        """
        self.chunk_seconds.observe(seconds)
        self.recent.append(seconds)
        if rollouts:
            self.rollouts.inc(rollouts)
        for key, value in counts.items():
            tier, _, kind = key.partition("_")
            if kind not in ("hits", "misses"):
                continue
            grown = value - self._counts.get(key, 0)
            if grown > 0:
                (self.cache_hits if kind == "hits" else self.cache_misses).inc(grown, tags={"tier": tier})
            self._counts[key] = value


class PoolMetrics(_Metrics):
    """The coordinator's series: queue depth, rollouts in flight, retries, results and call latency."""

    def __init__(self, pool: str) -> None:
        super().__init__({"pool": pool})
        self.queued = self.gauge("evalsi_pool_queued_rollouts", "Rollouts waiting for an idle actor.")
        self.inflight = self.gauge("evalsi_pool_inflight_rollouts", "Rollouts on actors now.")
        self.waiting = self.gauge(
            "evalsi_pool_waiting_rollouts", "Rollouts of calls waiting for room in the bounded queue."
        )
        self.rollouts = self.counter("evalsi_pool_rollouts", "Rollouts answered, by result.", ("status",))
        self.shared = self.counter(
            "evalsi_pool_deduplicated_rollouts", "Rollouts answered by a computation already under way."
        )
        self.retries = self.counter("evalsi_pool_retries", "Chunks scored again, by cause.", ("cause",))
        self.call_seconds = self.histogram("evalsi_pool_call_seconds", "Wall time of one scoring call, waits included.")
        self.recent: deque[float] = deque(maxlen=RECENT)

    def observe_call(self, seconds: float) -> None:
        """A finished call's latency."""
        self.call_seconds.observe(seconds)
        self.recent.append(seconds)
