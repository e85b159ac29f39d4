"""The HTTP side: JSON scoring, Connect, ``/metrics`` and ``/healthz`` in one ASGI application.

Routes: ``POST /v1alpha1/rewards:score`` (JSON), Connect at ``/evalsi.v1alpha1.RewardService/*``; the Run
Service's routes (``/v1alpha1/runs...``, Connect at ``/evalsi.v1alpha1.RunService/*``) come from ``_runs_http``.
``/metrics`` is an operator's: on this port it needs a token with ``metrics.read``; :func:`build_metrics_app`
serves it without a token on the operator's own ``metrics.port``. ``/healthz`` answers 503 while the server drains.

Connect is served by ``connect-python``'s ASGI application (unary, JSON or binary protobuf) from the code
``scripts/gen-proto`` generates; it calls the same :class:`RewardService` as the JSON route.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import orjson
from connectrpc.errors import ConnectError
from connectrpc.request import RequestContext
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route

from evalsi.rewards.wire import results_json
from evalsi.server._convert import request_parts, results_message
from evalsi.server._errors import ServiceError, from_exception
from evalsi.server._proto.evalsi.v1alpha1 import rewards_pb2 as pb
from evalsi.server._proto.evalsi.v1alpha1.rewards_connect import RewardServiceASGIApplication
from evalsi.server._status import status_of
from evalsi.server._tokens import METRICS
from evalsi.server.rewards._service import RewardService, require
from evalsi.server.runs._service import RunService
from evalsi.server.transport._connect import decoded as _decoded
from evalsi.server.transport._evaluation import EvaluationApi
from evalsi.server.transport._guard import PRINCIPAL_KEY, Guard
from evalsi.server.transport._runs_http import GUARDED_POSTS as RUN_POSTS
from evalsi.server.transport._runs_http import run_connect_app, run_routes
from evalsi.server.ui._app import ServerUi

SCORE_PATH = "/v1alpha1/rewards:score"
_OFFLOAD_BYTES = 4 * 1024 * 1024  # bodies larger than this (a few ms of JSON) are decoded off the event loop

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


class ServerState:
    """What the routes share: the service, the draining flag, and the gate over request-body bytes.

    Health answers 503 while draining.
    """

    def __init__(
        self, service: RewardService, evaluation: EvaluationApi | None = None, ui: ServerUi | None = None
    ) -> None:
        self.service = service
        self.evaluation = evaluation
        """Evaluators, datasets and evaluation jobs (absent when the server is embedded without them)."""
        self.ui = ui
        """The results viewer under ``/ui`` (absent when switched off)."""
        self.draining = False
        self.body_bytes = service.body_bytes
        """The FIFO gate over ``rewards.max_inflight_bytes``, with each project's share (every protocol's)."""


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


async def _decode(body: bytes) -> Any:
    if len(body) > _OFFLOAD_BYTES:
        return await asyncio.to_thread(orjson.loads, body)
    return orjson.loads(body)


def parse_score_body(data: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The spec and rollouts of an HTTP JSON request body.

    Raises:
        ServiceError: ``invalid_argument`` naming what is missing or of the wrong type (and the rollout index).

    """
    if not isinstance(data, dict):
        raise ServiceError("invalid_argument", 'the body must be a JSON object {"spec": ..., "rollouts": [...]}')
    spec = data.get("spec")
    if not isinstance(spec, dict):
        raise ServiceError("invalid_argument", "`spec` must be a RewardSpec object", "invalid_spec", path="spec")
    rollouts = data.get("rollouts")
    if not isinstance(rollouts, list):
        raise ServiceError("invalid_argument", "`rollouts` must be a list of rollout objects")
    for index, rollout in enumerate(rollouts):
        if not isinstance(rollout, dict):
            raise ServiceError(
                "invalid_argument",
                f"rollout {index}: must be an object, got {type(rollout).__name__}",
                "invalid_rollout",
                index=index,
            )
    return spec, rollouts


