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
from evalsi.evaluators.judge._client import MAX_REPLY_CHARS
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


def http_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith(("evalsi-judge", "evalsi-http")))


def test_many_judge_configs_share_one_thread(judge: judge_pack.LLMJudge) -> None:
    with ChatJudgeServer() as server:
        for i in range(40):  # each a distinct endpoint config: a client apiece, all on the one HTTP loop
            assert judge_score(judge, judge_params(server.base_url, timeout=30 + i)).status == "ok"
    assert http_threads() == 1


def final_then_exhausted(judge: judge_pack.LLMJudge, kind: str) -> tuple[str, str, int]:
    """The reasons of a 503 marked final (x-should-retry: false), then of four plain 503s; the calls made."""
    final = {"x-should-retry": "false"}
    if kind == "judge":
        with ChatJudgeServer() as server:
            server.inject(status=503, headers=final)
            reason = judge_score(judge, judge_params(server.base_url, retries=3)).reason
            server.inject(status=503, times=4, retry_after=None)
            exhausted = judge_score(judge, judge_params(server.base_url, retries=3, backoff=0.01)).reason
            return reason or "", exhausted or "", server.calls
    rm = get_evaluator("reward-model")
    try:
        with OpenRLHFRewardServer() as server:
            params = rm.parse_params({"url": server.url, "retries": 3, "backoff": 0.01})
            server.inject(status=503, headers=final)
            once = rm.score_batch([from_rollout({"prompt": "q", "completion": "a"})], params, ScoreContext())[0]
            server.inject(status=503, times=4, retry_after=None)
            four = rm.score_batch([from_rollout({"prompt": "q", "completion": "b"})], params, ScoreContext())[0]
            return once.reason or "", four.reason or "", server.calls
    finally:
        rm.close()


@pytest.mark.parametrize("kind", ["judge", "reward-model"])
def test_an_answer_that_says_not_to_retry_is_not_reported_as_given_up(judge: judge_pack.LLMJudge, kind: str) -> None:
    reason, exhausted, calls = final_then_exhausted(judge, kind)
    assert calls == 5  # once, then four attempts
    # The server's own verdict made the 503 final: asked once, nothing was given up.
    assert "HTTP 503 Service Unavailable" in reason and "gave up" not in reason
    assert "HTTP 503 Service Unavailable" in exhausted and "gave up after 4 attempts" in exhausted


def test_an_upstream_url_without_a_host_fails_each_call_not_the_batch(judge: judge_pack.LLMJudge) -> None:
    judged = judge_score(judge, judge_params("http://", retries=0))
    rm = get_evaluator("reward-model")
    params = rm.parse_params({"url": "http://", "retries": 0})
    scored = rm.score_batch([from_rollout({"prompt": "q", "completion": "a"})], params, ScoreContext())[0]
    rm.close()
    for score in (judged, scored):
        assert score.status == "error" and "connection failed" in (score.reason or ""), score


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
