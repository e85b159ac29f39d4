"""A judge call whose caller went away stops: requests not yet sent are dropped, the one in flight is stopped."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from evalsi.evaluators import ScoreContext, get_evaluator
from evalsi.evaluators.judge import LLMJudgeParams
from evalsi.records import from_rollout
from tests.helpers.silent_upstream import silent_upstream

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def hung() -> Iterator[tuple[str, list[socket.socket]]]:
    with silent_upstream() as (base, accepted):
        yield base + "/v1", accepted


def test_a_cancelled_batch_drops_queued_requests_and_stops_the_one_in_flight(
    hung: tuple[str, list[socket.socket]],
) -> None:
    url, accepted = hung
    judge = get_evaluator("llm-judge")
    params = LLMJudgeParams.model_validate(
        {
            "judge": {
                "model": "m",
                "base_url": url,
                "timeout": 30,
                "retries": 0,
                "max_concurrency": 1,
                "api_key_env": None,
            }
        }
    )
    cancelled = threading.Event()

    def cancel_once_sent() -> None:  # the caller goes away once the first request reached the judge
        deadline = time.monotonic() + 60
        while not accepted and time.monotonic() < deadline:
            time.sleep(0.01)
        cancelled.set()

    threading.Thread(target=cancel_once_sent, daemon=True).start()
    records = [from_rollout({"completion": f"answer {n}"}) for n in range(4)]
    started = time.monotonic()
    try:
        scores = judge.score_batch(records, params, ScoreContext("judge", cancelled=cancelled))
    finally:
        judge.close()
    took = time.monotonic() - started
    assert [s.status for s in scores] == ["error"] * 4
    assert all("cancelled" in (s.reason or "") for s in scores)
    # The request in flight is stopped, not waited out: its 30 s attempt would hold the batch to the end.
    assert took < 20, f"a cancelled batch of 4 waited {took:.1f}s"
    assert len(accepted) == 1  # only the request in flight was sent
