"""Evaluation jobs and uploaded evaluators as reward components, against a real server and the real sandbox.

One server process serves the module: an evaluator is uploaded and built in the sandbox, a dataset is stored,
jobs score it (over HTTP JSON, Connect and gRPC), are cancelled, counted against quotas, and each project sees
only its own evaluators, datasets and jobs.
"""

from __future__ import annotations

import shutil
import subprocess
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
from tests.server.evaluation import (
    CAPITALS,
    SLOW,
    TERMINAL,
    chat,
    create_job,
    get,
    headers,
    jsonl,
    post,
    targz,
    upload,
    wait_built,
    wait_state,
)
from tests.server.harness import (
    ServerProcess,
    call_grpc,
    make_token,
    metric,
    post_connect_json,
    post_http,
    write_config,
)

pytestmark = [pytest.mark.timeout(300), pytest.mark.sandbox]

ALL = ["evaluations.run", "resource.runs_code", "evaluators.write"]
ROWS = [
    chat("Capital of France?", "It is Paris.", "Paris"),
    chat("Capital of Japan?", "Kyoto", "Tokyo"),
    chat("Capital of Italy?", "Rome, of course", "Rome"),
    chat("Capital of Peru?", None, "Lima"),  # no reply: a job without a target errors it
]


class Env:
    """The running server, its tokens by name, and the module's evaluator ids."""

    def __init__(self, server: ServerProcess, tokens: dict[str, str]) -> None:
        self.server = server
        self.tokens = tokens

    def __getitem__(self, name: str) -> str:
        return self.tokens[name]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    directory = tmp_path_factory.mktemp("jobs")
    database = f"sqlite:///{directory / 'server.db'}"
    storage = Path(tempfile.mkdtemp(prefix="evalsi-jobs-test-"))  # under /tmp: sandbox users must reach it
    spec = {
        "database": {"url": database},
        "evaluators": {"storage_dir": str(storage)},
        "jobs": {"workers": 3, "batch_rows": 2, "max_active_per_project": 3},
        "quotas": {"team-q": {"max_evaluation_jobs": 1}},
    }
    config = write_config(directory, spec)
    tokens = {
        "a": make_token(database, "team-a", ALL),
        "b": make_token(database, "team-b", ALL),
        "q": make_token(database, "team-q", ALL),
        "a-no-write": make_token(database, "team-a", ["evaluations.run", "resource.runs_code"]),
        "a-no-code": make_token(database, "team-a", ["evaluations.run", "evaluators.write"]),
        "a-write-only": make_token(database, "team-a", ["evaluators.write", "resource.runs_code"]),
        "ops": make_token(database, "ops", ["metrics.read"]),
    }
    with ServerProcess(config) as server:
        environment = Env(server, tokens)
        for token in ("a", "q"):
            assert upload(server, tokens[token], "capitals", {"test_capitals.py": CAPITALS},
                          "test_capitals.py::test_capitals").status_code == 200  # fmt: skip
        for token in ("a", "b", "q"):
            assert upload(server, tokens[token], "slow", {"test_slow.py": SLOW}, "test_slow.py::test_slow").is_success
        for token in ("a", "q"):
            assert post(server, tokens[token], "datasets", {"datasetId": "capitals", "jsonl": jsonl(ROWS)}).is_success
        assert post(server, tokens["b"], "datasets", {"datasetId": "b-rows", "jsonl": jsonl(ROWS)}).is_success
        yield environment
    shutil.rmtree(storage, ignore_errors=True)


def active(env: Env, token: str, evaluator_id: str) -> dict[str, Any]:
    evaluator = wait_built(env.server, env[token], evaluator_id)
    assert evaluator["state"] == "ACTIVE", get(env.server, env[token], f"evaluators/{evaluator_id}/log").text
    return evaluator


