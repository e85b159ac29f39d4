"""Listing a project's evaluators, datasets and evaluation jobs, and deleting evaluators and jobs, on a real server.

One server process serves the module, with the real sandbox building and running the uploaded evaluators.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import orjson
import pytest

from evalsi.server._proto.evalsi.v1alpha1 import evaluation_pb2 as pb
from evalsi.server.evaluation._ids import project_dir
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
    upload,
    wait_built,
    wait_state,
)
from tests.server.harness import ServerProcess, make_token, post_http, write_config

pytestmark = [pytest.mark.timeout(300), pytest.mark.sandbox]

ALL = ["evaluations.run", "resource.runs_code", "evaluators.write"]
ROWS = [chat("Capital of France?", "Paris", "Paris"), chat("Capital of Japan?", "Kyoto", "Tokyo")]
CAPITALS_FILES = {"test_capitals.py": CAPITALS}
CAPITALS_ENTRY = "test_capitals.py::test_capitals"
ROLLOUTS = [{"prompt": "Capital of France?", "completion": "Paris", "answer": "Paris"}]


class Env:
    """The running server, its evaluator storage and its tokens by name."""

    def __init__(self, server: ServerProcess, storage: Path, tokens: dict[str, str]) -> None:
        self.server = server
        self.storage = storage
        self.tokens = tokens

    def __getitem__(self, name: str) -> str:
        return self.tokens[name]

    def evaluator_dir(self, project: str, evaluator_id: str) -> Path:
        return self.storage / project_dir(project) / evaluator_id


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    directory = tmp_path_factory.mktemp("lists")
    database = f"sqlite:///{directory / 'server.db'}"
    storage = Path(tempfile.mkdtemp(prefix="evalsi-lists-test-"))  # under /tmp: sandbox users must reach it
    spec = {
        "database": {"url": database},
        "evaluators": {"storage_dir": str(storage)},
        "jobs": {"workers": 2, "batch_rows": 2, "max_active_per_project": 5},
    }
    config = write_config(directory, spec)
    tokens = {
        "a": make_token(database, "team-a", ALL),
        "b": make_token(database, "team-b", ALL),
        "a-run": make_token(database, "team-a", ["evaluations.run", "resource.runs_code"]),
        "a-write": make_token(database, "team-a", ["evaluators.write", "resource.runs_code"]),
    }
    with ServerProcess(config) as server:
        assert upload(server, tokens["a"], "capitals", CAPITALS_FILES, CAPITALS_ENTRY).status_code == 200
        assert upload(server, tokens["a"], "slow", {"test_slow.py": SLOW}, "test_slow.py::test_slow").is_success
        assert upload(server, tokens["b"], "b-capitals", CAPITALS_FILES, CAPITALS_ENTRY).is_success
        for token, dataset in (("a", "capitals"), ("b", "b-rows")):
            assert post(server, tokens[token], "datasets", {"datasetId": dataset, "jsonl": jsonl(ROWS)}).is_success
        yield Env(server, storage, tokens)
    shutil.rmtree(storage, ignore_errors=True)


def active(env: Env, token: str, evaluator_id: str) -> None:
    evaluator = wait_built(env.server, env[token], evaluator_id)
    assert evaluator["state"] == "ACTIVE", get(env.server, env[token], f"evaluators/{evaluator_id}/log").text


def every_page(env: Env, token: str, path: str, key: str, **query: Any) -> tuple[list[str], int]:
    """The ids of every page of a listing, and how many pages it took."""
    ids: list[str] = []
    pages, page_token = 0, ""
    while True:
        params = {**query, **({"pageToken": page_token} if page_token else {})}
        answer = httpx.get(f"{env.server.http}/v1alpha1/{path}", params=params, headers=headers(env[token]))
        assert answer.status_code == 200, answer.text
        body = answer.json()
        ids += [item["name"].rpartition("/")[2] for item in body[key]]
        pages += 1
        page_token = body["nextPageToken"]
        if not page_token:
            return ids, pages


def delete(env: Env, token: str, path: str) -> httpx.Response:
    return httpx.delete(f"{env.server.http}/v1alpha1/{path}", headers=headers(env[token]), timeout=60)


def test_datasets_are_listed_newest_first_in_pages_each_project_its_own(env: Env) -> None:
    created = [f"page-{i}" for i in range(5)]
    for dataset_id in created:
        assert post(env.server, env["a"], "datasets", {"datasetId": dataset_id, "jsonl": jsonl(ROWS)}).is_success
    ids, pages = every_page(env, "a", "datasets", "datasets", pageSize=2)
    assert ids[:5] == created[::-1] and "capitals" in ids and len(ids) == len(set(ids))
    assert pages == (len(ids) + 1) // 2
    assert "b-rows" not in ids
    assert every_page(env, "b", "datasets", "datasets")[0] == ["b-rows"]
    first = get(env.server, env["a"], "datasets?pageSize=1").json()["datasets"][0]
    assert first["rowCount"] == 2 and first["jsonl"] == "" and first["createTime"]  # rows are never listed

    # A dataset deleted between two pages is neither repeated nor makes the next page skip one.
    answer = get(env.server, env["a"], "datasets?pageSize=2").json()
    assert delete(env, "a", "datasets/page-2").status_code == 200
    rest = get(env.server, env["a"], f"datasets?pageSize=2&pageToken={answer['nextPageToken']}").json()
    assert [d["datasetId"] for d in rest["datasets"]] == ["page-1", "page-0"]


def test_a_bad_page_size_token_or_query_is_refused_naming_it(env: Env) -> None:
    token = get(env.server, env["a"], "datasets?pageToken=not-a-token")
    assert token.status_code == 400 and "pageToken" in token.json()["error"]["message"]
    size = get(env.server, env["a"], "evaluators?pageSize=-1")
    assert size.status_code == 400 and "pageSize" in size.json()["error"]["message"]
    unknown = get(env.server, env["a"], "evaluationJobs?colour=red")
    assert unknown.status_code == 400 and "colour" in unknown.json()["error"]["message"]
    state = get(env.server, env["a"], "evaluationJobs?state=DONE")
    assert state.status_code == 400
    assert "DONE" in state.json()["error"]["message"] and "COMPLETED" in state.json()["error"]["message"]


def test_evaluators_are_listed_over_http_grpc_and_connect_and_listing_needs_evaluations_run(env: Env) -> None:
    active(env, "a", "capitals")
    listed = get(env.server, env["a"], "evaluators").json()["evaluators"]
    states = {e["evaluatorId"]: e["state"] for e in listed}
    assert states["capitals"] == "ACTIVE" and "b-capitals" not in states
    assert listed[0]["createTime"] >= listed[-1]["createTime"]
    metadata = (("authorization", f"Bearer {env['a']}"),)
    with grpc.insecure_channel(env.server.grpc) as channel:
        rpc = channel.unary_unary(
            "/evalsi.v1alpha1.EvaluatorService/ListEvaluators",
            request_serializer=pb.ListEvaluatorsRequest.SerializeToString,
            response_deserializer=pb.ListEvaluatorsResponse.FromString,
        )
        answer = rpc(pb.ListEvaluatorsRequest(page_size=1), metadata=metadata, timeout=30)
        assert len(answer.evaluators) == 1 and answer.next_page_token
        rest = rpc(pb.ListEvaluatorsRequest(page_token=answer.next_page_token), metadata=metadata, timeout=30)
        assert {answer.evaluators[0].evaluator_id, *(e.evaluator_id for e in rest.evaluators)} == set(states)
    connect = httpx.post(
        env.server.http + "/evalsi.v1alpha1.DatasetService/ListDatasets",
        content=orjson.dumps({"pageSize": 50}),
        headers={**headers(env["b"]), "Content-Type": "application/json", "Connect-Protocol-Version": "1"},
        timeout=30,
    )
    assert connect.status_code == 200 and [d["datasetId"] for d in connect.json()["datasets"]] == ["b-rows"]
    refused = get(env.server, env["a-write"], "evaluators")
    assert refused.status_code == 403 and "evaluations.run" in refused.json()["error"]["message"]


def test_jobs_are_listed_by_state_and_by_evaluator(env: Env) -> None:
    active(env, "a", "capitals")
    active(env, "a", "slow")
    for job_id in ("list-1", "list-2"):
        assert create_job(env.server, env["a"], job_id, "capitals", "capitals", f"{job_id}-out").status_code == 200
        assert wait_state(env.server, env["a"], job_id, TERMINAL)["state"] == "COMPLETED"
    assert create_job(env.server, env["a"], "list-slow", "slow", "capitals", "list-slow-out").status_code == 200
    assert wait_state(env.server, env["a"], "list-slow", ("RUNNING", *TERMINAL))["state"] == "RUNNING"
    try:
        ids, _ = every_page(env, "a", "evaluationJobs", "evaluationJobs", pageSize=1)
        assert ids[:3] == ["list-slow", "list-2", "list-1"]
        completed, _ = every_page(env, "a", "evaluationJobs", "evaluationJobs", state="COMPLETED")
        assert "list-1" in completed and "list-2" in completed and "list-slow" not in completed
        running, _ = every_page(env, "a", "evaluationJobs", "evaluationJobs", state="RUNNING")
        assert running == ["list-slow"]
        by_slow, _ = every_page(env, "a", "evaluationJobs", "evaluationJobs", evaluator="evaluators/slow")
        assert by_slow == ["list-slow"]
        both, _ = every_page(env, "a", "evaluationJobs", "evaluationJobs", evaluator="capitals", state="RUNNING")
        assert both == []
        assert every_page(env, "b", "evaluationJobs", "evaluationJobs")[0] == []
        job = get(env.server, env["a"], "evaluationJobs?evaluator=capitals&pageSize=1").json()["evaluationJobs"][0]
        assert job["state"] == "COMPLETED" and job["metrics"]["score"] == pytest.approx(0.5)
        with grpc.insecure_channel(env.server.grpc) as channel:
            rpc = channel.unary_unary(
                "/evalsi.v1alpha1.EvaluationJobService/ListEvaluationJobs",
                request_serializer=pb.ListEvaluationJobsRequest.SerializeToString,
                response_deserializer=pb.ListEvaluationJobsResponse.FromString,
            )
            request = pb.ListEvaluationJobsRequest(state="RUNNING", evaluator="slow")
            answer = rpc(request, metadata=(("authorization", f"Bearer {env['a']}"),), timeout=30)
            assert [j.name for j in answer.evaluation_jobs] == ["evaluationJobs/list-slow"]
            with pytest.raises(grpc.RpcError) as refused:
                rpc(pb.ListEvaluationJobsRequest(page_token="!"), metadata=(("authorization", f"Bearer {env['a']}"),))
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        post(env.server, env["a"], "evaluationJobs/list-slow/cancel")


def test_only_a_finished_job_is_deleted_and_its_output_dataset_stays(env: Env) -> None:
    active(env, "a", "capitals")
    active(env, "a", "slow")
    assert create_job(env.server, env["a"], "del-slow", "slow", "capitals", "del-slow-out").status_code == 200
    wait_state(env.server, env["a"], "del-slow", ("RUNNING", *TERMINAL))
    refused = delete(env, "a", "evaluationJobs/del-slow")
    assert refused.status_code == 422 and "RUNNING" in refused.json()["error"]["message"]
    assert "cancel it first" in refused.json()["error"]["message"]
    assert post(env.server, env["a"], "evaluationJobs/del-slow/cancel").json()["state"] == "CANCELLED"
    assert delete(env, "a", "evaluationJobs/del-slow").status_code == 200
    assert get(env.server, env["a"], "evaluationJobs/del-slow").status_code == 404

    assert create_job(env.server, env["a"], "del-done", "capitals", "capitals", "del-done-out").status_code == 200
    assert wait_state(env.server, env["a"], "del-done", TERMINAL)["state"] == "COMPLETED"
    assert delete(env, "b", "evaluationJobs/del-done").status_code == 404  # another project's job
    deleted = httpx.post(  # over Connect
        env.server.http + "/evalsi.v1alpha1.EvaluationJobService/DeleteEvaluationJob",
        content=orjson.dumps({"evaluationJobId": "del-done"}),
        headers={**headers(env["a"]), "Content-Type": "application/json", "Connect-Protocol-Version": "1"},
        timeout=30,
    )
    assert deleted.status_code == 200 and deleted.json() == {"name": "evaluationJobs/del-done"}
    assert get(env.server, env["a"], "evaluationJobs/del-done").status_code == 404
    assert "del-done" not in every_page(env, "a", "evaluationJobs", "evaluationJobs")[0]
    output = get(env.server, env["a"], "datasets/del-done-out").json()
    assert output["sourceJob"] == "del-done" and output["rowCount"] == 2
    assert delete(env, "a", "evaluationJobs/del-done").status_code == 404
    # The id is free again: a new job under it runs.
    assert create_job(env.server, env["a"], "del-done", "capitals", "capitals", "del-done-2").status_code == 200
    assert wait_state(env.server, env["a"], "del-done", TERMINAL)["state"] == "COMPLETED"


def test_an_evaluator_in_use_is_not_deleted_and_a_deleted_one_stops_scoring_at_once(env: Env) -> None:
    assert upload(env.server, env["a"], "doomed", CAPITALS_FILES, CAPITALS_ENTRY).status_code == 200
    active(env, "a", "doomed")
    active(env, "a", "slow")
    spec = {"components": [{"ref": "evaluator/doomed", "name": "capital"}]}
    scored = post_http(env.server, env["a"], spec, ROLLOUTS)  # remembered as ACTIVE from here
    assert scored.status_code == 200 and scored.json()["results"][0]["total"] == 1.0
    directory = env.evaluator_dir("team-a", "doomed")
    assert (directory / "upload" / "source.tar.gz").is_file() and (directory / "env").is_dir()

    assert create_job(env.server, env["a"], "holds-slow", "slow", "capitals", "holds-slow-out").status_code == 200
    in_use = delete(env, "a", "evaluators/slow")
    assert in_use.status_code == 422 and "holds-slow" in in_use.json()["error"]["message"]
    assert get(env.server, env["a"], "evaluators/slow").status_code == 200
    post(env.server, env["a"], "evaluationJobs/holds-slow/cancel")

    no_write = delete(env, "a-run", "evaluators/doomed")
    assert no_write.status_code == 403 and "evaluators.write" in no_write.json()["error"]["message"]
    assert delete(env, "b", "evaluators/doomed").status_code == 404
    deleted = delete(env, "a", "evaluators/doomed")
    assert deleted.status_code == 200 and deleted.json() == {"name": "evaluators/doomed"}
    assert not directory.exists()
    assert not [p for p in directory.parent.iterdir() if "doomed" in p.name]  # nothing left aside either
    assert get(env.server, env["a"], "evaluators/doomed").status_code == 404
    refused = post_http(env.server, env["a"], spec, ROLLOUTS)
    assert refused.status_code == 404 and "spec.components[0].ref" in refused.json()["error"]["message"]
    job = create_job(env.server, env["a"], "after-delete", "doomed", "capitals", "after-delete-out")
    assert job.status_code == 404 and "doomed" in job.json()["error"]["message"]
    assert "doomed" not in every_page(env, "a", "evaluators", "evaluators")[0]

    # The id may be uploaded again; the new upload (not the remembered one) is what scores.
    assert upload(env.server, env["a"], "doomed", {"test_capitals.py": CAPITALS.replace("1.0 if", "0.5 if")},
                  CAPITALS_ENTRY).status_code == 200  # fmt: skip
    active(env, "a", "doomed")
    again = post_http(env.server, env["a"], spec, ROLLOUTS)
    assert again.status_code == 200 and again.json()["results"][0]["total"] == 0.5


def test_an_evaluator_still_building_is_not_deleted(env: Env) -> None:
    assert upload(env.server, env["a"], "building", CAPITALS_FILES, CAPITALS_ENTRY).status_code == 200
    answer = delete(env, "a", "evaluators/building")  # the build (a venv, in the sandbox) takes seconds
    assert answer.status_code == 422 and "BUILDING" in answer.json()["error"]["message"]
    active(env, "a", "building")
    assert delete(env, "a", "evaluators/building").status_code == 200
    assert get(env.server, env["a"], "evaluators/building").status_code == 404


def test_the_cli_lists_as_a_table_or_json_and_deletes(env: Env) -> None:
    from typer.testing import CliRunner

    from evalsi.cli.main import app

    active(env, "a", "capitals")
    assert create_job(env.server, env["a"], "cli-list", "capitals", "capitals", "cli-list-out").status_code == 200
    assert wait_state(env.server, env["a"], "cli-list", TERMINAL)["state"] == "COMPLETED"
    cli_env = {"EVALSI_SERVER": env.server.http, "EVALSI_TOKEN": env["a"], "COLUMNS": "160"}
    runner = CliRunner()

    table = runner.invoke(app, ["evaluators", "list", "--uploaded"], env=cli_env)
    assert table.exit_code == 0, table.output
    assert "capitals" in table.stdout and "ACTIVE" in table.stdout and "exact-match" not in table.stdout
    local = runner.invoke(app, ["evaluators", "list", "--json"], env=cli_env)  # the built-in ones, as before
    assert local.exit_code == 0 and "exact-match" in [e["name"] for e in orjson.loads(local.stdout)]
    listed = runner.invoke(app, ["evaluators", "list", "--uploaded", "--json"], env=cli_env)
    assert listed.exit_code == 0 and "capitals" in [e["evaluatorId"] for e in orjson.loads(listed.stdout)]

    datasets = runner.invoke(app, ["datasets", "list"], env=cli_env)
    assert datasets.exit_code == 0 and "cli-list-out" in datasets.stdout and "b-rows" not in datasets.stdout
    first = runner.invoke(app, ["datasets", "list", "--json", "--limit", "1"], env=cli_env)
    assert first.exit_code == 0 and [d["datasetId"] for d in orjson.loads(first.stdout)] == ["cli-list-out"]
    assert "--limit 0" in first.stderr

    jobs = runner.invoke(app, ["jobs", "list", "--state", "completed", "--evaluator", "capitals"], env=cli_env)
    assert jobs.exit_code == 0 and "cli-list" in jobs.stdout and "0.500" in jobs.stdout
    found = runner.invoke(app, ["jobs", "list", "--json", "--state", "COMPLETED"], env=cli_env)
    assert all(j["state"] == "COMPLETED" for j in orjson.loads(found.stdout))
    bad = runner.invoke(app, ["jobs", "list", "--state", "DONE"], env=cli_env)
    assert bad.exit_code == 2 and "COMPLETED" in bad.output

    assert runner.invoke(app, ["jobs", "delete", "cli-list"], env=cli_env).exit_code == 0
    gone = runner.invoke(app, ["jobs", "list", "--json"], env=cli_env)
    assert "evaluationJobs/cli-list" not in [j["name"] for j in orjson.loads(gone.stdout)]
    assert runner.invoke(app, ["evaluators", "delete", "no-such-evaluator"], env=cli_env).exit_code == 2
    assert upload(env.server, env["a"], "cli-doomed", CAPITALS_FILES, CAPITALS_ENTRY).status_code == 200
    active(env, "a", "cli-doomed")
    assert runner.invoke(app, ["evaluators", "delete", "cli-doomed"], env=cli_env).exit_code == 0
    assert get(env.server, env["a"], "evaluators/cli-doomed").status_code == 404


def test_an_evaluator_deleted_on_one_replica_stops_scoring_on_another_at_once(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'shared.db'}"
    storage = Path(tempfile.mkdtemp(prefix="evalsi-replicas-test-"))  # both replicas' evaluator storage
    spec = {"database": {"url": database}, "evaluators": {"storage_dir": str(storage)}}
    token = make_token(database, "team-r", ALL)
    reward = {"components": [{"ref": "evaluator/shared", "name": "capital"}]}
    try:
        with ServerProcess(write_config(tmp_path, spec, "one.yaml")) as one:
            assert upload(one, token, "shared", CAPITALS_FILES, CAPITALS_ENTRY).status_code == 200
            assert wait_built(one, token, "shared")["state"] == "ACTIVE"
            with ServerProcess(write_config(tmp_path, spec, "two.yaml")) as two:  # started once nothing builds
                for server in (one, two):  # each replica now remembers the evaluator as ACTIVE
                    scored = post_http(server, token, reward, ROLLOUTS)
                    assert scored.status_code == 200 and scored.json()["results"][0]["total"] == 1.0
                assert httpx.delete(f"{one.http}/v1alpha1/evaluators/shared", headers=headers(token)).is_success
                refused = post_http(two, token, reward, ROLLOUTS)
                assert refused.status_code == 404 and "spec.components[0].ref" in refused.text

                halved = {"test_capitals.py": CAPITALS.replace("1.0 if", "0.5 if")}
                assert upload(one, token, "shared", halved, CAPITALS_ENTRY).status_code == 200
                assert wait_built(one, token, "shared")["state"] == "ACTIVE"
                again = post_http(two, token, reward, ROLLOUTS)
                assert again.status_code == 200 and again.json()["results"][0]["total"] == 0.5
    finally:
        shutil.rmtree(storage, ignore_errors=True)
