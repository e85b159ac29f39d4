"""What every call pays on the server: labelled metrics looked up once, startup objects out of the collector's way,
fixed-path routes dispatched without walking the router (and every other request routed as before), and the event
loop (uvloop's when installed)."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import Histogram

from evalsi.server._config import config_from_mapping
from evalsi.server._metrics import Metrics
from evalsi.server._run import _event_loop, build, serve_async
from evalsi.server.transport._http import _direct_routes
from tests.server.harness import ServerProcess, make_token, metric, post_http, write_config

EXACT = {"components": [{"ref": "exact-match", "name": "exact"}]}


def test_a_metrics_child_is_kept_and_counts_into_its_labelled_series() -> None:
    metrics = Metrics()
    first = metrics.child(metrics.calls, "http", "ok")
    assert metrics.child(metrics.calls, "http", "ok") is first
    assert first is metrics.calls.labels("http", "ok")  # the very series prometheus_client keeps
    first.inc()
    metrics.child(metrics.calls, "http", "ok").inc(2)
    metrics.child(metrics.calls, "grpc", "ok").inc()
    metrics.on_lookup("memory", 5, 3)
    metrics.on_gauge("inflight", "alpha", 4)
    metrics.on_gauge("inflight", "alpha", -1)
    seconds = metrics.child(metrics.call_seconds, "http")
    assert isinstance(seconds, Histogram)
    seconds.observe(0.2)
    text = metrics.render().decode()
    assert metric(text, "evalsi_reward_calls_total", protocol="http", code="ok") == 3.0
    assert metric(text, "evalsi_reward_calls_total", protocol="grpc", code="ok") == 1.0
    assert metric(text, "evalsi_reward_cache_hits_total", tier="memory") == 5.0
    assert metric(text, "evalsi_reward_cache_misses_total", tier="memory") == 3.0
    assert metric(text, "evalsi_reward_inflight_rollouts", project="alpha") == 3.0
    assert metric(text, "evalsi_reward_call_seconds_count", protocol="http") == 1.0


def test_the_server_freezes_its_startup_objects_before_it_serves(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'server.db'}"
    config = config_from_mapping(
        {"listen": {"host": "127.0.0.1", "port": 0, "grpc_port": None}, "database": {"url": url}}, tmp_path
    )
    frozen: list[int] = []

    def ready(info: dict[str, Any]) -> None:
        frozen.append(gc.get_freeze_count())
        os.kill(os.getpid(), signal.SIGTERM)  # the server's own handler: it drains and returns

    gc.unfreeze()
    try:
        assert asyncio.run(asyncio.wait_for(serve_async(config, ready), 120)) is True
    finally:
        gc.unfreeze()
    # the imported server libraries and the built services (tens of thousands of objects) were frozen
    assert frozen and frozen[0] > 10_000, frozen


def test_fixed_path_routes_are_dispatched_directly_and_the_rest_through_the_router(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'server.db'}"
    parts = build(config_from_mapping({"database": {"url": url}}, tmp_path))
    try:
        direct = _direct_routes(parts.state.api.routes())
    finally:
        parts.service.close()
        parts.engine.dispose()
    assert ("POST", "/v1alpha1/rewards:score") in direct
    assert ("GET", "/v1alpha1/runs") in direct
    assert all("{" not in path for _, path in direct)  # a path with parameters is the router's
    assert all(verb != "HEAD" for verb, _ in direct)

    config = write_config(tmp_path, {"database": {"url": url}})
    token = make_token(url, "alpha", ["evaluations.run"])
    headers = {"Authorization": f"Bearer {token}"}
    with ServerProcess(config) as server:
        scored = post_http(
            server, token, EXACT, [{"completion": "4", "answer": "4"}, {"completion": "5", "answer": "4"}]
        )
        assert scored.status_code == 200, scored.text
        assert [r["total"] for r in scored.json()["results"]] == [1.0, 0.0]
        refused = post_http(server, None, EXACT, [{"completion": "4"}])  # the guard still runs first
        assert refused.status_code == 401, refused.text
        wrong_verb = httpx.get(server.http + "/v1alpha1/rewards:score", headers=headers, timeout=60)
        assert wrong_verb.status_code == 405 and "POST" in wrong_verb.headers["allow"]
        listed = httpx.get(server.http + "/v1alpha1/runs", headers=headers, timeout=60)
        assert listed.status_code == 200, listed.text
        missing = httpx.get(server.http + "/v1alpha1/runs/nope", headers=headers, timeout=60)  # a path parameter
        assert missing.status_code == 404, missing.text
        assert httpx.get(server.http + "/nowhere", timeout=60).status_code == 404


def test_the_server_loop_is_uvloops_when_installed_and_asyncios_without_it(monkeypatch: pytest.MonkeyPatch) -> None:
    uvloop = pytest.importorskip("uvloop")  # the server extra installs it
    loop = _event_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as if it were not installed: the import fails
    loop = _event_loop()
    try:
        assert isinstance(loop, asyncio.SelectorEventLoop)  # asyncio's own
    finally:
        loop.close()
