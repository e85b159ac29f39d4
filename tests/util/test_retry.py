"""The shared retry transport against a real loopback server that rate-limits, fails and drops connections."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from evalsi._util.retry import MAX_DELAY, RETRY_STATUSES, RetryNotice, RetryPolicy, attempts_phrase, retry_delay
from evalsi._util.retry_transports import AsyncRetryTransport, RetryTransport


class ScriptedServer(ThreadingHTTPServer):
    """Answers each POST with the next step of ``script``: a status (with headers), or ``drop``."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script: list[tuple[int, dict[str, str]] | str] = []
        self.bodies: list[bytes] = []
        self.times: list[float] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/score"

    def next_step(self, body: bytes) -> tuple[int, dict[str, str]] | str:
        with self.lock:
            self.bodies.append(body)
            self.times.append(time.monotonic())
            return self.script.pop(0) if self.script else (200, {})


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ScriptedServer

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        step = self.server.next_step(body)
        if step == "drop":  # close the connection without a word
            self.close_connection = True
            return
        assert not isinstance(step, str)
        status, headers = step
        payload = b'{"ok": true}' if status == 200 else b"internal admin page: do not show"
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    srv = ScriptedServer()
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def sync_client(policy: RetryPolicy) -> tuple[httpx.Client, RetryTransport]:
    transport = RetryTransport(policy)
    return httpx.Client(transport=transport, timeout=5.0), transport


def test_retry_after_seconds_is_honoured_and_the_body_resent(server: ScriptedServer) -> None:
    server.script = [(429, {"Retry-After": "1"}), (503, {"Retry-After": "0"})]
    notices: list[RetryNotice] = []
    client, transport = sync_client(RetryPolicy(retries=3, backoff=0.01, on_retry=notices.append))
    with client:
        response = client.post(server.url, content=b'{"x": 1}')
    assert response.status_code == 200
    assert transport.attempts == 3 and server.bodies == [b'{"x": 1}'] * 3
    assert server.times[1] - server.times[0] >= 0.9  # the server's 1 s, not the 0.01 s backoff
    assert [(n.attempt, n.attempts, n.reason, n.delay) for n in notices] == [
        (1, 4, "HTTP 429", 1.0),
        (2, 4, "HTTP 503", 0.0),
    ]


def test_retry_after_as_an_http_date_async(server: ScriptedServer) -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=2), usegmt=True)
    server.script = [(503, {"Retry-After": when})]

    async def go() -> int:
        transport = AsyncRetryTransport(RetryPolicy(retries=1, backoff=0.01))
        async with httpx.AsyncClient(transport=transport, timeout=5.0) as client:
            response = await client.post(server.url, json={"x": 1})
        assert transport.attempts == 2
        return response.status_code

    assert asyncio.run(go()) == 200
    assert server.times[1] - server.times[0] >= 0.5  # the date is whole seconds: between 1 and 2 s away


@pytest.mark.parametrize("use_async", [False, True])
def test_a_dropped_connection_is_retried(server: ScriptedServer, use_async: bool) -> None:
    server.script = ["drop", "drop"]
    notices: list[RetryNotice] = []
    policy = RetryPolicy(retries=2, backoff=0.01, on_retry=notices.append)
    if use_async:

        async def go() -> int:
            async with httpx.AsyncClient(transport=AsyncRetryTransport(policy), timeout=5.0) as client:
                return (await client.post(server.url, content=b"{}")).status_code

        status = asyncio.run(go())
    else:
        client, _ = sync_client(policy)
        with client:
            status = client.post(server.url, content=b"{}").status_code
    assert status == 200 and len(server.bodies) == 3
    assert [n.reason for n in notices] == ["connection failed", "connection failed"]


def test_exhausted_retries_return_the_last_answer(server: ScriptedServer) -> None:
    server.script = [(503, {"Retry-After": "0"})] * 3
    client, transport = sync_client(RetryPolicy(retries=2, backoff=0.01))
    with client:
        response = client.post(server.url, content=b"{}")
    assert response.status_code == 503 and transport.attempts == 3


def test_drops_past_the_retries_raise_the_transport_error(server: ScriptedServer) -> None:
    server.script = ["drop"] * 2
    client, transport = sync_client(RetryPolicy(retries=1, backoff=0.01))
    with client, pytest.raises(httpx.TransportError):
        client.post(server.url, content=b"{}")
    assert transport.attempts == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_other_answers_come_back_at_once(server: ScriptedServer, status: int) -> None:
    server.script = [(status, {"Retry-After": "0"})]
    client, transport = sync_client(RetryPolicy(retries=3, backoff=0.01))
    with client:
        assert client.post(server.url, content=b"{}").status_code == status
    assert transport.attempts == 1


def test_a_refused_connection_is_retried_then_raised() -> None:
    probe = ScriptedServer()
    url = probe.url
    probe.server_close()  # nothing listens there now
    notices: list[RetryNotice] = []
    client, transport = sync_client(RetryPolicy(retries=2, backoff=0.01, on_retry=notices.append))
    with client, pytest.raises(httpx.ConnectError):
        client.post(url, content=b"{}")
    assert transport.attempts == 3 and [n.reason for n in notices] == ["connection failed"] * 2


def test_the_policy_in_numbers() -> None:
    assert {429, 500, 502, 503, 504} <= RETRY_STATUSES and not RETRY_STATUSES & {400, 401, 403, 404, 422}
    assert retry_delay(0, 0.5) == 0.5 and retry_delay(2, 0.5) == 2.0
    assert retry_delay(0, 0.5, "3600") == MAX_DELAY and retry_delay(0, 0.5, "-4") == 0.0
    assert retry_delay(1, 0.5, "soon") == 1.0  # unreadable: the backoff
    past = format_datetime(datetime.now(UTC) - timedelta(minutes=5), usegmt=True)
    assert retry_delay(0, 0.5, past) == 0.0
    assert (attempts_phrase(1), attempts_phrase(3)) == ("1 attempt", "3 attempts")


@pytest.mark.parametrize("use_async", [False, True])
def test_the_servers_own_verdict_on_retrying_wins_over_the_status(server: ScriptedServer, use_async: bool) -> None:
    server.script = [(500, {"x-should-retry": "false"}), (400, {"x-should-retry": "true"}), (200, {})]
    policy = RetryPolicy(retries=3, backoff=0.01)

    async def send_async() -> list[int]:
        transport = AsyncRetryTransport(policy)
        async with httpx.AsyncClient(transport=transport, timeout=5.0) as client:
            return [(await client.post(server.url, content=b"{}")).status_code for _ in range(2)]

    if use_async:
        statuses = asyncio.run(send_async())
    else:
        client, _ = sync_client(policy)
        with client:
            statuses = [client.post(server.url, content=b"{}").status_code for _ in range(2)]
    # The 500 that says it will fail again is final; the 400 that asks for another try gets it.
    assert statuses == [500, 200] and len(server.bodies) == 3
