"""The Run Service in a real server process: HTTP JSON, Connect and gRPC give the same runs and comparisons; the
token's permission and project decide what a caller may see; the guard bounds the new routes' bodies."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import grpc
import httpx
import orjson
import pytest
from connectrpc.errors import ConnectError
from google.protobuf import json_format
from prometheus_client.parser import text_string_to_metric_families

from evalsi.errors import DataError
from evalsi.runs import RunNotFoundError, RunsClient, RunServiceError, compare_runs
from evalsi.runs._compare import run_from_document
from evalsi.server._proto.evalsi.v1alpha1 import rewards_pb2 as pb
from evalsi.server._proto.evalsi.v1alpha1 import rewards_pb2_grpc as pb_grpc
from evalsi.server._proto.evalsi.v1alpha1.rewards_connect import RunServiceClientSync
from evalsi.stats import RegressionRule, regressed
from tests.server.harness import ServerProcess, make_token, write_config
from tests.server.runs_data import results_document

MAX_BODY = 200_000


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("documents")
    return {"base": results_document(folder, "base"), "step": results_document(folder, "step", wrong=12)}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    directory = tmp_path_factory.mktemp("runs-server")
    config = write_config(
        directory, {"database": {"url": "sqlite:///server.db"}, "rewards": {"max_request_bytes": MAX_BODY}}
    )
    url = f"sqlite:///{directory / 'server.db'}"
    tokens = {
        "alpha": make_token(url, "alpha", ["evaluations.run"]),
        "beta": make_token(url, "beta", ["evaluations.run"]),
        "none": make_token(url, "alpha", ["resource.runs_code"]),
        "metrics": make_token(url, "ops", ["metrics.read"]),
    }
    with ServerProcess(config) as process:
        yield process, tokens


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _grpc(server: ServerProcess, token: str | None, method: str, request: Any) -> tuple[str, Any]:
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    with grpc.insecure_channel(server.grpc) as channel:
        stub = pb_grpc.RunServiceStub(channel)  # type: ignore[no-untyped-call]
        try:
            return "ok", getattr(stub, method)(request, metadata=metadata, timeout=60)
        except grpc.RpcError as exc:
            return exc.code().name.lower(), exc.details()


def _connect(server: ServerProcess, token: str | None, method: str, request: Any, proto_json: bool) -> tuple[str, Any]:
    with RunServiceClientSync(server.http, proto_json=proto_json) as client:
        try:
            return "ok", getattr(client, method)(request, headers=_headers(token), timeout_ms=60_000)
        except ConnectError as exc:
            return exc.code.name.lower(), exc.message


def _plain(message: Any) -> dict[str, Any]:
    result: dict[str, Any] = json_format.MessageToDict(message)
    return result


def _struct(document: dict[str, Any]) -> Any:
    message = pb.CreateRunRequest()
    json_format.ParseDict({"results": document, "labels": {"via": "grpc"}}, message)
    return message


def test_runs_over_http_json(server: tuple[ServerProcess, dict[str, str]], documents: dict[str, Any]) -> None:
    process, tokens = server
    headers = _headers(tokens["alpha"])
    created = {}
    for name, step in (("base", "base"), ("step", "100")):
        answer = httpx.post(
            process.http + "/v1alpha1/runs",
            json={"results": documents[name], "labels": {"training-run": "http-run", "training-step": step}},
            headers=headers,
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        created[name] = answer.json()
    run = created["base"]
    assert run["id"].startswith("run_") and run["name"] == "base" and run["recordCount"] == 40
    assert run["labels"] == {"training-run": "http-run", "training-step": "base"}
    assert run["summary"] == documents["base"]["summary"]

    got = httpx.get(f"{process.http}/v1alpha1/runs/{run['id']}", headers=headers).json()
    assert got == {"run": run}
    records, token = [], ""
    while True:
        params = {"records": "true", "pageSize": "16", **({"pageToken": token} if token else {})}
        page = httpx.get(f"{process.http}/v1alpha1/runs/{created['step']['id']}", params=params, headers=headers)
        records += page.json()["records"]
        token = page.json().get("nextPageToken", "")
        if not token:
            break
    assert records == documents["step"]["records"]

    listed = httpx.get(process.http + "/v1alpha1/runs", params={"label": "training-run=http-run"}, headers=headers)
    assert [r["id"] for r in listed.json()["runs"]] == [created["step"]["id"], run["id"]]  # newest first
    only_base = httpx.get(
        process.http + "/v1alpha1/runs",
        params=[("label", "training-run=http-run"), ("label", "training-step=base")],
        headers=headers,
    )
    assert [r["id"] for r in only_base.json()["runs"]] == [run["id"]]

    compared = httpx.post(
        process.http + "/v1alpha1/runs:compare",
        json={
            "baseRunId": run["id"],
            "candidateRunId": created["step"]["id"],
            "regression": ["exact-match:0.2", "has-1:0.5"],
        },
        headers=headers,
    ).json()
    local = compare_runs(run_from_document(documents["base"], "a"), run_from_document(documents["step"], "b"))
    assert [c["metric"] for c in compared["comparisons"]] == ["exact-match", "has-1"]
    exact = compared["comparisons"][0]
    expected = local[0].comparison
    assert exact["difference"]["mean"] == pytest.approx(expected.difference.mean) == pytest.approx(-0.3)
    assert exact["difference"]["ci_high"] == pytest.approx(expected.difference.ci_high)
    assert exact["significant"] is True and exact["regressed"] is True
    assert expected.mcnemar is not None
    assert exact["mcnemar"] == {"aOnly": 12, "bOnly": 0, "pValue": pytest.approx(expected.mcnemar.p_value)}
    assert len(exact["flips"]) == 12 and {f["direction"] for f in exact["flips"]} == {"regressed"}
    assert regressed(expected, RegressionRule("exact-match", 0.2))
    assert compared["comparisons"][1]["regressed"] is False
    assert compared["regressed"] is True and compared["regressions"] == ["exact-match:0.2"]

    gentle = httpx.post(
        process.http + "/v1alpha1/runs:compare",
        json={"baseRunId": run["id"], "candidateRunId": created["step"]["id"], "regression": ["exact-match:0.5"]},
        headers=headers,
    ).json()
    assert gentle["regressed"] is False and gentle["regressions"] == []


def test_connect_and_grpc_answer_as_http_json(
    server: tuple[ServerProcess, dict[str, str]], documents: dict[str, Any]
) -> None:
    process, tokens = server
    token = tokens["alpha"]
    ids = {}
    for protocol in ("grpc", "connect-binary", "connect-json"):
        for name in ("base", "step"):
            request = _struct(documents[name])
            request.labels["training-run"] = protocol
            if protocol == "grpc":
                status, answer = _grpc(process, token, "CreateRun", request)
            else:
                status, answer = _connect(process, token, "create_run", request, protocol == "connect-json")
            assert status == "ok", answer
            assert answer.record_count == 40 and answer.labels["training-run"] == protocol
            ids[protocol, name] = answer.id

    client = RunsClient(process.http, token=token)
    via_http = (
        client.create_run(documents["base"], {"training-run": "http"})["id"],
        client.create_run(documents["step"], {"training-run": "http"})["id"],
    )
    reference = client.compare_runs(*via_http, regression=["exact-match:0.2"])
    for protocol in ("grpc", "connect-binary", "connect-json"):
        request = pb.CompareRunsRequest(
            base_run_id=ids[protocol, "base"], candidate_run_id=ids[protocol, "step"], regression=["exact-match:0.2"]
        )
        if protocol == "grpc":
            status, answer = _grpc(process, token, "CompareRuns", request)
        else:
            status, answer = _connect(process, token, "compare_runs", request, protocol == "connect-json")
        assert status == "ok", answer
        plain = _plain(answer)
        # The HTTP JSON answer, read as the proto message, is the same answer (ids aside).
        same_ids = {**reference, "baseRunId": request.base_run_id, "candidateRunId": request.candidate_run_id}
        assert plain == _plain(json_format.ParseDict(same_ids, pb.CompareRunsResponse())), protocol
        assert plain["comparisons"][0]["difference"]["mean"] == pytest.approx(-0.3)
        assert plain["comparisons"][0]["difference"]["ci"]["method"] == "newcombe"  # the interval names its method

        status, listed = (
            _grpc(process, token, "ListRuns", pb.ListRunsRequest(labels={"training-run": protocol}))
            if protocol == "grpc"
            else _connect(process, token, "list_runs", pb.ListRunsRequest(labels={"training-run": protocol}), False)
        )
        assert [r.id for r in listed.runs] == [ids[protocol, "step"], ids[protocol, "base"]]
        status, got = _grpc(
            process, token, "GetRun", pb.GetRunRequest(id=ids[protocol, "step"], include_records=True, page_size=50)
        )
        assert status == "ok" and len(got.records) == 40 and not got.next_page_token
        assert [r["key"] for r in (_plain(s) for s in got.records)] == [f"r{i}" for i in range(40)]
        assert _plain(got.run.summary)["metrics"]["exact-match"]["mean"] == pytest.approx(0.7)
    client.close()


def test_a_token_without_evaluations_run_is_refused_on_every_protocol(
    server: tuple[ServerProcess, dict[str, str]], documents: dict[str, Any]
) -> None:
    process, tokens = server
    run_id = RunsClient(process.http, token=tokens["alpha"]).create_run(documents["base"])["id"]
    headers = _headers(tokens["none"])
    answers = [
        httpx.post(process.http + "/v1alpha1/runs", json={"results": documents["base"]}, headers=headers),
        httpx.get(f"{process.http}/v1alpha1/runs/{run_id}", headers=headers),
        httpx.get(process.http + "/v1alpha1/runs", headers=headers),
        httpx.post(
            process.http + "/v1alpha1/runs:compare",
            json={"baseRunId": run_id, "candidateRunId": run_id},
            headers=headers,
        ),
    ]
    for answer in answers:
        assert answer.status_code == 403, answer.text
        assert "evaluations.run" in answer.json()["error"]["message"]
    assert _grpc(process, tokens["none"], "GetRun", pb.GetRunRequest(id=run_id))[0] == "permission_denied"
    assert _connect(process, tokens["none"], "get_run", pb.GetRunRequest(id=run_id), True)[0] == "permission_denied"
    with pytest.raises(RunServiceError, match="EVALSI_TOKEN"):
        RunsClient(process.http, token=tokens["none"]).get_run(run_id)
    # No token at all: 401 before anything else.
    assert httpx.get(f"{process.http}/v1alpha1/runs/{run_id}").status_code == 401
    assert _grpc(process, None, "ListRuns", pb.ListRunsRequest())[0] == "unauthenticated"


def test_another_projects_run_is_not_found(
    server: tuple[ServerProcess, dict[str, str]], documents: dict[str, Any]
) -> None:
    process, tokens = server
    alpha = RunsClient(process.http, token=tokens["alpha"])
    run_id = alpha.create_run(documents["base"], {"secret": "alpha-only"})["id"]
    beta_headers = _headers(tokens["beta"])
    own = RunsClient(process.http, token=tokens["beta"]).create_run(documents["step"])["id"]
    got = httpx.get(f"{process.http}/v1alpha1/runs/{run_id}", headers=beta_headers)
    assert got.status_code == 404 and "alpha-only" not in got.text and "base" not in got.text
    compared = httpx.post(
        process.http + "/v1alpha1/runs:compare", json={"baseRunId": run_id, "candidateRunId": own}, headers=beta_headers
    )
    assert compared.status_code == 404 and "exact-match" not in compared.text
    listed = httpx.get(process.http + "/v1alpha1/runs", params={"label": "secret=alpha-only"}, headers=beta_headers)
    assert listed.json() == {"runs": []}
    assert _grpc(process, tokens["beta"], "GetRun", pb.GetRunRequest(id=run_id))[0] == "not_found"
    assert _connect(process, tokens["beta"], "get_run", pb.GetRunRequest(id=run_id), False)[0] == "not_found"
    status, _ = _grpc(
        process, tokens["beta"], "CompareRuns", pb.CompareRunsRequest(base_run_id=own, candidate_run_id=run_id)
    )
    assert status == "not_found"
    with pytest.raises(RunNotFoundError):
        RunsClient(process.http, token=tokens["beta"]).get_run(run_id)
    assert alpha.get_run(run_id)["labels"] == {"secret": "alpha-only"}


def test_a_run_is_deleted_on_every_protocol_by_its_project_alone(
    server: tuple[ServerProcess, dict[str, str]], documents: dict[str, Any]
) -> None:
    process, tokens = server
    alpha = RunsClient(process.http, token=tokens["alpha"])
    protocols = ("http", "grpc", "connect-binary", "connect-json", "client")
    ids = {p: alpha.create_run(documents["base"], {"deleted-by": p})["id"] for p in protocols}

    def delete(protocol: str, token: str | None, run_id: str) -> str:
        """The call's status: ok, or the canonical code."""
        if protocol == "http":
            answer = httpx.delete(f"{process.http}/v1alpha1/runs/{run_id}", headers=_headers(token))
            if answer.status_code == 200:
                assert answer.json() == {"id": run_id}
                return "ok"
            return str(answer.json()["error"]["status"])
        if protocol == "grpc":
            return _grpc(process, token, "DeleteRun", pb.DeleteRunRequest(id=run_id))[0]
        if protocol.startswith("connect"):
            request = pb.DeleteRunRequest(id=run_id)
            return _connect(process, token, "delete_run", request, protocol == "connect-json")[0]
        try:
            RunsClient(process.http, token=token).delete_run(run_id)
        except RunNotFoundError:
            return "not_found"
        except RunServiceError:
            return "refused"
        return "ok"

    for protocol, run_id in ids.items():
        assert delete(protocol, tokens["beta"], run_id) == "not_found", protocol  # as an unknown id answers
        assert delete(protocol, tokens["beta"], "run_nope") == "not_found", protocol
        assert delete(protocol, tokens["none"], run_id) in ("permission_denied", "refused"), protocol
        assert alpha.get_run(run_id)["labels"] == {"deleted-by": protocol}  # still there
        assert delete(protocol, tokens["alpha"], run_id) == "ok", protocol
        with pytest.raises(RunNotFoundError):
            alpha.get_run(run_id)
        assert alpha.list_runs({"deleted-by": protocol}) == []
        assert delete(protocol, tokens["alpha"], run_id) == "not_found", protocol  # deleting twice
    status, _ = _grpc(process, None, "DeleteRun", pb.DeleteRunRequest(id="run_nope"))
    assert status == "unauthenticated"


