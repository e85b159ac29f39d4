"""The aiohttp client of run targets, judges and reward models: the shared retry rules, timeouts, keep-alive,
connection limits and replicas, against real loopback servers."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import pytest

from evalsi._util.retry import RetryNotice, RetryPolicy
from evalsi._util.transport import HttpClient, Reply, TransportFailure, background_loop
from tests.helpers.openai_server import OpenAIServer
from tests.util.test_retry import ScriptedServer, server  # noqa: F401  (the fixture)

T = TypeVar("T")


def run(make: Callable[[], Awaitable[T]]) -> T:
    async def go() -> T:
        return await make()

    return asyncio.run(go())


def client(url: str | list[str], retries: int = 3, **kwargs: Any) -> HttpClient:
    notices = kwargs.pop("notices", None)
    policy = RetryPolicy(retries=retries, backoff=kwargs.pop("backoff", 0.01), on_retry=notices)
    return HttpClient(url, policy=policy, timeout=kwargs.pop("timeout", 10.0), max_connections=8, **kwargs)


async def post_once(http: HttpClient, path: str = "", content: bytes = b'{"x": 1}') -> Reply:
    try:
        return await http.post(path, content, {"Content-Type": "application/json"})
    finally:
        await http.aclose()


def free_port() -> int:
    probe = socket.create_server(("127.0.0.1", 0))
    port: int = probe.getsockname()[1]
    probe.close()
    return port


def test_retry_after_is_honoured_and_the_body_resent(server: ScriptedServer) -> None:  # noqa: F811
    server.script = [(429, {"Retry-After": "1"}), (503, {"Retry-After": "0"})]
    notices: list[RetryNotice] = []
    http = client(server.url, notices=notices.append)
    reply = run(lambda: post_once(http))
    assert reply.status_code == 200 and reply.json() == {"ok": True} and reply.attempts == 3
    assert http.attempts == 3 and server.bodies == [b'{"x": 1}'] * 3
    assert server.times[1] - server.times[0] >= 0.9  # the server's 1 s, not the 0.01 s backoff
    assert [(n.attempt, n.attempts, n.reason, n.delay) for n in notices] == [
        (1, 4, "HTTP 429", 1.0),
        (2, 4, "HTTP 503", 0.0),
    ]


def test_drops_are_retried_and_past_the_retries_raise_connection_failed(server: ScriptedServer) -> None:  # noqa: F811
    server.script = ["drop", "drop"]
    assert run(lambda: post_once(client(server.url, retries=2))).status_code == 200
    server.script = ["drop", "drop"]
    http = client(server.url, retries=1)
    with pytest.raises(TransportFailure) as caught:
        run(lambda: post_once(http))
    assert str(caught.value) == "connection failed" and not caught.value.timed_out and caught.value.attempts == 2


def test_exhausted_retries_return_the_last_answer_and_other_answers_come_at_once(
    server: ScriptedServer,  # noqa: F811
) -> None:
    server.script = [(503, {"Retry-After": "0"})] * 3
    reply = run(lambda: post_once(client(server.url, retries=2)))
    assert reply.status_code == 503 and reply.attempts == 3 and b"admin" in reply.content
    server.script = [(404, {"Retry-After": "0"})]
    reply = run(lambda: post_once(client(server.url, retries=3)))
    assert reply.status_code == 404 and reply.attempts == 1


def test_the_servers_verdict_on_retrying_wins_over_the_status(server: ScriptedServer) -> None:  # noqa: F811
    server.script = [(500, {"x-should-retry": "false"}), (400, {"x-should-retry": "true"}), (200, {})]

    async def two() -> list[int]:
        http = client(server.url)
        try:
            return [(await http.post("", b"{}")).status_code for _ in range(2)]
        finally:
            await http.aclose()

    assert run(two) == [500, 200] and len(server.bodies) == 3


def test_a_refused_connection_is_retried_then_raised() -> None:
    notices: list[RetryNotice] = []
    http = client(f"http://127.0.0.1:{free_port()}/v1", retries=2, notices=notices.append)
    with pytest.raises(TransportFailure, match="connection failed"):
        run(lambda: post_once(http))
    assert http.attempts == 3 and [n.reason for n in notices] == ["connection failed"] * 2


def test_a_stalled_answer_times_out_per_attempt() -> None:
    with OpenAIServer(default="late") as upstream:
        upstream.inject(delay=30.0, times=2)
        http = client(upstream.base_url + "/chat/completions", retries=1, timeout=0.5)
        started = time.monotonic()
        with pytest.raises(TransportFailure) as caught:
            run(lambda: post_once(http, content=b'{"messages": [{"role": "user", "content": "q"}]}'))
    assert caught.value.timed_out and str(caught.value) == "timed out" and caught.value.attempts == 2
    assert time.monotonic() - started < 20


def test_connections_follow_the_bound_and_are_kept_alive() -> None:
    body = b'{"model": "m", "messages": [{"role": "user", "content": "q"}]}'
    with OpenAIServer(default="ok", delay=0.05) as upstream:
        http = HttpClient(
            upstream.base_url + "/chat/completions",
            policy=RetryPolicy(0),
            timeout=30.0,
            max_connections=4,
            headers={"Content-Type": "application/json"},
        )

        async def many() -> list[int]:
            try:
                first = await asyncio.gather(*(http.post("", body) for _ in range(32)))
                second = await asyncio.gather(*(http.post("", body) for _ in range(32)))
                return [r.status_code for r in first + second]
            finally:
                await http.aclose()

        upstream.reset_peak()
        statuses = run(many)
        assert statuses == [200] * 64
        assert upstream.peak_in_flight <= 4  # the connector never opens more than the bound
        assert upstream.connections <= 4  # and the second wave reuses the first one's connections


def test_a_sync_caller_runs_on_the_background_loop() -> None:
    with OpenAIServer(default="ok") as upstream:
        http = client(upstream.base_url + "/chat/completions")
        body = b'{"messages": [{"role": "user", "content": "q"}]}'
        reply = background_loop().run(http.post("", body, {"Content-Type": "application/json"}), timeout=60)
        background_loop().run(http.aclose(), timeout=60)
    assert reply.json()["choices"][0]["message"]["content"] == "ok"


# --- replicas -------------------------------------------------------------------------------------------------------


def test_requests_spread_over_replicas_by_requests_in_flight() -> None:
    body = b'{"model": "m", "messages": [{"role": "user", "content": "q"}]}'
    with OpenAIServer(default="a", delay=0.05) as a, OpenAIServer(default="b", delay=0.05) as b:
        http = HttpClient(
            [a.base_url + "/chat/completions", b.base_url + "/chat/completions"],
            policy=RetryPolicy(0),
            timeout=30.0,
            max_connections=16,
            headers={"Content-Type": "application/json"},
        )

        async def many() -> list[str]:
            try:
                replies = await asyncio.gather(*(http.post("", body) for _ in range(64)))
                return [r.json()["choices"][0]["message"]["content"] for r in replies]
            finally:
                await http.aclose()

        texts = run(many)
    assert sorted(set(texts)) == ["a", "b"]
    assert a.request_count() == texts.count("a") and b.request_count() == texts.count("b")
    assert 24 <= texts.count("a") <= 40  # least outstanding requests: an even split of equal replicas


def test_a_dead_replica_is_skipped_at_once_and_set_aside() -> None:
    body = b'{"model": "m", "messages": [{"role": "user", "content": "q"}]}'
    dead = f"http://127.0.0.1:{free_port()}/v1/chat/completions"
    notices: list[RetryNotice] = []
    with OpenAIServer(default="alive") as alive:
        http = HttpClient(
            [dead, alive.base_url + "/chat/completions"],
            policy=RetryPolicy(retries=0, backoff=5.0, on_retry=notices.append),
            timeout=30.0,
            max_connections=4,
            headers={"Content-Type": "application/json"},
        )

        async def sequential() -> list[Reply]:
            try:
                return [await http.post("", body) for _ in range(6)]
            finally:
                await http.aclose()

        started = time.monotonic()
        replies = run(sequential)
        elapsed = time.monotonic() - started
    assert [r.status_code for r in replies] == [200] * 6 and alive.request_count() == 6
    # No backoff (5 s) before trying the other replica, even with no retries left: each replica gets its try.
    assert elapsed < 5.0
    # The dead replica was set aside after failing: later requests went straight to the live one.
    assert http.attempts <= 9 and [n.reason for n in notices].count("connection failed") <= 3
    assert all(n.delay == 0.0 for n in notices)


def test_every_replica_failing_waits_the_backoff_between_rounds(server: ScriptedServer) -> None:  # noqa: F811
    with OpenAIServer(default="x") as other:
        other.inject(status=503, times=2, retry_after=None)
        server.script = [(503, {})] * 2
        notices: list[RetryNotice] = []
        http = HttpClient(
            [server.url, other.base_url + "/chat/completions"],
            policy=RetryPolicy(retries=4, backoff=0.2, on_retry=notices.append),
            timeout=30.0,
            max_connections=2,
        )
        reply = run(lambda: post_once(http, content=b'{"messages": [{"role": "user", "content": "q"}]}'))
    assert reply.status_code == 200 and reply.attempts == 5
    delays = [n.delay for n in notices]
    assert delays.count(0.0) >= 2 and any(d > 0 for d in delays)  # at once to the other, then a wait


class CountingGate:
    """An upstream gate that records each slot taken and given back (what a cluster-wide limiter sees)."""

    def __init__(self) -> None:
        self.taken: list[str] = []
        self.released: list[str] = []

    def acquire(self, upstream: str) -> int:
        self.taken.append(upstream)
        return len(self.taken)

    async def acquire_async(self, upstream: str) -> int:
        return self.acquire(upstream)

    def release(self, upstream: str, token: Any) -> None:
        self.released.append(upstream)


def test_every_attempt_holds_a_slot_of_its_upstream_when_a_gate_is_installed(server: ScriptedServer) -> None:  # noqa: F811
    from evalsi._util.upstream import set_gate, upstream_of

    server.script = [(503, {"Retry-After": "0"})]
    gate = CountingGate()
    previous = set_gate(gate)
    try:
        reply = run(lambda: post_once(client(server.url)))
    finally:
        set_gate(previous)
    assert reply.status_code == 200 and reply.attempts == 2
    upstream = upstream_of(httpx.URL(server.url))
    assert gate.taken == [upstream, upstream] and gate.released == gate.taken  # each attempt, given back after
