"""The TRL adapter, called exactly as GRPOTrainer._calculate_rewards calls reward functions (all keywords)."""

from __future__ import annotations

import asyncio
import inspect
import pickle
import threading
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from evalsi.errors import DataError, RewardBatchError, SpecError
from evalsi.rewards import load
from evalsi.rewards.trl import reward_funcs
from tests.rewards._adapter_evaluators import CountingLength
from tests.rewards._servers import ServerThread, ServiceLog, reward_service_app

SPEC: dict[str, Any] = {
    "apiVersion": "evals.si/v1alpha1",
    "kind": "RewardSpec",
    "metadata": {"name": "grpo-test"},
    "spec": {
        "cache": {"enabled": False},  # so the counting evaluator sees every scoring the adapter asks for
        "components": [
            {"ref": "exact-match", "name": "exact", "weight": 1.0},
            {"ref": "test-adapters-length", "name": "length", "weight": 0.01},
            {"ref": "overlong-penalty", "name": "overlong", "params": {"max_length": 10, "buffer": 5}},
        ],
    },
}


class FakeTrainerState:
    global_step = 3


@pytest.fixture(autouse=True)
def _reset_counts() -> Iterator[None]:
    CountingLength.batches.clear()
    yield


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "reward.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    return path


def token_count(completion: Any) -> int:
    if isinstance(completion, list):
        return len(completion[-1]["content"])
    return len(str(completion))


def trl_kwargs(completions: list[Any], prompts: list[Any] | None = None, **columns: Any) -> dict[str, Any]:
    """The keywords TRL passes: prompts, completions, completion_ids, dataset columns, and its extras."""
    logged: list[tuple[str, Any]] = []
    return {
        "prompts": prompts if prompts is not None else ["What is 2+2?"] * len(completions),
        "completions": completions,
        "completion_ids": [list(range(token_count(c))) for c in completions],
        **columns,
        "trainer_state": FakeTrainerState(),
        "log_extra": lambda column, values: logged.append((column, values)),
        "log_metric": lambda name, value: logged.append((name, value)),
    }


def call_all(funcs: list[Any], kwargs: dict[str, Any]) -> list[list[float | None]]:
    return [f(**kwargs) for f in funcs]


def test_names_and_weights_follow_the_spec(spec_file: Path) -> None:
    funcs, weights = reward_funcs(spec_file)
    assert [f.__name__ for f in funcs] == ["grpo-test", "grpo-test/exact", "grpo-test/length", "grpo-test/overlong"]
    assert weights == [1.0, 0.0, 0.0, 0.0]
    assert not any(inspect.iscoroutinefunction(f) for f in funcs)


def test_standard_completions_total_and_components(spec_file: Path) -> None:
    funcs, _ = reward_funcs(spec_file)
    kwargs = trl_kwargs(["4", "five", "4444444444"], answer=["4", "4", None])
    total, exact, length, overlong = call_all(funcs, kwargs)
    assert exact == [1.0, 0.0, None]  # no reference: skipped -> None
    assert length == [1.0, 4.0, 10.0]
    # completion_ids reach the record as the token count: 1 and 4 tokens are within budget, 10 is at the max
    assert overlong == [0.0, 0.0, -1.0]
    assert total == pytest.approx([1.0 + 0.01, 0.04, 0.1 - 1.0])


def test_conversational_completions(spec_file: Path) -> None:
    funcs, _ = reward_funcs(spec_file)
    prompts = [[{"role": "user", "content": "2+2?"}]] * 2
    completions = [[{"role": "assistant", "content": "4"}], [{"role": "assistant", "content": "22"}]]
    total, exact, length, _ = call_all(funcs, trl_kwargs(completions, prompts, answer=["4", "4"]))
    assert exact == [1.0, 0.0]
    assert length == [1.0, 2.0]
    assert total[0] == pytest.approx(1.01)


def test_batch_is_scored_once_in_any_order(spec_file: Path) -> None:
    funcs, _ = reward_funcs(spec_file)
    first = trl_kwargs(["a", "bb", "a"], answer=["a", "a", "a"])
    call_all(funcs, first)
    assert CountingLength.batches == [2]  # one call; the repeated completion is de-duplicated by the engine
    second = trl_kwargs(["ccc", "dddd"], answer=["c", "d"])
    results = [f(**second) for f in reversed(funcs)]  # components first, total last
    assert CountingLength.batches == [2, 2]
    assert results[-1] == pytest.approx([0.03, 0.04])


def test_equal_batch_in_new_lists_reuses_the_result(spec_file: Path) -> None:
    funcs, _ = reward_funcs(spec_file)
    funcs[0](**trl_kwargs(["x", "y"], answer=["x", "x"]))
    funcs[1](**trl_kwargs(["x", "y"], answer=["x", "x"]))  # equal content, fresh list objects
    assert CountingLength.batches == [2]
    funcs[1](**trl_kwargs(["x", "y"], answer=["y", "y"]))  # a different column is a different batch
    assert CountingLength.batches == [2, 2]


