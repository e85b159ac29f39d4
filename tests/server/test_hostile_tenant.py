"""A tenant with an ordinary token attacks a real server process: secrets, sandbox, metrics, cache, errors, files.

The server's environment holds secrets; an upstream listener on loopback records every request that reaches it (it
plays the operator's judge and reward model, and the internal network a tenant must not reach). Each test is one
kind of attack; the payloads are data the tests iterate over.
"""

from __future__ import annotations

import base64
import json
import re
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from evalsi.server._proto.evalsi.v1alpha1 import evaluation_pb2 as epb
from evalsi.server._proto.evalsi.v1alpha1 import rewards_pb2 as rpb
from tests.server.calls import PROTOCOLS, Call
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

SECRET = "sk-tenant-must-never-see-this"
JUDGE_KEY = "judge-key-for-the-operators-judge"
LISTENER = "{listener}"  # replaced by the upstream listener's address


class Upstream(ThreadingHTTPServer):
    """A judge and reward model on loopback that records what reaches it."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _UpstreamHandler)
        self.seen: list[tuple[str, str, bytes]] = []  # (path, authorization, body)
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def requests_to(self, path: str) -> int:
        with self.lock:
            return sum(1 for p, _, _ in self.seen if p == path)


class _UpstreamHandler(BaseHTTPRequestHandler):
    server: Upstream

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.lock:
            self.server.seen.append((self.path, self.headers.get("Authorization") or "", body))
        if self.path.endswith("/get_reward"):
            reply: dict[str, Any] = {"rewards": [0.25] * len(json.loads(body)["query"])}
        else:
            reply = {"choices": [{"message": {"role": "assistant", "content": "Score: 7"}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@dataclass
class Hostile:
    """The server under attack, its upstream, and tokens of two projects."""

    server: ServerProcess
    upstream: Upstream
    directory: Path
    run: str  # evaluations.run for project alpha
    other: str  # evaluations.run for project beta
    ops: str  # metrics.read


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    directory = tmp_path_factory.mktemp("hostile")
    upstream = Upstream()
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    url = f"sqlite:///{directory / 'server.db'}"
    config = write_config(
        directory,
        {
            "database": {"url": url},
            "judges": {
                "strict": {
                    "model": "m",
                    "base_url": upstream.url + "/v1",
                    "api_key_env": "EVALSI_JUDGE_KEY",
                    "retries": 0,
                }
            },
            "reward_models": {
                "rm": {"url": upstream.url + "/get_reward", "retries": 0, "wait_ms": 0},
                "dead": {"url": "http://127.0.0.1:9/get_reward", "retries": 0, "timeout": 5},
            },
            "metrics": {"port": 0},
        },
    )
    tokens = {
        "run": make_token(url, "alpha", ["evaluations.run"]),
        "other": make_token(url, "beta", ["evaluations.run"]),
        "ops": make_token(url, "ops", ["metrics.read"]),
    }
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OPENAI_API_KEY", SECRET)
        env.setenv("EVALSI_TENANT_SECRET", SECRET)
        env.setenv("EVALSI_JUDGE_KEY", JUDGE_KEY)
        server = ServerProcess(config)
    try:
        yield Hostile(server, upstream, directory, **tokens)
    finally:
        server.kill()
        upstream.shutdown()


def _fill(value: Any, listener: str) -> Any:
    if isinstance(value, str):
        return value.replace(LISTENER, listener)
    if isinstance(value, dict):
        return {k: _fill(v, listener) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, listener) for v in value]
    return value


# --- credentials and URLs are the operator's --------------------------------------------------------------------------

SECRET_GRABS = [
    (
        {
            "ref": "llm-judge",
            "judge": {"model": "m", "base_url": LISTENER + "/v1", "api_key_env": "EVALSI_TENANT_SECRET"},
        },
        "spec.components[0].judge.base_url",
    ),
    ({"ref": "llm-judge", "judge": {"model": "m", "baseUrl": LISTENER + "/v1"}}, "spec.components[0].judge.baseUrl"),
    (
        {"ref": "llm-judge", "params": {"judge": {"model": "m", "base_url": LISTENER + "/v1"}}},
        "spec.components[0].params.judge.base_url",
    ),
    ({"ref": "llm-judge", "judge": {"model": "m", "extra_body": {"n": 50}}}, "spec.components[0].judge.extra_body"),
    (
        {"ref": "llm-judge", "judge": {"model": "m", "api_key_env": "EVALSI_TENANT_SECRET"}},
        "spec.components[0].judge.api_key_env",
    ),
    ({"ref": "llm-judge", "judge": {"model": "gpt-4o"}}, "spec.components[0].judge"),  # the default key, inline
    (
        {"ref": "pairwise-judge", "judge": {"model": "m", "base_url": LISTENER + "/v1"}},
        "spec.components[0].judge.base_url",
    ),
    (
        {"ref": "pairwise-judge", "params": {"judge": {"model": "m", "api_key_env": "EVALSI_TENANT_SECRET"}}},
        "spec.components[0].params.judge.api_key_env",
    ),
    (
        {"ref": "reward-model", "params": {"url": LISTENER + "/get_reward", "api_key_env": "EVALSI_TENANT_SECRET"}},
        "spec.components[0].params.url",
    ),
    (
        {"ref": "reward-model", "params": {"model": "rm", "api_key_env": "OPENAI_API_KEY"}},
        "spec.components[0].params.api_key_env",
    ),
    (
        {"ref": "reward-model", "params": {"model": "rm", "extra_body": {"x": 1}}},
        "spec.components[0].params.extra_body",
    ),
]


def test_a_request_never_sets_where_credentials_go(hostile: Hostile) -> None:
    rollouts = [{"prompt": "p", "completion": "c", "answer": "a"}]
    for component, path in SECRET_GRABS:
        spec = {"components": [_fill(component, hostile.upstream.url)], "onError": "zero"}
        answer = post_http(hostile.server, hostile.run, spec, rollouts)
        assert answer.status_code == 403, (component, answer.text)
        error = answer.json()["error"]
        assert error["status"] == "permission_denied" and error["path"] == path, error
        assert path in error["message"]
        assert call_grpc(hostile.server, hostile.run, spec, rollouts)[0] == "permission_denied"
    with hostile.upstream.lock:
        assert not any(SECRET in auth or SECRET.encode() in body for _, auth, body in hostile.upstream.seen)
    # the operator's named judge and reward model still work, with the operator's credential, at its URL
    named = {
        "components": [
            {"ref": "llm-judge", "name": "judged", "judge": "strict"},
            {"ref": "reward-model", "name": "rm", "params": {"model": "rm", "normalise": "affine", "scale": 2.0}},
            {"ref": "pairwise-judge", "name": "paired", "judge": "strict"},  # a group of one: nothing to compare
        ]
    }
    answer = post_http(hostile.server, hostile.run, named, rollouts)
    assert answer.status_code == 200, answer.text
    components = answer.json()["results"][0]["components"]
    assert components["judged"]["value"] == pytest.approx(0.7) and components["rm"]["value"] == 0.5
    assert components["paired"]["status"] == "skipped", components["paired"]
    with hostile.upstream.lock:
        judged = [auth for path, auth, _ in hostile.upstream.seen if path == "/v1/chat/completions"]
    assert judged == [f"Bearer {JUDGE_KEY}"]
    unnamed = post_http(hostile.server, hostile.run, {"components": [{"ref": "reward-model", "params": {}}]}, rollouts)
    assert unnamed.status_code == 400 and "valid: dead, rm" in unnamed.json()["error"]["message"]


HOST_CODE = [
    ({"ref": "evaluation-test/os::system"}, "spec.components[0].ref"),
    ({"ref": "evaluation-test/tests/conftest.py::anything"}, "spec.components[0].ref"),
    ({"ref": "evaluation-test", "params": {"test": "subprocess::run"}}, "spec.components[0].ref"),
    ({"ref": "task-checker", "params": {"task": "/etc/passwd"}}, "spec.components[0].ref"),
]
"""Evaluators that import or read what the spec names on the scoring machine: in-process only, never a tenant's."""


