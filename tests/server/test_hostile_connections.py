"""Connections that never finish a request cannot hold the server: a real server process against many idle sockets.

Sockets that connect and send nothing, sockets that send a header line now and then (never the blank line that ends
the headers), and a login form whose promised body never comes: each is closed within a bounded time, the server's
open descriptors stay under its connection cap, and it answers other clients throughout and after. The attacks are
data (``STALLS``) the test iterates over.
"""

from __future__ import annotations

import os
import select
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from evalsi.server._config import ListenConfig
from tests.server.harness import ServerProcess, make_token, post_http, write_config

EXACT = {"components": [{"ref": "exact-match"}]}
ROLLOUT = {"completion": "a", "reference": "a"}
DEFAULTS = ListenConfig()
CAP = DEFAULTS.max_connections
"""The test servers run the default ``listen`` settings: the connection cap and the header deadline."""
HEADER_TIMEOUT = DEFAULTS.header_timeout
IDLE = CAP + 500
"""Sockets that connect and never send a byte: more than the connection cap, far below this machine's fd limit."""
BODY_TIMEOUT = 2.0


def _address(server: ServerProcess) -> tuple[str, int]:
    host, port = server.http.removeprefix("http://").split(":")
    return host, int(port)


def _descriptors(server: ServerProcess) -> int:
    return len(os.listdir(f"/proc/{server.process.pid}/fd"))


class Client:
    """A socket that sends what it is told and never finishes its request; what the server answered is kept."""

    def __init__(self, address: tuple[str, int], opening: bytes = b"") -> None:
        self.sock = socket.create_connection(address, timeout=30)
        self.answer = b""
        self.closed = False
        if opening:
            self.sock.sendall(opening)

    def closed_by_server(self) -> bool:
        """Whether the server has closed the connection (EOF or reset), reading what it sent first; never blocks."""
        while not self.closed and self._readable():
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                chunk = b""
            self.answer += chunk
            self.closed = not chunk
        return self.closed

    def _readable(self) -> bool:
        poller = select.poll()  # not select(): these descriptors are past 1024
        poller.register(self.sock, select.POLLIN | select.POLLERR | select.POLLHUP)
        return bool(poller.poll(0))

    def close(self) -> None:
        self.sock.close()


def _until(condition: Callable[[], bool], what: str, wait: float = 60.0) -> None:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < wait, f"never reached within {wait:g}s: {what}"
        time.sleep(0.1)


STALLS: dict[str, bytes] = {
    "a request line, then nothing": b"GET /healthz HTTP/1.1\r\n",
    "headers without their blank line": b"POST /v1alpha1/rewards:score HTTP/1.1\r\nHost: x\r\n",
    "a login form whose body never comes": (
        b"POST /ui/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        b"Content-Length: 100\r\n\r\ntoken="
    ),
    "a run listing with a promised body": b"GET /v1alpha1/runs HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n",
}
"""What a stalled client sends before it stops (a slow one resends a header line every half second)."""
BODY_STALLS = {"a login form whose body never comes"}


def test_idle_and_stalled_sockets_are_closed_and_the_server_still_answers(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    config = write_config(tmp_path, {"database": {"url": url}, "rewards": {"body_timeout": BODY_TIMEOUT}})
    token = make_token(url, "p", ["evaluations.run"])
    idle: list[Client] = []
    stop = threading.Event()
    with ServerProcess(config) as server:
        address = _address(server)
        baseline = _descriptors(server)
        stalled = [Client(address, opening) for opening in STALLS.values()]

        def drip() -> None:  # the slow one: a header line every half second, never the end of the headers
            slow = stalled[1].sock
            while not stop.wait(0.5):
                try:
                    slow.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    return

        dripping = threading.Thread(target=drip, daemon=True)
        dripping.start()
        try:
            for _ in range(IDLE):
                idle.append(Client(address))
            everyone = stalled + idle
            # past the cap, sockets are closed as soon as they are accepted: the server holds at most the cap
            _until(
                lambda: sum(c.closed_by_server() for c in everyone) >= len(everyone) - CAP,
                "the sockets past the connection cap closed",
            )
            _until(lambda: _descriptors(server) <= baseline + CAP + 16, "the server's descriptors within the cap")
            # the rest are closed at the header or body deadline, however slowly they send
            _until(
                lambda: all(c.closed_by_server() for c in everyone),
                "every idle socket closed",
                wait=HEADER_TIMEOUT + 60,
            )
            answered = post_http(server, token, EXACT, [ROLLOUT], timeout=30)
            health = httpx.get(server.http + "/healthz", timeout=30)
            after = _descriptors(server)
        finally:
            stop.set()
            for client in stalled + idle:
                client.close()
    assert answered.status_code == 200, answered.text
    assert health.status_code == 200
    assert after <= baseline + 16, f"{after - baseline} descriptors still open after the sockets were closed"


@pytest.mark.parametrize("stall", sorted(STALLS))
def test_a_stalled_request_is_closed_within_its_deadline(tmp_path: Path, stall: str) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    config = write_config(
        tmp_path,
        {
            "database": {"url": url},
            "listen": {"host": "127.0.0.1", "port": 0, "grpc_port": None},
            "rewards": {"body_timeout": BODY_TIMEOUT},
        },
    )
    with ServerProcess(config) as server:
        client = Client(_address(server), STALLS[stall])
        try:
            _until(client.closed_by_server, f"{stall}: closed by the server", wait=HEADER_TIMEOUT + 30)
        finally:
            client.close()
        assert httpx.get(server.http + "/healthz", timeout=30).status_code == 200
    if stall in BODY_STALLS:  # its headers were whole: the body deadline answers before it closes
        assert client.answer.startswith(b"HTTP/1.1 408"), client.answer[:200]
