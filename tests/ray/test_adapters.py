"""The Ray trainer adapters (``evalsi/ray/verl.py``, ``evalsi/ray/openrlhf.py``) answer as the in-process ones do.

Ray does not run in the core suite (its own nox session starts a cluster), so the adapters' pool here is a stand-in
that scores in this process with the same spec; what is checked is the adapters' own work: the rollouts they build,
the spec they look up, and the answer they give back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

import evalsi.ray.openrlhf
import evalsi.ray.verl
import evalsi.rewards.openrlhf
import evalsi.rewards.verl
from evalsi.errors import SpecError
from evalsi.records import Record
from evalsi.rewards import Reward, RewardResult, clear_shared, load
from tests.rewards.test_verl import SPEC

LATENCY = "reward/latency_ms"


class StandInPool:
    """Offers what the adapters use of a ``RewardPool``, scoring with ``reward`` in this process."""

    def __init__(self, reward: Reward) -> None:
        self.reward = reward
        self.spec = str(reward.source)
        self.component_names = reward.component_names
        self.rules = reward.rules
        self.calls: list[tuple[str, int]] = []

    def score(self, rollouts: Iterable[Mapping[str, Any]]) -> list[RewardResult]:
        batch = list(rollouts)
        self.calls.append(("score", len(batch)))
        return self.reward.score(batch)

    def score_records(self, records: Sequence[Record], *, eager: bool = True) -> list[RewardResult]:
        self.calls.append(("score_records" if eager else "score_records batched", len(records)))
        return self.reward.score_records(records)

    async def score_one(self, rollout: Mapping[str, Any]) -> RewardResult:
        self.calls.append(("score_one", 1))
        return self.reward.score([rollout])[0]


@pytest.fixture
def pool(tmp_path: Path) -> StandInPool:
    (tmp_path / "reward.yaml").write_text(yaml.safe_dump(SPEC))
    return StandInPool(load(tmp_path / "reward.yaml"))


@pytest.fixture
def pools(pool: StandInPool, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str, str]]]:
    """Every pool the adapters ask for, as (spec, pool name, trainer); each is ``pool``."""
    asked: list[tuple[str, str, str]] = []

    def shared_pool(spec: str, name: str, trainer: str, options: Mapping[str, Any]) -> StandInPool:
        asked.append((spec, name, trainer))
        return pool

    monkeypatch.setattr(evalsi.ray.verl, "shared_pool", shared_pool)
    monkeypatch.setattr(evalsi.ray.openrlhf, "shared_pool", shared_pool)
    clear_shared()
    yield asked
    clear_shared()


def without_latency(answer: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in answer.items() if not key.startswith(LATENCY)}


def test_verl_batch_on_the_pool_answers_as_in_process(pools: list[tuple[str, str, str]], pool: StandInPool) -> None:
    infos = [{"index": 0, "tests": ["4"]}, None, {"tests": ["it is 4"]}]
    columns: tuple[list[Any], ...] = (["gsm8k"] * 3, ["4", "5", "it is 4"], ["4", "4", None], infos)
    on_pool = evalsi.ray.verl.compute_score_batch(*columns, spec=pool.spec, pool="grpo")
    in_process = evalsi.rewards.verl.compute_score_batch(*columns, spec=pool.spec)
    assert [without_latency(d) for d in on_pool] == [without_latency(d) for d in in_process]
    assert [d["exact"] for d in on_pool] == [1.0, 0.0, 0.0]
    # extra_info reaches the rollout: its test cases are read, and a sample without any skips the component
    assert [(d["tests"], d["tests_skipped"]) for d in on_pool] == [(1.0, 0.0), (0.0, 1.0), (1.0, 0.0)]
    assert all(d[LATENCY] > 0.0 for d in on_pool)
    assert pools == [(pool.spec, "grpo", "verl")]
    assert pool.calls == [("score", 3)]  # the whole batch in one call


def test_verl_per_rollout_on_the_pool_answers_as_in_process(
    pools: list[tuple[str, str, str]], pool: StandInPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALSI_REWARD_SPEC", pool.spec)
    on_pool = asyncio.run(evalsi.ray.verl.compute_score("gsm8k", "4", "4", {"index": 3, "tests": ["5"]}))
    in_process = evalsi.rewards.verl.compute_score("gsm8k", "4", "4", {"index": 3, "tests": ["5"]})
    assert without_latency(on_pool) == without_latency(in_process)
    assert (on_pool["score"], on_pool["exact"], on_pool["tests"]) == (0.5, 1.0, 0.0)
    assert pools == [(pool.spec, evalsi.ray.verl.DEFAULT_POOL, "verl")]
    assert pool.calls == [("score_one", 1)]  # batched by the pool with other callers' rollouts


def test_verl_on_the_pool_names_a_misaligned_column(pools: list[tuple[str, str, str]], pool: StandInPool) -> None:
    with pytest.raises(ValueError, match="ground_truths has 1 items for 2 solution_strs"):
        evalsi.ray.verl.compute_score_batch(["a", "b"], ["4", "5"], ["4"], spec=pool.spec)


def test_verl_on_the_pool_needs_a_spec(pools: list[tuple[str, str, str]], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVALSI_REWARD_SPEC", raising=False)
    with pytest.raises(SpecError, match="no RewardSpec given"):
        asyncio.run(evalsi.ray.verl.compute_score("gsm8k", "4", "4"))
    assert pools == []


def test_openrlhf_on_the_pool_answers_as_in_process(
    pools: list[tuple[str, str, str]], pool: StandInPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALSI_REWARD_SPEC", pool.spec)
    monkeypatch.setenv("EVALSI_RAY_POOL", "rollouts")
    queries, prompts, labels = ["Q: 2+2? 4", "Q: 2+3? 5"], ["Q: 2+2? ", "Q: 2+3? "], ["4", "4"]
    on_pool = evalsi.ray.openrlhf.reward_func(queries, prompts, labels)
    in_process = evalsi.rewards.openrlhf.reward_func(queries, prompts, labels)
    assert on_pool["rewards"] == in_process["rewards"]
    assert without_latency(on_pool["extra_logs"]) == without_latency(in_process["extra_logs"])
    assert on_pool["extra_logs"]["exact"] == [1.0, 0.0]
    assert on_pool["extra_logs"][LATENCY][0] > 0.0
    assert pools == [(pool.spec, "rollouts", "OpenRLHF")]
    assert pool.calls == [("score_records batched", 2)]  # may wait to share a chunk with other threads' samples


def test_openrlhf_on_the_pool_needs_a_spec(pools: list[tuple[str, str, str]], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVALSI_REWARD_SPEC", raising=False)
    with pytest.raises(SpecError, match="EVALSI_REWARD_SPEC"):
        evalsi.ray.openrlhf.reward_func(["4"])
    assert pools == []
