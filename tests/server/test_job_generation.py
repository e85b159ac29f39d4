"""Evaluation jobs that generate missing replies with a target the operator configures, then score them.

One server process serves the module, with one named target: the scripted OpenAI-compatible server on loopback
(a real socket; it records every request body). Scoring runs in the real sandbox.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import orjson
import pytest
from google.protobuf import json_format

from evalsi.server._proto.evalsi.v1alpha1 import evaluation_pb2 as pb
from tests.helpers.openai_server import OpenAIServer
from tests.server.evaluation import CAPITALS, TERMINAL, chat, get, headers, jsonl, post, upload, wait_built, wait_state
from tests.server.harness import ServerProcess, make_token, metric, write_config

pytestmark = [pytest.mark.timeout(300), pytest.mark.sandbox]

ALL = ["evaluations.run", "resource.runs_code", "evaluators.write"]
ANSWERS = {
    "Capital of France?": "It is Paris.",
    "Capital of Japan?": "Kyoto",
    "Capital of Peru?": "Lima is the capital",
    "Capital of Chile?": "Santiago",
}
QUESTIONS = [
    chat("Capital of France?", None, "Paris"),
    chat("Capital of Japan?", None, "Tokyo"),
    chat("Capital of Italy?", "Rome, of course", "Rome"),  # holds its reply: scored as it is, nothing generated
    chat("Capital of Peru?", None, "Lima"),
]
SECRET_BODY = "injected"  # what the loopback server's injected failures answer: never to reach a tenant


class Env:
    """The running server, the scripted upstream, and the module's token."""

    def __init__(
        self,
        server: ServerProcess,
        upstream: OpenAIServer,
        broken: OpenAIServer,
        token: str,
        ops: str,
        others: list[str],
    ) -> None:
        self.server = server
        self.upstream = upstream
        self.broken = broken
        """A replica of the ``replicas`` target that answers every request with 500."""
        self.token = token
        self.ops = ops
        self.others = others
        """Tokens of two further projects."""


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    directory = tmp_path_factory.mktemp("generation")
    database = f"sqlite:///{directory / 'server.db'}"
    storage = Path(tempfile.mkdtemp(prefix="evalsi-generation-test-"))  # under /tmp: sandbox users must reach it
    with OpenAIServer(answers=ANSWERS, default="I do not know") as upstream, OpenAIServer() as broken:
        broken.inject(status=500, times=1_000_000)
        target = {"base_url": upstream.base_url, "model": "test-model", "max_tokens": 64, "max_concurrency": 4,
                  "timeout": 60, "retries": 1, "retry_backoff": 0}  # fmt: skip
        spec = {
            "database": {"url": database},
            "evaluators": {"storage_dir": str(storage)},
            "jobs": {"workers": 4, "batch_rows": 2, "max_active_per_project": 4},
            "targets": {
                "tiny": target,
                "keyed": {**target, "api_key_env": "EVALSI_TEST_TARGET_KEY"},
                "unkeyed": {**target, "api_key_env": "EVALSI_TEST_TARGET_KEY_UNSET"},
                "narrow": {**target, "max_concurrency": 2},  # each project: project_share 0.5 of it, 1 request
                "replicas": {
                    **{k: v for k, v in target.items() if k != "base_url"},
                    "base_urls": [broken.base_url, upstream.base_url],
                },
            },
        }
        config = write_config(directory, spec)
        os.environ["EVALSI_TEST_TARGET_KEY"] = "sk-test-operator-key"  # the server process inherits it
        token = make_token(database, "team-g", ALL)
        ops = make_token(database, "ops", ["metrics.read"])
        others = [make_token(database, project, ALL) for project in ("team-h", "team-i")]
        with ServerProcess(config) as server:
            files = {"test_capitals.py": CAPITALS}
            uploaded = upload(server, token, "capitals", files, "test_capitals.py::test_capitals")
            assert uploaded.status_code == 200, uploaded.text
            assert post(server, token, "datasets", {"datasetId": "questions", "jsonl": jsonl(QUESTIONS)}).is_success
            assert wait_built(server, token, "capitals")["state"] == "ACTIVE"
            yield Env(server, upstream, broken, token, ops, others)
    os.environ.pop("EVALSI_TEST_TARGET_KEY", None)
    shutil.rmtree(storage, ignore_errors=True)


def create(env: Env, job_id: str, source: str, output: str, **extra: Any) -> httpx.Response:
    job = {"evaluator": "capitals", "inputDataset": source, "outputDataset": output, **extra}
    return post(env.server, env.token, "evaluationJobs", {"evaluationJob": job, "evaluationJobId": job_id})


