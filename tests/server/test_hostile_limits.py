"""A hostile or broken tenant cannot starve the others: hanging upstreams, vanished callers, slow and huge bodies.

Every test runs a real server process and attacks it over real sockets: an upstream on loopback that accepts
connections and never answers, clients that disconnect mid-call, sockets that promise a large body and send
nothing, bodies far past the configured maximum, requests without a valid token. The attacks are data
(``OVERSIZE``, ``UNAUTHENTICATED``, ``CANCELLERS``) the tests iterate over.
"""

from __future__ import annotations

import base64
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import orjson
import pytest

from evalsi.server._proto.evalsi.v1alpha1 import evaluation_pb2 as epb
from evalsi.server._proto.evalsi.v1alpha1 import rewards_pb2 as pb
from evalsi.server._proto.evalsi.v1alpha1 import rewards_pb2_grpc as pb_grpc
from tests.helpers.silent_upstream import silent_upstream
from tests.server.calls import PROTOCOLS, Call
from tests.server.harness import (
    CONNECT_PATH,
    ServerProcess,
    call_grpc,
    make_token,
    metric,
    post_http,
    write_config,
)
from tests.server.messages import request_message

SCORE_PATH = "/v1alpha1/rewards:score"
EXACT = {"components": [{"ref": "exact-match"}]}
ROLLOUT = {"completion": "a", "reference": "a"}
MIB = 1 << 20


@pytest.fixture
def black_hole() -> Iterator[str]:
    """An upstream on loopback that accepts every connection and never answers (``http://127.0.0.1:PORT/v1``)."""
    with silent_upstream() as (base, _):
        yield base + "/v1"


