"""Per-rollout scoring time as the trainer adapters log it: ``reward/latency_ms/p50``, ``/p90`` and ``/p99``.

The engine measures what each rollout's components took (:attr:`RewardResult.latency_ms`); a trainer sees the
distribution, so one slow component on a few rollouts (a judge that times out, a program that loops until its
limit) shows as a high p99 while the median stays low. A call that scored several rollouts reports their
percentiles; a call of one rollout (verl's per-sample ``compute_score``, OpenRLHF called per sample) reports those
of the last :data:`WINDOW` rollouts this process scored, since the percentiles of one value say nothing.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence

from evalsi.rewards._batch import LATENCY_KEY
from evalsi.rewards._compose import RewardResult

PERCENTILES: tuple[int, ...] = (50, 90, 99)
"""The percentiles logged, as ``reward/latency_ms/p<q>``."""
PERCENTILE_KEYS: tuple[str, ...] = tuple(f"{LATENCY_KEY}/p{q}" for q in PERCENTILES)
WINDOW = 1024
"""How many recent rollouts the percentiles of a one-rollout call are taken over."""


def elapsed_ms(started: float) -> float:
    """Milliseconds since ``started``, a :func:`time.perf_counter` reading: how long a call's scoring took."""
    return (time.perf_counter() - started) * 1000.0


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile of non-empty ``values`` (one of the values, never interpolated)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


class RecentLatencies:
    """The per-rollout latencies of the last ``size`` rollouts scored, shared by a process's adapter calls."""

    def __init__(self, size: int = WINDOW) -> None:
        self._values: deque[float] = deque(maxlen=size)
        self._lock = threading.Lock()

    def add(self, values: Iterable[float]) -> list[float]:
        """Remember ``values``; returns the window's contents after adding them."""
        with self._lock:
            self._values.extend(values)
            return list(self._values)


_recent = RecentLatencies()


def latency_percentiles(results: Sequence[RewardResult], recent: RecentLatencies | None = None) -> dict[str, float]:
    """``{reward/latency_ms/p50: ms, /p90: ms, /p99: ms}`` for a call's results; empty when none was measured.

    Over the call's rollouts when it scored several, else over the process's recent rollouts (``recent``, by
    default the process's window). Results scored on a server carry no per-rollout time and add nothing.
    """
    measured = [r.latency_ms for r in results if r.latency_ms is not None]
    window = (recent or _recent).add(measured)
    values = measured if len(measured) > 1 else window if measured else []
    if not values:
        return {}
    return {key: percentile(values, q) for key, q in zip(PERCENTILE_KEYS, PERCENTILES, strict=True)}
