"""Per-rollout scoring time as the trainer adapters log it: ``reward/latency_ms/p50``, ``/p90`` and ``/p99``.

The engine measures what each rollout's components took (:attr:`RewardResult.latency_ms`); a trainer sees the
distribution, so one slow component on a few rollouts (a judge that times out, a program that loops until its
limit) shows as a high p99 while the median stays low. A call that scored several rollouts reports their
percentiles; a call of one rollout (verl's per-sample ``compute_score``, OpenRLHF called per sample) reports those
of the last :data:`WINDOW` rollouts this process scored, since the percentiles of one value say nothing.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import Any

from evalsi.rewards._batch import LATENCY_KEY
from evalsi.rewards._compose import RewardResult

PERCENTILES: tuple[int, ...] = (50, 90, 99)
"""The percentiles logged, as ``reward/latency_ms/p<q>``."""
PERCENTILE_KEYS: tuple[str, ...] = tuple(f"{LATENCY_KEY}/p{q}" for q in PERCENTILES)
CALL_KEYS: tuple[str, ...] = (LATENCY_KEY, *PERCENTILE_KEYS)
"""A one-rollout call's latency, then the window's percentiles (as :func:`window_percentiles` reads them)."""
WINDOW = 1024
"""How many recent rollouts the percentiles of a one-rollout call are taken over."""


def elapsed_ms(started: float) -> float:
    """Milliseconds since ``started``, a :func:`time.perf_counter` reading: how long a call's scoring took."""
    return (time.perf_counter() - started) * 1000.0


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile of non-empty ``values`` (one of the values, never interpolated)."""
    ordered = sorted(values)
    return ordered[_rank(len(ordered), q) - 1]


class RecentLatencies:
    """The per-rollout latencies of the last ``size`` rollouts scored, shared by a process's adapter calls.

    Per-sample trainers call once per rollout, and sorting the whole window three times per call cost more than
    scoring a cached rollout: while one-rollout calls read it, the window is kept sorted as it changes (one
    insertion and one removal per rollout) and the percentiles are read off by index. Calls of a whole batch only
    remember their rollouts (they report their own percentiles); the sorted copy is rebuilt once when a
    one-rollout call next reads the window. A NaN has no place in an order and is not kept.
    """

    def __init__(self, size: int = WINDOW) -> None:
        self._values: deque[float] = deque(maxlen=size)
        self._sorted: list[float] = []
        self._stale = False
        self._lock = threading.Lock()
        self._count = 0
        self._pick = _picker(1)
        self._ranked: tuple[float, ...] = ()

    def add(self, values: Iterable[float]) -> None:
        """Remember ``values`` (a batch's latencies, in milliseconds)."""
        with self._lock:
            self._values.extend(value for value in values if value == value)  # NaN != NaN
            self._stale = True

    def add_and_rank(self, values: Iterable[float]) -> tuple[float, ...]:
        """Remember ``values``; the window's :data:`PERCENTILES` (nearest rank) after adding them.

        Args:
            values: Latencies of the rollouts just scored, in milliseconds.

        Returns:
            One value of the window per percentile; empty while the window is.

        """
        with self._lock:
            return self._insert(values)

    def add_one(self, value: float) -> tuple[float, ...]:
        """:meth:`add_and_rank` for one rollout: the per-sample trainers' call, once per rollout.

        Once the window is full, a value equal to the one it replaces leaves the order as it was (cached scores
        all take 0.0 ms), so the percentiles read last time stand.

        Args:
            value: The latency of the rollout just scored, in milliseconds.

        Returns:
            One value of the window per percentile; empty while the window is.

        """
        with self._lock:
            arrived = self._values
            if self._stale or value != value or len(arrived) != arrived.maxlen or arrived[0] != value:
                return self._insert((value,))
            arrived.append(value)  # the oldest, equal, leaves: the sorted window is unchanged
            return self._ranked

    def _insert(self, values: Iterable[float]) -> tuple[float, ...]:
        """Add ``values`` to the window and its sorted copy; the percentiles after (the lock is held)."""
        arrived = self._values
        if self._stale:
            self._sorted = sorted(arrived)
            self._stale = False
        ordered = self._sorted
        for value in values:
            if value != value:  # NaN
                continue
            if len(arrived) == arrived.maxlen:  # the oldest leaves as this one arrives
                del ordered[bisect.bisect_left(ordered, arrived[0])]
            arrived.append(value)
            bisect.insort(ordered, value)
        if not ordered:
            self._ranked = ()
        else:
            if len(ordered) != self._count:  # the ranks change only while the window fills
                self._count = len(ordered)
                self._pick = _picker(self._count)
            self._ranked = self._pick(ordered)
        return self._ranked


def _picker(count: int) -> itemgetter[Any]:
    """Reads the :data:`PERCENTILES` (nearest rank) off an ascending list of ``count`` values."""
    return itemgetter(*(_rank(count, q) - 1 for q in PERCENTILES))


def _rank(count: int, q: float) -> int:
    """The 1-based nearest rank of the ``q``-th percentile among ``count`` values."""
    return max(1, math.ceil(q / 100.0 * count))


_recent = RecentLatencies()


def latency_percentiles(results: Sequence[RewardResult], recent: RecentLatencies | None = None) -> dict[str, float]:
    """``{reward/latency_ms/p50: ms, /p90: ms, /p99: ms}`` for a call's results; empty when none was measured.

    Over the call's rollouts when it scored several, else over the process's recent rollouts (``recent``, by
    default the process's window). Results scored on a server carry no per-rollout time and add nothing.
    """
    if len(results) == 1:  # a per-sample trainer's call: over the window
        return dict(zip(PERCENTILE_KEYS, window_percentiles(results[0], recent), strict=False))  # () when unmeasured
    measured = [r.latency_ms for r in results if r.latency_ms is not None]
    if not measured:
        return {}
    window = recent or _recent
    if len(measured) == 1:  # one rollout measured: over the window
        return dict(zip(PERCENTILE_KEYS, window.add_one(measured[0]), strict=False))
    window.add(measured)
    # a call of several rollouts: theirs, sorted once for the three percentiles
    return dict(zip(PERCENTILE_KEYS, _picker(len(measured))(sorted(measured)), strict=True))


def window_percentiles(result: RewardResult, recent: RecentLatencies | None = None) -> tuple[float, ...]:
    """The values of :data:`PERCENTILE_KEYS` over the recent rollouts, ``result``'s among them: a one-rollout call's.

    Args:
        result: The one rollout a call scored.
        recent: The window, by default the process's.

    Returns:
        One value per key; empty when the rollout was not measured (a server), or while the window holds nothing
        (its latency was NaN).

    """
    latency = result.latency_ms
    if latency is None:
        return ()
    return (recent or _recent).add_one(latency)


def call_keys(ranked: tuple[float, ...]) -> tuple[str, ...]:
    """The keys of ``(latency, *ranked)``: the call's latency, and the percentiles when the window had any.

    Args:
        ranked: What :func:`window_percentiles` read.

    """
    return CALL_KEYS if ranked else CALL_KEYS[:1]