def output_rows(env: Env, dataset: str) -> list[dict[str, Any]]:
    found = get(env.server, env.token, f"datasets/{dataset}?rows=true").json()
    return [orjson.loads(line) for line in found["jsonl"].splitlines()]


def bodies(env: Env, prompts: set[str], since: int) -> list[dict[str, Any]]:
    """The upstream's request bodies for these prompts, from request number ``since`` on."""
    return [b for b in env.upstream.requests[since:] if b["messages"][-1]["content"] in prompts]


def test_a_job_with_a_target_generates_the_missing_replies_and_scores_them(env: Env) -> None:
    since = len(env.upstream.requests)
    params = {"temperature": 0.2, "max_tokens": 5000, "seed": 7, "stop": ["END"]}
    created = create(env, "gen-1", "questions", "gen-out-1", target="tiny", completionParams=params)
    assert created.status_code == 200, created.text
    assert created.json()["target"] == "tiny"
    assert created.json()["completionParams"]["max_tokens"] == 64  # clamped to the target's ceiling
    job = wait_state(env.server, env.token, "gen-1", TERMINAL)
    assert job["state"] == "COMPLETED", job
    # France and Peru named (1), Japan answered Kyoto (0), Italy's own reply names Rome (1).
    assert job["metrics"]["score"] == pytest.approx(3 / 4)
    stats = job["outputStats"]
    assert (stats["rows"], stats["scored"], stats["errored"]) == (4, 4, 0)
    assert (int(stats["generated"]), int(stats.get("generationFailed", 0))) == (3, 0)

    sent = bodies(env, {"Capital of France?", "Capital of Japan?", "Capital of Peru?", "Capital of Italy?"}, since)
    assert sorted(b["messages"][-1]["content"] for b in sent) == ["Capital of France?", "Capital of Japan?",
                                                                   "Capital of Peru?"]  # fmt: skip
    for body in sent:
        assert body["model"] == "test-model" and body["max_tokens"] == 64
        assert body["temperature"] == 0.2 and body["seed"] == 7 and body["stop"] == ["END"]
        assert set(body) == {"model", "messages", "temperature", "max_tokens", "seed", "stop"}

    rows = output_rows(env, "gen-out-1")
    assert [r["messages"][-1]["content"] for r in rows] == ["It is Paris.", "Kyoto", "Rome, of course",
                                                            "Lima is the capital"]  # fmt: skip
    assert all(r["messages"][-1]["role"] == "assistant" for r in rows)
    assert [r["evaluation_result"]["score"] for r in rows] == [1.0, 0.0, 1.0, 1.0]
    generation = rows[0]["generation"]
    assert generation["target"] == "tiny" and generation["finish_reason"] == "stop"
    assert generation["completion_tokens"] == 3 and generation["latency_s"] >= 0
    assert "generation" not in rows[2]  # its reply was the dataset's


def test_a_target_of_two_replicas_one_failing_generates_every_row_on_the_other(env: Env) -> None:
    since, tried = len(env.upstream.requests), env.broken.request_count()
    created = create(env, "replicas-1", "questions", "replicas-out-1", target="replicas")
    assert created.status_code == 200, created.text
    job = wait_state(env.server, env.token, "replicas-1", TERMINAL)
    assert job["state"] == "COMPLETED", job
    stats = job["outputStats"]
    assert (stats["rows"], stats["scored"], stats["errored"]) == (4, 4, 0)
    assert (int(stats["generated"]), int(stats.get("generationFailed", 0))) == (3, 0)
    assert env.broken.request_count() > tried  # the failing replica was asked, and its requests went elsewhere
    sent = bodies(env, {"Capital of France?", "Capital of Japan?", "Capital of Peru?"}, since)
    assert sorted(b["messages"][-1]["content"] for b in sent) == ["Capital of France?", "Capital of Japan?",
                                                                   "Capital of Peru?"]  # fmt: skip
    rows = output_rows(env, "replicas-out-1")
    assert [r["messages"][-1]["content"] for r in rows] == ["It is Paris.", "Kyoto", "Rome, of course",
                                                            "Lima is the capital"]  # fmt: skip
    assert [r["evaluation_result"]["score"] for r in rows] == [1.0, 0.0, 1.0, 1.0]
    assert rows[0]["generation"]["target"] == "replicas"


