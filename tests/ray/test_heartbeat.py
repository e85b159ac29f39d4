"""A process's heartbeat thread without Ray: one beat per limiter per round, only while it holds leases."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

from evalsi.ray._heartbeat import Heartbeat

BOUND = 60.0
"""Seconds a test waits for the thread (a busy machine)."""


class Beats:
    """Records every round the heartbeat sends and answers with the intervals it is told to."""

    def __init__(self, answer: Mapping[str, float]) -> None:
        self.answer = dict(answer)
        self.rounds: list[list[str]] = []
        self.sent = threading.Condition()

    def __call__(self, upstreams: Sequence[str]) -> Mapping[str, float]:
        with self.sent:
            self.rounds.append(list(upstreams))
            self.sent.notify_all()
        return {upstream: self.answer[upstream] for upstream in upstreams}

    def wait_rounds(self, count: int) -> list[list[str]]:
        with self.sent:
            assert self.sent.wait_for(lambda: len(self.rounds) >= count, timeout=BOUND), self.rounds
            return list(self.rounds)


def test_one_beat_per_held_upstream_each_round_not_one_per_lease() -> None:
    beats = Beats({"http://a:1": 0.01, "http://b:1": 0.01})
    heartbeat = Heartbeat(beats, {"http://a:1": 0.01, "http://b:1": 0.01})
    try:
        for _ in range(5):
            heartbeat.took("http://a:1")
        heartbeat.took("http://b:1")
        rounds = beats.wait_rounds(3)
        assert all(sorted(r) == ["http://a:1", "http://b:1"] for r in rounds[:3])
        heartbeat.gave("http://b:1")
        with beats.sent:  # the rounds after b is given back name only a
            seen = len(beats.rounds)
            assert beats.sent.wait_for(lambda: len(beats.rounds) >= seen + 2, timeout=BOUND)
            assert beats.rounds[-1] == ["http://a:1"]
    finally:
        heartbeat.close(timeout=BOUND)


def test_nothing_is_sent_while_nothing_is_held_and_the_beats_start_again_with_a_lease() -> None:
    beats = Beats({"http://a:1": 0.01})
    heartbeat = Heartbeat(beats, {"http://a:1": 0.01})
    try:
        heartbeat.took("http://a:1")
        beats.wait_rounds(1)
        heartbeat.gave("http://a:1")
        assert heartbeat.holding() == []
        with beats.sent:  # a round in flight when the lease went back may finish; then none in 50 intervals
            quiet = len(beats.rounds) + 1
            assert not beats.sent.wait_for(lambda: len(beats.rounds) > quiet, timeout=0.5)
        heartbeat.took("http://a:1")
        beats.wait_rounds(quiet + 1)
    finally:
        heartbeat.close(timeout=BOUND)
    assert heartbeat._thread is not None and not heartbeat._thread.is_alive()


def test_the_limiter_sets_the_interval_and_a_failed_round_is_tried_again() -> None:
    calls: list[float] = []
    done = threading.Event()

    def beat(upstreams: Sequence[str]) -> Mapping[str, float]:
        calls.append(len(calls))
        if len(calls) == 1:
            raise ConnectionError("limiter restarting")
        if len(calls) >= 3:
            done.set()
        return {"http://a:1": 0.01}  # the limiter asks for beats far more often than the gate started with

    heartbeat = Heartbeat(beat, {"http://a:1": 0.05})
    try:
        heartbeat.took("http://a:1")
        assert done.wait(BOUND)
        assert heartbeat._intervals["http://a:1"] == 0.01 and heartbeat.rounds >= 3
    finally:
        heartbeat.close(timeout=BOUND)
