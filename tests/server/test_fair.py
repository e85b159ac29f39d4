"""Fair shares of the server's pools, and the caps on a spec's upstream waits."""

from __future__ import annotations

import threading
import time

from evalsi.rewards import from_mapping
from evalsi.server._fair import FairPool, share_of
from evalsi.server.rewards._caps import Caps, capped


def test_one_project_cannot_take_every_worker_and_its_queue_is_fifo() -> None:
    pool = FairPool(4, share_of(4, 0.5), "test-fair")
    release = threading.Event()
    order: list[int] = []
    try:
        held = [pool.submit("slow", release.wait, 30) for _ in range(5)]
        queued = [pool.submit("slow", order.append, n) for n in range(3)]
        time.sleep(0.05)
        assert (pool.running("slow"), pool.queued("slow")) == (2, 6)
        started = time.monotonic()
        assert pool.submit("fast", lambda: "served").result(timeout=5) == "served"  # a free worker was left
        assert time.monotonic() - started < 1
        queued[1].cancel()  # dropped without running
        release.set()
        for future in [*held, queued[0], queued[2]]:
            future.result(timeout=5)  # type: ignore[attr-defined]
        assert order == [0, 2]
        assert (pool.running("slow"), pool.queued("slow")) == (0, 0)
    finally:
        release.set()
        pool.shutdown()


def test_share_is_at_least_one_worker() -> None:
    assert share_of(1, 0.5) == 1
    assert share_of(8, 0.5) == 4
    assert share_of(8, 1.0) == 8


def test_upstream_timeout_retries_and_backoff_are_clamped_to_the_caps() -> None:
    judge = {"model": "m", "base_url": "http://127.0.0.1:9/v1", "timeout": 900, "retries": 9, "backoff": 500}
    reward = from_mapping(
        {
            "components": [
                {"ref": "llm-judge", "judge": judge},
                {"ref": "llm-judge", "name": "modest", "judge": {**judge, "timeout": 2, "retries": 1, "backoff": 0.5}},
                {"ref": "exact-match"},
            ]
        }
    )
    bounded = capped(reward, Caps(timeout=10, retries=2))
    first, modest, exact = (c.params for c in bounded.components)
    assert (first.judge.timeout, first.judge.retries, first.judge.backoff) == (10, 2, 10)  # type: ignore[attr-defined]
    assert (modest.judge.timeout, modest.judge.retries, modest.judge.backoff) == (2, 1, 0.5)  # type: ignore[attr-defined]
    assert exact is reward.components[2].params
    assert bounded.components[0].job.key_prefix != reward.components[0].job.key_prefix
    assert capped(from_mapping({"components": [{"ref": "exact-match"}]}), Caps(10, 2)).components


def test_upstream_concurrency_and_a_records_own_timeout_are_clamped() -> None:
    judge = {"model": "m", "base_url": "http://127.0.0.1:9/v1", "max_concurrency": 1024}
    reward = from_mapping(
        {
            "components": [
                {"ref": "llm-judge", "judge": judge},
                {"ref": "llm-judge", "name": "few", "judge": {**judge, "max_concurrency": 2}},
                {"ref": "math-equiv", "params": {"timeout": 60}},
                {"ref": "math-equiv", "name": "quick", "params": {"timeout": 0.5}},
            ]
        }
    )
    bounded = capped(reward, Caps(timeout=10, retries=2, concurrency=16, record_timeout=3))
    many, few, slow, quick = (c.params for c in bounded.components)
    assert many.judge.max_concurrency == 16  # type: ignore[attr-defined]
    assert few.judge.max_concurrency == 2  # type: ignore[attr-defined]
    assert slow.timeout == 3  # type: ignore[attr-defined]
    assert quick.timeout == 0.5  # type: ignore[attr-defined]
    assert many.judge.timeout == 10  # type: ignore[attr-defined]  # the upstream cap, not the record one
