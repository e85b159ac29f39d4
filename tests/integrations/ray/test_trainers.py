"""verl's reward loop and OpenRLHF's agent executor score through a RewardPool on the cluster (no HTTP hop).

verl: its own ``RewardLoopWorker`` runs as Ray actors, loads ``evalsi/ray/verl.py`` from the
``custom_reward_function`` config and awaits ``compute_score`` per rollout, as a training run does. OpenRLHF:
its ``SingleTurnAgentExecutor`` calls ``evalsi/ray/openrlhf.py``'s ``reward_func`` in a thread per sample.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import ray
import yaml
from omegaconf import OmegaConf
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

import evalsi.ray.openrlhf
import evalsi.ray.verl
import evalsi.rewards.verl
from evalsi.ray import RewardPool
from evalsi.rewards import clear_shared
from tests.integrations.openrlhf.test_agent_executor import SPEC as OPENRLHF_SPEC
from tests.integrations.openrlhf.test_agent_executor import as_float, execute
from tests.integrations.ray.conftest import Cluster
from tests.integrations.verl.test_reward_managers import SPEC as VERL_SPEC
from tests.integrations.verl.test_reward_managers import batch, tokenizer

RESPONSES = ["4", "5", "no 4", "4", "4", "no", "5", "4"]


def reward_loop_config(tokenizer_dir: Path, spec: Path) -> Any:
    return OmegaConf.create(
        {
            "actor_rollout_ref": {"model": {"path": str(tokenizer_dir), "tokenizer_path": str(tokenizer_dir)}},
            "reward": {
                "reward_model": {"enable": False},
                "reward_manager": {"source": "register", "name": "naive", "module": {"path": None, "name": None}},
                "custom_reward_function": {
                    "path": evalsi.ray.verl.__file__,
                    "name": "compute_score",
                    "reward_kwargs": {
                        "spec": str(spec),
                        "pool": "verl-test",
                        "num_workers": 2,
                        "num_cpus": 0.25,
                        "resources": {"evalsi_slot": 1},
                    },
                },
            },
        }
    )


def test_verl_reward_loop_workers_share_one_pool(cluster: Cluster, tmp_path: Path) -> None:
    spec = tmp_path / "reward.yaml"
    spec.write_text(yaml.safe_dump(VERL_SPEC))
    tok = tokenizer()
    tok.save_pretrained(tmp_path / "tokenizer")
    extras = [{"index": i} for i in range(len(RESPONSES))]
    data = batch(tok, RESPONSES, ["4"] * len(RESPONSES), extras)
    worker = ray.remote(RewardLoopWorker).options(num_cpus=0.1)
    workers = [worker.remote(reward_loop_config(tmp_path / "tokenizer", spec)) for _ in range(2)]
    halves = data.chunk(2)
    outputs = [
        o
        for part in ray.get([w.compute_score_batch.remote(h) for w, h in zip(workers, halves, strict=True)])
        for o in part
    ]
    clear_shared()
    expected = [
        evalsi.rewards.verl.compute_score(
            "openai/gsm8k", text, "4", {"index": i, "num_turns": None, "rollout_reward_scores": {}}, spec=str(spec)
        )
        for i, text in enumerate(RESPONSES)
    ]
    assert [o["reward_score"] for o in outputs] == [e["score"] for e in expected]
    # the same dicts, the reward vector and weights included; only the latency is the pool's own (the per-rollout
    # percentiles are measured in-process only)
    latency = "reward/latency_ms"
    assert [{k: v for k, v in o["reward_extra_info"].items() if not k.startswith(latency)} for o in outputs] == [
        {k: v for k, v in e.items() if not k.startswith(latency)} for e in expected
    ]
    assert all(o["reward_extra_info"][latency] > 0.0 for o in outputs)
    pool = RewardPool.attach("verl-test", spec)
    try:
        stats = pool.stats()
        assert len(stats["actors"]) == 2
        assert stats["rollouts"] == len(RESPONSES)  # every rollout of both reward workers went through the pool
        assert stats["chunks"] < len(RESPONSES)  # rollouts scored one at a time were batched
    finally:
        pool.shutdown()
        for w in workers:
            ray.kill(w)


@pytest.fixture
def openrlhf_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    path = tmp_path / "reward.yaml"
    path.write_text(yaml.safe_dump(OPENRLHF_SPEC))
    monkeypatch.setenv("EVALSI_REWARD_SPEC", str(path))
    monkeypatch.setenv("EVALSI_RAY_POOL", "openrlhf-test")
    yield path
    RewardPool.attach("openrlhf-test", path).shutdown()


def test_openrlhf_executor_scores_through_the_pool(cluster: Cluster, openrlhf_spec: Path) -> None:
    good = execute(evalsi.ray.openrlhf.__file__, "<answer> 4 </answer>", "<answer> 4 </answer>")
    assert as_float(good["reward"]) == pytest.approx(1.0)
    logs = {k: as_float(v) for k, v in good["extra_logs"].items()}
    assert logs.pop("reward/latency_ms") > 0.0
    weights = {f"reward_weight/{c['name']}": c["weight"] for c in OPENRLHF_SPEC["spec"]["components"]}
    assert logs == {
        "exact": 1.0,
        "format": 1.0,
        "exact_skipped": 0.0,
        "format_skipped": 0.0,
        "reward/exact": 1.0,
        "reward/format": 1.0,
        **weights,
    }
    wrong = execute(evalsi.ray.openrlhf.__file__, "<answer> 5 </answer>", "<answer> 4 </answer>")
    assert as_float(wrong["reward"]) == pytest.approx(0.25)
    assert RewardPool.attach("openrlhf-test", openrlhf_spec).stats()["rollouts"] == 2
