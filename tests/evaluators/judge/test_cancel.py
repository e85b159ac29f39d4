"""A judge call whose caller went away stops waiting: requests not yet sent are dropped, not sent later."""

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


def test_requests_queued_behind_max_concurrency_are_dropped_once_cancelled(
    hung: tuple[str, list[socket.socket]],
) -> None:
    url, accepted = hung
    judge = get_evaluator("llm-judge")
    params = LLMJudgeParams.model_validate(
        {
            "judge": {
                "model": "m",
                "base_url": url,
                "timeout": 3,
                "retries": 0,
                "max_concurrency": 1,
                "api_key_env": None,
            }
        }
    )
    cancelled = threading.Event()
    threading.Timer(0.5, cancelled.set).start()
    records = [from_rollout({"completion": f"answer {n}"}) for n in range(4)]
    started = time.monotonic()
    try:
        scores = judge.score_batch(records, params, ScoreContext("judge", cancelled=cancelled))
    finally:
        judge.close()
    took = time.monotonic() - started
    assert [s.status for s in scores] == ["error"] * 4
    assert sum("cancelled" in (s.reason or "") for s in scores) == 3  # only the request in flight was sent
    assert took < 3 + 2, f"a cancelled batch of 4 waited {took:.1f}s (one 3 s attempt is the bound)"
    assert len(accepted) == 1
