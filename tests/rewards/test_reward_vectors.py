"""The reward vector (each component as it counts in the total, with its weight) and the scoring latency, as the
TRL, verl and OpenRLHF adapters hand them to trainers that normalise each component within its group."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

import evalsi.rewards.openrlhf
import evalsi.rewards.verl
from evalsi.rewards._scorer import clear_shared
from evalsi.rewards.trl import reward_funcs
from tests.rewards import _adapter_evaluators  # noqa: F401  (registers the test evaluators)

# exact is a gate; flaky errors on "boom" and counts it as 0; in-tests is skipped without tests
SPEC: dict[str, Any] = {
    "apiVersion": "evals.si/v1alpha1",
    "kind": "RewardSpec",
    "metadata": {"name": "vec"},
    "spec": {
        "floor": -1.0,
        "components": [
            {"ref": "contains", "name": "answer", "weight": 2.0, "gate": True},
            {"ref": "test-adapters-flaky", "name": "flaky", "weight": 0.5, "onError": "zero"},
            {"ref": "test-adapters-in-tests", "name": "tests", "weight": 0.25},
        ],
    },
}


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    clear_shared()
    yield
    clear_shared()


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "reward.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    return path


# rollouts: passes everything; errors in flaky (counted 0) with tests skipped; fails the gate
COMPLETIONS = ["42", "42 boom", "41"]
REFERENCES = ["42", "42", "42"]
TESTS: list[Any] = [["42"], None, ["41"]]


def test_verl_dicts_carry_the_vector_and_weights(spec_file: Path) -> None:
    out = evalsi.rewards.verl.compute_score_batch(
        ["d"] * 3, COMPLETIONS, REFERENCES, [{"tests": t} for t in TESTS], spec=str(spec_file)
    )
    assert [o["score"] for o in out] == [2.75, 2.0, -1.0]
    # the gated rollout reads 0.0 in every component; the raw values stay beside them for logging
    assert [[o[f"reward/{c}"] for c in ("answer", "flaky", "tests")] for o in out] == [
        [1.0, 1.0, 1.0],
        [1.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
    ]
    assert out[2]["tests"] == 1.0 and out[2]["flaky"] == 1.0
    for item in out:
        assert {k: v for k, v in item.items() if k.startswith("reward_weight/")} == {
            "reward_weight/answer": 2.0,
            "reward_weight/flaky": 0.5,
            "reward_weight/tests": 0.25,
        }
    # weights × vector is the total wherever no gate failed
    for item in out[:2]:
        total = sum(item[f"reward_weight/{c}"] * item[f"reward/{c}"] for c in ("answer", "flaky", "tests"))
        assert total == pytest.approx(item["score"])


def test_verl_reports_the_latency_of_each_call(spec_file: Path) -> None:
    single = evalsi.rewards.verl.compute_score("d", "42", "42", {"tests": ["42"]}, spec=str(spec_file))
    assert single["reward/latency_ms"] > 0.0
    assert 0.0 < single["reward/latency_ms/p50"] <= single["reward/latency_ms/p99"]
    batch = evalsi.rewards.verl.compute_score_batch(["d"] * 2, ["1", "2"], ["1", "1"], None, spec=str(spec_file))
    # every rollout of a batch waited for the whole batch
    assert batch[0]["reward/latency_ms"] == batch[1]["reward/latency_ms"] > 0.0


def test_openrlhf_extra_logs_carry_the_vector_weights_and_latency(
    spec_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALSI_REWARD_SPEC", str(spec_file))
    out = evalsi.rewards.openrlhf.reward_func(["Q: 42", "Q: 42 boom", "Q: 41"], ["Q: "] * 3, REFERENCES)
    logs = out["extra_logs"]
    assert out["rewards"] == [2.5, 2.0, -1.0]  # no tests column in OpenRLHF: skipped, adds nothing
    assert logs["reward/answer"] == [1.0, 1.0, 0.0]
    assert logs["reward/flaky"] == [1.0, 0.0, 0.0]
    assert logs["reward/tests"] == [0.0, 0.0, 0.0]
    assert logs["reward_weight/answer"] == [2.0] * 3 and logs["reward_weight/tests"] == [0.25] * 3
    assert len(logs["reward/latency_ms"]) == 3 and all(v > 0.0 for v in logs["reward/latency_ms"])
    assert all(len(logs[f"reward/latency_ms/p{q}"]) == 3 for q in (50, 90, 99))


def trl_kwargs(logged: list[tuple[str, float]]) -> dict[str, Any]:
    return {
        "prompts": ["p"] * 3,
        "completions": COMPLETIONS,
        "completion_ids": [[1]] * 3,
        "reference": REFERENCES,
        "tests": TESTS,
        "log_metric": lambda name, value: logged.append((name, value)),
    }


def test_trl_vector_functions_use_the_spec_weights(spec_file: Path) -> None:
    funcs, weights = reward_funcs(spec_file, vector=True)
    assert [f.__name__ for f in funcs] == ["vec/answer", "vec/flaky", "vec/tests"]
    assert weights == [2.0, 0.5, 0.25]
    logged: list[tuple[str, float]] = []
    values = [f(**trl_kwargs(logged)) for f in funcs]
    # one list per component: the skipped tests component is None (left out of its group), the gated rollout 0.0
    assert values == [[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, None, 0.0]]


def test_trl_vector_leaves_a_row_without_total_unscored(tmp_path: Path) -> None:
    spec = {**SPEC, "spec": {"components": [{"ref": "test-adapters-flaky", "name": "f", "onError": "none"}]}}
    path = tmp_path / "none.yaml"
    path.write_text(yaml.safe_dump(spec))
    funcs, _ = reward_funcs(path, vector=True)
    assert funcs[0](prompts=["p", "p"], completions=["ok", "boom"]) == [1.0, None]


def test_trl_logs_the_latency_once_per_batch(spec_file: Path) -> None:
    funcs, _ = reward_funcs(spec_file)
    logged: list[tuple[str, float]] = []
    kwargs = trl_kwargs(logged)
    for f in funcs:
        f(**kwargs)
    names = [name for name, _ in logged]
    assert names == [
        "reward/latency_ms",
        "reward/latency_ms_per_rollout",
        "reward/latency_ms/p50",
        "reward/latency_ms/p90",
        "reward/latency_ms/p99",
    ]
    total, per_rollout, p50, p90, p99 = (value for _, value in logged)
    assert total > 0.0 and per_rollout == pytest.approx(total / 3)
    assert 0.0 < p50 <= p90 <= p99 <= total  # each rollout's own time is part of the batch's


def test_trl_async_functions_log_the_latency_too(spec_file: Path) -> None:
    funcs, _ = reward_funcs(spec_file, asynchronous=True, vector=True)
    logged: list[tuple[str, float]] = []
    kwargs = trl_kwargs(logged)

    assert all(inspect.iscoroutinefunction(f) for f in funcs)

    async def run() -> list[list[float | None]]:
        return list(await asyncio.gather(*(cast(Awaitable[list[float | None]], f(**kwargs)) for f in funcs)))

    values = asyncio.run(run())
    assert values[0] == [1.0, 1.0, 0.0]
    assert [name for name, _ in logged] == [
        "reward/latency_ms",
        "reward/latency_ms_per_rollout",
        "reward/latency_ms/p50",
        "reward/latency_ms/p90",
        "reward/latency_ms/p99",
    ]