def test_bad_requests_name_what_is_wrong(
    server: tuple[ServerProcess, dict[str, str]], documents: dict[str, Any]
) -> None:
    process, tokens = server
    client = RunsClient(process.http, token=tokens["alpha"])
    broken = {**documents["base"], "records": [*documents["base"]["records"][:2], {"samples": []}]}
    with pytest.raises(DataError, match=r"results\.records\[2\]"):
        client.create_run(broken)
    with pytest.raises(DataError, match="label key"):
        client.create_run(documents["base"], {"bad key": "x"})
    run_id = client.create_run(documents["base"])["id"]
    with pytest.raises(DataError, match="MAX_DROP"):
        client.compare_runs(run_id, run_id, regression=["exact-match:-1"])
    with pytest.raises(DataError, match="no metric 'nope'"):
        client.compare_runs(run_id, run_id, metrics=["nope"])
    answer = httpx.get(process.http + "/v1alpha1/runs", params={"label": "novalue"}, headers=_headers(tokens["alpha"]))
    assert answer.status_code == 400 and "KEY=VALUE" in answer.json()["error"]["message"]
    status, detail = _grpc(process, tokens["alpha"], "CreateRun", pb.CreateRunRequest())
    assert status == "invalid_argument" and "results" in detail


def test_the_guard_bounds_run_bodies(server: tuple[ServerProcess, dict[str, str]], documents: dict[str, Any]) -> None:
    process, tokens = server
    big = {**documents["base"], "padding": "x" * (MAX_BODY + 70_000)}  # past the gRPC framing headroom too
    refused = httpx.post(
        process.http + "/v1alpha1/runs", json={"results": big}, headers=_headers(tokens["alpha"]), timeout=60
    )
    assert refused.status_code == 413 and "max_request_bytes" in refused.json()["error"]["message"]
    status, _ = _grpc(process, tokens["alpha"], "CreateRun", _struct(big))
    assert status == "resource_exhausted"
    # An unknown token is refused from the headers alone: the declared body is never read.
    host, port = process.http.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /v1alpha1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer evalsi_nope\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
        )
        head = sock.recv(4096).decode()
    assert head.startswith("HTTP/1.1 401")
    connect = httpx.post(
        process.http + "/evalsi.v1alpha1.RunService/CreateRun",
        content=orjson.dumps({"results": big}),
        headers={"Content-Type": "application/json", **_headers(tokens["alpha"])},
        timeout=60,
    )
    assert connect.status_code == 429 and connect.json()["code"] == "resource_exhausted"


