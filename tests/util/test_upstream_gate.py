"""The upstream gate: every HTTP attempt of the shared retry transports holds a slot of its upstream."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from evalsi._util.retry import RetryPolicy
from evalsi._util.retry_transports import AsyncRetryTransport, RetryTransport
from evalsi._util.upstream import set_gate, upstream_of
from tests.util.test_retry import ScriptedServer


class RecordingGate:
    """A gate that counts slots per upstream and the most held at once."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.held = 0
        self.most = 0
        self.lock = threading.Lock()

    def acquire(self, upstream: str) -> Any:
        with self.lock:
            self.events.append(("acquire", upstream))
            self.held += 1
            self.most = max(self.most, self.held)
        return len(self.events)

    async def acquire_async(self, upstream: str) -> Any:
        return self.acquire(upstream)

    def release(self, upstream: str, token: Any) -> None:
        with self.lock:
            self.events.append(("release", upstream))
            self.held -= 1


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    srv = ScriptedServer()
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def gate() -> Iterator[RecordingGate]:
    recording = RecordingGate()
    previous = set_gate(recording)
    yield recording
    set_gate(previous)


@pytest.mark.parametrize("use_async", [False, True])
def test_each_attempt_holds_a_slot_of_its_upstream(
    server: ScriptedServer, gate: RecordingGate, use_async: bool
) -> None:
    server.script = [(503, {"Retry-After": "0"}), "drop"]
    policy = RetryPolicy(retries=3, backoff=0.01)
    if use_async:

        async def go() -> int:
            async with httpx.AsyncClient(transport=AsyncRetryTransport(policy), timeout=5.0) as client:
                return (await client.post(server.url, content=b"{}")).status_code

        status = asyncio.run(go())
    else:
        with httpx.Client(transport=RetryTransport(policy), timeout=5.0) as client:
            status = client.post(server.url, content=b"{}").status_code
    assert status == 200
    upstream = upstream_of(httpx.URL(server.url))
    assert gate.events == [("acquire", upstream), ("release", upstream)] * 3  # three attempts, none held on
    assert gate.most == 1 and gate.held == 0


def test_without_a_gate_requests_go_straight_through(server: ScriptedServer) -> None:
    previous = set_gate(None)
    try:
        with httpx.Client(transport=RetryTransport(RetryPolicy(retries=0)), timeout=5.0) as client:
            assert client.post(server.url, content=b"{}").status_code == 200
    finally:
        set_gate(previous)
