"""A method table served over HTTP JSON, Connect and gRPC by the same code.

Every call of every protocol goes the same way: :func:`~._methods.admit` (token, draining, the method's scopes),
then the request made plain data (HTTP: the route's ``read``; Connect and gRPC: the method's ``decode``), the
service call, and the answer written (``write``; ``encode``). A failure anywhere is the same :class:`ServiceError`
rendered in the caller's protocol (:func:`~evalsi.server._status.status_of`: HTTP status and JSON payload, Connect
code, gRPC status), with the same message. The method's ``observe`` counts each call by protocol and code.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
from connectrpc.errors import ConnectError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, compile_path

from evalsi.server._errors import ServiceError, from_exception
from evalsi.server._proto.evalsi.v1alpha1 import evaluation_connect, rewards_connect
from evalsi.server._status import status_of
from evalsi.server.transport._connect import decoding
from evalsi.server.transport._grpc import MalformedRequest, decoder
from evalsi.server.transport._guard import PRINCIPAL_KEY
from evalsi.server.transport._methods import (
    Authenticator,
    HttpRoute,
    Method,
    Observer,
    admit,
    converted,
    json_response,
)

PACKAGE = "evalsi.v1alpha1"
CONNECT_APPLICATIONS: dict[str, tuple[type[Any], str]] = {
    "RewardService": (rewards_connect.RewardServiceASGIApplication, "ScoreRewardsRequest"),
    "RunService": (rewards_connect.RunServiceASGIApplication, "Run Service request"),
    "EvaluatorService": (evaluation_connect.EvaluatorServiceASGIApplication, "EvaluatorService request"),
    "DatasetService": (evaluation_connect.DatasetServiceASGIApplication, "DatasetService request"),
    "EvaluationJobService": (evaluation_connect.EvaluationJobServiceASGIApplication, "EvaluationJobService request"),
}
"""Each service's generated Connect application, and what a body its codec rejects is said not to be."""


class Api:
    """The methods of one or more services, and their HTTP routes, Connect applications and gRPC handlers."""

    def __init__(
        self, methods: Sequence[Method], authenticate: Authenticator, draining: Callable[[], bool] = lambda: False
    ) -> None:
        self.methods = list(methods)
        self.authenticate = authenticate
        self.draining = draining
        """True once SIGTERM arrived: further calls are refused ``unavailable``."""
        self._guarded = [
            re.compile(compile_path(route.path)[0].pattern)
            for method in self.methods
            for route in method.http
            if route.body
        ]

    @property
    def services(self) -> list[str]:
        """The services the table serves, in the order their methods are listed."""
        return list(dict.fromkeys(m.service for m in self.methods))

    def observers(self) -> dict[str, Observer]:
        """Each service's call counter, by its full gRPC name (``evalsi.v1alpha1.RunService``)."""
        return {f"{PACKAGE}.{m.service}": m.observe for m in self.methods if m.observe is not None}

    # HTTP JSON

    def routes(self) -> list[Route]:
        """The HTTP JSON routes of every method."""
        return [
            Route(route.path, self._endpoint(method, route), methods=[route.verb])
            for method in self.methods
            for route in method.http
        ]

    def is_guarded(self, path: str) -> bool:
        """Whether ``path`` is a route with a body (the guard checks its token and bounds it before it runs)."""
        return any(pattern.match(path) for pattern in self._guarded)

    def _endpoint(self, method: Method, route: HttpRoute) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            started = time.perf_counter()
            code = "ok"
            try:
                principal = await admit(
                    method,
                    request.scope.get(PRINCIPAL_KEY),
                    request.headers.get("authorization"),
                    self.authenticate,
                    self.draining,
                )
                plain = await route.read(request)
                answer = await method.handler(principal, plain)
                del plain
                response = await route.write(answer)
            except Exception as exc:
                error = from_exception(exc)
                response, code = json_response(error.payload(), error.http_status), error.status
            if method.observe is not None:
                method.observe(method.name, "http", code, time.perf_counter() - started)
            return response

        return endpoint

    # Connect

    def connect_apps(self, read_max_bytes: int) -> list[Any]:
        """connect-python's ASGI applications, one per service (each mounted at its ``path``)."""
        apps: list[Any] = []
        for service in self.services:
            cls, label = CONNECT_APPLICATIONS[service]
            adapter = _ConnectService(self, [m for m in self.methods if m.service == service])
            apps.append(decoding(cls, label)(adapter, read_max_bytes=read_max_bytes))
        return apps

    async def _message_call(self, method: Method, authorization: str | None, request: Any) -> Any:
        """A Connect or gRPC call once its protocol gave the token: admitted, decoded, handled, encoded.

        A request gRPC could not parse (:class:`MalformedRequest`) is refused after admission, so an
        unauthenticated caller learns nothing about the body.
        """
        principal = await admit(method, None, authorization, self.authenticate, self.draining)
        if isinstance(request, MalformedRequest):
            raise ServiceError("invalid_argument", f"the body is not a valid {method.malformed_name}: {request.detail}")
        plain = await converted(method.decode, request)
        del request
        answer = await method.handler(principal, plain)
        del plain
        return await converted(method.encode, answer)

    async def _connect_call(self, method: Method, request: Any, ctx: Any) -> Any:
        started = time.perf_counter()
        code = "ok"
        try:
            return await self._message_call(method, ctx.request_headers().get("authorization"), request)
        except Exception as exc:
            error = from_exception(exc)
            code = error.status
            raise ConnectError(status_of(error.status).connect, error.message) from None
        finally:
            if method.observe is not None:
                method.observe(method.name, "connect", code, time.perf_counter() - started)

    # gRPC

    def grpc_handlers(self) -> list[grpc.GenericRpcHandler]:
        """One generic handler per service for a ``grpc.aio`` server."""
        handlers: list[grpc.GenericRpcHandler] = []
        for service in self.services:
            table = {
                m.name: grpc.unary_unary_rpc_method_handler(
                    self._grpc_method(m),
                    request_deserializer=decoder(m.request),
                    response_serializer=m.response.SerializeToString,
                )
                for m in self.methods
                if m.service == service
            }
            handlers.append(grpc.method_handlers_generic_handler(f"{PACKAGE}.{service}", table))
        return handlers

    def _grpc_method(self, method: Method) -> Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]:
        async def handle(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            started = time.perf_counter()
            code = "ok"
            try:
                metadata = dict(context.invocation_metadata() or ())
                return await self._message_call(method, _text(metadata.get("authorization")), request)
            except Exception as exc:
                error = from_exception(exc)
                code = error.status
                await context.abort(status_of(error.status).grpc, error.message)
                raise  # abort raises; this line is for type checkers
            finally:
                if method.observe is not None:
                    method.observe(method.name, "grpc", code, time.perf_counter() - started)

        return handle


class _ConnectService:
    """The object connect-python calls (``score_rewards(request, ctx)`` and the like) for one service."""

    def __init__(self, api: Api, methods: list[Method]) -> None:
        for method in methods:
            setattr(self, method.snake, self._bind(api, method))

    @staticmethod
    def _bind(api: Api, method: Method) -> Callable[[Any, Any], Awaitable[Any]]:
        async def handle(request: Any, ctx: Any) -> Any:
            return await api._connect_call(method, request, ctx)

        return handle


def _text(value: str | bytes | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value