class _LosesFirstAnswer(http.server.BaseHTTPRequestHandler):
    """A proxy on loopback that forwards every request to the server, but answers the first POST with 502 after
    the server stored it: the answer lost on the way back, as a failing load balancer loses it."""

    upstream: ClassVar[str] = ""
    posts: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).posts.append(body)
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type")}
        answer = httpx.post(self.upstream + self.path, content=body, headers=headers, timeout=60)
        status, content = (502, b"bad gateway") if len(type(self).posts) == 1 else (answer.status_code, answer.content)
        self.send_response(status)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_retried_create_stores_one_run(
    server: tuple[ServerProcess, dict[str, str]], documents: dict[str, Any]
) -> None:
    process, tokens = server
    labels = {"training-run": "retried"}
    _LosesFirstAnswer.upstream, _LosesFirstAnswer.posts = process.http, []
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _LosesFirstAnswer)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        with RunsClient(f"http://127.0.0.1:{proxy.server_address[1]}", token=tokens["alpha"]) as client:
            run = client.create_run(documents["step"], labels)
    finally:
        proxy.shutdown()
        proxy.server_close()
    sent = [orjson.loads(body) for body in _LosesFirstAnswer.posts]
    assert len(sent) == 2 and sent[0] == sent[1] and sent[0]["requestId"]  # one create, retried as it was
    with RunsClient(process.http, token=tokens["alpha"]) as client:
        assert [r["id"] for r in client.list_runs(labels)] == [run["id"]]
        # A new create of the same document is a new run: each create has its own request id.
        assert client.create_run(documents["step"], labels)["id"] != run["id"]