def test_a_request_never_runs_or_reads_host_code_it_names(hostile: Hostile) -> None:
    rollouts = [{"prompt": "p", "completion": "c", "answer": "a"}]
    for component, path in HOST_CODE:
        spec = {"components": [component], "onError": "zero"}
        answer = post_http(hostile.server, hostile.run, spec, rollouts)
        assert answer.status_code == 403, (component, answer.text)
        error = answer.json()["error"]
        assert error["status"] == "permission_denied" and error["path"] == path, error
        assert call_grpc(hostile.server, hostile.run, spec, rollouts)[0] == "permission_denied"


# --- the operator's isolation floor -----------------------------------------------------------------------------------

LOWERED_FLOORS = [
    {"ref": "code-exec-tests", "sandbox": {"minIsolation": "process"}},
    {"ref": "code-exec-tests", "params": {"min_isolation": "process"}},
    {"ref": "code-exec-tests", "sandbox": {"min_isolation": "process"}, "name": "snake"},
]
PROBE_PROGRAM = """
import os, socket
seen = []
try:
    socket.create_connection(("127.0.0.1", {port}), 2).close()
    seen.append("network")
except OSError:
    pass
for path, what in (("/proc/1/cmdline", "processes"), ("/etc/passwd", "files"), ("{database}", "database")):
    if os.path.exists(path):
        seen.append(what)
if any(value == "{secret}" for value in os.environ.values()):
    seen.append("environment")
print(",".join(seen) or "isolated")
"""


