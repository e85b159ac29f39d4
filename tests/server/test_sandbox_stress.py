"""Code scored through gRPC and HTTP at once, many times: sandboxes start while gRPC's threads are busy.

Every case gets a fresh sandbox (``fresh_interpreter: true``), so the server starts hundreds of sandboxes while
gRPC calls are in flight. Starting one must never run gRPC's fork handlers in the server process (a child
forked from a process whose threads are inside gRPC inherits broken pollers: the sandbox does not start). gRPC's
fork support is turned on here, as it is in deployments that fork, so a start that forks would trip it.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from evalsi.sandbox import available_rungs
from tests.server.harness import ServerProcess, call_grpc, make_token, post_http, write_config

ROUNDS = 12
"""Calls per protocol; each call runs CASES sandboxes, one per case."""
CASES = 4
PROGRAM = "```python\nprint(int(input()) * 2)\n```"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif("namespaced" not in available_rungs(), reason="bubblewrap sandboxes do not work here"),
]


def _spec() -> dict[str, Any]:
    return {
        "components": [
            {
                "ref": "code-exec-tests",
                "name": "tests",
                "sandbox": {"minIsolation": "namespaced"},
                "params": {"fresh_interpreter": True},
            }
        ],
        "cache": {"enabled": False},
    }


def _rollouts(call: int) -> list[dict[str, Any]]:
    tests = [{"input": str(call * 100 + n), "output": str(2 * (call * 100 + n))} for n in range(CASES)]
    return [{"completion": PROGRAM, "tests": tests}, {"completion": "print(-1)", "tests": tests[:1]}]


def test_code_through_grpc_and_http_at_once_always_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRPC_ENABLE_FORK_SUPPORT", "1")
    url = f"sqlite:///{tmp_path / 's.db'}"
    config = write_config(tmp_path, {"database": {"url": url}, "rewards": {"sandbox_workers": 4, "project_share": 1}})
    token = make_token(url, "code", ["evaluations.run", "resource.runs_code"])
    assert os.environ["GRPC_ENABLE_FORK_SUPPORT"] == "1"
    with ServerProcess(config) as server, ThreadPoolExecutor(8) as pool:
        grpc_calls = [pool.submit(call_grpc, server, token, _spec(), _rollouts(n)) for n in range(ROUNDS)]
        http_calls = [pool.submit(post_http, server, token, _spec(), _rollouts(ROUNDS + n), 120) for n in range(ROUNDS)]
        grpc_results = [call.result(timeout=120) for call in grpc_calls]
        http_results = [call.result(timeout=120) for call in http_calls]
        stderr = "".join(server.stderr_lines)
    for status, body in grpc_results:
        assert status == "ok", body
        assert [r["total"] for r in body["results"]] == [1.0, 0.0], body
    for response in http_results:
        assert response.status_code == 200, response.text
        assert [r["total"] for r in response.json()["results"]] == [1.0, 0.0], response.text
    assert "skipping fork() handlers" not in stderr
