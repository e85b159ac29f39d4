"""Back-pressure and quotas against a real server: calls past the limits wait (none is dropped), and a project
at its quota does not delay another project. The gate evaluator holds calls in flight until the test releases
them, so every state asserted here is reached deterministically (no timing)."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import grpc
import httpx

from evalsi.server._proto.evalsi.v1alpha1 import rewards_pb2_grpc as pb_grpc
from tests.server.harness import ServerProcess, make_token, metric, post_http, write_config
from tests.server.messages import request_message

WAIT = 60.0


def _metrics(process: ServerProcess, token: str) -> str:
    return httpx.get(process.http + "/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=30).text


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"never reached: {what}"
        time.sleep(0.05)


def test_eight_times_max_inflight_all_complete_and_wait_in_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    config = write_config(tmp_path, {"database": {"url": url}, "rewards": {"max_inflight": 8, "cpu_workers": 8}})
    token = make_token(url, "team", ["evaluations.run", "metrics.read"])
    gate = tmp_path / "release"
    spec = {"components": [{"ref": "test-server-gate", "params": {"gate": str(gate)}}]}
    sizes = [1, 2, 4, 1] * 4 + [3, 5, 8, 1, 1, 2, 4, 8]  # 64 rollouts = 8 x max_inflight, calls of mixed sizes
    assert sum(sizes) == 64
    peak = 0
    with ServerProcess(config) as server, ThreadPoolExecutor(len(sizes)) as pool:
        calls: list[Future[httpx.Response]] = []
        for number, size in enumerate(sizes):
            rollouts = [{"completion": f"call{number}-{i}"} for i in range(size)]
            calls.append(pool.submit(post_http, server, token, spec, rollouts, 120))

        def all_admitted_or_waiting() -> bool:
            nonlocal peak
            text = _metrics(server, token)
            inflight = metric(text, "evalsi_reward_inflight_rollouts", project="team")
            waiting = metric(text, "evalsi_reward_waiting_rollouts", project="team")
            peak = max(peak, int(inflight))
            return inflight + waiting == 64 and waiting > 0

        _until(all_admitted_or_waiting, "every call admitted or waiting")
        assert peak <= 8  # never more than max_inflight rollouts being scored
        gate.touch()
        responses = [call.result(timeout=WAIT) for call in calls]
        text = _metrics(server, token)
    assert [r.status_code for r in responses] == [200] * len(sizes)
    assert [len(r.json()["results"]) for r in responses] == sizes
    assert all(item["total"] == 1.0 for r in responses for item in r.json()["results"])
    assert metric(text, "evalsi_reward_waiting_rollouts", project="team") == 0
    assert metric(text, "evalsi_reward_rollouts_total", project="team", status="ok") == 64


def test_a_project_over_its_quota_waits_without_delaying_another(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    config = write_config(
        tmp_path,
        {"database": {"url": url}, "rewards": {"cpu_workers": 8}, "quotas": {"slow": {"max_reward_rollouts": 4}}},
    )
    slow = make_token(url, "slow", ["evaluations.run", "metrics.read"])
    fast = make_token(url, "fast", ["evaluations.run", "metrics.read"])
    gate = tmp_path / "release"
    gated = {"components": [{"ref": "test-server-gate", "params": {"gate": str(gate)}}]}
    with ServerProcess(config) as server, ThreadPoolExecutor(3) as pool:
        held = [
            pool.submit(post_http, server, slow, gated, [{"completion": f"{n}-{i}"} for i in range(4)], 120)
            for n in range(3)
        ]
        _until(
            lambda: metric(_metrics(server, slow), "evalsi_reward_waiting_rollouts", project="slow") == 8,
            "two of slow's calls waiting on its quota",
        )
        text = _metrics(server, slow)
        assert metric(text, "evalsi_reward_inflight_rollouts", project="slow") == 4
        # the other project is answered while slow's calls still wait
        other = post_http(server, fast, {"components": [{"ref": "exact-match"}]}, [{"completion": "a", "answer": "a"}])
        assert other.status_code == 200 and other.json()["results"][0]["total"] == 1.0
        assert metric(_metrics(server, slow), "evalsi_reward_waiting_rollouts", project="slow") == 8
        assert not any(call.done() for call in held)
        gate.touch()
        assert [call.result(timeout=WAIT).status_code for call in held] == [200, 200, 200]


def test_a_cancelled_call_keeps_its_capacity_until_its_batch_ends(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    config = write_config(tmp_path, {"database": {"url": url}})
    token = make_token(url, "p", ["evaluations.run", "metrics.read"])
    gate = tmp_path / "release"
    spec = {"components": [{"ref": "test-server-gate", "params": {"gate": str(gate)}}]}
    with ServerProcess(config) as server:
        with grpc.insecure_channel(server.grpc) as channel:
            stub = pb_grpc.RewardServiceStub(channel)  # type: ignore[no-untyped-call]
            request = request_message(spec, [{"completion": "a"}, {"completion": "b"}, {"completion": "c"}])
            call = stub.ScoreRewards.future(request, metadata=(("authorization", f"Bearer {token}"),), timeout=120)
            _until(
                lambda: metric(_metrics(server, token), "evalsi_reward_inflight_rollouts", project="p") == 3,
                "the batch is being scored",
            )
            call.cancel()
            _until(
                lambda: metric(_metrics(server, token), "evalsi_reward_cancelled_calls_total") == 1,
                "the server saw the cancellation",
            )
        assert metric(_metrics(server, token), "evalsi_reward_inflight_rollouts", project="p") == 3
        gate.touch()
        _until(
            lambda: metric(_metrics(server, token), "evalsi_reward_inflight_rollouts", project="p") == 0,
            "the cancelled batch released its capacity when it ended",
        )


def test_request_bodies_past_max_inflight_bytes_wait_unread(tmp_path: Path) -> None:
    """Memory stays bounded: bodies beyond rewards.max_inflight_bytes are not read until room is free."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    budget = 12_000
    config = write_config(
        tmp_path, {"database": {"url": url}, "rewards": {"max_inflight_bytes": budget, "cpu_workers": 8}}
    )
    token = make_token(url, "team", ["evaluations.run", "metrics.read"])
    gate = tmp_path / "release"
    spec = {"components": [{"ref": "test-server-gate", "params": {"gate": str(gate)}}]}
    calls_count = 12
    peak = 0.0
    with ServerProcess(config) as server, ThreadPoolExecutor(calls_count) as pool:
        calls = [
            pool.submit(post_http, server, token, spec, [{"completion": f"c{n}-" + "x" * 4000}], 120)
            for n in range(calls_count)
        ]

        def some_wait_unread() -> bool:
            nonlocal peak
            text = _metrics(server, token)
            held = metric(text, "evalsi_reward_request_bytes")
            peak = max(peak, held)
            return metric(text, "evalsi_reward_requests_waiting_to_read") >= calls_count - budget // 4000

        _until(some_wait_unread, "calls past the byte budget waiting before their body is read")
        assert 0 < peak <= budget
        gate.touch()
        responses = [call.result(timeout=WAIT) for call in calls]
        text = _metrics(server, token)
    assert [r.status_code for r in responses] == [200] * calls_count
    assert all(r.json()["results"][0]["total"] == 1.0 for r in responses)
    assert metric(text, "evalsi_reward_request_bytes") == 0
    assert metric(text, "evalsi_reward_requests_waiting_to_read") == 0