def test_concurrent_threads_share_one_scoring(spec_file: Path) -> None:
    funcs, _ = reward_funcs(spec_file)
    kwargs = trl_kwargs(["p", "qq", "rrr"], answer=["p", "p", "p"])
    out: dict[str, list[float | None]] = {}
    threads = [threading.Thread(target=lambda f=f: out.__setitem__(f.__name__, f(**kwargs))) for f in funcs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert CountingLength.batches == [3]
    assert out["grpo-test/length"] == [1.0, 2.0, 3.0]


def test_async_variant_runs_concurrently_and_scores_once(spec_file: Path) -> None:
    funcs, weights = reward_funcs(spec_file, asynchronous=True)
    assert all(inspect.iscoroutinefunction(f) for f in funcs)
    assert weights == [1.0, 0.0, 0.0, 0.0]
    kwargs = trl_kwargs(["4", "five"], answer=["4", "4"])

    async def gather() -> list[list[float | None]]:
        return list(await asyncio.gather(*(cast(Awaitable[list[float | None]], f(**kwargs)) for f in funcs)))

    async_results = asyncio.run(gather())
    assert CountingLength.batches == [2]
    sync_funcs, _ = reward_funcs(spec_file)
    assert async_results == call_all(sync_funcs, kwargs)


def test_on_error_none_leaves_the_whole_row_unscored(tmp_path: Path) -> None:
    spec = {
        "components": [
            {"ref": "test-adapters-flaky", "name": "flaky", "onError": "none"},
            {"ref": "exact-match", "name": "exact"},
        ]
    }
    funcs, _ = reward_funcs(spec)
    total, flaky, exact = call_all(funcs, trl_kwargs(["ok", "boom"], answer=["ok", "boom"]))
    assert total == [2.0, None]
    assert flaky == [1.0, None]
    # TRL sums weight-0 components with nansum: a row with no total reports None everywhere, so TRL marks it
    # unscorable instead of training on a reward of 0.
    assert exact == [1.0, None]


def test_on_error_raise_fails_every_function_and_is_retried() -> None:
    spec = {
        "cache": {"enabled": False},
        "components": [
            {"ref": "test-adapters-flaky", "name": "flaky"},
            {"ref": "test-adapters-length", "name": "length"},
        ],
    }
    funcs, _ = reward_funcs(spec)
    kwargs = trl_kwargs(["fine", "boom"])
    for func in funcs:
        with pytest.raises(RewardBatchError, match="rollout 1: component 'flaky'"):
            func(**kwargs)
    # a failed batch is not remembered: each call scored it again
    assert len(CountingLength.batches) == len(funcs)


def test_bad_completion_names_the_rollout(spec_file: Path) -> None:
    funcs, _ = reward_funcs(spec_file)
    with pytest.raises(DataError, match="rollout 1"):
        funcs[0](**trl_kwargs(["fine", 42], answer=["a", "b"]))


def test_non_list_and_misaligned_extras_are_ignored(spec_file: Path) -> None:
    funcs, _ = reward_funcs(spec_file)
    kwargs = trl_kwargs(["4"], answer=["4"], environments=[object()], learning_rate=0.1, other=[1, 2, 3])
    assert funcs[1](**kwargs) == [1.0]


def test_invalid_spec_fails_at_construction(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**SPEC, "spec": {"components": [{"ref": "exact-match", "weight": "x"}]}}))
    with pytest.raises(SpecError, match=r"bad\.yaml:\d+: spec\.components\[0\]\.weight"):
        reward_funcs(path)


def test_a_loaded_reward_is_a_trl_reward_function(spec_file: Path) -> None:
    reward: Any = load(spec_file)
    assert reward.__name__ == "grpo-test"
    totals = reward(**trl_kwargs(["4", "five"], answer=["4", "4"]))
    funcs, _ = reward_funcs(spec_file)
    assert totals == funcs[0](**trl_kwargs(["4", "five"], answer=["4", "4"]))


def test_a_loaded_reward_can_be_passed_to_reward_funcs(spec_file: Path) -> None:
    reward = load(spec_file)
    funcs, _ = reward_funcs(reward)
    assert funcs[2](**trl_kwargs(["abc"], answer=["abc"])) == [3.0]


def test_remote_scoring_sends_one_request_per_batch(spec_file: Path) -> None:
    log = ServiceLog()
    with ServerThread(reward_service_app(log)) as server:
        remote, weights = reward_funcs(spec_file, server=server.url)
        local, _ = reward_funcs(spec_file)
        kwargs = trl_kwargs(["4", "five", "4444444444"], answer=["4", "4", None], tests=[[1], [2], [3]])
        remote_values = [f(**kwargs) for f in reversed(remote)]
        assert len(log.requests) == 1
        assert list(reversed(remote_values)) == call_all(local, kwargs)
        assert [f.__name__ for f in remote] == [f.__name__ for f in local]
        assert weights == [1.0, 0.0, 0.0, 0.0]
        # dataset columns travel with the rollouts; TRL's extras do not
        sent = log.requests[0]["rollouts"][0]
        assert sent["tests"] == [1] and "trainer_state" not in sent and sent["answer"] == "4"


def test_functions_pickle_together_and_keep_sharing_one_scoring(spec_file: Path) -> None:
    # TRL's async GRPO trainer spawns its rollout worker and pickles reward_funcs over
    for spec in (spec_file, load(spec_file), SPEC):
        funcs, _ = reward_funcs(spec)
        copies = pickle.loads(pickle.dumps(funcs))
        assert [f.__name__ for f in copies] == [f.__name__ for f in funcs]
        CountingLength.batches.clear()
        kwargs = trl_kwargs(["4", "five"], answer=["4", "4"])
        assert call_all(copies, kwargs) == call_all(funcs, kwargs)
        assert CountingLength.batches == [2, 2]  # once for the copies, once for the originals


def test_remote_functions_pickle_with_their_server(spec_file: Path) -> None:
    log = ServiceLog()
    with ServerThread(reward_service_app(log)) as server:
        copies = pickle.loads(pickle.dumps(reward_funcs(spec_file, server=server.url)[0]))
        call_all(copies, trl_kwargs(["4"], answer=["4"]))
    assert len(log.requests) == 1
    assert log.requests[0]["spec"]["metadata"]["name"] == "grpo-test"
