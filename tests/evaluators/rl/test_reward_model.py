"""reward-model against loopback servers speaking OpenRLHF's protocol and vLLM's /pooling over real HTTP."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

import evalsi.evaluators.rl.reward_model as rm_module
import evalsi.rewards
from evalsi.errors import RewardBatchError, SpecError
from evalsi.evaluators import Score, ScoreContext, get_evaluator
from evalsi.evaluators.rl.reward_model import RewardModel, RewardModelParams
from evalsi.records import Record, from_rollout
from tests.helpers.model_servers import OpenRLHFRewardServer, PoolingServer, default_rm_score

pytestmark = pytest.mark.timeout(60)
CTX = ScoreContext(component="rm")


@pytest.fixture
def rm() -> Iterator[RewardModel]:
    evaluator = get_evaluator("reward-model")
    assert isinstance(evaluator, rm_module.RewardModel)
    yield evaluator
    evaluator.close()


@pytest.fixture
def openrlhf() -> Iterator[OpenRLHFRewardServer]:
    with OpenRLHFRewardServer() as server:
        yield server


@pytest.fixture
def pooling() -> Iterator[PoolingServer]:
    with PoolingServer() as server:
        yield server


def params(url: str, **extra: Any) -> RewardModelParams:
    return RewardModelParams.model_validate({"url": url, "backoff": 0.0, **extra})


def records(n: int, prefix: str = "c") -> list[Record]:
    return [from_rollout({"prompt": f"Q{i}: ", "completion": f"{prefix}{'x' * i}", "answer": "xx"}) for i in range(n)]


# --- OpenRLHF ---------------------------------------------------------------------------------------------------


def test_openrlhf_sends_query_prompt_label_and_reads_rewards(rm: RewardModel, openrlhf: OpenRLHFRewardServer) -> None:
    recs = [
        from_rollout({"prompt": "What is 2+2? ", "completion": "4", "answer": "4"}),
        from_rollout({"prompt": "Say hi. ", "completion": "hello there"}),
    ]
    scores = rm.score_batch(recs, params(openrlhf.url + "/get_reward"), CTX)
    assert openrlhf.requests == [
        {
            "query": ["What is 2+2? 4", "Say hi. hello there"],
            "prompts": ["What is 2+2? ", "Say hi. "],
            "labels": ["4", ""],
        }
    ]
    assert openrlhf.paths == ["/get_reward"]
    assert [s.status for s in scores] == ["ok", "ok"]
    assert [s.value for s in scores] == [pytest.approx(1.1), pytest.approx(1.1)]
    assert scores[0].details == {"raw": pytest.approx(1.1)}


def test_one_batch_is_split_into_max_batch_calls(rm: RewardModel, openrlhf: OpenRLHFRewardServer) -> None:
    recs = records(100)
    scores = rm.score_batch(recs, params(openrlhf.url, max_batch=32, wait_ms=50), CTX)
    assert sorted(openrlhf.batch_sizes) == [4, 32, 32, 32]
    expected = [default_rm_score(r.prompt_text + r.completion_text, r.prompt_text, "xx") for r in recs]
    assert [s.value for s in scores] == pytest.approx(expected)
    assert rm.calls(params(openrlhf.url, max_batch=32, wait_ms=50)) == 4


def test_concurrent_batches_from_threads_share_calls(rm: RewardModel, openrlhf: OpenRLHFRewardServer) -> None:
    p = params(openrlhf.url, max_batch=64, wait_ms=400)
    start = threading.Barrier(8)
    results: dict[int, list[Score]] = {}

    def worker(t: int) -> None:
        start.wait()
        results[t] = rm.score_batch(records(5, prefix=f"t{t}-"), p, CTX)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sum(openrlhf.batch_sizes) == 40
    assert openrlhf.calls < 8, openrlhf.batch_sizes  # eight batches of five were merged
    assert max(openrlhf.batch_sizes) > 5
    for t, scores in results.items():  # every thread got its own rollouts' scores back, in order
        expected = [len(f"t{t}-" + "x" * i) / 10 + (1.0 if i >= 2 else 0.0) for i in range(5)]
        assert [s.value for s in scores] == pytest.approx(expected)


def test_while_every_slot_is_busy_rollouts_gather_into_one_call(rm: RewardModel) -> None:
    with OpenRLHFRewardServer(delay=1.0) as server:
        p = params(server.url, max_concurrency=1, wait_ms=0, max_batch=64)
        first = threading.Thread(target=rm.score_batch, args=(records(1, prefix="first"), p, CTX))
        first.start()
        while server.calls == 0:  # the only slot is now taken by the first call
            threading.Event().wait(0.01)
        later = [threading.Thread(target=rm.score_batch, args=(records(1, prefix=f"t{t}"), p, CTX)) for t in range(10)]
        for thread in later:
            thread.start()
        for thread in [first, *later]:
            thread.join(30)
        assert server.batch_sizes == [1, 10]


def test_two_rewards_scoring_at_once_share_calls(openrlhf: OpenRLHFRewardServer) -> None:
    component = {"ref": "reward-model", "params": {"url": openrlhf.url, "wait_ms": 400, "max_batch": 64}}
    first = evalsi.rewards.from_mapping({"components": [component], "cache": {"enabled": False}})
    second = evalsi.rewards.from_mapping({"components": [component], "cache": {"enabled": False}})
    start = threading.Barrier(2)
    totals: dict[str, list[float | None]] = {}

    def run(name: str, reward: evalsi.rewards.Reward) -> None:
        start.wait()
        totals[name] = [r.total for r in reward.score([{"prompt": "p", "completion": f"{name}{i}"} for i in range(3)])]

    threads = [threading.Thread(target=run, args=(n, r)) for n, r in (("a", first), ("bb", second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    get_evaluator("reward-model").close()
    assert openrlhf.batch_sizes == [6]
    assert totals == {"a": pytest.approx([0.2] * 3), "bb": pytest.approx([0.3] * 3)}


def test_cached_repeats_cost_no_call(openrlhf: OpenRLHFRewardServer) -> None:
    reward = evalsi.rewards.from_mapping({"components": [{"ref": "reward-model", "params": {"url": openrlhf.url}}]})
    rollouts = [{"prompt": "p", "completion": "same"}] * 4 + [{"prompt": "p", "completion": "other"}]
    first = reward.score(rollouts)
    again = reward.score(rollouts)
    get_evaluator("reward-model").close()
    assert openrlhf.batch_sizes == [2]  # the repeats within the batch and the whole second batch came from the cache
    assert [r.total for r in first] == [r.total for r in again] == pytest.approx([0.4] * 4 + [0.5])


# --- retries and failures ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 500, 503])
def test_retryable_statuses_are_retried(rm: RewardModel, openrlhf: OpenRLHFRewardServer, status: int) -> None:
    openrlhf.inject(status=status, times=2)
    scores = rm.score_batch(records(3), params(openrlhf.url, retries=2), CTX)
    assert [s.status for s in scores] == ["ok"] * 3
    assert openrlhf.statuses == [status, status, 200]


def test_a_timeout_is_retried(rm: RewardModel, openrlhf: OpenRLHFRewardServer) -> None:
    openrlhf.inject(delay=2.0)
    scores = rm.score_batch(records(2), params(openrlhf.url, timeout=0.3, retries=1), CTX)
    assert [s.status for s in scores] == ["ok", "ok"]
    assert openrlhf.calls == 2


def test_exhausted_retries_are_errors_not_zeros(rm: RewardModel, openrlhf: OpenRLHFRewardServer) -> None:
    openrlhf.inject(status=503, times=3)
    scores = rm.score_batch(records(2), params(openrlhf.url, retries=2), CTX)
    assert [s.status for s in scores] == ["error", "error"]
    assert all(s.value is None for s in scores)
    assert "HTTP 503" in (scores[0].reason or "") and "3 attempts" in (scores[0].reason or "")
    assert openrlhf.url in (scores[0].reason or "")


def test_timeouts_exhausted_name_the_timeout(rm: RewardModel, openrlhf: OpenRLHFRewardServer) -> None:
    openrlhf.inject(delay=1.5, times=2)
    scores = rm.score_batch(records(1), params(openrlhf.url, timeout=0.2, retries=1), CTX)
    assert scores[0].status == "error"
    assert "no reply within 0.2 s" in (scores[0].reason or "")


def test_client_errors_are_not_retried(rm: RewardModel, openrlhf: OpenRLHFRewardServer) -> None:
    openrlhf.inject(status=401)
    scores = rm.score_batch(records(1), params(openrlhf.url, retries=3), CTX)
    assert scores[0].status == "error" and "HTTP 401" in (scores[0].reason or "")
    assert openrlhf.calls == 1


def test_connection_refused_is_an_error(rm: RewardModel) -> None:
    with OpenRLHFRewardServer() as server:
        url = server.url
    scores = rm.score_batch(records(2), params(url, retries=1), CTX)
    assert [s.status for s in scores] == ["error", "error"]
    assert "connection failed" in (scores[0].reason or "")


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ({"raw": b"<html>oops</html>"}, "not JSON"),
        ({"payload": {"scores": [1.0, 2.0]}}, "expected 'rewards'"),
        ({"payload": {"rewards": [1.0]}}, "sent 2 queries, got 1 rewards"),
        ({"payload": [1.0, 2.0]}, "expected a JSON object"),
    ],
)
def test_malformed_replies_error_every_rollout_of_the_call(
    rm: RewardModel, openrlhf: OpenRLHFRewardServer, fault: dict[str, Any], message: str
) -> None:
    openrlhf.inject(**fault)
    scores = rm.score_batch(records(2), params(openrlhf.url), CTX)
    assert [s.status for s in scores] == ["error", "error"]
    assert "malformed reply" in (scores[0].reason or "") and message in (scores[0].reason or "")


def test_a_bad_value_errors_only_its_rollout(rm: RewardModel, openrlhf: OpenRLHFRewardServer) -> None:
    openrlhf.inject(payload={"rewards": [0.5, "high", None]})
    scores = rm.score_batch(records(3), params(openrlhf.url), CTX)
    assert [s.status for s in scores] == ["ok", "error", "error"]
    assert scores[0].value == 0.5
    assert "rewards[1] is a string, not a number" in (scores[1].reason or "")
    assert "high" not in (scores[1].reason or "")  # the reply's content never reaches a reason


def test_on_error_decides_what_a_failed_call_means(openrlhf: OpenRLHFRewardServer) -> None:
    component = {"ref": "reward-model", "params": {"url": openrlhf.url, "retries": 0}}
    zero = evalsi.rewards.from_mapping({"components": [{**component, "onError": "zero"}]})
    raising = evalsi.rewards.from_mapping({"components": [component]})
    openrlhf.inject(status=500, times=2)
    results = zero.score([{"prompt": "p", "completion": "abc"}])
    assert results[0].total == 0.0
    assert results[0].components["reward-model"].status == "error"
    with pytest.raises(RewardBatchError, match="HTTP 500"):
        raising.score([{"prompt": "p", "completion": "abc"}])
    get_evaluator("reward-model").close()


def test_api_key_is_sent_as_a_bearer_token(
    rm: RewardModel, openrlhf: OpenRLHFRewardServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RM_TOKEN", "s3cret")
    rm.score_batch(records(1), params(openrlhf.url, api_key_env="RM_TOKEN"), CTX)
    rm.score_batch(records(1, prefix="z"), params(openrlhf.url), CTX)
    assert openrlhf.headers[0]["authorization"] == "Bearer s3cret"
    assert "authorization" not in openrlhf.headers[1]


def test_close_then_reuse(rm: RewardModel, openrlhf: OpenRLHFRewardServer) -> None:
    assert rm.score_batch(records(1), params(openrlhf.url), CTX)[0].status == "ok"
    rm.close()
    assert not [t for t in threading.enumerate() if t.name == "evalsi-reward-model"]
    assert rm.score_batch(records(1), params(openrlhf.url), CTX)[0].status == "ok"


def test_close_during_a_call_errors_its_rollouts(rm: RewardModel) -> None:
    with OpenRLHFRewardServer(delay=5.0) as server:
        out: list[Score] = []
        caller = threading.Thread(target=lambda: out.extend(rm.score_batch(records(2), params(server.url), CTX)))
        caller.start()
        while server.calls == 0:
            threading.Event().wait(0.01)
        rm.close()
        caller.join(10)
    assert [s.status for s in out] == ["error", "error"]
    assert "closed during the call" in (out[0].reason or "")


# --- vLLM /pooling ----------------------------------------------------------------------------------------------


def test_pooling_batches_text_inputs_with_the_model(rm: RewardModel, pooling: PoolingServer) -> None:
    recs = records(5)
    p = params(pooling.url + "/pooling", protocol="vllm-pooling", model="rm", max_batch=4)
    scores = rm.score_batch(recs, p, CTX)
    assert sorted(pooling.batch_sizes) == [1, 4]
    assert all(body["model"] == "rm" for body in pooling.requests)
    assert pooling.requests[0]["input"][0] == "Q0: c"
    assert [s.value for s in scores] == pytest.approx([len(r.prompt_text + r.completion_text) / 10 for r in recs])


def test_pooling_sends_chat_rollouts_as_messages(rm: RewardModel, pooling: PoolingServer) -> None:
    chat = from_rollout(
        {"prompt": [{"role": "user", "content": "hi"}], "completion": [{"role": "assistant", "content": "hello"}]}
    )
    mixed = from_rollout({"prompt": [{"role": "user", "content": "yo"}], "completion": "sup"})
    p = params(pooling.url + "/pooling", protocol="vllm-pooling")
    scores = rm.score_batch([chat, mixed], p, CTX)
    bodies = sorted(pooling.requests, key=lambda b: b["messages"][0]["content"])
    assert bodies == [
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]},
        {"messages": [{"role": "user", "content": "yo"}, {"role": "assistant", "content": "sup"}]},
    ]
    assert [s.value for s in scores] == pytest.approx([0.7, 0.5])


def test_pooling_chat_as_chatml_text_batches(rm: RewardModel, pooling: PoolingServer) -> None:
    chat = from_rollout({"prompt": [{"role": "user", "content": "hi"}], "completion": "hello"})
    p = params(pooling.url + "/pooling", protocol="vllm-pooling", chat_as_messages=False)
    rm.score_batch([chat, chat], p, CTX)
    assert pooling.requests == [
        {"input": ["<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n"] * 2}
    ]


def test_openrlhf_chat_query_starts_with_the_rendered_prompt(rm: RewardModel, openrlhf: OpenRLHFRewardServer) -> None:
    chat = from_rollout(
        {
            "prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
            "completion": "a",
            "reference": ["x", 1],
        }
    )
    rm.score_batch([chat], params(openrlhf.url), CTX)
    body = openrlhf.requests[0]
    assert body["prompts"] == ["<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nu<|im_end|>\n"]
    assert body["query"] == [body["prompts"][0] + "<|im_start|>assistant\na<|im_end|>\n"]
    assert body["labels"] == ['["x",1]']


@pytest.mark.parametrize(
    ("output", "label_index", "expected"),
    [
        ([0.25], None, 0.25),
        (0.75, None, 0.75),
        ([0.1, 0.9], 1, 0.9),
        ([[0.1], [0.2], [0.8]], None, 0.8),  # token-level: the last token
    ],
)
def test_pooling_output_shapes(rm: RewardModel, output: Any, label_index: int | None, expected: float) -> None:
    with PoolingServer(pool=lambda _item: output) as server:
        scores = rm.score_batch(
            records(1), params(server.url + "/pooling", protocol="vllm-pooling", label_index=label_index), CTX
        )
    assert scores[0].status == "ok" and scores[0].value == pytest.approx(expected)


@pytest.mark.parametrize(
    ("output", "message"),
    [([0.1, 0.9], "set label_index"), ("AAAA", "encoded text"), ([None], "not a number")],
)
def test_pooling_unusable_outputs_are_errors(rm: RewardModel, output: Any, message: str) -> None:
    with PoolingServer(pool=lambda _item: output) as server:
        scores = rm.score_batch(records(1), params(server.url + "/pooling", protocol="vllm-pooling"), CTX)
    assert scores[0].status == "error" and message in (scores[0].reason or "")


def test_pooling_missing_index_errors_that_rollout(rm: RewardModel, pooling: PoolingServer) -> None:
    pooling.inject(payload={"data": [{"index": 1, "data": [2.0]}]})
    scores = rm.score_batch(records(2), params(pooling.url + "/pooling", protocol="vllm-pooling"), CTX)
    assert [s.status for s in scores] == ["error", "ok"]
    assert "no data item with index 0" in (scores[0].reason or "")


def test_pooling_unknown_model_is_an_error(rm: RewardModel, pooling: PoolingServer) -> None:
    scores = rm.score_batch(records(1), params(pooling.url + "/pooling", protocol="vllm-pooling", model="nope"), CTX)
    assert scores[0].status == "error" and "HTTP 404" in (scores[0].reason or "")


# --- normalisation and params -----------------------------------------------------------------------------------


def test_normalisation(rm: RewardModel) -> None:
    with OpenRLHFRewardServer(score=lambda q, p, lb: -2.0) as server:
        sig = rm.score_batch(records(1), params(server.url, normalise="sigmoid"), CTX)[0]
        aff = rm.score_batch(records(1), params(server.url, normalise="affine", scale=0.5, shift=1.0), CTX)[0]
        big = rm.score_batch(records(1), params(server.url, normalise="sigmoid", scale=1000.0), CTX)[0]
    assert sig.value == pytest.approx(1 / (1 + math.exp(2.0)))
    assert sig.details == {"raw": -2.0}
    assert aff.value == pytest.approx(0.0)
    assert big.status == "ok" and big.value == pytest.approx(0.0)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"url": "localhost:5000"}, "should match pattern"),
        ({"url": "http://x", "scale": 2.0}, "only with normalise"),
        ({"url": "http://x", "model": "m"}, "only to protocol: vllm-pooling"),
        ({"url": "http://x", "protocol": "grpc"}, "openrlhf"),
        ({"url": "http://x", "max_batch": 0}, "greater than or equal to 1"),
        ({"url": "http://x", "batch": 8}, "Extra inputs"),
    ],
)
def test_bad_params_are_refused(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RewardModelParams.model_validate(raw)


def test_spec_errors_name_the_field() -> None:
    with pytest.raises(SpecError, match=r"spec\.components\[0\]\.params\.max_batch"):
        evalsi.rewards.from_mapping(
            {"components": [{"ref": "reward-model", "params": {"url": "http://x", "max_batch": -1}}]}
        )
