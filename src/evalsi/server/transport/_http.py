"""The HTTP side: every service's JSON routes and Connect, ``/metrics`` and ``/healthz`` in one ASGI application.

The services' routes and Connect applications come from their method tables (:mod:`._rewards`, :mod:`._runs`,
:mod:`._evaluation`), served by :class:`~._api.Api`; every route with a body, and every Connect call, passes the
:class:`~._guard.Guard` first. ``/metrics`` is an operator's: on this port it needs a token with
``metrics.read``; :func:`build_metrics_app` serves it without a token on the operator's own ``metrics.port``.
``/healthz`` answers 503 while the server drains.

Connect is served by ``connect-python``'s ASGI applications (unary, JSON or binary protobuf) from the code
``scripts/gen-proto`` generates.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route

from evalsi.server._errors import ServiceError
from evalsi.server._tokens import METRICS
from evalsi.server.rewards._service import RewardService, require
from evalsi.server.runs._service import RunService
from evalsi.server.transport._api import Api
from evalsi.server.transport._evaluation import EvaluationServices
from evalsi.server.transport._guard import Guard
from evalsi.server.transport._rewards import reward_methods
from evalsi.server.transport._runs import run_methods
from evalsi.server.ui._app import ServerUi

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


class ServerState:
    """What the routes share: the service, the draining flag, and the gate over request-body bytes.

    Health answers 503 while draining.
    """

    def __init__(
        self, service: RewardService, evaluation: EvaluationServices | None = None, ui: ServerUi | None = None
    ) -> None:
        self.service = service
        self.runs = RunService(service)
        self.evaluation = evaluation
        """Evaluators, datasets and evaluation jobs (absent when the server is embedded without them)."""
        self.ui = ui
        """The results viewer under ``/ui`` (absent when switched off)."""
        self.draining = False
        self.body_bytes = service.body_bytes
        """The FIFO gate over ``rewards.max_inflight_bytes``, with each project's share (every protocol's)."""
        methods = [*reward_methods(service), *run_methods(self.runs)]
        self.api = Api(methods + (evaluation.methods() if evaluation else []), service.authenticate, self.is_draining)
        """Every service's methods, served on HTTP JSON, Connect and gRPC alike."""

    def is_draining(self) -> bool:
        """Whether SIGTERM arrived: new calls are refused ``unavailable`` while those in flight finish."""
        return self.draining or self.service.draining


@asynccontextmanager
async def held_body(state: ServerState, project: str, length: int) -> AsyncIterator[None]:
    """Hold room for a request body of ``length`` bytes while the call is served, waiting for it first.

    The body is not read until the room is held (the guard passes the Content-Length, or the maximum request
    size when it is unknown).
    """
    async with state.body_bytes.hold(project, length):
        yield


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


def _error(error: ServiceError) -> Response:
    return _json(error.payload(), error.http_status)


def build_app(state: ServerState) -> ASGIApp:
    """The ASGI application serving every HTTP route and Connect."""
    service = state.service

    async def metrics_route(request: Request) -> Response:
        try:
            principal = await service.authenticate(request.headers.get("authorization"))
            require(principal, METRICS, "metrics show every project's calls: an operator's view")
        except ServiceError as error:
            return _error(error)
        return _metrics_response(service)

    async def health(request: Request) -> Response:
        if state.draining:
            return _json({"status": "draining"}, 503)
        return _json({"status": "ok"})

    api = state.api
    http = Starlette(
        routes=[
            *api.routes(),
            Route("/metrics", metrics_route, methods=["GET"]),
            Route("/healthz", health, methods=["GET"]),
            *([Mount("/ui", app=state.ui)] if state.ui is not None else []),
        ]
    )
    rewards = service.config.spec.rewards
    connects: dict[str, ASGIApp] = {
        application.path + "/": application for application in api.connect_apps(rewards.max_request_bytes)
    }

    def connect_for(path: str) -> ASGIApp | None:
        return next((a for prefix, a in connects.items() if path.startswith(prefix)), None)

    async def app(scope: Scope, receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]) -> None:
        target = connect_for(scope["path"]) if scope["type"] == "http" else None
        await (target or http)(scope, receive, send)

    def scoring(path: str) -> str | None:
        if api.is_guarded(path):
            return "json"
        return "connect" if connect_for(path) is not None else None

    return Guard(
        app,
        is_scoring=scoring,
        authenticate=service.authenticate,
        gate=lambda project, length: held_body(state, project, length),
        max_bytes=lambda: rewards.max_request_bytes,
        body_timeout=lambda: rewards.body_timeout,
    )


def _metrics_response(service: RewardService) -> Response:
    return Response(service.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


def build_metrics_app(state: ServerState) -> ASGIApp:
    """The operator's metrics listener: ``GET /metrics`` without a token, as Prometheus scrapers expect."""

    async def metrics_route(request: Request) -> Response:
        return _metrics_response(state.service)

    return Starlette(routes=[Route("/metrics", metrics_route, methods=["GET"])])
