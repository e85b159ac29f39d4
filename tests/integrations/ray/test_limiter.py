"""The cluster-wide limiter: a killed holder's leases come back within its heartbeat bound, and limits change.

Each test limits an upstream of its own (a limiter actor is detached: it outlives the test) and kills that
limiter when done.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from evalsi._util.upstream import set_gate
from evalsi.ray import Limit, RayShards, RewardPool, limit_upstreams
from evalsi.ray._limiter import configure_limits, limiter_name
from evalsi.ray._options import NAMESPACE
from evalsi.ray._runs import target_limits
from evalsi.runs import Runner, run_from_mapping
from tests.helpers.model_servers import OpenRLHFRewardServer
from tests.helpers.openai_server import OpenAIServer
from tests.integrations.ray._util import wait_for
from tests.integrations.ray.conftest import Cluster
from tests.integrations.ray.test_limits_and_metrics import rm_spec
from tests.integrations.ray.test_runs import QUESTIONS, dataset
from tests.runs.conftest import run_spec

BOUND = 120.0
"""Seconds a test waits for leases to come back: generous on a busy machine, and far below the lease_timeout."""


class Holder:
    """A process (a Ray actor) that takes leases through its own gate and keeps them."""

    def __init__(self, upstream: str, limit: Limit) -> None:
        self.upstream = upstream
        self.gate = limit_upstreams({upstream: limit})

    def take(self, count: int) -> str:
        """Take ``count`` leases (never given back); this gate's holder name."""
        for _ in range(count):
            self.gate.acquire(self.upstream)
        return self.gate.holder

    def rounds(self) -> int:
        """Heartbeat rounds this process has sent."""
        return self.gate.heartbeat.rounds


def stats(upstream: str) -> dict[str, Any]:
    handle = ray.get_actor(limiter_name(upstream), namespace=NAMESPACE)
    return dict(ray.get(handle.stats.remote()))


def pid_of(holder: str) -> int:
    """The process id in a holder's name (``host:pid:id``)."""
    return int(holder.split(":")[1])


@pytest.fixture
def upstream(cluster: Cluster) -> Iterator[str]:
    """An upstream of this test's own; its limiter is killed after the test."""
    url = f"http://limited-{uuid.uuid4().hex[:8]}.invalid:80"
    yield url
    set_gate(None)
    with contextlib.suppress(ValueError):
        ray.kill(ray.get_actor(limiter_name(url), namespace=NAMESPACE), no_restart=True)


def test_a_killed_holders_leases_come_back_within_its_holder_timeout(upstream: str) -> None:
    limit = Limit(max_concurrency=6, holder_timeout=6.0)  # lease_timeout stays 600 s
    holder = ray.remote(Holder)
    doomed = holder.options(num_cpus=0, resources={"evalsi_node_b": 1}).remote(upstream, limit)
    alive = holder.options(num_cpus=0, resources={"evalsi_head": 1}).remote(upstream, limit)
    name = ray.get(doomed.take.remote(4))
    ray.get(alive.take.remote(2))
    assert stats(upstream)["held"] == 6
    os.kill(pid_of(name), signal.SIGKILL)
    killed = time.monotonic()
    handle = ray.get_actor(limiter_name(upstream), namespace=NAMESPACE)
    # four more leases: granted once the dead process's four are reclaimed (the live one keeps its two)
    ray.get([handle.acquire.remote("driver") for _ in range(4)], timeout=BOUND)
    waited = time.monotonic() - killed
    after = stats(upstream)
    assert after["reclaimed"] == 4 and after["held"] == 6 and name not in after["holders"]
    assert waited < BOUND < limit.lease_timeout
    assert waited >= limit.holder_timeout * 0.5  # not before the holder had missed its heartbeats
    # the live holder kept its leases past the holder timeout: its heartbeats renewed them
    assert ray.get(alive.rounds.remote()) >= 1
    ray.kill(alive, no_restart=True)


def test_a_lower_limit_configured_later_takes_effect_and_is_warned_of(
    upstream: str, caplog: pytest.LogCaptureFixture
) -> None:
    gate = limit_upstreams({upstream: Limit(max_concurrency=4)})
    leases = [gate.acquire(upstream) for _ in range(3)]
    with caplog.at_level(logging.WARNING, logger="evalsi.ray"):
        configure_limits({upstream: Limit(max_concurrency=2)})
    (warning,) = [r.getMessage() for r in caplog.records if "changes from" in r.getMessage()]
    assert upstream in warning and "max_concurrency=4" in warning and "max_concurrency=2" in warning
    assert stats(upstream)["max_concurrency"] == 2 and stats(upstream)["held"] == 3  # none revoked
    handle = ray.get_actor(limiter_name(upstream), namespace=NAMESPACE)
    pending = handle.acquire.remote("other")
    gate.release(upstream, leases[0])
    wait_for(lambda: stats(upstream)["held"] == 2, BOUND, "the release at the limiter")
    ready, _ = ray.wait([pending], timeout=2.0)
    assert not ready  # two held: at the new limit
    gate.release(upstream, leases[1])
    assert ray.get(pending, timeout=BOUND) > 0
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="evalsi.ray"):
        configure_limits({upstream: Limit(max_concurrency=2)})
    assert not [r for r in caplog.records if "changes from" in r.getMessage()]  # the same limit: no warning