def viewer(env: Env, token: str, path: str) -> Any:
    """The server's results viewer's JSON API, as the token's project sees it."""
    answer = httpx.get(f"{env.server.http}/ui/api/{path}", headers=headers(env[token]), timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_an_uploaded_evaluator_is_built_active_and_its_job_writes_metrics_and_an_output_dataset(env: Env) -> None:
    evaluator = active(env, "a", "capitals")
    assert evaluator["mode"] == "pointwise" and evaluator["entry"] == "test_capitals.py::test_capitals"
    log = get(env.server, env["a"], "evaluators/capitals/log").json()["log"]
    assert "unpack the archive" in log and "check the entry" in log and "ready" in log

    created = create_job(env.server, env["a"], "scores-1", "evaluators/capitals", "datasets/capitals", "scored-1")
    assert created.status_code == 200, created.text
    assert created.json()["state"] == "VALIDATING"
    job = wait_state(env.server, env["a"], "scores-1", TERMINAL)
    assert job["state"] == "COMPLETED", job
    # Paris and Rome are named (1), Kyoto is not (0); the Peru row has no reply and is errored.
    assert job["metrics"]["score"] == pytest.approx(2 / 3)
    assert job["metrics"]["words"] == pytest.approx((3 + 1 + 3) / 3)
    stats = job["outputStats"]
    assert (stats["rows"], stats["scored"], stats["errored"]) == (4, 3, 1)
    assert (stats["minScore"], stats["maxScore"]) == (0.0, 1.0)

    dataset = get(env.server, env["a"], "datasets/scored-1?rows=true").json()
    assert dataset["rowCount"] == 4 and dataset["sourceJob"] == "scores-1"
    rows = [orjson.loads(line) for line in dataset["jsonl"].splitlines()]
    assert [r.get("evaluation_result", {}).get("score") for r in rows] == [1.0, 0.0, 1.0, None]
    assert rows[1]["evaluation_result"]["reason"] == "another city"
    assert "no assistant reply" in rows[3]["evaluation_error"]
    assert rows[0]["messages"] == ROWS[0]["messages"] and rows[0]["ground_truth"] == "Paris"

    scraped = httpx.get(env.server.http + "/metrics", headers=headers(env["ops"]), timeout=30).text
    assert metric(scraped, "evalsi_evaluation_jobs_total", state="COMPLETED") >= 1
    assert metric(scraped, "evalsi_evaluator_builds_total", state="ACTIVE") >= 1

    viewed = viewer(env, "a", "sources")
    (shown,) = [run for run in viewed["runs"] if run["label"] == "evaluation-jobs/scores-1.results.json"]
    assert shown["target"] == "evaluator capitals on capitals" and shown["date"]
    summary = viewer(env, "a", f"runs/{shown['id']}")
    assert summary["records"] == 4 and summary["name"] == "job scores-1"
    assert summary["summary"]["metrics"]["score"]["mean"] == pytest.approx(job["metrics"]["score"])
    errored = viewer(env, "a", f"runs/{shown['id']}/records/3")
    assert errored["samples"][0]["scores"]["score"]["status"] == "error"
    assert not [r for r in viewer(env, "b", "sources")["runs"] if "scores-1" in r["label"]]

    again = create_job(env.server, env["a"], "scores-2", "capitals", "capitals", "scored-1")
    assert again.status_code == 422 and "already exists" in again.json()["error"]["message"]
    assert "outputDataset" in again.json()["error"]["message"]


def test_an_uploaded_evaluator_is_a_reward_component_over_every_protocol(env: Env) -> None:
    active(env, "a", "capitals")
    spec = {"components": [{"ref": "evaluator/capitals", "name": "capital"}]}
    rollouts = [
        {"prompt": "Capital of France?", "completion": "Paris", "answer": "Paris"},
        {"prompt": "Capital of Spain?", "completion": "Lisbon", "answer": "Madrid"},
    ]
    answer = post_http(env.server, env["a"], spec, rollouts)
    assert answer.status_code == 200, answer.text
    totals = [r["total"] for r in answer.json()["results"]]
    reasons = [r["components"]["capital"]["reason"] for r in answer.json()["results"]]
    assert totals == [1.0, 0.0] and reasons == ["names the capital", "another city"]
    connect = post_connect_json(env.server, env["a"], spec, rollouts)
    assert connect.status_code == 200 and [r["total"] for r in connect.json()["results"]] == [1.0, 0.0]
    status, body = call_grpc(env.server, env["a"], spec, rollouts)
    assert status == "ok" and [r["total"] for r in body["results"]] == [1.0, 0.0]


def test_a_reward_component_naming_an_unknown_or_unusable_evaluator_is_refused_naming_it(env: Env) -> None:
    rollouts = [{"prompt": "p", "completion": "c", "answer": "a"}]
    unknown = {"components": [{"ref": "exact-match", "name": "e"}, {"ref": "evaluator/nope", "name": "u"}]}
    answer = post_http(env.server, env["a"], unknown, rollouts)
    assert answer.status_code == 404 and "spec.components[1].ref" in answer.json()["error"]["message"]
    forged = {"components": [{"ref": "evaluator/capitals", "params": {"directory": "/etc"}}]}
    answer = post_http(env.server, env["a"], forged, rollouts)
    assert answer.status_code == 403 and "params.directory" in answer.json()["error"]["message"]
    no_code = post_http(env.server, env["a-no-code"], {"components": [{"ref": "evaluator/capitals"}]}, rollouts)
    assert no_code.status_code == 403 and "resource.runs_code" in no_code.json()["error"]["message"]
    broken = {"test_broken.py": "import nonexistent_module_for_this_test\n"}
    assert upload(env.server, env["a"], "broken-ref", broken, "test_broken.py::test_x").status_code == 200
    assert wait_built(env.server, env["a"], "broken-ref")["state"] == "BUILD_FAILED"
    refused = post_http(env.server, env["a"], {"components": [{"ref": "evaluator/broken-ref"}]}, rollouts)
    assert refused.status_code == 400
    assert "spec.components[0].ref" in refused.json()["error"]["message"] and "BUILD_FAILED" in refused.text


def _runner_processes() -> list[str]:
    listing = subprocess.run(["ps", "-ewwo", "args"], capture_output=True, text=True, check=True).stdout
    return [line for line in listing.splitlines() if "evalsi_runner.py serve test_slow.py" in line]


def test_a_cancelled_job_ends_cancelled_and_its_sandbox_processes_are_killed(env: Env) -> None:
    active(env, "a", "slow")
    created = create_job(env.server, env["a"], "slow-1", "slow", "capitals", "slow-out")
    assert created.status_code == 200, created.text
    running = wait_state(env.server, env["a"], "slow-1", ("RUNNING", *TERMINAL))
    assert running["state"] == "RUNNING"
    deadline = time.monotonic() + 30
    while not _runner_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _runner_processes(), "the scoring sandbox never started"
    started = time.monotonic()
    cancelled = post(env.server, env["a"], "evaluationJobs/slow-1/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "CANCELLED"
    while _runner_processes() and time.monotonic() - started < 10:
        time.sleep(0.1)
    assert not _runner_processes(), "the cancelled job's sandbox is still running"
    assert time.monotonic() - started < 10  # the batch sleeps 30 s per row: it was killed, not waited for
    time.sleep(0.5)
    job = get(env.server, env["a"], "evaluationJobs/slow-1").json()
    assert job["state"] == "CANCELLED" and job["message"] == "cancelled by the caller"
    assert get(env.server, env["a"], "datasets/slow-out").status_code == 404


def test_a_projects_job_quota_refuses_further_jobs_until_one_ends(env: Env) -> None:
    active(env, "q", "slow")
    first = create_job(env.server, env["q"], "q-1", "slow", "capitals", "q-out-1")
    assert first.status_code == 200, first.text
    second = create_job(env.server, env["q"], "q-2", "capitals", "capitals", "q-out-2")
    assert second.status_code == 429
    assert "max_evaluation_jobs=1" in second.json()["error"]["message"]
    other = create_job(env.server, env["a"], "a-beside-q", "capitals", "capitals", "a-beside-q-out")
    assert other.status_code == 200, "another project's quota must not limit this one"
    assert post(env.server, env["q"], "evaluationJobs/q-1/cancel").json()["state"] == "CANCELLED"
    third = create_job(env.server, env["q"], "q-3", "capitals", "capitals", "q-out-3")
    assert third.status_code == 200, third.text
    assert wait_state(env.server, env["q"], "q-3", TERMINAL)["state"] == "COMPLETED"


def test_a_projects_queued_jobs_wait_for_its_share_of_the_workers_while_others_run(env: Env) -> None:
    active(env, "b", "slow")
    for job_id in ("b-slow-1", "b-slow-2"):
        assert create_job(env.server, env["b"], job_id, "slow", "b-rows", f"{job_id}-out").status_code == 200
    assert wait_state(env.server, env["b"], "b-slow-1", ("RUNNING",))["state"] == "RUNNING"
    created = create_job(env.server, env["a"], "a-while-b", "capitals", "capitals", "a-while-b-out")
    assert created.status_code == 200, created.text
    assert wait_state(env.server, env["a"], "a-while-b", TERMINAL)["state"] == "COMPLETED"
    # team-b's share of the three workers is one (project_share 0.5): its second job is still queued
    assert get(env.server, env["b"], "evaluationJobs/b-slow-2").json()["state"] == "VALIDATING"
    for job_id in ("b-slow-2", "b-slow-1"):
        assert post(env.server, env["b"], f"evaluationJobs/{job_id}/cancel").json()["state"] == "CANCELLED"


def test_one_project_cannot_see_or_use_another_projects_evaluators_datasets_or_jobs(env: Env) -> None:
    active(env, "a", "capitals")
    created = create_job(env.server, env["a"], "private-job", "capitals", "capitals", "private-out")
    assert created.status_code == 200
    wait_state(env.server, env["a"], "private-job", TERMINAL)
    for path in ("evaluators/capitals", "evaluators/capitals/log", "datasets/capitals", "datasets/private-out",
                 "evaluationJobs/private-job"):  # fmt: skip
        assert get(env.server, env["b"], path).status_code == 404, path
        assert get(env.server, env["a"], path).status_code == 200, path
    assert post(env.server, env["b"], "evaluationJobs/private-job/cancel").status_code == 404
    deleted = httpx.delete(env.server.http + "/v1alpha1/datasets/capitals", headers=headers(env["b"]))
    assert deleted.status_code == 404
    used = create_job(env.server, env["b"], "steal", "evaluators/capitals", "capitals", "steal-out")
    assert used.status_code == 404 and "evaluator" in used.json()["error"]["message"]
    spec = {"components": [{"ref": "evaluator/capitals"}]}
    reward = post_http(env.server, env["b"], spec, [{"prompt": "p", "completion": "Paris", "answer": "Paris"}])
    assert reward.status_code == 404


def test_permissions_uploads_need_evaluators_write_and_runs_code_jobs_need_evaluations_run(env: Env) -> None:
    files = {"test_capitals.py": CAPITALS}
    entry = "test_capitals.py::test_capitals"
    no_write = upload(env.server, env["a-no-write"], "perm-1", files, entry)
    assert no_write.status_code == 403 and "evaluators.write" in no_write.json()["error"]["message"]
    no_code = upload(env.server, env["a-no-code"], "perm-2", files, entry)
    assert no_code.status_code == 403 and "resource.runs_code" in no_code.json()["error"]["message"]
    job = create_job(env.server, env["a-write-only"], "perm-job", "capitals", "capitals", "perm-out")
    assert job.status_code == 403 and "evaluations.run" in job.json()["error"]["message"]
    dataset = post(env.server, env["a-write-only"], "datasets", {"datasetId": "perm", "jsonl": jsonl(ROWS)})
    assert dataset.status_code == 403
    assert get(env.server, env["a-write-only"], "evaluators/capitals").status_code == 200  # its own evaluators
    missing = httpx.get(env.server.http + "/v1alpha1/evaluators/capitals", timeout=30)
    assert missing.status_code == 401


def test_datasets_and_jobs_over_grpc_and_connect(env: Env) -> None:
    active(env, "a", "capitals")
    metadata = (("authorization", f"Bearer {env['a']}"),)
    with grpc.insecure_channel(env.server.grpc) as channel:
        create_dataset = channel.unary_unary(
            "/evalsi.v1alpha1.DatasetService/CreateDataset",
            request_serializer=pb.CreateDatasetRequest.SerializeToString,
            response_deserializer=pb.Dataset.FromString,
        )
        dataset = create_dataset(pb.CreateDatasetRequest(dataset_id="grpc-rows", jsonl=jsonl(ROWS[:3])),
                                 metadata=metadata, timeout=30)  # fmt: skip
        assert dataset.row_count == 3 and dataset.name == "datasets/grpc-rows"
        create_job_rpc = channel.unary_unary(
            "/evalsi.v1alpha1.EvaluationJobService/CreateEvaluationJob",
            request_serializer=pb.CreateEvaluationJobRequest.SerializeToString,
            response_deserializer=pb.EvaluationJob.FromString,
        )
        job = pb.EvaluationJob(evaluator="capitals", input_dataset="grpc-rows", output_dataset="grpc-out")
        created = create_job_rpc(pb.CreateEvaluationJobRequest(evaluation_job=job, evaluation_job_id="grpc-job"),
                                 metadata=metadata, timeout=30)  # fmt: skip
        assert created.state == "VALIDATING"
        with pytest.raises(grpc.RpcError) as refused:
            create_job_rpc(pb.CreateEvaluationJobRequest(evaluation_job=job, evaluation_job_id="grpc-job-2"),
                           metadata=(("authorization", f"Bearer {env['b']}"),), timeout=30)  # fmt: skip
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND
        create_evaluator = channel.unary_unary(
            "/evalsi.v1alpha1.EvaluatorService/CreateEvaluator",
            request_serializer=pb.CreateEvaluatorRequest.SerializeToString,
            response_deserializer=pb.Evaluator.FromString,
        )
        upload_request = pb.CreateEvaluatorRequest(
            evaluator_id="grpc-eval",
            entry="test_capitals.py::test_capitals",
            archive=targz({"test_capitals.py": CAPITALS}),
        )
        assert create_evaluator(upload_request, metadata=metadata, timeout=30).state == "BUILDING"
    wait_state(env.server, env["a"], "grpc-job", TERMINAL)
    assert wait_built(env.server, env["a"], "grpc-eval")["state"] == "ACTIVE"
    log = httpx.post(
        env.server.http + "/evalsi.v1alpha1.EvaluatorService/GetEvaluatorBuildLog",
        content=orjson.dumps({"evaluatorId": "grpc-eval"}),
        headers={**headers(env["a"]), "Content-Type": "application/json", "Connect-Protocol-Version": "1"},
        timeout=30,
    )
    assert log.status_code == 200 and "check the entry" in log.json()["log"]
    answer = httpx.post(
        env.server.http + "/evalsi.v1alpha1.EvaluationJobService/GetEvaluationJob",
        content=orjson.dumps({"evaluationJobId": "grpc-job"}),
        headers={**headers(env["a"]), "Content-Type": "application/json", "Connect-Protocol-Version": "1"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    job_json = answer.json()
    assert job_json["state"] == "COMPLETED" and job_json["metrics"]["score"] == pytest.approx(2 / 3)
    message = json_format.ParseDict(job_json, pb.EvaluationJob())
    assert message.output_stats.scored == 3


def test_the_cli_uploads_creates_a_dataset_and_waits_for_a_job(env: Env, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from evalsi.cli.main import app

    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / ".git" / "config").write_text("[core]\n")
    (project / "test_capitals.py").write_text(CAPITALS)
    (project / ".gitignore").write_text("*.log\n")
    (project / "debug.log").write_text("x" * 100)
    data = tmp_path / "rows.jsonl"
    data.write_text(jsonl(ROWS))
    cli_env = {"EVALSI_SERVER": env.server.http, "EVALSI_TOKEN": env["a"]}
    runner = CliRunner()
    uploaded = runner.invoke(
        app, ["evaluators", "upload", str(project), "--entry", "test_capitals.py::test_capitals", "--id", "cli-eval"],
        env=cli_env,
    )  # fmt: skip
    assert uploaded.exit_code == 0, uploaded.output
    assert '"state": "ACTIVE"' in uploaded.stdout
    assert runner.invoke(app, ["datasets", "create", "cli-rows", str(data)], env=cli_env).exit_code == 0
    created = runner.invoke(app, ["jobs", "create", "--evaluator", "cli-eval", "--input-dataset", "cli-rows",
                                  "--output-dataset", "cli-out", "--id", "cli-job"], env=cli_env)  # fmt: skip
    assert created.exit_code == 0, created.output
    waited = runner.invoke(app, ["jobs", "wait", "cli-job", "--interval", "0.2"], env=cli_env)
    assert waited.exit_code == 0 and '"COMPLETED"' in waited.stdout
    saved = tmp_path / "out.jsonl"
    assert runner.invoke(app, ["datasets", "get", "cli-out", "-o", str(saved)], env=cli_env).exit_code == 0
    assert len(saved.read_text().splitlines()) == 4
    log = runner.invoke(app, ["evaluators", "log", "cli-eval"], env=cli_env)
    assert log.exit_code == 0 and "check the entry" in log.stdout
    slow = runner.invoke(app, ["jobs", "create", "--evaluator", "slow", "--input-dataset", "cli-rows",
                               "--output-dataset", "cli-slow-out", "--id", "cli-slow"], env=cli_env)  # fmt: skip
    assert slow.exit_code == 0, slow.output
    assert runner.invoke(app, ["jobs", "cancel", "cli-slow"], env=cli_env).exit_code == 0
    waited = runner.invoke(app, ["jobs", "wait", "cli-slow", "--interval", "0.2"], env=cli_env)
    assert waited.exit_code == 1 and "CANCELLED" in waited.output
    refused = runner.invoke(app, ["datasets", "get", "no-such-dataset"], env=cli_env)
    assert refused.exit_code == 2 and "no dataset" in refused.output