def test_code_runs_at_the_operators_floor_and_sees_nothing_of_the_server(hostile: Hostile, tmp_path: Path) -> None:
    # HTTP only: this server starts sandboxes from a process without gRPC threads, so only the floor is tested
    url = f"sqlite:///{tmp_path / 'code.db'}"
    config = write_config(
        tmp_path, {"listen": {"host": "127.0.0.1", "port": 0, "grpc_port": None}, "database": {"url": url}}
    )
    token = make_token(url, "alpha", ["evaluations.run", "resource.runs_code"])
    program = PROBE_PROGRAM.format(
        port=hostile.upstream.server_address[1], database=tmp_path / "code.db", secret=SECRET
    )
    rollout = {"completion": f"```python\n{program}\n```", "tests": [{"input": "", "output": "isolated"}]}
    with pytest.MonkeyPatch.context() as env:
        env.setenv("EVALSI_TENANT_SECRET", SECRET)
        server = ServerProcess(config)
    try:
        for component in LOWERED_FLOORS:
            answer = post_http(server, token, {"components": [component]}, [rollout], timeout=120)
            assert answer.status_code == 200, answer.text
            [score] = answer.json()["results"][0]["components"].values()
            assert score["value"] == 1.0, (component, score)
    finally:
        server.kill()


OVERSIZED_LIMITS = [
    # asked by the request -> what the component is bound with (the default config's ceilings: 60 s, 1024 MiB,
    # 64 processes, 4096 KiB of output)
    ({"timeout": 600, "memory_mb": 65536, "max_processes": 4096, "max_output_kb": 1 << 20}, (60.0, 1024, 64, 4096)),
    ({"timeout": 5, "memory_mb": 256}, (5.0, 256, 16, 1024)),  # less than the ceilings: kept, defaults too
]


def test_code_limits_are_clamped_to_the_operators_ceilings() -> None:
    from evalsi.rewards import from_mapping
    from evalsi.server import config_from_mapping
    from evalsi.server._trust import server_spec
    from evalsi.server.rewards._caps import Caps, capped

    config = config_from_mapping({}).spec
    for asked, granted in OVERSIZED_LIMITS:
        spec = server_spec({"components": [{"ref": "code-exec-tests", "params": asked}]}, config)
        caps = Caps(config.rewards.upstream_timeout, 0, code_limits=config.sandbox.caps())
        bound = capped(from_mapping(spec), caps)
        params: Any = bound.components[0].params
        assert (params.timeout, params.memory_mb, params.max_processes, params.max_output_kb) == granted, asked
        assert params.min_isolation == "namespaced"


def test_a_server_refuses_the_process_rung_as_its_floor(tmp_path: Path) -> None:
    config = write_config(
        tmp_path, {"database": {"url": f"sqlite:///{tmp_path / 's.db'}"}, "sandbox": {"min_isolation": "process"}}
    )
    with pytest.raises(RuntimeError, match=r"sandbox\.min_isolation.*'process' is not allowed on a server"):
        ServerProcess(config)


# --- metrics are the operator's ---------------------------------------------------------------------------------------


