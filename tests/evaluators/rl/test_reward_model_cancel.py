"""A reward-model call whose caller went away stops waiting, and rollouts not yet sent are never sent."""

from __future__ import annotations

import threading
import time

import pytest

from evalsi.evaluators import ScoreContext, get_evaluator
from evalsi.records import from_rollout
from tests.helpers.silent_upstream import silent_upstream

pytestmark = pytest.mark.timeout(60)


def test_a_cancelled_batch_stops_waiting_and_drops_what_was_not_sent() -> None:
    evaluator = get_evaluator("reward-model")
    with silent_upstream() as (base, accepted):
        params = evaluator.parse_params(
            {
                "url": base + "/get_reward",
                "timeout": 5,
                "retries": 0,
                "max_batch": 1,
                "max_concurrency": 1,
                "wait_ms": 0,
            }
        )
        cancelled = threading.Event()
        threading.Timer(0.5, cancelled.set).start()
        records = [from_rollout({"prompt": "q", "completion": f"answer {n}"}) for n in range(4)]
        started = time.monotonic()
        try:
            scores = evaluator.score_batch(records, params, ScoreContext("rm", cancelled=cancelled))
            took = time.monotonic() - started
            time.sleep(6)  # the call in flight times out; the dropped rollouts must not follow it
            connections = len(accepted)
        finally:
            evaluator.close()
    assert took < 2, f"the cancelled batch kept its caller {took:.1f}s"
    assert [s.status for s in scores] == ["error"] * 4
    assert sum("cancelled" in (s.reason or "") for s in scores) == 4
    assert connections == 1