def _metrics(server: ServerProcess, token: str) -> str:
    return httpx.get(server.http + "/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=30).text


def _until(condition: Callable[[], bool], what: str, wait: float = 60.0) -> None:
    deadline = time.monotonic() + wait
    while not condition():
        assert time.monotonic() < deadline, f"never reached: {what}"
        time.sleep(0.05)


def _rss_kib(server: ServerProcess) -> int:
    for line in Path(f"/proc/{server.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _raw_request(server: ServerProcess, path: str, headers: dict[str, str], body: bytes = b"") -> socket.socket:
    """A POST sent by hand: the headers (and ``body``, maybe less than the Content-Length says), nothing more."""
    host, port = server.http.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", *(f"{k}: {v}" for k, v in headers.items()), "", ""]
    sock.sendall("\r\n".join(lines).encode() + body)
    return sock


def _status_of(sock: socket.socket, wait: float) -> tuple[int, bytes]:
    """The status code and body of the answer, read within ``wait`` seconds (refusals close the connection)."""
    sock.settimeout(wait)
    data = b""
    while True:
        head, found, rest = data.partition(b"\r\n\r\n")
        if found:
            length = next(
                (
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                None,
            )
            if length is not None and len(rest) >= length:
                break
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 "), data[:200]
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
        None,
    )
    while length is not None and len(rest) < length:  # the body may follow the head in another segment
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return int(head.split()[1]), rest


# --- hanging upstreams and worker shares -------------------------------------------------------------------


@pytest.mark.slow
def test_a_never_answering_judge_does_not_delay_another_project(tmp_path: Path, black_hole: str) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    cap = 12.0
    judge = {"model": "m", "base_url": black_hole, "timeout": 1000, "retries": 20, "api_key_env": None}
    config = write_config(
        tmp_path,
        {
            "database": {"url": url},
            "judges": {"hole": judge},
            "rewards": {"cpu_workers": 4, "upstream_timeout": cap, "upstream_retries": 0},
        },
    )
    slow = make_token(url, "slow", ["evaluations.run", "metrics.read"])
    fast = make_token(url, "fast", ["evaluations.run"])
    hanging = {"components": [{"ref": "llm-judge", "judge": "hole", "onError": "zero"}]}
    waits: list[float] = []
    with ServerProcess(config) as server, ThreadPoolExecutor(4) as pool:
        # as many hanging calls as there are cpu workers: without shares they would hold every one
        stuck = [pool.submit(post_http, server, slow, hanging, [{"completion": f"x{n}"}], 120) for n in range(4)]
        _until(
            lambda: metric(_metrics(server, slow), "evalsi_reward_inflight_rollouts", project="slow") >= 2,
            "the hanging calls reached the judge",
        )
        started = time.monotonic()
        for _ in range(3):
            began = time.monotonic()
            response = post_http(server, fast, EXACT, [ROLLOUT], 60)
            waits.append(time.monotonic() - began)
            assert response.status_code == 200, response.text
        answers = [call.result(timeout=120) for call in stuck]
        hung_for = time.monotonic() - started
    assert max(waits) < cap / 2, f"another project waited {max(waits):.1f}s behind a hanging upstream"
    # the spec's judge asked for 1000 s and 20 retries; the operator's caps (12 s, no retry) bound every call
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    reasons = [a.json()["results"][0]["components"]["llm-judge"] for a in answers]
    assert all(r["status"] == "error" for r in reasons), reasons
    assert hung_for < 4 * cap, f"4 calls of one project took {hung_for:.0f}s with a {cap:g} s upstream cap"


# --- callers that go away -------------------------------------------------------------------------------------


def _disconnect_http(server: ServerProcess, token: str, spec: Any, rollouts: Any) -> None:
    with pytest.raises(httpx.TimeoutException):
        post_http(server, token, spec, rollouts, timeout=1.0)


def _disconnect_connect(server: ServerProcess, token: str, spec: Any, rollouts: Any) -> None:
    headers = {"Content-Type": "application/json", "Connect-Protocol-Version": "1", "Authorization": f"Bearer {token}"}
    body = orjson.dumps({"spec": spec, "rollouts": rollouts})
    with pytest.raises(httpx.TimeoutException):
        httpx.post(server.http + CONNECT_PATH, content=body, headers=headers, timeout=1.0)


def _disconnect_grpc(server: ServerProcess, token: str, spec: Any, rollouts: Any) -> None:
    with grpc.insecure_channel(server.grpc) as channel:
        stub = pb_grpc.RewardServiceStub(channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.RpcError) as caught:
            stub.ScoreRewards(
                request_message(spec, rollouts), metadata=(("authorization", f"Bearer {token}"),), timeout=1.0
            )
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


CANCELLERS: dict[str, Callable[[ServerProcess, str, Any, Any], None]] = {
    "http": _disconnect_http,
    "connect": _disconnect_connect,
    "grpc": _disconnect_grpc,
}
"""How a caller goes away, by protocol: a client timeout closes the connection, a gRPC deadline cancels."""


@pytest.mark.parametrize("protocol", sorted(CANCELLERS))
def test_a_disconnected_callers_queued_work_never_runs(tmp_path: Path, protocol: str) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    config = write_config(tmp_path, {"database": {"url": url}, "rewards": {"cpu_workers": 2, "project_share": 0.5}})
    token = make_token(url, "p", ["evaluations.run", "metrics.read"])
    gate, log = tmp_path / "release", tmp_path / "scored.log"
    blocking = {"components": [{"ref": "test-server-gate", "params": {"gate": str(gate), "timeout": 120}}]}
    counting = {"components": [{"ref": "test-server-count", "params": {"log": str(log)}}], "cache": {"enabled": False}}
    with ServerProcess(config) as server, ThreadPoolExecutor(2) as pool:
        warm = post_http(server, token, counting, [{"completion": "warm", "reference": "x"}])  # the spec is bound
        assert warm.status_code == 200, warm.text
        held = pool.submit(post_http, server, token, blocking, [{"completion": "held"}], 120)
        _until(
            lambda: metric(_metrics(server, token), "evalsi_reward_inflight_rollouts", project="p") == 1,
            "the project's one worker is busy",
        )
        # the project's share (one worker) is taken: this call queues, then its caller goes away
        CANCELLERS[protocol](server, token, counting, [{"completion": "abandoned", "reference": "x"}])
        _until(
            lambda: metric(_metrics(server, token), "evalsi_reward_cancelled_calls_total") == 1,
            "the server saw the caller go away",
        )
        gate.touch()
        assert held.result(timeout=60).status_code == 200
        after = post_http(server, token, counting, [{"completion": "later", "reference": "x"}])
        assert after.status_code == 200, after.text
        text = _metrics(server, token)
    assert log.read_text().split() == ["warm", "later"]  # the queued call was dropped, the next one ran
    assert metric(text, "evalsi_reward_inflight_rollouts", project="p") == 0


def test_sigterm_exits_within_the_drain_bound_with_work_hanging(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    config = write_config(tmp_path, {"database": {"url": url}, "drain_timeout": 3})
    token = make_token(url, "p", ["evaluations.run", "metrics.read"])
    never = {"components": [{"ref": "test-server-gate", "params": {"gate": str(tmp_path / "never"), "timeout": 600}}]}
    server = ServerProcess(config)
    try:
        with ThreadPoolExecutor(2) as pool:
            calls = [pool.submit(post_http, server, token, never, [{"completion": f"{n}"}], 120) for n in range(2)]
            _until(
                lambda: metric(_metrics(server, token), "evalsi_reward_inflight_rollouts", project="p") >= 1,
                "a call is in flight",
            )
            started = time.monotonic()
            server.process.send_signal(15)
            code = server.process.wait(30)
            took = time.monotonic() - started
            outcomes = [call.exception(timeout=30) or call.result().status_code for call in calls]
    finally:
        server.kill()
    assert took < 3 + 4, f"SIGTERM took {took:.1f}s with drain_timeout 3s"
    assert code == 1  # work was abandoned, and the exit status says so
    # no abandoned call is reported as scored: the client sees a server error or the connection close
    assert all(isinstance(o, httpx.HTTPError) or (isinstance(o, int) and o >= 500) for o in outcomes), outcomes
    assert any("drain timeout" in line for line in server.stderr_lines)


# --- slow and huge bodies ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attack:
    """One request sent by hand, and the answer it must get without its body being read."""

    name: str
    path: str
    headers: dict[str, str]
    status: int
    code: str


def _json_headers(token: str | None, length: int) -> dict[str, str]:
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    return {"Content-Type": "application/json", "Content-Length": str(length), **auth}


def _connect_headers(token: str | None, length: int) -> dict[str, str]:
    return {**_json_headers(token, length), "Connect-Protocol-Version": "1"}


LIMIT = 1 * MIB
"""``rewards.max_request_bytes`` of the body tests."""


def _oversize(token: str) -> list[Attack]:
    huge = 200 * MIB
    return [
        Attack("json declared 200 MiB", SCORE_PATH, _json_headers(token, huge), 413, "request_too_large"),
        Attack("connect declared 200 MiB", CONNECT_PATH, _connect_headers(token, huge), 429, "resource_exhausted"),
    ]


def _unauthenticated(token: str) -> list[Attack]:
    big = 50 * 1024  # within the maximum: only the token is wrong
    return [
        Attack("json no token", SCORE_PATH, _json_headers(None, big), 401, "unauthenticated"),
        Attack("json unknown token", SCORE_PATH, _json_headers("evalsi_nope", big), 401, "unauthenticated"),
        Attack("json no token, oversize", SCORE_PATH, _json_headers(None, 200 * MIB), 401, "unauthenticated"),
        Attack("connect no token", CONNECT_PATH, _connect_headers(None, big), 401, "unauthenticated"),
        Attack("connect unknown token", CONNECT_PATH, _connect_headers("evalsi_nope", big), 401, "unauthenticated"),
    ]


OVERSIZE = _oversize
UNAUTHENTICATED = _unauthenticated


@pytest.fixture(scope="module")
def body_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    """A server with a 1 MiB request maximum, a 2 MiB byte gate, a 2 s body timeout, and two projects."""
    tmp = tmp_path_factory.mktemp("bodies")
    url = f"sqlite:///{tmp / 's.db'}"
    config = write_config(
        tmp,
        {
            "database": {"url": url},
            "rewards": {
                "max_request_bytes": LIMIT,
                "max_inflight_bytes": 2 * MIB,
                "body_timeout": 2,
                "project_share": 0.5,
            },
        },
    )
    every = ["evaluations.run", "evaluators.write", "resource.runs_code"]
    tokens = {project: make_token(url, project, every) for project in ("a", "b")}
    tokens["ops"] = make_token(url, "ops", ["metrics.read"])
    with ServerProcess(config) as server:
        yield server, tokens


@pytest.mark.parametrize("attack", [a.name for a in _oversize("t") + _unauthenticated("t")])
def test_refused_bodies_are_answered_without_being_read(
    body_server: tuple[ServerProcess, dict[str, str]], attack: str
) -> None:
    server, tokens = body_server
    (chosen,) = [a for a in OVERSIZE(tokens["a"]) + UNAUTHENTICATED(tokens["a"]) if a.name == attack]
    before = _rss_kib(server)
    sock = _raw_request(server, chosen.path, chosen.headers, b"{")  # the promised body never comes
    try:
        status, rest = _status_of(sock, wait=5)  # an answer now: the server did not wait for the body
    finally:
        sock.close()
    assert status == chosen.status
    assert chosen.code.encode() in rest
    assert _rss_kib(server) - before < 32 * 1024


def test_a_chunked_body_past_the_maximum_is_cut_off(body_server: tuple[ServerProcess, dict[str, str]]) -> None:
    server, tokens = body_server
    headers = {
        "Content-Type": "application/json",
        "Transfer-Encoding": "chunked",
        "Authorization": f"Bearer {tokens['a']}",
    }
    sock = _raw_request(server, SCORE_PATH, headers)
    before = _rss_kib(server)
    chunk = b"x" * (256 * 1024)
    sent = 0
    try:
        with pytest.raises(OSError):  # the server answers and closes once the maximum is passed
            while sent < 100 * MIB:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
        status, rest = _status_of(sock, wait=5)
    except OSError:
        status, rest = 0, b""
    finally:
        sock.close()
    assert sent < 20 * MIB, f"the server read {sent} bytes of a body over a 1 MiB maximum"
    assert status in (413, 0) and (status == 0 or b"request_too_large" in rest)
    assert _rss_kib(server) - before < 32 * 1024


def test_an_idle_socket_with_a_large_content_length_blocks_no_one(
    body_server: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, tokens = body_server
    idle = [_raw_request(server, SCORE_PATH, _json_headers(tokens["a"], LIMIT), b'{"spec"') for _ in range(3)]
    try:
        started = time.monotonic()
        response = post_http(server, tokens["b"], EXACT, [ROLLOUT], timeout=30)  # another project: served now
        assert response.status_code == 200, response.text
        assert time.monotonic() - started < 1.5
        statuses = [_status_of(sock, wait=10)[0] for sock in idle]  # the body timeout frees their room
        assert statuses == [408, 408, 408]
        response = post_http(server, tokens["a"], EXACT, [ROLLOUT], timeout=30)  # and the project is served again
        assert response.status_code == 200, response.text
    finally:
        for sock in idle:
            sock.close()


def test_grpc_refuses_an_oversize_message_and_an_unknown_token(
    body_server: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, tokens = body_server
    before = _rss_kib(server)
    big = [{"completion": "x" * (256 * 1024)} for _ in range(40)]  # 10 MiB against a 1 MiB maximum
    status, details = call_grpc(server, tokens["a"], EXACT, big)
    assert status == "resource_exhausted", details
    status, details = call_grpc(server, "evalsi_nope", EXACT, [ROLLOUT])
    assert status == "unauthenticated", details
    status, body = call_grpc(server, tokens["a"], EXACT, [ROLLOUT])
    assert status == "ok" and body["results"][0]["total"] == 1.0
    assert _rss_kib(server) - before < 32 * 1024


def test_grpc_message_cap_follows_the_configured_maximum(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    config = write_config(tmp_path, {"database": {"url": url}, "rewards": {"max_request_bytes": 4 * MIB}})
    token = make_token(url, "p", ["evaluations.run"])
    fits = [{"completion": "x" * (512 * 1024), "reference": "y"} for _ in range(6)]  # 3 MiB
    over = [{"completion": "x" * (512 * 1024), "reference": "y"} for _ in range(10)]  # 5 MiB
    with ServerProcess(config) as server:
        assert call_grpc(server, token, EXACT, fits)[0] == "ok"
        assert call_grpc(server, token, EXACT, over)[0] == "resource_exhausted"
        assert post_http(server, token, EXACT, fits).status_code == 200
        assert post_http(server, token, EXACT, over).status_code == 413


# --- bound specs ---------------------------------------------------------------------------------------------


def _spec_of(size: int, salt: int) -> dict[str, Any]:
    """A distinct RewardSpec of about ``size`` bytes of canonical JSON: 100 ``contains`` components."""
    text = (f"{salt}-" + "x" * (size // 100))[: size // 100]
    return {"components": [{"ref": "contains", "name": f"c{n}", "params": {"text": text}} for n in range(100)]}


SPEC_FLOODS = {"just under the spec limit": 1000 * 1024, "four times the spec limit": 4 << 20}
"""Spec sizes a tenant floods the server with, forty distinct specs each (the default ``max_spec_bytes`` is 1 MiB)."""


def test_bound_specs_are_kept_within_bytes_and_a_projects_share(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    config = write_config(tmp_path, {"database": {"url": url}})  # the default limits
    flood = make_token(url, "flood", ["evaluations.run", "metrics.read"])
    quiet = make_token(url, "quiet", ["evaluations.run"])
    rollout = [{"completion": "x"}]
    with ServerProcess(config) as server:
        kept = {"components": [{"ref": "exact-match"}], "clip": [0, 1]}
        assert post_http(server, quiet, kept, rollout).status_code == 200  # another project's spec, bound first
        assert post_http(server, flood, EXACT, rollout).status_code == 200  # warm: the server's own memory
        answers: dict[str, list[int]] = {}
        held: dict[str, int] = {}
        for name, size in SPEC_FLOODS.items():
            before = _rss_kib(server)
            with ThreadPoolExecutor(4) as pool:
                calls = [pool.submit(post_http, server, flood, _spec_of(size, n), rollout) for n in range(40)]
                answers[name] = [call.result(timeout=300).status_code for call in calls]
            held[name] = (_rss_kib(server) - before) // 1024
        text = _metrics(server, flood)
        over = post_http(server, flood, _spec_of(4 << 20, 99), rollout).json().get("error", {})
        code, details = call_grpc(server, flood, _spec_of(4 << 20, 98), rollout)
    assert answers["just under the spec limit"] == [200] * 40
    assert answers["four times the spec limit"] == [400] * 40
    assert over.get("code") == "spec_too_large" and "rewards.max_spec_bytes=1048576" in over["message"], over
    assert code == "invalid_argument" and "rewards.max_spec_bytes" in details
    # the flood keeps at most its share (half of the 64 MiB default) of bound specs, not forty of them
    share = 32 << 20
    assert 0 < metric(text, "evalsi_reward_spec_cache_bytes", project="flood") <= share
    assert metric(text, "evalsi_reward_spec_cache_bytes", project="quiet") > 0  # the other project's spec stayed
    # after the calls, the server holds the kept specs (and the allocator's slack), not every spec it saw
    assert max(held.values()) < 80, f"MiB the server held after each flood: {held}"


# --- every service on every protocol passes the byte gate ----------------------------------------------------------


def _calls(payload: str) -> list[Call]:
    """Every RPC with a request body, carrying ``payload`` where the request has room for free text."""
    archive = base64.b64encode(payload.encode()).decode()
    row = orjson.dumps({"messages": [{"role": "user", "content": payload}]}).decode()
    run = {"version": 1, "kind": "RunResults", "name": "r", "records": [], "summary": {"note": payload}}
    job = {"evaluator": "none", "inputDataset": "none", "outputDataset": "out"}
    return [
        Call("RewardService", "ScoreRewards", SCORE_PATH, pb.ScoreRewardsRequest,
             {"spec": EXACT, "rollouts": [{"completion": payload, "reference": "a"}]}),
        Call("RunService", "CreateRun", "/v1alpha1/runs", pb.CreateRunRequest, {"results": run}),
        Call("RunService", "CompareRuns", "/v1alpha1/runs:compare", pb.CompareRunsRequest,
             {"baseRunId": "run_x", "candidateRunId": "run_y", "metrics": [payload]}),
        Call("EvaluatorService", "CreateEvaluator", "/v1alpha1/evaluators", epb.CreateEvaluatorRequest,
             {"evaluatorId": "e", "entry": "t.py::test_t", "archive": archive}),
        Call("DatasetService", "CreateDataset", "/v1alpha1/datasets", epb.CreateDatasetRequest,
             {"datasetId": "d", "jsonl": row}),
        Call("EvaluationJobService", "CreateEvaluationJob", "/v1alpha1/evaluationJobs",
             epb.CreateEvaluationJobRequest, {"evaluationJob": {**job, "target": payload}}),
        Call("EvaluationJobService", "CancelEvaluationJob", "/v1alpha1/evaluationJobs/j/cancel",
             epb.GetEvaluationJobRequest, {"evaluationJobId": "j"}),
    ]  # fmt: skip


def test_every_service_on_every_protocol_waits_for_the_projects_byte_share(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    rewards = {"max_request_bytes": LIMIT, "max_inflight_bytes": 2 * MIB, "body_timeout": 600, "project_share": 0.5}
    config = write_config(tmp_path, {"database": {"url": url}, "rewards": rewards})
    every = ["evaluations.run", "evaluators.write", "resource.runs_code"]
    tokens = {project: make_token(url, project, every) for project in ("a", "b")}
    tokens["ops"] = make_token(url, "ops", ["metrics.read"])
    calls = [(call, protocol) for call in _calls("x" * 1024) for protocol in PROTOCOLS]
    with ServerProcess(config) as server, ThreadPoolExecutor(len(calls)) as pool:
        # an idle body takes project a's whole share of the byte gate (1 MiB of 2) until its client goes away
        idle = _raw_request(server, SCORE_PATH, _json_headers(tokens["a"], LIMIT), b"{")
        try:
            pending = {
                pool.submit(getattr(call, protocol), server, tokens["a"]): (call.method, protocol)
                for call, protocol in calls
            }
            _until(
                lambda: metric(_metrics(server, tokens["ops"]), "evalsi_reward_requests_waiting_to_read") >= len(calls),
                f"all {len(calls)} calls waiting for project a's share",
            )
            answered = [pending[f] for f in pending if f.done()]
            assert not answered, f"answered while the project's byte share was held: {answered}"
            assert post_http(server, tokens["b"], EXACT, [ROLLOUT], timeout=30).status_code == 200  # b is served
        finally:
            idle.close()  # the idle body's client goes away: its room is given back
        outcomes = {pending[f]: f.result(timeout=120) for f in pending}
    # each got its own answer (whatever it was) once the share was free
    assert all(outcome not in (500, "UNKNOWN", "INTERNAL") for outcome in outcomes.values()), outcomes


def _hwm_kib(server: ServerProcess) -> int:
    for line in Path(f"/proc/{server.process.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def _peak_from_here(server: ServerProcess) -> Callable[[], int]:
    """Reset the server's peak memory to what it holds now; the returned function gives the MiB it rose since."""
    Path(f"/proc/{server.process.pid}/clear_refs").write_text("5")  # Linux: VmHWM := VmRSS
    now = _rss_kib(server)
    return lambda: (_hwm_kib(server) - now) // 1024


LARGE = 50 * 1000 * 1000
"""One large call's payload: six of them at once are 300 MB of messages."""
LARGE_CALLS = ("ScoreRewards", "CreateDataset", "CreateEvaluator", "CreateRun")


@pytest.mark.slow
@pytest.mark.parametrize("method", LARGE_CALLS)
def test_six_large_grpc_calls_at_once_take_the_memory_of_one(tmp_path: Path, method: str) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    rewards = {"max_inflight_bytes": 128 * MIB, "project_share": 0.5}  # a project's share: one 64 MiB call at once
    config = write_config(tmp_path, {"database": {"url": url}, "rewards": rewards})
    token = make_token(url, "p", ["evaluations.run", "evaluators.write", "resource.runs_code"])
    (call,) = [c for c in _calls("x" * LARGE) if c.method == method]
    with ServerProcess(config) as server:
        assert _calls("warm")[0].grpc(server, token) == "OK"
        peak = _peak_from_here(server)
        alone = call.grpc(server, token, timeout=300)
        one = peak()
        peak = _peak_from_here(server)
        with ThreadPoolExecutor(6) as pool:
            outcomes = list(pool.map(lambda _: call.grpc(server, token, timeout=300), range(6)))
        six = peak()
        assert _calls("after")[0].grpc(server, token) == "OK"
    assert alone not in ("UNKNOWN", "INTERNAL") and set(outcomes) == {alone}, (alone, outcomes)
    # the byte gate admits one such message of the project at a time: six at once peak near one alone
    assert six < 1.75 * one, f"{method}: one 50 MB call raised the peak by {one} MiB, six at once by {six} MiB"


# --- comparing runs --------------------------------------------------------------------------------------------


def _results(name: str, records: int, text: int, wrong: int = 0) -> dict[str, Any]:
    """A results document of ``records`` records of one sample each, with ``text`` characters of completion."""
    rows = [
        {
            "key": f"k{n}",
            "index": n,
            "prompt": f"question {n}",
            "samples": [
                {
                    "completion": f"{n}:" + "y" * text,
                    "scores": {
                        "exact-match": {"value": n >= wrong, "status": "ok", "reason": "a reason " * 4},
                        "length": {"value": float(n % 7), "status": "ok"},
                    },
                }
            ],
        }
        for n in range(records)
    ]
    metrics = [{"name": "exact-match", "threshold": 1.0}, {"name": "length", "threshold": 1.0}]
    return {"version": 1, "kind": "RunResults", "name": name, "metrics": metrics, "records": rows}


def _create_run(server: ServerProcess, token: str, document: dict[str, Any]) -> str:
    headers = {"Authorization": f"Bearer {token}"}
    created = httpx.post(server.http + "/v1alpha1/runs", json={"results": document}, headers=headers, timeout=300)
    assert created.status_code == 200, created.text[:300]
    return str(created.json()["id"])


def _compare(server: ServerProcess, token: str, base: str, candidate: str) -> httpx.Response:
    body = {"baseRunId": base, "candidateRunId": candidate, "regression": ["exact-match:0.01"]}
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.post(server.http + "/v1alpha1/runs:compare", json=body, headers=headers, timeout=300)


@pytest.mark.slow
def test_four_comparisons_of_large_runs_at_once_read_their_scores_not_their_texts(tmp_path: Path) -> None:
    from evalsi.runs import compare_runs
    from evalsi.runs._compare import comparison_to_dict, run_from_document

    url = f"sqlite:///{tmp_path / 's.db'}"
    config = write_config(tmp_path, {"database": {"url": url}})  # the default limits
    token = make_token(url, "p", ["evaluations.run"])
    base_doc, step_doc = _results("base", 12000, 2500), _results("step", 12000, 2500, wrong=600)  # 30 MB each
    with ServerProcess(config) as server:
        base, step = _create_run(server, token, base_doc), _create_run(server, token, step_doc)
        small = _create_run(server, token, _results("small", 50, 10))
        assert _compare(server, token, small, small).status_code == 200  # warm: the comparison's own code
        rise = _peak_from_here(server)
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda _: _compare(server, token, base, step), range(4)))
        peak = rise()
    assert all(a.status_code == 200 for a in answers), [a.text[:200] for a in answers]
    local = compare_runs(run_from_document(base_doc, "base"), run_from_document(step_doc, "step"))
    expected = [comparison_to_dict(c) for c in local]
    for answer in answers:
        compared = answer.json()
        assert compared["regressed"] is True and compared["regressions"] == ["exact-match:0.01"]
        got = {c["metric"]: c for c in compared["comparisons"]}
        for item in expected:
            assert got[item["metric"]]["difference"]["mean"] == pytest.approx(item["difference"]["mean"])
            assert got[item["metric"]]["pairs"] == item["pairs"]
            assert (got[item["metric"]]["mcnemar"] is None) == (item["mcnemar"] is None)
    assert peak < 200, f"four comparisons of two 30 MB runs raised the server's peak memory by {peak} MiB"


def test_a_comparison_past_max_compare_bytes_is_refused_on_every_protocol(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    config = write_config(tmp_path, {"database": {"url": url}, "runs": {"max_compare_bytes": MIB}})
    token = make_token(url, "p", ["evaluations.run"])
    with ServerProcess(config) as server:
        large = [_create_run(server, token, _results(f"large-{n}", 400, 1500)) for n in range(2)]  # 600 KB each
        small = [_create_run(server, token, _results(f"small-{n}", 40, 100)) for n in range(2)]
        assert _compare(server, token, *small).status_code == 200
        body = {"baseRunId": large[0], "candidateRunId": large[1]}
        call = Call("RunService", "CompareRuns", "/v1alpha1/runs:compare", pb.CompareRunsRequest, body)
        answers = {protocol: call.answer(protocol, server, token) for protocol in PROTOCOLS}
    assert answers["http"].status == "413", answers
    assert answers["connect"].status == answers["grpc"].status == "resource_exhausted", answers
    for answer in answers.values():
        assert f"runs.max_compare_bytes={MIB}" in answer.message, answer