def test_a_request_id_stores_once_on_every_protocol(
    server: tuple[ServerProcess, dict[str, str]], documents: dict[str, Any]
) -> None:
    process, tokens = server
    token = tokens["alpha"]
    headers = _headers(token)
    for protocol in ("http", "grpc", "connect-binary", "connect-json"):
        labels = {"training-run": f"once-{protocol}"}
        request_id = f"create-{protocol}"
        ids = set()
        for _ in range(2):
            if protocol == "http":
                answer = httpx.post(
                    process.http + "/v1alpha1/runs",
                    json={"results": documents["base"], "labels": labels, "requestId": request_id},
                    headers=headers,
                    timeout=60,
                )
                assert answer.status_code == 200, answer.text
                ids.add(answer.json()["id"])
            else:
                request = _struct(documents["base"])
                request.labels.clear()
                request.labels.update(labels)
                request.request_id = request_id
                status, run = (
                    _grpc(process, token, "CreateRun", request)
                    if protocol == "grpc"
                    else _connect(process, token, "create_run", request, protocol == "connect-json")
                )
                assert status == "ok", run
                ids.add(run.id)
        assert len(ids) == 1, protocol
        with RunsClient(process.http, token=token) as client:
            assert [r["id"] for r in client.list_runs(labels)] == list(ids), protocol

    # A request sent over gRPC (every number a double) and again over HTTP JSON is the same request.
    with RunsClient(process.http, token=token) as client:
        again = client.create_run(documents["base"], {"training-run": "once-grpc"}, request_id="create-grpc")
        assert [r["id"] for r in client.list_runs({"training-run": "once-grpc"})] == [again["id"]]

        # The id reused for a different run is refused on every protocol, and names the field.
        with pytest.raises(DataError, match="requestId"):
            client.create_run(documents["step"], {"training-run": "once-http"}, request_id="create-http")
    reused = httpx.post(
        process.http + "/v1alpha1/runs",
        json={"results": documents["base"], "labels": {"other": "x"}, "requestId": "create-http"},
        headers=headers,
    )
    assert reused.status_code == 400 and reused.json()["error"]["code"] == "request_id_reused"
    request = _struct(documents["step"])
    request.request_id = "create-grpc"
    status, detail = _grpc(process, token, "CreateRun", request)
    assert status == "invalid_argument" and "requestId" in detail
    status, detail = _connect(process, token, "create_run", request, False)
    assert status == "invalid_argument" and "requestId" in detail
    bad = httpx.post(
        process.http + "/v1alpha1/runs", json={"results": documents["base"], "requestId": "a b"}, headers=headers
    )
    assert bad.status_code == 400 and "requestId" in bad.json()["error"]["message"]


