"""Loopback HTTP servers for the adapter tests: a uvicorn thread, and a Reward Service double.

The Reward Service double implements the ``POST /v1alpha1/rewards:score`` contract documented in
``evalsi.rewards.wire`` with the real ``Reward``, as the evalsi server does.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from evalsi.rewards import from_mapping
from evalsi.rewards._remote import SCORE_PATH
from evalsi.rewards.serve import listening_socket
from evalsi.rewards.wire import error_for, results_json


class ServerThread:
    """Run an ASGI app with uvicorn on 127.0.0.1 (a free port) in a daemon thread."""

    def __init__(self, app: Any) -> None:
        self.sock = listening_socket("127.0.0.1", 0)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)
        self.sock.close()


@dataclass
class ServiceLog:
    """What the Reward Service double saw, and how it should misbehave."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    token: str | None = None
    fail_first: int = 0
    """Answer this many requests with 503 before serving."""
    drop_last_result: bool = False
    """Break the contract: answer one result fewer than asked."""


def reward_service_app(log: ServiceLog) -> Starlette:
    """A Reward Service double: binds the posted spec with the real ``Reward`` and scores the rollouts."""

    async def score(request: Request) -> Response:
        log.headers.append(dict(request.headers))
        if log.token is not None and request.headers.get("authorization") != f"Bearer {log.token}":
            return _json({"error": {"code": "unauthenticated", "message": "invalid or missing token"}}, 401)
        if log.fail_first > 0:
            log.fail_first -= 1
            return _json({"error": {"code": "unavailable", "message": "warming up"}}, 503)
        body = orjson.loads(await request.body())
        log.requests.append(body)
        try:
            reward = from_mapping(body["spec"])
            results = await reward.score_async(body["rollouts"])
        except Exception as exc:
            status, payload = error_for(exc)
            return _json(payload, status)
        answer: dict[str, Any] = dict(results_json(results))
        if log.drop_last_result:
            answer["results"].pop()
        return _json(answer)

    return Starlette(routes=[Route(SCORE_PATH, score, methods=["POST"])])


def _json(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")