def test_metrics_are_an_operator_endpoint_with_bounded_labels(hostile: Hostile) -> None:
    label = "tenant-chosen-label-8f3a"
    spec = {"components": [{"ref": "reward-model", "name": label, "params": {"model": "dead"}, "onError": "zero"}]}
    assert post_http(hostile.server, hostile.run, spec, [{"prompt": "p", "completion": "x"}]).status_code == 200
    main = hostile.server.http + "/metrics"
    assert httpx.get(main, headers={"Authorization": f"Bearer {hostile.run}"}).status_code == 403
    assert httpx.get(main, headers={"Authorization": f"Bearer {hostile.ops}"}).status_code == 200
    scraped = httpx.get(hostile.server.ready["metrics"])  # the operator's port: no token, as Prometheus expects
    assert scraped.status_code == 200
    assert metric(scraped.text, "evalsi_reward_component_errors_total", evaluator="reward-model") >= 1
    assert label not in scraped.text
    assert httpx.get(hostile.server.ready["metrics"].replace("/metrics", CONNECT_PATH)).status_code == 404


# --- one project's cache is not another's oracle ----------------------------------------------------------------------


def test_cached_scores_are_kept_per_project(hostile: Hostile) -> None:
    log = hostile.directory / "scored.log"
    spec = {"components": [{"ref": "test-server-count", "params": {"log": str(log)}}]}
    rollout = [{"completion": "the other tenant's answer", "reference": "x"}]
    calls = [(hostile.run, 1), (hostile.run, 1), (hostile.other, 2), (hostile.other, 2)]
    for token, scored in calls:
        assert post_http(hostile.server, token, spec, rollout).status_code == 200
        assert len(log.read_text().splitlines()) == scored  # a hit only within the project that scored it


# --- bad input is the caller's error, and errors reveal nothing of the server -----------------------------------------

CLASS_NAME = re.compile(r"\b[A-Z]\w*(Error|Exception)\b")  # an exception's class name, e.g. DecodeError
DEEP = '{"a":' * 1000 + "1" + "}" * 1000
MALFORMED_JSON = [
    '{"spec": {"components": [{"ref": "exact-match", "params": DEEP}]}, "rollouts": [{"completion": "a"}]}',
    # field-score reads the rollout's metadata, so the deep field reaches its cache key
    '{"spec": {"components": [{"ref": "field-score", "params": {"field": "m"}}]}, '
    '"rollouts": [{"completion": "a", "m": DEEP}]}',
]
MALFORMED_CONNECT = [b"{not json", b'{"spec": 3}', b'{"rollouts": "x"}', b"[1, 2]", b'{"spec": DEEP, "rollouts": []}']
OVERFLOWS = [
    {"components": [{"ref": "exact-match", "weight": 1e308}, {"ref": "contains", "weight": 1e308}]},
    {
        "components": [
            {"ref": "exact-match", "weight": 1.7e308, "name": "a"},
            {"ref": "exact-match", "weight": 1.7e308, "name": "b"},
        ]
    },
]


def test_errors_are_classified_and_reveal_nothing(hostile: Hostile) -> None:
    headers = {"Authorization": f"Bearer {hostile.run}", "Content-Type": "application/json"}
    for body in MALFORMED_JSON:
        answer = httpx.post(
            hostile.server.http + "/v1alpha1/rewards:score", content=body.replace("DEEP", DEEP), headers=headers
        )
        assert answer.status_code == 400, answer.text[:300]
        assert "nested more than" in answer.json()["error"]["message"]
    connect = {**headers, "Connect-Protocol-Version": "1"}
    for raw in MALFORMED_CONNECT:
        answer = httpx.post(
            hostile.server.http + CONNECT_PATH, content=raw.replace(b"DEEP", DEEP.encode()), headers=connect
        )
        assert answer.json()["code"] == "invalid_argument", (raw[:40], answer.text[:300])
    for depth in (70, 150):  # below and past protobuf's own nesting limit
        nested: dict[str, Any] = {}
        for _ in range(depth):
            nested = {"a": nested}
        for spec, rollout in (
            ({"components": [{"ref": "exact-match", "params": nested}]}, {"completion": "a"}),
            ({"components": [{"ref": "exact-match"}]}, {"completion": "a", "m": nested}),
        ):
            code, message = call_grpc(hostile.server, hostile.run, spec, [rollout])
            assert code == "invalid_argument" and not CLASS_NAME.search(message), (depth, message)
    for overflow in OVERFLOWS:
        rollouts = [{"completion": "a", "reference": "a"}]
        answer = post_http(hostile.server, hostile.run, overflow, rollouts)
        assert answer.status_code == 400 and "rollout 0" in answer.json()["error"]["message"], answer.text
        assert call_grpc(hostile.server, hostile.run, overflow, rollouts)[0] == "invalid_argument"
    failing = {"components": [{"ref": "reward-model", "params": {"model": "dead"}, "onError": "zero"}]}
    answer = post_http(hostile.server, hostile.run, failing, [{"prompt": "p", "completion": "y"}])
    reason = answer.json()["results"][0]["components"]["reward-model"]["reason"]
    assert reason and "127.0.0.1:9" in reason  # still says what failed
    assert not CLASS_NAME.search(reason), reason
    for host_path in {tempfile.gettempdir(), sys.prefix, str(Path.home())}:
        assert host_path not in reason
    connect_answer = post_connect_json(hostile.server, hostile.run, failing, [{"prompt": "p", "completion": "y"}])
    assert not CLASS_NAME.search(json.dumps(connect_answer.json()))


