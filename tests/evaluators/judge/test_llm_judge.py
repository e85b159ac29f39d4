"""llm-judge against a loopback OpenAI-compatible chat-completions server with scripted verdicts."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

import evalsi.evaluators.judge as judge_pack
import evalsi.rewards
from evalsi.errors import SpecError
from evalsi.evaluators import Score, ScoreContext, get_evaluator
from evalsi.evaluators.judge import LLMJudge, LLMJudgeParams
from evalsi.records import Record, from_rollout
from tests.helpers.model_servers import ChatJudgeServer, LoopbackServer
from tests.helpers.openai_server import OpenAIServer

pytestmark = pytest.mark.timeout(60)
CTX = ScoreContext(component="judge")


@pytest.fixture
def judge() -> Iterator[LLMJudge]:
    evaluator = get_evaluator("llm-judge")
    assert isinstance(evaluator, judge_pack.LLMJudge)
    yield evaluator
    evaluator.close()


@pytest.fixture
def server() -> Iterator[ChatJudgeServer]:
    with ChatJudgeServer() as srv:
        yield srv


def params(base_url: str, **config: Any) -> LLMJudgeParams:
    return LLMJudgeParams.model_validate({"judge": {"model": "judge-1", "base_url": base_url, "backoff": 0, **config}})


def score(judge: LLMJudge, p: LLMJudgeParams, *rollouts: dict[str, Any]) -> list[Score]:
    return judge.score_batch([from_rollout(r) for r in rollouts], p, CTX)


ROLLOUT = {"prompt": "What is 2+2?", "completion": "It is 4.", "answer": "4"}


# --- the request ------------------------------------------------------------------------------------------------


def test_default_request_shows_rubric_question_reference_and_response(judge: LLMJudge, server: ChatJudgeServer) -> None:
    server.verdict = "The response is right.\nScore: 8"
    p = params(server.base_url, system="You are strict.", rubric="Correctness only.", temperature=0.2, max_tokens=64)
    scores = score(judge, p, ROLLOUT)
    body = server.requests[0]
    assert server.paths == ["/v1/chat/completions"]
    assert body["model"] == "judge-1" and body["temperature"] == 0.2 and body["max_tokens"] == 64
    assert body["messages"][0] == {"role": "system", "content": "You are strict."}
    user = body["messages"][1]["content"]
    for part in ("Correctness only.", "[Question]\nWhat is 2+2?", "[Reference answer]\n4", "[Response]\nIt is 4."):
        assert part in user
    assert "'Score: N', where N is a number from 0 to 10" in user
    assert scores[0].status == "ok" and scores[0].value == pytest.approx(0.8)
    assert scores[0].details is not None and scores[0].details["raw"].endswith("Score: 8")


def test_without_a_reference_the_default_template_has_no_reference_section(
    judge: LLMJudge, server: ChatJudgeServer
) -> None:
    score(judge, params(server.base_url), {"prompt": "Hi", "completion": "Hello"})
    assert "Reference" not in server.user_messages()[0]


def test_custom_template_with_metadata_and_chat_prompt(judge: LLMJudge, server: ChatJudgeServer) -> None:
    server.verdict = "7"
    template = 'Topic {{topic}} / {{metadata.level}}\n{{prompt}}\n>> {{completion}}\nJSON stays: {"a": 1}'
    rollout = {
        "prompt": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        "completion": [{"role": "assistant", "content": "hey"}],
        "topic": "greetings",
        "level": 2,
    }
    scores = score(judge, params(server.base_url, template=template), rollout)
    assert server.user_messages() == ['Topic greetings / 2\nsystem: be brief\nuser: hi\n>> hey\nJSON stays: {"a": 1}']
    assert scores[0].value == pytest.approx(0.7)


def test_missing_template_fields(judge: LLMJudge, server: ChatJudgeServer) -> None:
    p = params(server.base_url, template="{{completion}} vs {{reference}} on {{topic}}")
    scores = score(judge, p, {"completion": "x", "topic": "t"}, {"completion": "x", "answer": "y"})
    assert scores[0].status == "skipped" and "{{reference}}" in (scores[0].reason or "")
    assert scores[1].status == "error" and "no 'topic'" in (scores[1].reason or "")
    assert server.calls == 0


def test_cache_fields_follow_the_template(judge: LLMJudge) -> None:
    assert judge.cache_fields(params("http://x", template="{{completion}} {{topic}} {{metadata.a}} {{rubric}}")) == (
        "completion",
        "metadata.a",
        "metadata.topic",
    )
    assert judge.cache_fields(params("http://x")) == ("prompt", "completion", "reference")


def test_api_key_from_the_named_variable(
    judge: LLMJudge, server: ChatJudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUDGE_KEY", "k-123")
    score(judge, params(server.base_url, api_key_env="JUDGE_KEY"), ROLLOUT)
    assert server.headers[0]["authorization"] == "Bearer k-123"


# --- verdicts ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("verdict", "reply", "expected"),
    [
        ({"min": 1, "max": 5}, "Good.\n**Score:** 4", 0.75),
        ({"min": 1, "max": 5, "rescale": False}, "Score: 2\nOn reflection...\nFinal score: 3", 3.0),
        ({"pattern": r"(\d+)/10"}, "I give it 9/10.", 0.9),
        ({"kind": "label", "labels": {"CORRECT": 1, "INCORRECT": 0}}, "Not correct at first... INCORRECT", 0.0),
        ({"labels": {"correct": 1, "partially correct": 0.5}}, "Verdict: Partially correct", 0.5),
        ({"labels": {"A": 1, "B": 0}, "pattern": r"Answer: (\w)"}, "A or B? Answer: B", 0.0),
        ({"kind": "json"}, '{"score": 0.6, "reasoning": "ok"}', 0.6),
        ({"field": "verdict.score", "min": 0, "max": 4}, 'Here:\n```json\n{"verdict": {"score": 3}}\n```', 0.75),
        ({"field": "pass"}, 'thinking... {"pass": true} done', 1.0),
        ({"field": "grade", "labels": {"good": 1, "bad": 0}}, '{"grade": "Bad"}', 0.0),
    ],
)
def test_verdict_kinds(
    judge: LLMJudge, server: ChatJudgeServer, verdict: dict[str, Any], reply: str, expected: float
) -> None:
    server.verdict = reply
    scores = score(judge, params(server.base_url, verdict=verdict), ROLLOUT)
    assert scores[0].status == "ok", scores[0].reason
    assert scores[0].value == pytest.approx(expected)


@pytest.mark.parametrize(
    ("verdict", "reply", "message"),
    [
        ({}, "I cannot grade this.", "no score found"),
        ({}, "Score: 11", "outside [0, 10]"),
        ({"labels": {"YES": 1, "NO": 0}}, "Maybe.", "none of the labels"),
        ({"kind": "json"}, "score is 5", "no JSON object"),
        ({"kind": "json"}, '{"rating": 5}', "no field 'score'"),
        ({"kind": "json"}, '{"score": "high"}', "not a number"),
        ({"field": "grade", "labels": {"good": 1}}, '{"grade": "meh"}', "not one of"),
    ],
)
def test_unparseable_verdicts_are_errors_with_the_raw_text(
    judge: LLMJudge, server: ChatJudgeServer, verdict: dict[str, Any], reply: str, message: str
) -> None:
    server.verdict = reply
    scores = score(judge, params(server.base_url, verdict=verdict), ROLLOUT)
    assert scores[0].status == "error" and scores[0].value is None
    assert "unparseable verdict" in (scores[0].reason or "") and message in (scores[0].reason or "")
    assert scores[0].details == {"raw": reply}


def test_json_mode_asks_for_a_json_object(judge: LLMJudge, server: ChatJudgeServer) -> None:
    server.verdict = '{"score": 1}'
    score(judge, params(server.base_url, verdict={"kind": "json", "json_mode": True}, extra_body={"seed": 7}), ROLLOUT)
    assert server.requests[0]["response_format"] == {"type": "json_object"}
    assert server.requests[0]["seed"] == 7


# --- failures, retries, concurrency -----------------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 500, 502])
def test_retryable_statuses_are_retried(judge: LLMJudge, server: ChatJudgeServer, status: int) -> None:
    server.inject(status=status, times=2)
    scores = score(judge, params(server.base_url, retries=2), ROLLOUT)
    assert scores[0].status == "ok"
    assert server.statuses == [status, status, 200]


def test_timeouts_are_retried_then_reported(judge: LLMJudge, server: ChatJudgeServer) -> None:
    server.inject(delay=1.5)
    assert score(judge, params(server.base_url, timeout=0.3, retries=1), ROLLOUT)[0].status == "ok"
    server.inject(delay=1.5, times=2)
    failed = score(judge, params(server.base_url, timeout=0.3, retries=1), ROLLOUT)[0]
    assert failed.status == "error" and "no reply within 0.3 s" in (failed.reason or "")
    assert "gave up after 2 attempts" in (failed.reason or "")


def test_client_errors_are_not_retried(judge: LLMJudge, server: ChatJudgeServer) -> None:
    server.inject(status=400)
    failed = score(judge, params(server.base_url, retries=3), ROLLOUT)[0]
    assert failed.status == "error" and "HTTP 400" in (failed.reason or "") and "judge-1" in (failed.reason or "")
    assert server.calls == 1


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ({"raw": b"<html>"}, "not JSON"),
        ({"payload": {"choices": []}}, "no choices"),
        ({"payload": {"choices": [{"message": {"role": "assistant", "content": None, "refusal": "no"}}]}}, "refusal"),
    ],
)
def test_malformed_replies_are_errors(
    judge: LLMJudge, server: ChatJudgeServer, fault: dict[str, Any], message: str
) -> None:
    server.inject(**fault)
    failed = score(judge, params(server.base_url), ROLLOUT)[0]
    assert failed.status == "error" and "malformed reply" in (failed.reason or "") and message in (failed.reason or "")


def test_concurrency_is_bounded_across_batches(judge: LLMJudge) -> None:
    with ChatJudgeServer("Score: 1", delay=0.1) as srv:
        p = params(srv.base_url, max_concurrency=2)
        scores = score(judge, p, *[{"prompt": f"q{i}", "completion": "a"} for i in range(8)])
        assert [s.status for s in scores] == ["ok"] * 8
        assert srv.max_in_flight == 2
        assert judge.calls(p) == 8


def test_server_unreachable_is_an_error(judge: LLMJudge) -> None:
    with LoopbackServer() as srv:
        url = srv.url + "/v1"
    failed = score(judge, params(url, retries=0), ROLLOUT)[0]
    assert failed.status == "error" and "connection failed" in (failed.reason or "")


# --- in a reward: cache, the `judge` field, names ---------------------------------------------------------------


def test_repeated_rollouts_cost_no_judge_call(server: ChatJudgeServer) -> None:
    server.verdict = lambda user, body: "Score: 10" if "It is 4." in user else "Score: 0"
    reward = evalsi.rewards.from_mapping(
        {"components": [{"ref": "llm-judge", "judge": {"model": "judge-1", "baseUrl": server.base_url}}]}
    )
    wrong = {**ROLLOUT, "completion": "5"}
    rollouts = [ROLLOUT, ROLLOUT, wrong, ROLLOUT]
    first = reward.score(rollouts)
    assert server.calls == 2
    again = reward.score(rollouts)
    get_evaluator("llm-judge").close()
    assert server.calls == 2  # every judgement came from the cache
    assert [r.total for r in first] == [r.total for r in again] == [1.0, 1.0, 0.0, 1.0]


def test_unparseable_verdicts_are_not_cached_and_on_error_applies(server: ChatJudgeServer) -> None:
    server.verdict = "no idea"
    component = {"ref": "llm-judge", "judge": {"model": "judge-1", "base_url": server.base_url}, "onError": "none"}
    reward = evalsi.rewards.from_mapping({"components": [component]})
    assert reward.score([ROLLOUT])[0].total is None
    server.verdict = "Score: 10"
    assert reward.score([ROLLOUT])[0].total == 1.0
    get_evaluator("llm-judge").close()
    assert server.calls == 2


def test_a_judge_name_in_process_is_an_error_that_says_so() -> None:
    with pytest.raises(SpecError, match=re.escape("'strict' names a judge configured on an evalsi server")):
        evalsi.rewards.from_mapping({"components": [{"ref": "llm-judge", "judge": "strict"}]})


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({}, "model"),
        ({"model": "m", "verdict": {"min": 5, "max": 1}}, "must be below max"),
        ({"model": "m", "verdict": {"pattern": "(unclosed"}}, "not a valid regular expression"),
        ({"model": "m", "verdict": {"pattern": r"\d+"}}, "capturing group"),
        ({"model": "m", "verdict": {"kind": "json", "min": 0}}, "both min and max"),
        ({"model": "m", "template": "Rate {{reference}}"}, "neither {{completion}} nor {{prompt}}"),
        ({"model": "m", "base_url": "localhost:8000"}, "should match pattern"),
        ({"model": "m", "temperature": 5}, "less than or equal to 2"),
        ({"model": "m", "sampling": {}}, "Extra inputs"),
    ],
)
def test_bad_configs_are_refused(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        LLMJudgeParams.model_validate({"judge": config})


def test_records_are_scored_in_order(judge: LLMJudge, server: ChatJudgeServer) -> None:
    server.verdict = lambda user, body: f"Score: {user.count('x')}"
    recs: list[Record] = [from_rollout({"prompt": "p", "completion": "x" * n}) for n in (3, 0, 10, 1)]
    scores = judge.score_batch(recs, params(server.base_url), CTX)
    assert [s.value for s in scores] == pytest.approx([0.3, 0.0, 1.0, 0.1])


def test_works_against_the_shared_openai_test_server(judge: LLMJudge) -> None:
    with OpenAIServer(default="Looks right.\nScore: 9") as srv:
        srv.inject(status=429)
        scores = score(judge, params(srv.base_url, retries=1), ROLLOUT)
        assert srv.statuses == [429, 200]
    assert scores[0].status == "ok" and scores[0].value == pytest.approx(0.9)