def test_one_create_sent_twice_at_once_stores_one_run(
    server: tuple[ServerProcess, dict[str, str]], documents: dict[str, Any]
) -> None:
    process, tokens = server
    body = {"results": documents["step"], "labels": {"training-run": "raced"}, "requestId": "raced-1"}
    barrier = threading.Barrier(2)

    def send(_: int) -> str:
        barrier.wait()
        answer = httpx.post(process.http + "/v1alpha1/runs", json=body, headers=_headers(tokens["alpha"]), timeout=60)
        assert answer.status_code == 200, answer.text
        run_id: str = answer.json()["id"]
        return run_id

    with ThreadPoolExecutor(2) as pool:
        ids = set(pool.map(send, range(2)))
    assert len(ids) == 1
    with RunsClient(process.http, token=tokens["alpha"]) as client:
        assert [r["id"] for r in client.list_runs({"training-run": "raced"})] == list(ids)


def _samples(server: ServerProcess, token: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(server.http + "/metrics", headers=_headers(token)).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("evalsi_")
    }


def test_run_service_calls_are_counted_by_method_protocol_and_code(
    server: tuple[ServerProcess, dict[str, str]], documents: dict[str, Any]
) -> None:
    process, tokens = server
    before = _samples(process, tokens["metrics"])
    with RunsClient(process.http, token=tokens["alpha"]) as client:
        run_id = client.create_run(documents["base"], request_id="metrics-1")["id"]
        client.create_run(documents["base"], request_id="metrics-1")  # a retry: answered, not stored again
        client.get_run(run_id)
        client.list_runs({"training-run": "nothing-here"})
        client.compare_runs(run_id, run_id)
    httpx.get(f"{process.http}/v1alpha1/runs/run_nope", headers=_headers(tokens["alpha"]))
    _grpc(process, tokens["alpha"], "GetRun", pb.GetRunRequest(id=run_id))
    _grpc(process, None, "ListRuns", pb.ListRunsRequest())
    _connect(process, tokens["none"], "get_run", pb.GetRunRequest(id=run_id), True)
    after = _samples(process, tokens["metrics"])

    def grew(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    calls = "evalsi_run_calls_total"
    assert grew(calls, method="CreateRun", protocol="http", code="ok") == 2
    assert grew("evalsi_run_create_replays_total") == 1
    for method in ("GetRun", "ListRuns", "CompareRuns"):
        assert grew(calls, method=method, protocol="http", code="ok") == 1, method
    assert grew(calls, method="GetRun", protocol="http", code="not_found") == 1
    assert grew(calls, method="GetRun", protocol="grpc", code="ok") == 1
    assert grew(calls, method="ListRuns", protocol="grpc", code="unauthenticated") == 1  # refused by the interceptor
    assert grew(calls, method="GetRun", protocol="connect", code="permission_denied") == 1
    assert grew("evalsi_run_call_seconds_count", method="CreateRun", protocol="http") == 2
    assert grew("evalsi_reward_calls_total", protocol="grpc", code="unauthenticated") == 0  # not the Reward Service's
    methods = {dict(labels)["method"] for name, labels in after if name == calls}
    assert methods <= {"CreateRun", "GetRun", "ListRuns", "CompareRuns", "DeleteRun", "other"}


def test_an_unversioned_document_is_stored_migrated(
    server: tuple[ServerProcess, dict[str, str]], documents: dict[str, Any]
) -> None:
    """A results file written before the layout carried a version uploads as the loader reads it: version 1."""
    process, tokens = server
    old = {k: v for k, v in documents["base"].items() if k not in ("version", "kind")}
    with RunsClient(process.http, token=tokens["alpha"]) as client:
        run = client.create_run(old, {"layout": "unversioned"})
        assert run["recordCount"] == 40 and run["name"] == "base"
        document = client.document(run["id"])
    assert "version" not in run["details"] and "kind" not in run["details"]
    assert [r["key"] for r in document["records"]] == [r["key"] for r in documents["base"]["records"]]
    assert document["summary"] == documents["base"]["summary"]
    status, answer = _grpc(process, tokens["alpha"], "CreateRun", _struct(old))
    assert status == "ok" and answer.record_count == 40, answer


def test_a_bad_field_and_a_newer_version_are_refused_on_http_json_and_grpc(
    server: tuple[ServerProcess, dict[str, str]], documents: dict[str, Any]
) -> None:
    process, tokens = server
    gate = {**documents["base"], "summary": {**documents["base"]["summary"], "gates": [{"metric": "m", "passed": 3}]}}
    newer = {**documents["base"], "version": 9}
    for document, field, said in (
        (gate, "results.summary.gates[0].passed", "must be true or false"),
        (newer, "results.version", "9 is newer than this evalsi reads (1)"),
    ):
        answer = httpx.post(
            process.http + "/v1alpha1/runs", json={"results": document}, headers=_headers(tokens["alpha"]), timeout=60
        )
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["status"] == "invalid_argument" and f"`{field}`: {said}" in error["message"], error
        status, detail = _grpc(process, tokens["alpha"], "CreateRun", _struct(document))
        assert status == "invalid_argument" and f"`{field}`: {said}" in detail, detail
