"""SIGTERM drains: calls in flight and calls waiting for capacity are answered, then the process exits 0."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.server.harness import ServerProcess, make_token, metric, post_http, write_config


def test_sigterm_answers_inflight_and_waiting_calls_then_exits(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    config = write_config(tmp_path, {"database": {"url": url}, "rewards": {"max_inflight": 2}})
    token = make_token(url, "p", ["evaluations.run", "metrics.read"])
    gate = tmp_path / "release"
    spec = {"components": [{"ref": "test-server-gate", "params": {"gate": str(gate)}}]}
    headers = {"Authorization": f"Bearer {token}"}
    server = ServerProcess(config)
    try:
        with ThreadPoolExecutor(2) as pool:
            calls = [
                pool.submit(post_http, server, token, spec, [{"completion": f"{n}a"}, {"completion": f"{n}b"}], 120)
                for n in range(2)
            ]
            deadline = time.monotonic() + 60
            while True:  # one call in flight, the other waiting behind max_inflight
                text = httpx.get(server.http + "/metrics", headers=headers).text
                if metric(text, "evalsi_reward_waiting_rollouts", project="p") == 2:
                    break
                assert time.monotonic() < deadline, "the calls never reached the server"
                time.sleep(0.05)
            server.process.send_signal(15)
            deadline = time.monotonic() + 60
            while True:  # the port stays open: health says 503 (load balancers stop routing) while calls are held
                health = httpx.get(server.http + "/healthz", timeout=5)
                if health.status_code == 503:
                    break
                assert time.monotonic() < deadline, "still healthy after SIGTERM"
                time.sleep(0.05)
            assert health.json() == {"status": "draining"}
            late = post_http(server, token, spec, [{"completion": "late"}])
            assert late.status_code == 503 and late.json()["error"]["status"] == "unavailable"
            assert server.process.poll() is None  # still draining
            gate.touch()
            responses = [call.result(timeout=60) for call in calls]
        assert [r.status_code for r in responses] == [200, 200]
        assert [len(r.json()["results"]) for r in responses] == [2, 2]
        assert server.process.wait(60) == 0
    finally:
        server.kill()
