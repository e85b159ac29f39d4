"""RewardPool on a real two-node Ray cluster: in-process results, the shared cache, faults and back-pressure."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
import ray

import evalsi.rewards
from evalsi.engine._keys import record_key
from evalsi.errors import DataError, RewardBatchError, SpecError
from evalsi.ray import RewardPool, RewardPoolStartError
from evalsi.rewards import read_rollout_file
from evalsi.rewards.vectors import Outcome, check_vectors
from evalsi.server._db import open_database
from evalsi.server.rewards._shared_cache import SharedScores
from tests.integrations.ray import probe
from tests.integrations.ray._util import EXAMPLES, PROBE_MODULE, dicts, probe_spec, wait_for
from tests.integrations.ray.conftest import Cluster, add_node, kill_node, node_ids

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def spread(cluster: Cluster) -> Any:
    """Two actors, one on each node (each node has two evalsi_slot, each actor takes both of one node's)."""
    pool = RewardPool(
        EXAMPLES / "math-reward.yaml",
        num_workers=2,
        num_cpus=0.25,
        resources={"evalsi_slot": 2},
        imports=[PROBE_MODULE],
        name="spread",
    )
    yield pool
    pool.shutdown()


def test_actors_spread_over_both_nodes(spread: RewardPool) -> None:
    nodes = node_ids(ray)
    assert sorted(a["node_id"] for a in spread.where()) == sorted(nodes.values())


@pytest.mark.parametrize(
    ("spec", "data"), [("math-reward.yaml", "math-rollouts.jsonl"), ("code-reward.yaml", "code-rollouts.jsonl")]
)
def test_results_equal_in_process_and_keep_input_order(spread: RewardPool, spec: str, data: str) -> None:
    rollouts, _ = read_rollout_file(EXAMPLES / data)
    batch = rollouts * 3  # repeats, as GRPO makes them
    local = evalsi.rewards.load(EXAMPLES / spec)
    pool = spread.with_spec(EXAMPLES / spec)
    assert dicts(pool.score(batch)) == dicts(local.score(batch))
    reversed_batch = list(reversed(batch))
    assert dicts(pool.score(reversed_batch)) == dicts(local.score(reversed_batch))


def test_reward_vectors_pass_through_the_pool(spread: RewardPool) -> None:
    def pool_scorer(body: dict[str, Any], batch: list[dict[str, Any]]) -> Outcome:
        try:
            pool = spread.with_spec(body)
        except SpecError as exc:
            return Outcome(spec_error_path=exc.path)
        try:
            results = pool.score(batch)
        except RewardBatchError as exc:
            return Outcome(raised=(exc.component, exc.index))
        return Outcome(results=[(r.total, r.status) for r in results])

    report = check_vectors(ROOT / "testdata" / "reward_vectors.json", pool_scorer)
    assert report.failures == []
    assert report.passed >= 50


def test_errors_name_the_rollout_as_in_process(spread: RewardPool) -> None:
    body = {"components": [{"ref": "field-score", "name": "a", "params": {"field": "s"}}]}
    batch = [{"completion": "", "s": {"status": "ok", "value": i / 40}} for i in range(40)]
    batch[27] = {"completion": "", "s": {"status": "error", "reason": "upstream down"}}
    pool = spread.with_spec(body)
    with pytest.raises(RewardBatchError) as remote:
        pool.score(batch)
    with pytest.raises(RewardBatchError) as local:
        evalsi.rewards.from_mapping(body).score(batch)
    assert (remote.value.index, remote.value.component, str(remote.value)) == (27, "a", str(local.value))
    broken: list[dict[str, Any]] = [*batch[:3], {"prompt": "no completion"}]
    with pytest.raises(DataError, match="rollout 3"):
        pool.score(broken)


def test_repeats_are_computed_once_across_the_cluster(spread: RewardPool, tmp_path: Path) -> None:
    log = tmp_path / "scored.log"
    pool = spread.with_spec(probe_spec(log))
    distinct = [f"answer-{i}" for i in range(16)]
    batch = [{"completion": text} for text in distinct for _ in range(8)]  # 8 samples per prompt, all equal
    results = pool.score(batch)
    assert [r.total for r in results] == [len(b["completion"]) / 10 for b in batch]
    assert sorted(text for _, text in probe.scored(log)) == sorted(distinct)
    assert len({pid for pid, _ in probe.scored(log)}) == 2  # both actors scored (the batch was split)
    pool.score(batch)  # a second step with the same rollouts: all from the cache
    assert len(probe.scored(log)) == len(distinct)


def test_one_actors_verdicts_reach_the_other(spread: RewardPool, tmp_path: Path) -> None:
    log = tmp_path / "scored.log"
    pool = spread.with_spec(probe_spec(log))
    before = {a["index"]: a.get("replicated", 0) for a in pool.stats()["actors"]}
    first = pool.score([{"completion": "shared"}])
    [(scorer, _)] = probe.scored(log)
    # the actor that scored it publishes the verdict after its reply; the coordinator keeps it in the shared tier
    # and forwards it to the other actor
    other = next(a["index"] for a in pool.stats()["actors"] if a["pid"] != scorer)
    wait_for(
        lambda: next(a for a in pool.stats()["actors"] if a["index"] == other).get("replicated", 0) > before[other],
        what="the verdict to reach the other actor",
    )
    # calls of two rollouts: one goes to each actor, which one follows the call's keys, so across these calls
    # "shared" is sent to both actors; neither computes it again
    for i in range(12):
        results = pool.score([{"completion": f"company-{i}"}, {"completion": "shared"}])
        assert dicts(results[1:]) == dicts(first)
    scored = probe.scored(log)
    assert [text for _, text in scored].count("shared") == 1
    assert len({pid for pid, text in scored if text.startswith("company-")}) == 2  # so "shared" went to both
    assert pool.stats()["cache"]["entries"] >= 1


def test_a_chunk_through_the_coordinator_finds_the_shared_tier(spread: RewardPool, tmp_path: Path) -> None:
    log = tmp_path / "scored.log"
    pool = spread.with_spec(probe_spec(log))
    entries = pool.stats()["cache"]["entries"]
    first = pool.score([{"completion": "tiered"}])
    wait_for(lambda: pool.stats()["cache"]["entries"] > entries, what="the verdict in the shared tier")
    hits = sum(a.get("shared_hits", 0) for a in pool.stats()["actors"])

    async def one_at_a_time() -> list[Any]:  # score_one goes through the coordinator, idle actors in turn
        return [await pool.score_one({"completion": "tiered"}) for _ in range(4)]

    assert [r.to_dict() for r in asyncio.run(one_at_a_time())] == dicts(first) * 4
    assert probe.scored(log) == [(probe.scored(log)[0][0], "tiered")]
    assert sum(a.get("shared_hits", 0) for a in pool.stats()["actors"]) > hits


def test_score_one_batches_rollouts_from_concurrent_callers(spread: RewardPool, tmp_path: Path) -> None:
    log = tmp_path / "scored.log"
    pool = spread.with_spec(probe_spec(log))
    before = pool.stats()["chunks"]

    async def score_all() -> list[Any]:
        return list(await asyncio.gather(*(pool.score_one({"completion": f"one-{i}"}) for i in range(48))))

    results = asyncio.run(score_all())
    assert [r.total for r in results] == [len(f"one-{i}") / 10 for i in range(48)]
    assert pool.stats()["chunks"] - before < 48  # gathered into chunks within the window


def test_placement_on_a_chosen_node_runs_the_sandbox_there(cluster: Cluster) -> None:
    rollouts, _ = read_rollout_file(EXAMPLES / "code-rollouts.jsonl")
    with RewardPool(
        EXAMPLES / "code-reward.yaml", num_workers=1, num_cpus=0.25, resources={"evalsi_node_b": 1}, name="node-b"
    ) as pool:
        assert {a["node_id"] for a in pool.where()} == {node_ids(ray)["evalsi_node_b"]}
        local = evalsi.rewards.load(EXAMPLES / "code-reward.yaml")
        assert dicts(pool.score(rollouts)) == dicts(local.score(rollouts))


def test_an_actor_killed_mid_batch_is_restarted_and_its_rollouts_scored_again(cluster: Cluster, tmp_path: Path) -> None:
    log, started = tmp_path / "scored.log", tmp_path / "started"
    spec = probe_spec(log, delay=0.05, started=str(started))
    batch = [{"completion": f"kill-{i:03d}"} for i in range(96)]
    with RewardPool(
        spec,
        num_workers=2,
        num_cpus=0.25,
        max_batch=16,
        imports=[PROBE_MODULE],
        name="faults",
    ) as pool:
        out: dict[str, Any] = {}
        worker = threading.Thread(target=lambda: out.setdefault("results", pool.score(batch)))
        worker.start()
        victim = int(wait_for(lambda: started.exists() and started.read_text(), what="a chunk to start"))
        os.kill(victim, signal.SIGKILL)
        worker.join(timeout=600)
        assert not worker.is_alive()
        assert [r.total for r in out["results"]] == [len(b["completion"]) / 10 for b in batch]
        stats = pool.stats()
        assert stats["retries"].get("actor_died", 0) >= 1
        assert stats["failed_rollouts"] == 0
        assert stats["rollouts"] == len(batch)  # each rollout answered once
        assert {text for _, text in probe.scored(log)} == {b["completion"] for b in batch}
        assert victim not in {a["pid"] for a in pool.where()}  # the killed actor was replaced


class Holder:
    """An actor that only holds the resources it was placed with (to steer where a pool's actors go)."""

    def ready(self) -> bool:
        return True


def test_a_node_lost_mid_batch_has_its_actors_recreated_on_a_survivor_and_its_rollouts_scored_again(
    cluster: Cluster, tmp_path: Path
) -> None:
    # a third node of this test's own (the session's two stay up): one evalsi_failover slot there, two on the
    # head, one of which a holder takes until the node is lost, so the pool's two actors go one to each node
    # and the lost node's actor has room on the head afterwards
    node = add_node(cluster, {"evalsi_failover": 1, "evalsi_lost": 1}, log="node-lost.log")
    holder = ray.remote(Holder).options(num_cpus=0, resources={"evalsi_failover": 1, "evalsi_head": 1}).remote()
    pool: RewardPool | None = None
    try:
        ray.get(holder.ready.remote(), timeout=300)
        log = tmp_path / "scored.log"
        batch = [{"completion": f"lost-{i:03d}"} for i in range(96)]
        pool = RewardPool(
            probe_spec(log, delay=0.1),
            num_workers=2,
            num_cpus=0,
            resources={"evalsi_failover": 1},
            max_batch=8,
            imports=[PROBE_MODULE],
            name="node-lost",
        )
        lost = next(n["NodeID"] for n in ray.nodes() if n.get("Alive") and "evalsi_lost" in n["Resources"])
        head = node_ids(ray)["evalsi_head"]
        before = pool.where()
        assert sorted(a["node_id"] for a in before) == sorted([head, lost])
        victim = next(a for a in before if a["node_id"] == lost)
        out: dict[str, Any] = {}
        worker = threading.Thread(target=lambda: out.setdefault("results", pool.score(batch)))
        worker.start()
        # the lost node's actor has a chunk in hand (the probe logs a chunk before it works through it)
        wait_for(lambda: victim["pid"] in {pid for pid, _ in probe.scored(log)}, what="the node's actor to score")
        ray.kill(holder)
        kill_node(node)
        worker.join(timeout=900)
        assert not worker.is_alive()
        assert [r.total for r in out["results"]] == [len(b["completion"]) / 10 for b in batch]
        stats = pool.stats()
        assert stats["retries"].get("actor_died", 0) >= 1
        assert stats["failed_rollouts"] == 0
        assert stats["rollouts"] == len(batch)  # each rollout answered once
        assert {text for _, text in probe.scored(log)} == {b["completion"] for b in batch}
        after = {a["index"]: a for a in pool.where()}
        assert after[victim["index"]]["node_id"] == head  # recreated on the surviving node
        assert after[victim["index"]]["pid"] != victim["pid"]
    finally:
        if pool is not None:
            pool.shutdown()
        ray.kill(holder)
        kill_node(node)


def test_a_hung_worker_never_stalls_the_other_actors(cluster: Cluster, tmp_path: Path) -> None:
    log = tmp_path / "scored.log"
    spec = probe_spec(log, hang_on="hang")
    with RewardPool(
        spec,
        num_workers=2,
        num_cpus=0.25,
        chunk_timeout=60,
        max_retries=2,
        imports=[PROBE_MODULE],
        name="hang",
    ) as pool:
        out: dict[str, Any] = {}
        hung = threading.Thread(target=lambda: out.setdefault("hung", pool.score([{"completion": "hang"}])))
        hung.start()
        wait_for(lambda: Path(str(log) + ".hung").exists(), what="the worker to hang")
        for i in range(5):  # the other actor keeps scoring while one hangs
            assert pool.score([{"completion": f"ok-{i}"}])[0].total == len(f"ok-{i}") / 10
        assert hung.is_alive()
        hung.join(timeout=600)
        assert out["hung"][0].total == 0.4
        assert pool.stats()["retries"] == {"timeout": 1}


def test_calls_wait_for_room_when_every_actor_is_busy(cluster: Cluster, tmp_path: Path) -> None:
    log = tmp_path / "scored.log"
    spec = probe_spec(log, delay=0.2)
    with RewardPool(
        spec, num_workers=1, num_cpus=0.25, max_queued=4, max_batch=2, imports=[PROBE_MODULE], name="pressure"
    ) as pool:
        batches = [[{"completion": f"p{c}-{i}"} for i in range(4)] for c in range(3)]

        async def score_all() -> list[Any]:
            return list(await asyncio.gather(*(pool.score_async(b) for b in batches)))

        out: dict[str, Any] = {}
        worker = threading.Thread(target=lambda: out.setdefault("results", asyncio.run(score_all())))
        worker.start()
        wait_for(lambda: pool.stats()["waiting"] > 0, what="calls waiting for room")
        worker.join(timeout=600)
        assert [[r.total for r in results] for results in out["results"]] == [
            [len(b["completion"]) / 10 for b in batch] for batch in batches
        ]
        stats = pool.stats()
        assert stats["max_admitted"] == 4
        assert stats["waiting"] == 0 and stats["admitted"] == 0


def test_a_pool_without_room_on_the_cluster_says_so(cluster: Cluster) -> None:
    spec = EXAMPLES / "math-reward.yaml"
    with pytest.raises(RewardPoolStartError, match=r"no room for 2 actors .*'evalsi_nowhere': 1"):
        RewardPool(
            spec, num_workers=2, num_cpus=0.25, resources={"evalsi_nowhere": 1}, start_timeout=20, name="nowhere"
        )
    RewardPool.attach("nowhere", spec).shutdown()


def test_the_servers_database_is_the_shared_cache_of_pools_and_server(cluster: Cluster, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'server.sqlite'}"
    engine = open_database(url)  # as the evalsi server creates its database
    log = tmp_path / "scored.log"
    spec = probe_spec(log)
    batch = [{"completion": f"db-{i}"} for i in range(8)]
    with RewardPool(spec, num_workers=1, num_cpus=0.25, cache=url, imports=[PROBE_MODULE], name="db-first") as pool:
        first = dicts(pool.score(batch))
    assert len(probe.scored(log)) == len(batch)
    # the server reads the pool's verdicts under the same content keys
    [job] = [component.job for component in evalsi.rewards.from_mapping(spec).components]
    records = evalsi.rewards.from_mapping(spec).records(batch)
    keys = [record_key(job.key_prefix, record, job.fields) for record in records]
    held = SharedScores(engine, ttl=3600).get_many(keys)
    assert {key: score.value for key, score in held.items()} == {
        key: len(b["completion"]) / 10 for key, b in zip(keys, batch, strict=True)
    }
    # a new pool (new actors, empty memory) finds them there: nothing is computed again
    with RewardPool(spec, num_workers=1, num_cpus=0.25, cache=url, imports=[PROBE_MODULE], name="db-second") as pool:
        assert dicts(pool.score(batch)) == first
    assert len(probe.scored(log)) == len(batch)


def test_a_batch_is_split_evenly_over_the_actors(spread: RewardPool, tmp_path: Path) -> None:
    log = tmp_path / "scored.log"
    pool = spread.with_spec(probe_spec(log))
    before = pool.stats()["chunks"]
    batch = [{"completion": f"even-{i}"} for i in range(64)]
    assert [r.total for r in pool.score(batch)] == [len(b["completion"]) / 10 for b in batch]
    assert pool.stats()["chunks"] - before == 2  # one chunk per actor, not 32, 16, 8, 4, 2, 1, 1
    by_actor: dict[int, int] = {}
    for pid, _ in probe.scored(log):
        by_actor[pid] = by_actor.get(pid, 0) + 1
    assert sorted(by_actor.values()) == [32, 32]


def _group_batch(tag: str) -> list[dict[str, Any]]:
    """Groups of 3, 5 and 7 rollouts with repeated completions, interleaved, some grouped by metadata.group_id."""
    rollouts: list[dict[str, Any]] = []
    for g, size in enumerate([3, 5, 7] * 4):
        for i in range(size):
            rollout: dict[str, Any] = {
                "prompt": f"{tag} prompt {g}",
                "completion": f"answer {i % 3}" if g % 2 else f"Answer  {i % 2}",
                "reference": "answer 0",
            }
            if g % 4 == 3:  # its group is its group_id, shared with the next prompt's rollouts
                rollout["metadata"] = {"group_id": f"{tag}-shared-{g // 4}"}
            rollouts.append(rollout)
    return [rollouts[(i * 7) % len(rollouts)] for i in range(len(rollouts))]  # 7 and 60 are coprime


GROUP_SPEC = {
    "components": [
        {"ref": "exact-match", "name": "exact", "weight": 1.0},
        {"ref": "group-diversity", "name": "diversity", "weight": 0.5},
        {"ref": "group-diversity", "name": "by-prompt", "weight": 0.25, "params": {"group_by": "prompt"}},
    ]
}


def test_a_group_level_spec_scores_each_group_whole_as_in_process(spread: RewardPool) -> None:
    local = evalsi.rewards.from_mapping(GROUP_SPEC)
    pool = spread.with_spec(GROUP_SPEC)
    first, second = _group_batch("a"), _group_batch("b")
    assert len(first) == 60
    assert dicts(pool.score(first)) == dicts(local.score(first))
    before = pool.stats()["chunks"]

    async def both() -> list[Any]:
        return list(await asyncio.gather(pool.score_async(first), pool.score_async(first + second)))

    # two concurrent calls sending the same prompts: each call's groups are its own, as in process
    together = asyncio.run(both())
    assert dicts(together[0]) == dicts(local.score(first))
    assert dicts(together[1]) == dicts(local.score(first + second))
    assert pool.stats()["chunks"] - before >= 3  # spread over chunks, none splitting a group


def test_shutdown_returns_once_the_actors_and_their_workers_are_gone(cluster: Cluster) -> None:
    pool = RewardPool(
        EXAMPLES / "math-reward.yaml", num_workers=2, num_cpus=0.25, resources={"evalsi_head": 1}, name="stopping"
    )
    rollouts, _ = read_rollout_file(EXAMPLES / "math-rollouts.jsonl")
    symbolic = [{"completion": "so \\boxed{\\frac{6}{4}}", "answer": "1.5"}]  # decided by the math workers
    where = pool.warm([*rollouts, *symbolic])
    actors = [info["pid"] for info in where]
    workers = [pid for info in where for pid in info["children"]]
    assert len(actors) == 2
    assert workers  # each actor's math-equiv worker template (its workers are its children)
    tree = _descendants(actors)
    assert set(workers) <= tree
    stopped = pool.shutdown(timeout=120)
    assert sorted(info["pid"] for info in stopped) == sorted(actors)
    assert all(info["dead"] for info in stopped)
    # gone when shutdown returns, not some time later: a pool started next has the CPUs to itself
    assert [pid for pid in tree if _running(pid)] == []
    with pytest.raises(ValueError):
        ray.get_actor("evalsi-pool-stopping", namespace="evalsi")


def _descendants(pids: list[int]) -> set[int]:
    """The processes ``pids`` and every process under them."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            parents.setdefault(ppid, []).append(int(entry.name))
    out: set[int] = set()
    todo = list(pids)
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(parents.get(pid, []))
    return out


def _running(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
