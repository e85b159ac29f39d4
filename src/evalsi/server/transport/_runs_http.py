"""The Run Service over HTTP: JSON routes and Connect, mounted by :func:`evalsi.server.transport._http.build_app`.

JSON routes (bodies and answers are the proto messages' JSON form)::

    POST /v1alpha1/runs            CreateRun: {"results": <results document>, "labels": {...}}
    GET  /v1alpha1/runs/{id}       GetRun: ?records=true&pageSize=N&pageToken=T
    GET  /v1alpha1/runs            ListRuns: ?label=KEY=VALUE (repeatable)&pageSize=N&pageToken=T
    POST /v1alpha1/runs:compare    CompareRuns: {"baseRunId", "candidateRunId", "metrics", "regression"}
    DELETE /v1alpha1/runs/{id}     DeleteRun

The two POST routes and Connect go through the server's guard (token before body, size limits, body timeout,
the project's share of in-flight bytes); the GET and DELETE routes carry no body and check the token themselves.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from connectrpc.errors import ConnectError
from connectrpc.request import RequestContext
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from evalsi.server._errors import ServiceError, from_exception
from evalsi.server._proto.evalsi.v1alpha1 import rewards_pb2 as pb
from evalsi.server._proto.evalsi.v1alpha1.rewards_connect import RunServiceASGIApplication
from evalsi.server._status import status_of
from evalsi.server._tokens import Principal
from evalsi.server.runs._service import RunService
from evalsi.server.transport._connect import decoded
from evalsi.server.transport._guard import PRINCIPAL_KEY
from evalsi.server.transport._runs_proto import RunMessages

RUNS_PATH = "/v1alpha1/runs"
COMPARE_PATH = "/v1alpha1/runs:compare"
GUARDED_POSTS = frozenset({RUNS_PATH, COMPARE_PATH})
"""JSON routes with a body: the guard checks the token and bounds the body before they run."""
_OFFLOAD_BYTES = 4 * 1024 * 1024
_TRUE = {"1", "true", "yes"}


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


async def _principal(service: RunService, request: Request) -> Principal:
    principal = request.scope.get(PRINCIPAL_KEY)
    if isinstance(principal, Principal):
        return principal
    return await service.authenticate(request.headers.get("authorization"))


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        data = await asyncio.to_thread(orjson.loads, raw) if len(raw) > _OFFLOAD_BYTES else orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ServiceError("invalid_argument", f"the body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ServiceError("invalid_argument", "the body must be a JSON object")
    return data


def _query_labels(request: Request) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in request.query_params.getlist("label"):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ServiceError("invalid_argument", f"`label={item}`: give KEY=VALUE, e.g. label=training-run=grpo-1")
        labels[key] = value
    return labels


def run_routes(service: RunService) -> list[Route]:
    """The JSON routes of the Run Service."""

    def endpoint(
        method: str, call: Callable[[Request, Principal], Awaitable[Any]]
    ) -> Callable[[Request], Awaitable[Response]]:
        async def handle(request: Request) -> Response:
            started = time.perf_counter()
            try:
                principal = await _principal(service, request)
                response, code = _json(await call(request, principal)), "ok"
            except Exception as exc:
                error = from_exception(exc)
                response, code = _json(error.payload(), error.http_status), error.status
            service.metrics.on_run_call(method, "http", code, time.perf_counter() - started)
            return response

        return handle

    async def create(request: Request, principal: Principal) -> Any:
        return await service.create(principal, await _body(request))

    async def get(request: Request, principal: Principal) -> Any:
        query = request.query_params
        return await service.get(
            principal,
            request.path_params["run_id"],
            query.get("records", "").lower() in _TRUE,
            query.get("pageSize"),
            query.get("pageToken", ""),
        )

    async def listing(request: Request, principal: Principal) -> Any:
        query = request.query_params
        return await service.list_runs(
            principal, _query_labels(request), query.get("pageSize"), query.get("pageToken", "")
        )

    async def compare(request: Request, principal: Principal) -> Any:
        return await service.compare(principal, await _body(request))

    async def remove(request: Request, principal: Principal) -> Any:
        return await service.delete(principal, request.path_params["run_id"])

    return [
        Route(COMPARE_PATH, endpoint("CompareRuns", compare), methods=["POST"]),
        Route(RUNS_PATH, endpoint("CreateRun", create), methods=["POST"]),
        Route(RUNS_PATH, endpoint("ListRuns", listing), methods=["GET"]),
        Route(RUNS_PATH + "/{run_id}", endpoint("GetRun", get), methods=["GET"]),
        Route(RUNS_PATH + "/{run_id}", endpoint("DeleteRun", remove), methods=["DELETE"]),
    ]


class _RunConnectApplication(RunServiceASGIApplication):
    """connect-python's application, with a request it cannot decode answered ``invalid_argument``."""

    async def _read_post_request(self, *args: Any, **kwargs: Any) -> Any:
        return await decoded(super()._read_post_request(*args, **kwargs), "Run Service request")

    async def _read_get_request(self, *args: Any, **kwargs: Any) -> Any:
        return await decoded(super()._read_get_request(*args, **kwargs), "Run Service request")


class ConnectRunService:
    """The Connect protocol's view of the Run Service."""

    def __init__(self, service: RunService) -> None:
        self.service = service
        self.messages = RunMessages(service)

    async def _call(
        self, ctx: RequestContext[Any, Any], method: str, call: Callable[[Principal], Awaitable[Any]]
    ) -> Any:
        started = time.perf_counter()
        code = "ok"
        try:
            principal = await self.service.authenticate(ctx.request_headers().get("authorization"))
            return await call(principal)
        except Exception as exc:
            error = from_exception(exc)
            code = error.status
            raise ConnectError(status_of(error.status).connect, error.message) from None
        finally:
            self.service.metrics.on_run_call(method, "connect", code, time.perf_counter() - started)

    async def create_run(self, request: pb.CreateRunRequest, ctx: RequestContext[Any, Any]) -> pb.Run:
        """``CreateRun``."""
        result: pb.Run = await self._call(ctx, "CreateRun", lambda p: self.messages.create_run(p, request))
        return result

    async def get_run(self, request: pb.GetRunRequest, ctx: RequestContext[Any, Any]) -> pb.GetRunResponse:
        """``GetRun``."""
        result: pb.GetRunResponse = await self._call(ctx, "GetRun", lambda p: self.messages.get_run(p, request))
        return result

    async def list_runs(self, request: pb.ListRunsRequest, ctx: RequestContext[Any, Any]) -> pb.ListRunsResponse:
        """``ListRuns``."""
        result: pb.ListRunsResponse = await self._call(ctx, "ListRuns", lambda p: self.messages.list_runs(p, request))
        return result

    async def delete_run(self, request: pb.DeleteRunRequest, ctx: RequestContext[Any, Any]) -> pb.DeleteRunResponse:
        """``DeleteRun``."""
        result: pb.DeleteRunResponse = await self._call(
            ctx, "DeleteRun", lambda p: self.messages.delete_run(p, request)
        )
        return result

    async def compare_runs(
        self, request: pb.CompareRunsRequest, ctx: RequestContext[Any, Any]
    ) -> pb.CompareRunsResponse:
        """``CompareRuns``."""
        result: pb.CompareRunsResponse = await self._call(
            ctx, "CompareRuns", lambda p: self.messages.compare_runs(p, request)
        )
        return result


def run_connect_app(service: RunService, read_max_bytes: int) -> RunServiceASGIApplication:
    """The Run Service's Connect application (mounted at its ``path``)."""
    return _RunConnectApplication(ConnectRunService(service), read_max_bytes=read_max_bytes)