def test_a_restarted_limiter_is_configured_again_by_the_heartbeats_of_its_holders(upstream: str) -> None:
    configure_limits({upstream: Limit(max_concurrency=8)})  # the limiter is created with 8
    holder = ray.remote(Holder).options(num_cpus=0, resources={"evalsi_node_b": 1})
    lowered = holder.remote(upstream, Limit(max_concurrency=2, holder_timeout=3.0))
    ray.get(lowered.take.remote(1))
    before = stats(upstream)
    assert before["max_concurrency"] == 2
    os.kill(before["pid"], signal.SIGKILL)  # Ray restarts it, with the arguments it was created with

    def configured_again() -> dict[str, Any] | None:
        try:
            now = stats(upstream)
        except ray.exceptions.RayActorError:  # still restarting
            return None
        return now if now["started"] != before["started"] and now["max_concurrency"] == 2 else None

    after = wait_for(configured_again, BOUND, "the restarted limiter configured with the holder's limit")
    assert after["pid"] != before["pid"]
    ray.kill(lowered, no_restart=True)


def test_two_live_pools_that_disagree_share_the_limit_configured_last(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    with OpenRLHFRewardServer(delay=0.2) as server:
        spec = rm_spec(server.url)
        rollouts = [{"prompt": "p", "completion": f"answer {i}", "label": "x"} for i in range(16)]
        options: dict[str, Any] = {"num_cpus": 0.25, "resources": {"evalsi_slot": 1}, "max_batch": 4}
        with RewardPool(
            spec, num_workers=2, limits={server.url: Limit(max_concurrency=3)}, name="wide", **options
        ) as wide:
            wide.score(rollouts)
            assert 2 <= server.max_in_flight <= 3
            with (
                caplog.at_level(logging.WARNING, logger="evalsi.ray"),
                RewardPool(
                    spec, num_workers=1, limits={server.url: Limit(max_concurrency=1)}, name="narrow", **options
                ),
            ):
                server.max_in_flight = 0
                wide.score([{**r, "completion": r["completion"] + "!"} for r in rollouts])
                assert server.max_in_flight == 1  # the first pool's actors now keep to the second pool's limit
        warnings = [r.getMessage() for r in caplog.records if "changes from" in r.getMessage()]
        assert len(warnings) == 1 and "max_concurrency=3" in warnings[0] and "max_concurrency=1" in warnings[0]
        ray.kill(ray.get_actor(limiter_name(_normal(server.url)), namespace=NAMESPACE), no_restart=True)


def test_a_killed_shards_target_leases_come_back_and_the_other_shard_finishes(cluster: Cluster, tmp_path: Path) -> None:
    with OpenAIServer(answers=QUESTIONS, default="?", delay=0.5) as server:
        body = run_spec(server, dataset(tmp_path), tmp_path / "out.json", batchSize=1, target={"maxConcurrency": 2})
        run = run_from_mapping(body)
        (url,) = target_limits(run.body.target)
        upstream = _normal(url)

        async def sharded() -> Any:
            task = asyncio.create_task(Runner(run, shards=RayShards(2, num_cpus=0.25)).run_async())
            # a shard holding a lease of the target mid-request
            holders = await asyncio.to_thread(
                wait_for, lambda: _holders(upstream), BOUND, "a shard holding a lease of the target"
            )
            os.kill(pid_of(holders[0]), signal.SIGKILL)
            return await asyncio.wait_for(task, BOUND * 2)

        outcome = asyncio.run(sharded())
        after = stats(upstream)
    assert outcome.verdict == "failed" and outcome.failed  # the killed shard's records
    assert after["reclaimed"] >= 1 and after["held"] == 0
    ray.kill(ray.get_actor(limiter_name(upstream), namespace=NAMESPACE), no_restart=True)


def _holders(upstream: str) -> list[str]:
    try:
        return list(stats(upstream)["holders"])
    except ValueError:  # the limiter has not started yet
        return []


def _normal(url: str) -> str:
    import httpx

    from evalsi._util.upstream import upstream_of

    return upstream_of(httpx.URL(url))
