"""One real server process answering HTTP JSON, Connect (JSON and binary) and gRPC: same answers, same errors,
the shared reward vectors, the library's ``server=`` client, auth on every endpoint but health."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from connectrpc.errors import ConnectError
from google.protobuf import json_format

import tests.server.plugins  # noqa: F401  (registers the test evaluators in this process too)
from evalsi.errors import DataError, RewardBatchError, RewardServiceError, SpecError
from evalsi.rewards import RemoteReward, from_mapping
from evalsi.rewards.vectors import Outcome, check_vectors
from evalsi.server._proto.evalsi.v1alpha1 import rewards_pb2 as pb
from evalsi.server._proto.evalsi.v1alpha1.rewards_connect import RewardServiceClientSync
from tests.server.harness import (
    CONNECT_PATH,
    ServerProcess,
    call_grpc,
    make_token,
    metric,
    post_connect_json,
    post_http,
    write_config,
)
from tests.server.messages import message_to_json, request_message

ROOT = Path(__file__).resolve().parents[2]

SPEC = {
    "apiVersion": "evals.si/v1alpha1",
    "kind": "RewardSpec",
    "metadata": {"name": "mixed"},
    "spec": {
        "components": [
            {
                "ref": "format-check",
                "name": "format",
                "gate": True,
                "weight": 0.25,
                "params": {"pattern": "(?s).*ANSWER:.*"},
            },
            {"ref": "exact-match", "name": "exact", "weight": 0.75, "params": {"ignore_case": True}},
            {"ref": "overlong-penalty", "name": "long", "weight": 1.0, "params": {"max_length": 20, "buffer": 5}},
        ],
        "clip": [-1.0, 1.0],
    },
}
ROLLOUTS: list[dict[str, Any]] = [
    {"prompt": "2+2?", "completion": "ANSWER: 4", "answer": "answer: 4", "completion_tokens": 3},
    {"prompt": "2+2?", "completion": "4", "answer": "4", "completion_tokens": 18},
    {"prompt": "capital?", "completion": "ANSWER: Paris", "completion_tokens": 19},
    {"completion": [{"role": "assistant", "content": "ANSWER: x"}], "reference": "ANSWER: X", "completion_tokens": 1},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    directory = tmp_path_factory.mktemp("protocols")
    config = write_config(
        directory,
        {
            "database": {"url": "sqlite:///server.db"},
            "rewards": {"max_rollouts": 50},
            "judges": {"strict": {"model": "m"}},
        },
    )
    url = f"sqlite:///{directory / 'server.db'}"
    tokens = {
        "run": make_token(url, "alpha", ["evaluations.run"]),
        "code": make_token(url, "alpha", ["evaluations.run", "resource.runs_code"]),
        "none": make_token(url, "alpha", ["resource.runs_code"]),
        "metrics": make_token(url, "ops", ["metrics.read"]),
    }
    with ServerProcess(config) as process:
        yield process, tokens


def _connect_binary(process: ServerProcess, token: str, spec: Any, rollouts: Any) -> tuple[str, Any]:
    with RewardServiceClientSync(process.http) as client:
        try:
            response = client.score_rewards(
                request_message(spec, rollouts), headers={"authorization": f"Bearer {token}"}, timeout_ms=60_000
            )
        except ConnectError as exc:
            return exc.code.name.lower(), exc.message
    return "ok", message_to_json(response)


def _all_protocols(process: ServerProcess, token: str, spec: Any, rollouts: Any) -> dict[str, tuple[str, Any]]:
    http = post_http(process, token, spec, rollouts)
    http_answer = (
        ("ok", http.json())
        if http.status_code == 200
        else (http.json()["error"]["status"], http.json()["error"]["message"])
    )
    connect = post_connect_json(process, token, spec, rollouts)
    connect_answer = ("ok", None) if connect.status_code == 200 else (connect.json()["code"], connect.json()["message"])
    if connect.status_code == 200:
        connect_answer = ("ok", message_to_json(json_format.Parse(connect.content, pb.ScoreRewardsResponse())))
    return {
        "http": http_answer,
        "connect-json": connect_answer,
        "connect-proto": _connect_binary(process, token, spec, rollouts),
        "grpc": call_grpc(process, token, spec, rollouts),
    }


def test_three_protocols_answer_identically(server: tuple[ServerProcess, dict[str, str]]) -> None:
    process, tokens = server
    answers = _all_protocols(process, tokens["run"], SPEC, ROLLOUTS)
    assert answers["http"][0] == "ok"
    for name, answer in answers.items():
        assert answer == answers["http"], name
    # and they are what the library computes in-process
    local = from_mapping(SPEC).score(ROLLOUTS)
    got = answers["http"][1]["results"]
    assert [r["total"] for r in got] == pytest.approx([r.total for r in local])
    assert [r["status"] for r in got] == [r.status for r in local]
    assert [r["index"] for r in got] == [0, 1, 2, 3]
    assert got[2]["components"]["exact"] == {"value": None, "status": "skipped", "reason": "no reference"}


@pytest.mark.parametrize(
    ("spec", "rollouts", "status", "needle"),
    [
        (
            {"components": [{"ref": "exact-match", "weight": "heavy"}]},
            [{"completion": "a"}],
            "invalid_argument",
            "spec.components[0].weight",
        ),
        ({"components": [{"ref": "exact-matsh"}]}, [{"completion": "a"}], "invalid_argument", "exact-match"),
        (
            {"components": [{"ref": "exact-match"}]},
            [{"completion": "a"}, {"prompt": "no completion"}],
            "invalid_argument",
            "rollout 1",
        ),
        (
            {"components": [{"ref": "exact-match"}]},
            [{"completion": "a"}] * 51,
            "invalid_argument",
            "rewards.max_rollouts=50",
        ),
        (
            {
                "components": [
                    {"ref": "json-schema", "params": {"schema": {"type": "object"}}, "name": "js"},
                    {"ref": "exact-match", "judge": "lenient"},
                ]
            },
            [{"completion": "{}"}],
            "invalid_argument",
            "no judge named 'lenient'",
        ),
        (
            {"components": [{"ref": "test-server-code"}]},
            [{"completion": "a"}],
            "permission_denied",
            "resource.runs_code",
        ),
    ],
)
def test_errors_are_identical_on_every_protocol(
    server: tuple[ServerProcess, dict[str, str]], spec: Any, rollouts: Any, status: str, needle: str
) -> None:
    process, tokens = server
    answers = _all_protocols(process, tokens["run"], spec, rollouts)
    for name, (code, message) in answers.items():
        assert code == status, (name, message)
        assert needle in message, (name, message)
    assert len({message for _, message in answers.values()}) == 1


def test_a_failed_batch_names_rollout_and_component(server: tuple[ServerProcess, dict[str, str]]) -> None:
    process, tokens = server
    spec = {"components": [{"ref": "field-score", "name": "judge", "params": {"field": "s"}}]}
    rollouts = [
        {"completion": "", "s": {"status": "ok", "value": 1}},
        {"completion": "", "s": {"status": "error", "reason": "down"}},
    ]
    response = post_http(process, tokens["run"], spec, rollouts)
    assert response.status_code == 422
    error = response.json()["error"]
    assert (error["code"], error["status"], error["index"], error["component"]) == (
        "reward_batch_failed",
        "failed_precondition",
        1,
        "judge",
    )
    assert "rollout 1" in error["message"] and "'judge'" in error["message"]
    assert call_grpc(process, tokens["run"], spec, rollouts)[0] == "failed_precondition"


def test_reward_vectors_pass_through_the_http_api(server: tuple[ServerProcess, dict[str, str]]) -> None:
    process, tokens = server

    def http_scorer(body: dict[str, Any], batch: list[dict[str, Any]]) -> Outcome:
        response = post_http(process, tokens["run"], body, batch)
        if response.status_code == 200:
            return Outcome(results=[(r["total"], r["status"]) for r in response.json()["results"]])
        error = response.json()["error"]
        if error["code"] == "reward_batch_failed":
            return Outcome(raised=(error["component"], error["index"]))
        if error["code"] == "invalid_spec":
            return Outcome(spec_error_path=error["path"])
        raise AssertionError(response.text)

    report = check_vectors(ROOT / "testdata" / "reward_vectors.json", scorer=http_scorer)
    assert report.failures == []
    assert report.passed > 10


def test_the_librarys_server_client_scores_through_the_real_server(
    server: tuple[ServerProcess, dict[str, str]],
) -> None:
    process, tokens = server
    local = from_mapping(SPEC)
    remote = RemoteReward.from_spec(local.name, local.spec.spec, process.http, token=tokens["run"], retries=0)
    try:
        got = remote.score(ROLLOUTS)
        assert [(r.total, r.status) for r in got] == [(r.total, r.status) for r in local.score(ROLLOUTS)]
        assert got[1].components["format"].status == "ok"
        failing = RemoteReward.from_spec(
            "f",
            from_mapping({"components": [{"ref": "field-score", "params": {"field": "s"}}]}).spec.spec,
            process.http,
            token=tokens["run"],
            retries=0,
        )
        with pytest.raises(RewardBatchError) as raised:
            failing.score([{"completion": "", "s": {"status": "error", "reason": "x"}}])
        assert (raised.value.index, raised.value.component) == (0, "field-score")
        with pytest.raises(DataError):
            remote.score([{"prompt": "no completion"}])
        unauthorised = RemoteReward.from_spec(local.name, local.spec.spec, process.http, token="nope", retries=0)
        with pytest.raises(RewardServiceError, match="401"):
            unauthorised.score(ROLLOUTS)
        unauthorised.close()
        failing.close()
    finally:
        remote.close()


def test_a_bad_spec_through_the_client_is_a_spec_error(server: tuple[ServerProcess, dict[str, str]]) -> None:
    process, tokens = server
    body = from_mapping({"components": [{"ref": "test-server-count", "params": {"log": "/dev/null"}}]}).spec.spec
    remote = RemoteReward.from_spec("x", body, process.http, token=tokens["run"], retries=0)
    remote.resource["spec"]["components"][0]["params"] = {"log": 3.5, "extra": 1}
    try:
        with pytest.raises(SpecError, match="params"):
            remote.score([{"completion": "a"}])
    finally:
        remote.close()


def test_every_endpoint_but_health_refuses_a_missing_token(server: tuple[ServerProcess, dict[str, str]]) -> None:
    process, tokens = server
    spec = {"components": [{"ref": "exact-match"}]}
    assert post_http(process, None, spec, [{"completion": "a"}]).status_code == 401
    assert post_http(process, "evalsi_wrong", spec, [{"completion": "a"}]).status_code == 401
    assert post_connect_json(process, None, spec, [{"completion": "a"}]).json()["code"] == "unauthenticated"
    assert call_grpc(process, None, spec, [{"completion": "a"}])[0] == "unauthenticated"
    assert call_grpc(process, "evalsi_wrong", spec, [{"completion": "a"}])[0] == "unauthenticated"
    assert httpx.get(process.http + "/metrics").status_code == 401
    assert httpx.get(process.http + "/healthz").json() == {"status": "ok"}
    assert httpx.get(process.http + "/metrics", headers={"Authorization": f"Bearer {tokens['run']}"}).status_code == 403
    metrics = httpx.get(process.http + "/metrics", headers={"Authorization": f"Bearer {tokens['metrics']}"})
    assert metrics.status_code == 200
    assert (
        httpx.post(process.http + CONNECT_PATH, content=b"{}", headers={"Content-Type": "application/json"}).json()[
            "code"
        ]
        == "unauthenticated"
    )


def test_permissions_are_checked_and_named(server: tuple[ServerProcess, dict[str, str]]) -> None:
    process, tokens = server
    code_spec = {"components": [{"ref": "test-server-code"}]}
    refused = post_http(process, tokens["run"], code_spec, [{"completion": "ab"}])
    assert refused.status_code == 403
    assert "resource.runs_code" in refused.json()["error"]["message"]
    allowed = post_http(process, tokens["code"], code_spec, [{"completion": "ab"}, {"completion": "abc"}])
    assert [r["total"] for r in allowed.json()["results"]] == [0.0, 1.0]
    no_run = post_http(process, tokens["none"], {"components": [{"ref": "exact-match"}]}, [{"completion": "a"}])
    assert no_run.status_code == 403 and "evaluations.run" in no_run.json()["error"]["message"]


def test_metrics_count_calls_rollouts_and_cache_tiers(server: tuple[ServerProcess, dict[str, str]]) -> None:
    process, tokens = server
    spec = {"components": [{"ref": "exact-match", "name": "em-metrics"}]}
    rollouts = [{"completion": str(i), "answer": "1"} for i in range(5)]
    headers = {"Authorization": f"Bearer {tokens['metrics']}"}
    before = httpx.get(process.http + "/metrics", headers=headers).text
    assert post_http(process, tokens["run"], spec, rollouts).status_code == 200
    assert post_http(process, tokens["run"], spec, rollouts).status_code == 200
    after = httpx.get(process.http + "/metrics", headers=headers).text
    hits = metric(after, "evalsi_reward_cache_hits_total", tier="memory") - metric(
        before, "evalsi_reward_cache_hits_total", tier="memory"
    )
    assert hits >= 5  # the repeated batch came from memory
    scored = metric(after, "evalsi_reward_rollouts_total", project="alpha", status="ok") - metric(
        before, "evalsi_reward_rollouts_total", project="alpha", status="ok"
    )
    assert scored == 10
    assert metric(after, "evalsi_reward_component_seconds_count", evaluator="exact-match") >= 2
    assert metric(after, "evalsi_reward_inflight_rollouts", project="alpha") == 0


def test_a_judge_name_is_resolved_from_the_server_config(server: tuple[ServerProcess, dict[str, str]]) -> None:
    process, tokens = server
    spec = {"components": [{"ref": "test-server-judge", "judge": "strict"}]}
    response = post_http(process, tokens["run"], spec, [{"completion": "a"}])
    assert response.status_code == 200, response.text
    assert response.json()["results"][0]["components"]["test-server-judge"] == {
        "value": 1.0,
        "status": "ok",
        "reason": "m",
    }


def test_code_exec_tests_needs_runs_code_and_runs_on_the_sandbox_pool(
    server: tuple[ServerProcess, dict[str, str]],
) -> None:
    process, tokens = server
    spec = {"components": [{"ref": "code-exec-tests", "sandbox": {"minIsolation": "process"}}]}
    rollout = {"completion": "```python\nprint(int(input()) * 2)\n```", "tests": [{"input": "2", "output": "4"}]}
    refused = post_http(process, tokens["run"], spec, [rollout])
    assert refused.status_code == 403 and "resource.runs_code" in refused.json()["error"]["message"]
    scored = post_http(process, tokens["code"], spec, [rollout, {**rollout, "completion": "print(0)"}])
    assert scored.status_code == 200, scored.text
    local = from_mapping(spec).score([rollout, {**rollout, "completion": "print(0)"}])
    assert [r["total"] for r in scored.json()["results"]] == [r.total for r in local] == [1.0, 0.0]