def build_app(state: ServerState) -> ASGIApp:
    """The ASGI application serving every HTTP route and Connect."""
    service = state.service
    metrics = service.metrics

    async def score(request: Request) -> Response:
        started = time.perf_counter()
        try:
            principal = request.scope.get(PRINCIPAL_KEY)
            if principal is None:  # served without the guard (embedding): check the token here
                principal = await service.authenticate(request.headers.get("authorization"))
            try:
                data = await _decode(await request.body())
            except orjson.JSONDecodeError as exc:
                raise ServiceError("invalid_argument", f"the body is not valid JSON: {exc}") from None
            spec, rollouts = parse_score_body(data)
            del data
            results = await service.score(principal, spec, rollouts)
            del spec, rollouts
            body = results_json(results)
            encoded = await asyncio.to_thread(orjson.dumps, body) if len(results) > 8192 else orjson.dumps(body)
            response = Response(encoded, media_type="application/json")
            code = "ok"
        except Exception as exc:
            error = from_exception(exc)
            response, code = _error(error), error.status
        metrics.calls.labels("http", code).inc()
        metrics.call_seconds.labels("http").observe(time.perf_counter() - started)
        return response

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

    runs = RunService(service)
    http = Starlette(
        routes=[
            Route(SCORE_PATH, score, methods=["POST"]),
            *run_routes(runs),
            Route("/metrics", metrics_route, methods=["GET"]),
            Route("/healthz", health, methods=["GET"]),
            *(state.evaluation.routes() if state.evaluation is not None else []),
            *([Mount("/ui", app=state.ui)] if state.ui is not None else []),
        ]
    )
    rewards = service.config.spec.rewards
    connect = _ConnectApplication(ConnectRewardService(service), read_max_bytes=rewards.max_request_bytes)
    evaluation = state.evaluation
    others = evaluation.connect_apps(rewards.max_request_bytes) if evaluation is not None else []
    connects: dict[str, ASGIApp] = {
        application.path + "/": application
        for application in (connect, run_connect_app(runs, rewards.max_request_bytes), *others)
    }
    guarded_json = {SCORE_PATH, *RUN_POSTS}

    def connect_for(path: str) -> ASGIApp | None:
        return next((a for prefix, a in connects.items() if path.startswith(prefix)), None)

    async def app(scope: Scope, receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]) -> None:
        target = connect_for(scope["path"]) if scope["type"] == "http" else None
        await (target or http)(scope, receive, send)

    def scoring(path: str) -> str | None:
        if path in guarded_json or (evaluation is not None and evaluation.is_post_route(path)):
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


class _ConnectApplication(RewardServiceASGIApplication):
    """connect-python's application, with a request it cannot decode answered ``invalid_argument``.

    connect-python reports a body its codec rejects (not JSON, a field of the wrong type, nesting past
    protobuf's limit) as ``unknown``; for the caller it is a bad argument.
    """

    async def _read_post_request(self, *args: Any, **kwargs: Any) -> Any:
        return await _decoded(super()._read_post_request(*args, **kwargs))

    async def _read_get_request(self, *args: Any, **kwargs: Any) -> Any:
        return await _decoded(super()._read_get_request(*args, **kwargs))


class ConnectRewardService:
    """The Connect protocol's view of the service (``connect-python`` calls ``score_rewards``)."""

    def __init__(self, service: RewardService) -> None:
        self.service = service

    async def score_rewards(
        self, request: pb.ScoreRewardsRequest, ctx: RequestContext[pb.ScoreRewardsRequest, pb.ScoreRewardsResponse]
    ) -> pb.ScoreRewardsResponse:
        """Score a batch; errors become Connect errors with the same message as every other protocol."""
        metrics = self.service.metrics
        started = time.perf_counter()
        code = "ok"
        try:
            principal = await self.service.authenticate(ctx.request_headers().get("authorization"))
            spec, rollouts = request_parts(request)
            results = await self.service.score(principal, spec, rollouts)
            return results_message(results)
        except Exception as exc:
            error = from_exception(exc)
            code = error.status
            raise ConnectError(status_of(error.status).connect, error.message) from None
        finally:
            metrics.calls.labels("connect", code).inc()
            metrics.call_seconds.labels("connect").observe(time.perf_counter() - started)
