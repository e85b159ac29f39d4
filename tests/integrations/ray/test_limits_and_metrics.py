"""Limits per upstream shared by every actor of a cluster, and the pool's metrics through ray.util.metrics."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path
from typing import Any

import ray

from evalsi.ray import Limit, RewardPool
from evalsi.ray._limiter import limiter_name
from evalsi.ray._options import NAMESPACE
from tests.helpers.model_servers import OpenRLHFRewardServer
from tests.integrations.ray._util import wait_for
from tests.integrations.ray.conftest import Cluster


def rm_spec(url: str) -> dict[str, Any]:
    params = {"url": url + "/get_reward", "max_batch": 1, "max_concurrency": 8, "wait_ms": 0}
    return {"components": [{"ref": "reward-model", "name": "rm", "params": params}]}


def limiter_stats(url: str) -> dict[str, Any]:
    import httpx

    from evalsi._util.upstream import upstream_of

    handle = ray.get_actor(limiter_name(upstream_of(httpx.URL(url))), namespace=NAMESPACE)
    return dict(ray.get(handle.stats.remote()))


def test_actors_on_both_nodes_share_one_concurrency_limit(cluster: Cluster) -> None:
    with OpenRLHFRewardServer(delay=0.3) as server:
        spec = rm_spec(server.url)
        rollouts = [{"prompt": "p", "completion": f"answer {i}", "label": "x"} for i in range(48)]
        with RewardPool(
            spec,
            num_workers=4,
            num_cpus=0.25,
            resources={"evalsi_slot": 1},
            max_batch=12,
            limits={server.url: Limit(max_concurrency=3)},
            name="limited",
        ) as pool:
            results = pool.score(rollouts)
            stats = limiter_stats(server.url)
            assert len({a["node_id"] for a in pool.where()}) == 2
        assert [r.total for r in results] == [len(f"answer {i}") / 10 for i in range(48)]
        assert server.calls == 48  # one call per rollout (max_batch 1), each through the limiter
        assert 1 <= server.max_in_flight <= 3
        assert stats["granted"] == 48 and stats["most"] <= 3 and stats["held"] == 0


def test_a_rate_limit_spaces_the_requests_of_every_actor(cluster: Cluster) -> None:
    with OpenRLHFRewardServer() as server:
        spec = rm_spec(server.url)
        rollouts = [{"prompt": "p", "completion": f"rated {i}", "label": "x"} for i in range(10)]
        with RewardPool(
            spec,
            num_workers=2,
            num_cpus=0.25,
            resources={"evalsi_slot": 1},
            limits={server.url: {"max_concurrency": 64, "rate": 4.0}},
            name="rated",
        ) as pool:
            started = time.monotonic()
            pool.score(rollouts)
            elapsed = time.monotonic() - started
        assert server.calls == 10
        assert elapsed >= (10 - 1) / 4.0 * 0.95  # one burst token, then 4 a second across both actors


def test_pool_metrics_reach_the_metrics_agent(cluster: Cluster, tmp_path: Path) -> None:
    body = {"components": [{"ref": "exact-match", "name": "exact"}]}
    with RewardPool(body, num_workers=1, num_cpus=0.25, resources={"evalsi_head": 1}, name="metered") as pool:
        pool.score([{"completion": "4", "answer": "4"}] * 8)
        pool.score([{"completion": "4", "answer": "4"}])
        stats = pool.stats()
        assert stats["latency"]["p50"] is not None and stats["latency"]["p99"] >= stats["latency"]["p50"]
        assert stats["actors"][0]["p50"] is not None

        def exported() -> str | None:
            text = "".join(
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
                for port in cluster.metrics_ports
            )
            wanted = ("ray_evalsi_pool_rollouts", "ray_evalsi_reward_cache_hits", "ray_evalsi_pool_actor_chunk_seconds")
            return text if all(name in text for name in wanted) else None

        text = wait_for(exported, bound=180, what="the pool's metrics on the node's metrics endpoint")
        assert 'pool="metered"' in text
