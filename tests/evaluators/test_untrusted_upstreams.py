"""Untrusted schemas and upstream answers: json-schema reads no file and fetches no URL; judge and reward-model
reasons carry a status, never an upstream body or a remote's error text; judges share one bounded pool."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import evalsi.evaluators.judge as judge_pack
from evalsi.errors import SpecError
from evalsi.evaluators import Score, ScoreContext, get_evaluator
from evalsi.evaluators.judge import LLMJudgeParams
from evalsi.evaluators.judge._client import MAX_REPLY_CHARS, MAX_THREADS, SHARED_POOL, _SharedPool
from evalsi.evaluators.rl.reward_model import RewardModel
from evalsi.records import from_rollout
from evalsi.rewards import from_mapping
from tests.helpers.listener import Listener
from tests.helpers.model_servers import ChatJudgeServer, OpenRLHFRewardServer

pytestmark = pytest.mark.timeout(120)
SECRET = "AKIA-not-for-your-eyes"


@pytest.fixture
def listener() -> Iterator[Listener]:
    lst = Listener()
    yield lst
    lst.close()


def json_schema(schema: Any, completion: str) -> Score:
    evaluator = get_evaluator("json-schema")
    parsed = evaluator.parse_params({"schema": schema})
    return evaluator.score_batch([from_rollout({"completion": completion})], parsed, ScoreContext())[0]


def test_refs_outside_the_schema_are_refused_without_reading_or_fetching(tmp_path: Path, listener: Listener) -> None:
    secret = tmp_path / "credentials"
    secret.write_text(f'{{"type": "string", "description": "{SECRET}"}}')
    for ref in (
        secret.as_uri(),
        f"http://127.0.0.1:{listener.port}/schema.json",
        "https://example.com/s.json",
        "other.json#/x",
        f"file://{secret}#/description",
    ):
        for schema in ({"$ref": ref}, {"properties": {"a": {"items": [{"$dynamicRef": ref}]}}}):
            with pytest.raises(SpecError) as caught:
                from_mapping({"components": [{"ref": "json-schema", "params": {"schema": schema}}]})
            assert "points outside the schema" in str(caught.value) and SECRET not in str(caught.value)
    assert listener.connections == 0


def test_refs_within_the_schema_resolve_and_a_base_id_fetches_nothing(listener: Listener) -> None:
    base = f"http://127.0.0.1:{listener.port}/root.json"
    schema = {"$id": base, "$defs": {"n": {"type": "integer"}}, "properties": {"n": {"$ref": "#/$defs/n"}}}
    assert json_schema(schema, '{"n": 1}').value is True
    assert json_schema(schema, '{"n": "x"}').value is False
    anchored = {"$defs": {"n": {"$anchor": "num", "type": "integer"}}, "$ref": "#num"}
    assert json_schema(anchored, "3").value is True
    missing = json_schema({"$id": base, "$ref": "#/$defs/nowhere"}, "1")
    assert missing.status == "error" and "does not resolve within the schema" in (missing.reason or "")
    assert listener.connections == 0


def test_a_ref_loop_is_an_error_score_without_internals() -> None:
    result = json_schema({"$ref": "#"}, "1")
    assert result.status == "error" and "loops" in (result.reason or "") and "Error" not in (result.reason or "")


def test_a_ref_key_inside_instance_data_is_not_a_reference() -> None:
    schema = {"const": {"$ref": "file:///etc/passwd"}}
    assert json_schema(schema, '{"$ref": "file:///etc/passwd"}').value is True


def test_unevaluated_properties_beside_pattern_properties_is_refused() -> None:
    schema = {"patternProperties": {"^a": {}}, "unevaluatedProperties": False}
    with pytest.raises(SpecError, match="use additionalProperties beside patternProperties"):
        from_mapping({"components": [{"ref": "json-schema", "params": {"schema": schema}}]})


# --- upstream answers never reach reasons ------------------------------------------------------------------------


@pytest.fixture
def judge() -> Iterator[judge_pack.LLMJudge]:
    evaluator = get_evaluator("llm-judge")
    assert isinstance(evaluator, judge_pack.LLMJudge)
    yield evaluator
    evaluator.close()


def judge_params(base_url: str, **config: Any) -> LLMJudgeParams:
    return LLMJudgeParams.model_validate({"judge": {"model": "j", "base_url": base_url, "backoff": 0, **config}})


def judge_score(judge: judge_pack.LLMJudge, p: LLMJudgeParams) -> Score:
    return judge.score_batch([from_rollout({"prompt": "q", "completion": "a"})], p, ScoreContext())[0]


@pytest.mark.parametrize("status", [403, 404, 503])
def test_judge_failures_name_the_status_not_the_body(judge: judge_pack.LLMJudge, status: int) -> None:
    with ChatJudgeServer() as server:
        server.inject(status=status, times=5)
        result = judge_score(judge, judge_params(server.base_url, retries=1))
    reason = result.reason or ""
    assert result.status == "error" and f"HTTP {status}" in reason and "injected" not in reason


def test_a_non_json_judge_answer_does_not_echo_the_body(judge: judge_pack.LLMJudge) -> None:
    with ChatJudgeServer() as server:
        server.inject(raw=SECRET.encode())
        result = judge_score(judge, judge_params(server.base_url))
    assert result.status == "error" and "not JSON" in (result.reason or "") and SECRET not in (result.reason or "")


def test_a_judge_without_choices_does_not_echo_the_reply(judge: judge_pack.LLMJudge) -> None:
    with ChatJudgeServer() as server:
        server.inject(payload={"detail": SECRET})
        result = judge_score(judge, judge_params(server.base_url))
    assert result.status == "error" and "no choices" in (result.reason or "") and SECRET not in (result.reason or "")


def test_connection_failures_hide_the_remote_error_text(judge: judge_pack.LLMJudge, listener: Listener) -> None:
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    for url in (f"http://127.0.0.1:{port}/v1", f"http://127.0.0.1:{listener.port}/v1"):  # refused; reset
        reason = judge_score(judge, judge_params(url, retries=1)).reason or ""
        assert reason.endswith("connection failed (gave up after 2 attempts)"), reason
        assert "Errno" not in reason and "refused" not in reason.lower() and "Error" not in reason


def test_reward_model_failures_name_the_status_not_the_body() -> None:
    rm = get_evaluator("reward-model")
    assert isinstance(rm, RewardModel)
    with OpenRLHFRewardServer() as server:
        server.inject(status=403)
        params = rm.parse_params({"url": server.url, "backoff": 0})
        result = rm.score_batch([from_rollout({"prompt": "q", "completion": "a"})], params, ScoreContext())[0]
        server.inject(payload={"rewards": SECRET})
        bad = rm.score_batch([from_rollout({"prompt": "q", "completion": "b"})], params, ScoreContext())[0]
    rm.close()
    assert result.status == "error" and "HTTP 403 Forbidden" in (result.reason or "")
    assert "injected" not in (result.reason or "")
    assert bad.status == "error" and SECRET not in (bad.reason or "") and "got a string" in (bad.reason or "")


# --- shared pools and capped replies ------------------------------------------------------------------------------


def judge_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("evalsi-judge"))


def test_many_judge_configs_share_one_bounded_pool(judge: judge_pack.LLMJudge) -> None:
    with ChatJudgeServer() as server:
        for i in range(40):  # each a distinct endpoint config: once a pool (and threads) apiece
            assert judge_score(judge, judge_params(server.base_url, timeout=30 + i)).status == "ok"
    assert judge_threads() <= 16
    assert SHARED_POOL.size <= MAX_THREADS


def test_the_pool_stops_its_threads_when_the_last_client_closes() -> None:
    pool = _SharedPool()
    pool.reserve(3)
    pool.reserve(2)
    assert pool.size == 5
    started, release = threading.Barrier(6), threading.Event()
    workers: list[threading.Thread] = []

    def work() -> None:
        workers.append(threading.current_thread())
        started.wait(10)
        release.wait(10)

    for _ in range(5):
        pool.submit(work)
    started.wait(10)  # five requests in flight on five threads
    pool.release(3)
    assert pool.size == 5
    pool.release(2)
    assert pool.size == 0
    release.set()
    for thread in workers:
        thread.join(10)
    assert not any(t.is_alive() for t in workers)
    with pytest.raises(RuntimeError, match="no judge client"):
        pool.submit(work)


def test_a_huge_judge_reply_is_read_whole_but_stored_cut(judge: judge_pack.LLMJudge) -> None:
    with ChatJudgeServer(verdict="x" * 200_000 + "\nScore: 5") as server:
        result = judge_score(judge, judge_params(server.base_url))
    assert result.status == "ok" and result.value == pytest.approx(0.5)
    assert result.details is not None and len(result.details["raw"]) <= MAX_REPLY_CHARS
    assert result.details["raw"].endswith("Score: 5")


def test_past_max_clients_the_least_recently_used_endpoint_is_closed(judge: judge_pack.LLMJudge) -> None:
    judge.max_clients = 3
    with ChatJudgeServer() as server:
        for i in range(6):
            assert judge_score(judge, judge_params(server.base_url, timeout=30 + i)).status == "ok"
        assert [e.timeout for e in judge._clients] == [33, 34, 35]
        assert judge_score(judge, judge_params(server.base_url, timeout=30)).status == "ok"  # reopened
