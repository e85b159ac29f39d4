"""A process's heartbeat to the limiters it holds leases of: one thread, one beat per limiter per round.

The gate counts the leases it holds per upstream (:meth:`Heartbeat.took`, :meth:`Heartbeat.gave`). While it holds
any, a daemon thread renews them: every round it sends one beat to each limiter it holds leases of (not one per
lease), then waits the shortest interval those limiters asked for. Holding nothing, the thread waits for a lease
and sends nothing, so an idle process costs its limiters no calls.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

Beat = Callable[[Sequence[str]], Mapping[str, float]]
"""Sends one beat to each named upstream's limiter; the seconds until each wants the next (those that answered)."""


class Heartbeat:
    """Renews a process's leases while it holds any.

    Args:
        beat: Sends the beats of one round (:data:`Beat`); an exception skips the round.
        intervals: Seconds between beats per upstream, until its limiter answers with its own.

    """

    def __init__(self, beat: Beat, intervals: Mapping[str, float]) -> None:
        self._beat = beat
        self._intervals = dict(intervals)
        self._held: Counter[str] = Counter()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.rounds = 0
        """Rounds sent so far."""

    def took(self, upstream: str) -> None:
        """Count a lease of ``upstream`` taken (starts the thread on the first one)."""
        with self._changed:
            self._held[upstream] += 1
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="evalsi-ray-heartbeat", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def gave(self, upstream: str) -> None:
        """Count a lease of ``upstream`` given back."""
        with self._changed:
            if self._held[upstream] > 0:
                self._held[upstream] -= 1
            self._changed.notify_all()

    def holding(self) -> list[str]:
        """The upstreams this process holds leases of now."""
        with self._changed:
            return sorted(upstream for upstream, count in self._held.items() if count > 0)

    def close(self, timeout: float | None = None) -> None:
        """Stop the thread (waiting up to ``timeout`` seconds for it); leases taken later are not renewed."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._closed or any(self._held.values()))
                if self._closed:
                    return
                held = [upstream for upstream, count in self._held.items() if count > 0]
                deadline = time.monotonic() + min(self._intervals[upstream] for upstream in held)
                while not self._closed and any(self._held.values()) and (left := deadline - time.monotonic()) > 0:
                    self._changed.wait(left)
                if self._closed:
                    return
                due = sorted(upstream for upstream, count in self._held.items() if count > 0)
            if due:
                self._send(due)

    def _send(self, upstreams: Sequence[str]) -> None:
        try:
            answers = self._beat(upstreams)
        except Exception:  # a limiter restarting or unreachable: the next round tries again
            answers = {}
        with self._changed:
            self._intervals.update({upstream: seconds for upstream, seconds in answers.items() if seconds > 0})
            self.rounds += 1
            self._changed.notify_all()