def test_a_job_without_a_target_still_scores_rows_as_given(env: Env) -> None:
    since = len(env.upstream.requests)
    assert create(env, "plain-1", "questions", "plain-out-1").status_code == 200
    job = wait_state(env.server, env.token, "plain-1", TERMINAL)
    assert job["state"] == "COMPLETED", job
    assert (job["outputStats"]["scored"], job["outputStats"]["errored"]) == (1, 3)
    assert int(job["outputStats"].get("generated", 0)) == 0
    assert len(env.upstream.requests) == since
    assert "name a target" in output_rows(env, "plain-out-1")[0]["evaluation_error"]


def test_an_unknown_target_is_refused_naming_it_and_the_valid_ones(env: Env) -> None:
    refused = create(env, "gen-unknown", "questions", "gen-unknown-out", target="gpt-9")
    assert refused.status_code == 400, refused.text
    message = refused.json()["error"]["message"]
    assert "evaluationJob.target" in message and "'gpt-9'" in message and "tiny" in message
    assert get(env.server, env.token, "evaluationJobs/gen-unknown").status_code == 404


@pytest.mark.parametrize(
    ("params", "status", "named"),
    [
        ({"base_url": "http://169.254.169.254/v1"}, 403, "completionParams.base_url"),
        ({"baseUrls": ["http://127.0.0.1:1/v1", "http://169.254.169.254/v1"]}, 403, "completionParams.baseUrls"),
        ({"api_key": "sk-x"}, 403, "completionParams.api_key"),
        ({"extra_body": {"guided_json": {}}}, 403, "completionParams.extra_body"),
        ({"headers": {"X-Admin": "1"}}, 403, "completionParams.headers"),
        ({"model": "other"}, 403, "completionParams.model"),
        ({"logit_bias": {"1": 5}}, 400, "completionParams.logit_bias"),
        ({"n": 4}, 400, "completionParams.n"),
        ({"max_tokens": 2.5}, 400, "completionParams.max_tokens"),
        ({"temperature": -1}, 400, "completionParams.temperature"),
    ],
)
def test_a_completion_param_beyond_sampling_is_refused_naming_it(
    env: Env, params: dict[str, Any], status: int, named: str
) -> None:
    since = len(env.upstream.requests)
    refused = create(env, "gen-bad", "questions", "gen-bad-out", target="tiny", completionParams=params)
    assert refused.status_code == status, refused.text
    assert named in refused.json()["error"]["message"]
    assert get(env.server, env.token, "evaluationJobs/gen-bad").status_code == 404
    assert len(env.upstream.requests) == since


def test_completion_params_without_a_target_are_refused(env: Env) -> None:
    refused = create(env, "gen-no-target", "questions", "gen-nt-out", completionParams={"temperature": 0.5})
    assert refused.status_code == 400 and "evaluationJob.target" in refused.json()["error"]["message"]


def test_an_upstream_failing_with_500s_errors_its_rows_without_its_body(env: Env) -> None:
    rows = [chat("Capital of France?", None, "Paris"), chat("Capital of Spain?", None, "Madrid")]
    assert post(env.server, env.token, "datasets", {"datasetId": "spain", "jsonl": jsonl(rows)}).is_success
    env.upstream.inject(status=500, prompt="Capital of Spain?", times=2)  # retries: 1, so two attempts fail
    assert create(env, "gen-500", "spain", "gen-500-out", target="tiny").status_code == 200
    job = wait_state(env.server, env.token, "gen-500", TERMINAL)
    assert job["state"] == "COMPLETED", job
    stats = job["outputStats"]
    assert (stats["scored"], stats["errored"], int(stats["generated"]), int(stats["generationFailed"])) == (1, 1, 1, 1)
    assert env.upstream.request_count("Capital of Spain?") == 2
    error = output_rows(env, "gen-500-out")[1]["evaluation_error"]
    assert error == "generation failed: gave up after 2 attempts; last: HTTP 500 Internal Server Error"
    assert SECRET_BODY not in error and "127.0.0.1" not in error

    # Every row failing fails the job, with the same reason and still nothing the upstream answered.
    lone = [chat("Capital of Chad?", None, "N'Djamena")]
    assert post(env.server, env.token, "datasets", {"datasetId": "chad", "jsonl": jsonl(lone)}).is_success
    env.upstream.inject(status=503, prompt="Capital of Chad?", times=2)
    assert create(env, "gen-503", "chad", "gen-503-out", target="tiny").status_code == 200
    failed = wait_state(env.server, env.token, "gen-503", TERMINAL)
    assert failed["state"] == "FAILED" and "HTTP 503 Service Unavailable" in failed["message"], failed
    assert SECRET_BODY not in failed["message"] and "127.0.0.1" not in failed["message"]


