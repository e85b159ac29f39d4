"""The method table every service is served from: one :class:`Method` per RPC, declared once for every protocol.

A method names its service, its request and response messages, the permission a token needs to call it
(:class:`Scope`), the service call answering it (plain data in, plain data out), how a protobuf request becomes
that plain data and the plain answer a protobuf response (Connect and gRPC), and its HTTP JSON routes (how the
route's path, query and body become the plain request, and how the answer is written). :mod:`._api` serves a
table over the three protocols with the same code; :func:`admit` is the one place a call is let in.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from google.protobuf.message import Message
from starlette.requests import Request
from starlette.responses import Response

from evalsi.server._errors import ServiceError
from evalsi.server._tokens import Principal

Handler = Callable[[Principal, Any], Awaitable[Any]]
"""The service call: the caller and the plain request, to the plain answer."""
Codec = Callable[[Any], Any]
"""A conversion (message to plain data or back); it may return an awaitable (a large conversion off the loop)."""
Observer = Callable[[str, str, str, "float | None"], None]
"""Counts one call: its method, protocol and status code, and its seconds (None: refused before it started)."""
Authenticator = Callable[[str | None], Awaitable[Principal]]


@dataclass(frozen=True)
class Scope:
    """A permission the caller's token must hold, or else the call is refused ``permission_denied``.

    ``unless`` names a permission that serves instead (reading evaluators needs ``evaluations.run`` or
    ``evaluators.write``); ``why`` is said in the refusal.
    """

    permission: str
    why: str = ""
    unless: str | None = None

    def check(self, principal: Principal) -> None:
        """Refuse ``principal`` unless its token holds the permission.

        Raises:
            ServiceError: ``permission_denied`` naming the permission the token lacks.

        """
        if self.unless is not None and principal.allows(self.unless):
            return
        if not principal.allows(self.permission):
            reason = f" ({self.why})" if self.why else ""
            raise ServiceError(
                "permission_denied",
                f"the token for project {principal.project!r} lacks the {self.permission} permission{reason}",
                permission=self.permission,
            )


@dataclass(frozen=True)
class HttpRoute:
    """One HTTP JSON route of a method.

    ``read`` makes the plain request of the route's request (path, query, body); ``write`` the response of the
    plain answer. A route with a body (``body``) goes through the guard: token before body, size limits, body
    timeout, the project's share of in-flight bytes.
    """

    verb: str
    path: str
    read: Callable[[Request], Awaitable[Any]]
    write: Callable[[Any], Awaitable[Response]]
    body: bool = False


def identity(value: Any) -> Any:
    """The value itself (a method whose service takes and gives its messages as they are)."""
    return value


@dataclass(frozen=True)
class Method:
    """One RPC, declared: what it is called, what it needs, and how each protocol reaches its service call.

    ``scopes`` left out (None) refuses every call: a method is served only once it says what a token needs.
    """

    service: str
    name: str
    request: type[Message]
    response: type[Message]
    handler: Handler
    scopes: tuple[Scope, ...] | None = None
    decode: Codec = identity
    encode: Codec = identity
    http: tuple[HttpRoute, ...] = ()
    observe: Observer | None = None
    malformed: str = field(default="")
    """How a request protobuf cannot decode is named (default: the request message's name)."""

    @property
    def snake(self) -> str:
        """The method's Python name in connect-python's generated code (``CreateEvaluator`` -> ``create_evaluator``)."""
        return "".join("_" + c.lower() if c.isupper() else c for c in self.name).lstrip("_")

    @property
    def malformed_name(self) -> str:
        """What a request that does not decode is said not to be."""
        return self.malformed or self.request.__name__


async def admit(
    method: Method,
    principal: Principal | None,
    authorization: str | None,
    authenticate: Authenticator,
    draining: Callable[[], bool],
) -> Principal:
    """Let a call in: its token (unless the guard checked it already), the server not draining, its scopes.

    Every method of every protocol passes here before its request is decoded; a method without declared scopes is
    refused whatever the token holds.

    Args:
        method: The method called.
        principal: The caller the guard already authenticated, or None.
        authorization: The ``authorization`` header or metadata value (read when ``principal`` is None).
        authenticate: The server's token check.
        draining: Whether the server is shutting down.

    Returns:
        The caller.

    Raises:
        ServiceError: ``unauthenticated``, ``unavailable`` (draining) or ``permission_denied``.

    """
    if principal is None:
        principal = await authenticate(authorization)
    if draining():
        raise ServiceError("unavailable", "the server is shutting down; retry (another replica will answer)")
    if method.scopes is None:
        raise ServiceError(
            "permission_denied",
            f"{method.service}.{method.name} declares no permission a token needs: it is not served",
        )
    for scope in method.scopes:
        scope.check(principal)
    return principal


async def converted(codec: Codec, value: Any) -> Any:
    """``codec(value)``, awaited when the codec returned an awaitable."""
    result = codec(value)
    if inspect.isawaitable(result):
        return await result
    return result


def json_response(data: Any, status: int = 200) -> Response:
    """A JSON response of ``data``."""
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")