# --- files and shutdown -----------------------------------------------------------------------------------------------


def test_database_files_are_private(hostile: Hostile) -> None:
    files = [p for p in hostile.directory.iterdir() if p.name.startswith("server.db")]
    assert any(p.name == "server.db" for p in files)
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, (path.name, oct(path.stat().st_mode))


def test_healthz_answers_503_while_draining(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    config = write_config(tmp_path, {"database": {"url": url}})
    token = make_token(url, "p", ["evaluations.run"])
    gate, entered = tmp_path / "release", tmp_path / "entered"
    spec = {"components": [{"ref": "test-server-gate", "params": {"gate": str(gate), "entered": str(entered)}}]}
    server = ServerProcess(config)
    try:
        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(post_http, server, token, spec, [{"completion": "held"}], 120)
            deadline = time.monotonic() + 60
            while not entered.exists():  # the call is in flight, waiting on the gate
                assert time.monotonic() < deadline, "the call never reached the evaluator"
                time.sleep(0.05)
            server.process.send_signal(15)
            deadline = time.monotonic() + 30
            while (health := httpx.get(server.http + "/healthz", timeout=5)).status_code != 503:
                assert time.monotonic() < deadline, "never reported draining"
                time.sleep(0.05)
            assert health.json() == {"status": "draining"}
            gate.touch()
            assert held.result(timeout=60).status_code == 200
        assert server.process.wait(60) == 0
    finally:
        server.kill()


# --- numbers out of range and deep nesting are the caller's error -----------------------------------------------------


def _deep(depth: int) -> Any:
    nested: Any = 1
    for _ in range(depth):
        nested = {"a": nested}
    return nested


def _run_with(**record: Any) -> Call:
    """CreateRun of one record with ``record``'s fields over a valid one."""
    sample = {"completion": "c", "scores": {"m": {"value": 1.0, "status": "ok"}}}
    base = {"key": "k", "index": 0, "samples": [sample], **record}
    results = {"version": 1, "kind": "RunResults", "name": "r", "records": [base]}
    return Call("RunService", "CreateRun", "/v1alpha1/runs", rpb.CreateRunRequest, {"results": results})


def _dataset_row(row: Any) -> Call:
    body = {"datasetId": "deep", "jsonl": json.dumps(row) + "\n"}
    return Call("DatasetService", "CreateDataset", "/v1alpha1/datasets", epb.CreateDatasetRequest, body)


def _score_with(rollout: dict[str, Any]) -> Call:
    body = {"spec": {"components": [{"ref": "exact-match"}]}, "rollouts": [{"completion": "a", **rollout}]}
    return Call("RewardService", "ScoreRewards", "/v1alpha1/rewards:score", rpb.ScoreRewardsRequest, body)


ONE_SAMPLE = {"completion": "c", "scores": {"m": {"value": "high", "status": "ok"}}}
ASKED = [{"role": "user", "content": "x"}]
OUT_OF_RANGE: list[tuple[str, Call, tuple[str, ...], str]] = [
    # (what, the call, the protocols that can carry it, what the refusal names)
    ("a record index of 1e30", _run_with(index=1e30), PROTOCOLS, "results.records[0]"),
    ("a record id past 64 bits", _run_with(id=2**63), PROTOCOLS, "results.records[0]"),
    ("a score value that is text", _run_with(samples=[ONE_SAMPLE]), PROTOCOLS, "results.records[0]"),
    ("a dataset row nested 300 deep", _dataset_row({"messages": ASKED, "label": _deep(300)}), PROTOCOLS, "line 1"),
    ("a message nested 80 deep", _dataset_row({"messages": [{**ASKED[0], "content": [_deep(80)]}]}), PROTOCOLS, "line"),
    ("a record index that is infinite", _run_with(index=float("inf")), ("grpc",), "results"),
    ("a rollout with an infinite number", _score_with({"completion_tokens": float("inf")}), ("grpc",), "rollouts[0]"),
]  # fmt: skip
"""Requests a JSON or protobuf decoder accepts whose numbers or nesting no stored resource may hold."""


def test_numbers_out_of_range_and_deep_nesting_are_refused_naming_where(hostile: Hostile) -> None:
    for what, call, protocols, where in OUT_OF_RANGE:
        for protocol in protocols:
            answer = call.answer(protocol, hostile.server, hostile.run)
            assert answer.status in ("400", "invalid_argument"), (what, protocol, answer)
            assert where in answer.message and not CLASS_NAME.search(answer.message), (what, protocol, answer)
    token = base64.urlsafe_b64encode(b"p" + b"9" * 30).decode()  # a page token naming a row past 64 bits
    headers = {"Authorization": f"Bearer {hostile.run}"}
    listed = httpx.get(f"{hostile.server.http}/v1alpha1/runs?pageToken={token}", headers=headers, timeout=60)
    assert listed.status_code == 400 and "pageToken" in listed.json()["error"]["message"], listed.text
    # a body whose field has the wrong type is a bad argument on every service's Connect route too
    bad = {"datasetId": 5, "jsonl": {"not": "text"}}
    for service, method in (("DatasetService", "CreateDataset"), ("EvaluationJobService", "CreateEvaluationJob")):
        response = httpx.post(
            f"{hostile.server.http}/evalsi.v1alpha1.{service}/{method}",
            json=bad if method == "CreateDataset" else {"evaluationJob": {"target": 1e30}},
            headers={**headers, "Connect-Protocol-Version": "1"},
            timeout=60,
        )
        assert response.status_code == 400 and response.json()["code"] == "invalid_argument", response.text


@pytest.mark.sandbox
@pytest.mark.timeout(600)
def test_a_jobs_seed_past_64_bits_is_refused_naming_it(tmp_path: Path) -> None:
    from tests.server.evaluation import CAPITALS, chat, jsonl, upload, wait_built

    url = f"sqlite:///{tmp_path / 's.db'}"
    storage = Path(tempfile.mkdtemp(prefix="evalsi-seed-test-"))  # under /tmp: sandbox users must reach it
    targets = {"t": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}}
    config = write_config(
        tmp_path, {"database": {"url": url}, "evaluators": {"storage_dir": str(storage)}, "targets": targets}
    )
    token = make_token(url, "p", ["evaluations.run", "resource.runs_code", "evaluators.write"])
    rows = jsonl([chat("Capital of France?", None, "Paris")])
    with ServerProcess(config) as server:
        files = {"test_capitals.py": CAPITALS, "capitals.jsonl": rows}
        assert upload(server, token, "capitals", files, "test_capitals.py::test_capitals").status_code == 200
        assert wait_built(server, token, "capitals", timeout=300)["state"] == "ACTIVE"
        dataset = Call("DatasetService", "CreateDataset", "/v1alpha1/datasets", epb.CreateDatasetRequest,
                       {"datasetId": "questions", "jsonl": rows})  # fmt: skip
        assert dataset.answer("http", server, token).status == "200"
        for n, seed in enumerate((1e30, -1e30, 2**64 - 1, float("inf"))):
            job = {"evaluator": "capitals", "inputDataset": "questions", "outputDataset": f"out-{n}", "target": "t",
                   "completionParams": {"seed": seed, "temperature": 0.5}}  # fmt: skip
            call = Call("EvaluationJobService", "CreateEvaluationJob", "/v1alpha1/evaluationJobs",
                        epb.CreateEvaluationJobRequest, {"evaluationJob": job, "evaluationJobId": f"j{n}"})  # fmt: skip
            for protocol in PROTOCOLS if seed != float("inf") else ("grpc",):
                answer = call.answer(protocol, server, token)
                assert answer.status in ("400", "invalid_argument"), (seed, protocol, answer)
                assert "evaluationJob.completionParams" in answer.message, (seed, protocol, answer)