def test_cancelling_a_job_during_generation_stops_it_at_once(env: Env) -> None:
    rows = [chat("Capital of Mali?", None, "Bamako")]
    assert post(env.server, env.token, "datasets", {"datasetId": "mali", "jsonl": jsonl(rows)}).is_success
    env.upstream.inject(delay=40, prompt="Capital of Mali?")
    assert create(env, "gen-cancel", "mali", "gen-cancel-out", target="tiny").status_code == 200
    deadline = time.monotonic() + 60
    while env.upstream.request_count("Capital of Mali?") == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert env.upstream.request_count("Capital of Mali?") == 1, "the job never asked the target"
    started = time.monotonic()
    cancelled = post(env.server, env.token, "evaluationJobs/gen-cancel/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "CANCELLED"
    while _running(env) and time.monotonic() - started < 10:
        time.sleep(0.1)
    assert not _running(env), "the job's worker still waits for the upstream"
    assert time.monotonic() - started < 10  # the upstream stalls 40 s: the request was dropped, not waited for
    assert get(env.server, env.token, "evaluationJobs/gen-cancel").json()["state"] == "CANCELLED"
    assert get(env.server, env.token, "datasets/gen-cancel-out").status_code == 404
    assert env.upstream.request_count("Capital of Mali?") == 1  # not retried after the cancel


def _running(env: Env) -> float:
    scraped = httpx.get(env.server.http + "/metrics", headers=headers(env.ops), timeout=30).text
    return metric(scraped, "evalsi_evaluation_jobs_running")


def test_a_generating_job_over_grpc_and_connect(env: Env) -> None:
    metadata = (("authorization", f"Bearer {env.token}"),)
    job = pb.EvaluationJob(evaluator="capitals", input_dataset="questions", output_dataset="grpc-gen-out",
                           target="tiny")  # fmt: skip
    job.completion_params.update({"temperature": 0.0, "maxTokens": 16})
    with grpc.insecure_channel(env.server.grpc) as channel:
        create_rpc = channel.unary_unary(
            "/evalsi.v1alpha1.EvaluationJobService/CreateEvaluationJob",
            request_serializer=pb.CreateEvaluationJobRequest.SerializeToString,
            response_deserializer=pb.EvaluationJob.FromString,
        )
        created = create_rpc(pb.CreateEvaluationJobRequest(evaluation_job=job, evaluation_job_id="grpc-gen"),
                             metadata=metadata, timeout=30)  # fmt: skip
        assert created.target == "tiny" and created.completion_params["max_tokens"] == 16
        job.completion_params.update({"base_url": "http://127.0.0.1:1/v1"})
        with pytest.raises(grpc.RpcError) as refused:
            create_rpc(pb.CreateEvaluationJobRequest(evaluation_job=job, evaluation_job_id="grpc-gen-2"),
                       metadata=metadata, timeout=30)  # fmt: skip
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "completionParams.base_url" in (refused.value.details() or "")
    assert wait_state(env.server, env.token, "grpc-gen", TERMINAL)["state"] == "COMPLETED"
    connect_headers = {**headers(env.token), "Content-Type": "application/json", "Connect-Protocol-Version": "1"}
    create_path = env.server.http + "/evalsi.v1alpha1.EvaluationJobService/CreateEvaluationJob"
    connect_job = {"evaluator": "capitals", "inputDataset": "questions", "outputDataset": "connect-gen-out",
                   "target": "tiny", "completionParams": {"seed": 1}}  # fmt: skip
    c_refused = httpx.post(
        create_path,
        headers=connect_headers,
        timeout=30,
        content=orjson.dumps(
            {"evaluationJob": {**connect_job, "completionParams": {"extra_body": {}}}, "evaluationJobId": "connect-gen"}
        ),
    )
    assert c_refused.status_code == 403 and c_refused.json()["code"] == "permission_denied", c_refused.text
    assert "completionParams.extra_body" in c_refused.json()["message"]
    c_created = httpx.post(
        create_path,
        headers=connect_headers,
        timeout=30,
        content=orjson.dumps({"evaluationJob": connect_job, "evaluationJobId": "connect-gen"}),
    )
    assert c_created.status_code == 200 and c_created.json()["completionParams"] == {"seed": 1, "max_tokens": 64}
    assert wait_state(env.server, env.token, "connect-gen", TERMINAL)["state"] == "COMPLETED"
    answer = httpx.post(
        env.server.http + "/evalsi.v1alpha1.EvaluationJobService/GetEvaluationJob",
        content=orjson.dumps({"evaluationJobId": "grpc-gen"}),
        headers={**headers(env.token), "Content-Type": "application/json", "Connect-Protocol-Version": "1"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    message = json_format.ParseDict(answer.json(), pb.EvaluationJob())
    assert message.target == "tiny" and message.output_stats.generated == 3
    assert message.metrics["score"] == pytest.approx(3 / 4)


def test_the_cli_creates_a_generating_job_with_params(env: Env) -> None:
    from typer.testing import CliRunner

    from evalsi.cli.main import app

    since = len(env.upstream.requests)
    cli_env = {"EVALSI_SERVER": env.server.http, "EVALSI_TOKEN": env.token}
    runner = CliRunner()
    created = runner.invoke(app, ["jobs", "create", "--evaluator", "capitals", "--input-dataset", "questions",
                                  "--output-dataset", "cli-gen-out", "--id", "cli-gen", "--target", "tiny",
                                  "--param", "temperature=0.7", "--param", "max_tokens=32", "--param", "stop=END"],
                            env=cli_env)  # fmt: skip
    assert created.exit_code == 0, created.output
    waited = runner.invoke(app, ["jobs", "wait", "cli-gen", "--interval", "0.2"], env=cli_env)
    assert waited.exit_code == 0 and '"COMPLETED"' in waited.stdout, waited.output
    sent = bodies(env, set(ANSWERS), since)
    assert len(sent) == 3
    assert all(b["temperature"] == 0.7 and b["max_tokens"] == 32 and b["stop"] == ["END"] for b in sent)
    refused = runner.invoke(app, ["jobs", "create", "--evaluator", "capitals", "--input-dataset", "questions",
                                  "--output-dataset", "cli-gen-out-2", "--param", "temperature=0.7"],
                            env=cli_env)  # fmt: skip
    assert refused.exit_code == 2 and "--target" in refused.output


def test_a_targets_api_key_comes_from_the_servers_environment_and_a_missing_one_fails_the_job(env: Env) -> None:
    lone = [chat("Capital of Chile?", None, "Santiago")]
    assert post(env.server, env.token, "datasets", {"datasetId": "chile", "jsonl": jsonl(lone)}).is_success
    since = len(env.upstream.headers)
    assert create(env, "gen-keyed", "chile", "gen-keyed-out", target="keyed").status_code == 200
    assert wait_state(env.server, env.token, "gen-keyed", TERMINAL)["state"] == "COMPLETED"
    assert [h.get("authorization") for h in env.upstream.headers[since:]] == ["Bearer sk-test-operator-key"]

    assert create(env, "gen-unkeyed", "chile", "gen-unkeyed-out", target="unkeyed").status_code == 200
    failed = wait_state(env.server, env.token, "gen-unkeyed", TERMINAL)
    assert failed["state"] == "FAILED" and "'unkeyed'" in failed["message"] and "API key" in failed["message"]
    assert len(env.upstream.headers) == since + 1  # nothing was sent without the key


def test_a_targets_requests_are_bounded_across_jobs_and_each_project_holds_its_share(env: Env) -> None:
    tokens = [env.token, *env.others]
    for token in env.others:
        assert upload(env.server, token, "capitals", {"test_capitals.py": CAPITALS},
                      "test_capitals.py::test_capitals").status_code == 200  # fmt: skip
    for project, token in enumerate(tokens):
        rows = [chat(f"Narrow {project}-{i}?", None, "x") for i in range(4)]
        assert post(env.server, token, "datasets", {"datasetId": "narrow", "jsonl": jsonl(rows)}).is_success
    for token in env.others:
        assert wait_built(env.server, token, "capitals")["state"] == "ACTIVE"

    def run(job_id: str, project_tokens: list[str]) -> None:
        for project in range(len(project_tokens)):
            for i in range(4):
                env.upstream.inject(delay=0.4, prompt=f"Narrow {project}-{i}?")
        env.upstream.reset_peak("Narrow ")
        for token in project_tokens:
            body = {"evaluator": "capitals", "inputDataset": "narrow", "outputDataset": f"{job_id}-out",
                    "target": "narrow"}  # fmt: skip
            created = post(env.server, token, "evaluationJobs", {"evaluationJob": body, "evaluationJobId": job_id})
            assert created.status_code == 200, created.text
        for token in project_tokens:
            job = wait_state(env.server, token, job_id, TERMINAL)
            assert job["state"] == "COMPLETED" and int(job["outputStats"]["generated"]) == 4, job

    # One project alone: its share of the target is one request, though a batch has two rows to generate.
    run("narrow-1", tokens[:1])
    assert env.upstream.peak_in_flight == 1
    # Three projects at once: one request each would be three, but the target allows two across all jobs.
    run("narrow-3", tokens)
    assert env.upstream.peak_in_flight == 2
