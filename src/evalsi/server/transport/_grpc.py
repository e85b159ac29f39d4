"""The gRPC side: a ``grpc.aio`` server on the same event loop as HTTP, serving the same method tables.

Every call of every service (rewards, runs, evaluators, datasets, jobs) passes :class:`Admit` before its message
is received: the token is checked from the metadata, then the call takes the largest message's room in the
project's share of ``rewards.max_inflight_bytes`` (a call past it waits, and HTTP/2 flow control holds its message
at the client), then the message is received and what it did not need is given back before it is decoded. A
message that does not arrive within ``rewards.body_timeout`` of its room being granted gives the room back and is
answered ``deadline_exceeded`` undecoded. ``listen.max_grpc_calls`` bounds the calls in flight (gRPC's
``maximum_concurrent_rpcs``), ``listen.max_connections`` the connections, ``listen.header_timeout`` a handshake and
``listen.grpc_idle_timeout`` a connection without calls.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError, Message

from evalsi.server._body_bytes import BodyBytes
from evalsi.server._errors import ServiceError, from_exception
from evalsi.server._limits import Held
from evalsi.server._status import status_of
from evalsi.server.rewards._service import RewardService

_HEADROOM = 64 << 10
"""Bytes a message may carry beyond ``rewards.max_request_bytes``: its framing, so equal limits mean equal bodies."""
_OFFLOAD_BYTES = 4 << 20
"""Messages larger than this are decoded off the event loop."""
Observer = Callable[[str, str, str, "float | None"], None]
"""Counts one call of a service: its method, protocol, code and seconds (None: refused before it started)."""


@dataclass(frozen=True)
class MalformedRequest:
    """A request body protobuf could not decode (nesting past its limit, bad bytes)."""

    detail: str


def decoder(message_type: type[Message]) -> Callable[[bytes], Any]:
    """A gRPC request deserializer: the message, or what was wrong with it (the handler answers ``invalid_argument``).

    A decoder that raises makes gRPC answer ``unknown``, naming the exception class; a malformed body is the
    caller's error, so it is returned, not raised. Every service's gRPC methods decode with it.
    """

    def decode(data: bytes) -> Any:
        try:
            return message_type.FromString(data)
        except DecodeError as exc:
            return MalformedRequest(str(exc))

    return decode


def _text(value: str | bytes | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


Continuation = Callable[[grpc.HandlerCallDetails], Awaitable["grpc.RpcMethodHandler[Any, Any] | None"]]


class Admit(grpc.aio.ServerInterceptor):
    """Token, then room for the message, before a call's message is received or decoded (see the module).

    A refused call gets a handler that aborts with the service's status and message without reading the message.
    """

    def __init__(
        self,
        service: RewardService,
        body_bytes: BodyBytes,
        max_calls: int,
        observers: Mapping[str, Observer] | None = None,
    ) -> None:
        self.service = service
        self.body_bytes = body_bytes
        self.max_calls = max_calls
        self.observers = dict(observers or {})
        """Each service's call counter, by its full name: a refused call is counted where its service's are."""
        self.calls = 0

    async def intercept_service(self, continuation: Continuation, details: grpc.HandlerCallDetails) -> Any:
        """The call's handler, admitted; or one that refuses it."""
        metadata = dict(details.invocation_metadata or ())
        if self.calls >= self.max_calls:  # gRPC refuses it too: it must not wait for room first
            return self._refusal(details, _too_many_calls(self.max_calls))
        try:
            principal = await self.service.authenticate(_text(metadata.get("authorization")))
        except Exception as exc:
            return self._refusal(details, from_exception(exc))
        handler = await continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        task = asyncio.current_task()  # the call's own task: it ends when the call does, however it ends
        if task is not None:
            self.calls += 1
            task.add_done_callback(self._finished)
        rewards = self.service.config.spec.rewards
        held = await self.body_bytes.enter(principal.project, max_message_bytes(rewards.max_request_bytes))
        return _admitted(handler, held, rewards.body_timeout, task)

    def _finished(self, _: object) -> None:
        self.calls -= 1

    def _refusal(self, details: grpc.HandlerCallDetails, error: ServiceError) -> grpc.RpcMethodHandler[Any, Any]:
        service, _, method = (details.method or "").strip("/").partition("/")
        observe = self.observers.get(service)
        if observe is not None:  # counted where its calls are
            observe(method, "grpc", error.status, None)
        code = status_of(error.status).grpc

        async def refuse(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
            await context.abort(code, error.message)

        # Served as a client stream, never read: the refused call's message is not received (so not measured
        # against the message cap either), and a bad token is answered as on HTTP JSON and Connect.
        return grpc.stream_unary_rpc_method_handler(refuse)


def _too_many_calls(limit: int) -> ServiceError:
    return ServiceError(
        "resource_exhausted",
        f"the server has listen.max_grpc_calls={limit} gRPC calls in flight; retry later",
        "too_many_calls",
        limit=limit,
    )


def _admitted(
    handler: grpc.RpcMethodHandler[Any, Any],
    held: Held,
    timeout: float,
    task: asyncio.Task[Any] | None,
) -> grpc.RpcMethodHandler[Any, Any]:
    """``handler`` receiving its message undecoded: the room is fitted to it, then it is decoded and served.

    The room is given back when the call ends however it ends (answered, refused, cancelled before its message
    arrived), or at ``timeout`` when the message has not arrived by then.
    """
    decode = handler.request_deserializer
    serve: Any = handler.unary_unary  # typed for the sync server; on grpc.aio it is a coroutine function
    arrived = [False]

    def expire() -> None:
        if not arrived[0]:
            held.release()

    timer = asyncio.get_running_loop().call_later(timeout, expire)

    def done(_: object) -> None:
        timer.cancel()
        held.release()

    if task is not None:
        task.add_done_callback(done)

    async def admitted(raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        arrived[0] = True
        timer.cancel()
        request: Any = None
        try:
            if held.released:
                await context.abort(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"the request message did not arrive within rewards.body_timeout={timeout:g}s",
                )
            held.shrink(len(raw))
            if decode is None:
                request = raw
            elif len(raw) > _OFFLOAD_BYTES:
                request = await asyncio.to_thread(decode, raw)
            else:
                request = decode(raw)
            del raw
            return await serve(request, context)
        except BaseException as exc:
            _forget_locals(exc)
            raise
        finally:
            request = None
            held.release()

    return grpc.unary_unary_rpc_method_handler(
        admitted, request_deserializer=None, response_serializer=handler.response_serializer
    )


def _forget_locals(error: BaseException) -> None:
    """Clear the locals of the finished frames in ``error``'s tracebacks (and its causes').

    gRPC keeps an aborted call's exception on the call's state, which the frames in its traceback reach again
    through their ``context``: the cycle would keep the request (a message of up to ``rewards.max_request_bytes``)
    until the garbage collector's next full pass.
    """
    seen: set[int] = set()
    each: BaseException | None = error
    while each is not None and id(each) not in seen:
        seen.add(id(each))
        if each.__traceback__ is not None:
            traceback.clear_frames(each.__traceback__)
        each = each.__cause__ or each.__context__


def max_message_bytes(max_request_bytes: int) -> int:
    """The gRPC message cap for a configured ``rewards.max_request_bytes``."""
    return max_request_bytes + _HEADROOM


def make_grpc_server(
    service: RewardService,
    body_bytes: BodyBytes,
    handlers: Sequence[grpc.GenericRpcHandler],
    observers: Mapping[str, Observer] | None = None,
) -> grpc.aio.Server:
    """A gRPC server serving ``handlers`` (every service's, from their method tables; ports are added by the caller).

    Messages past ``rewards.max_request_bytes`` are refused by gRPC itself with ``RESOURCE_EXHAUSTED``; every call
    is admitted by :class:`Admit` (token, then room in ``body_bytes``) before its message is received; a refused
    call is counted by its service's entry in ``observers``.
    """
    spec = service.config.spec
    listen = spec.listen
    cap = max_message_bytes(spec.rewards.max_request_bytes)
    server = grpc.aio.server(
        interceptors=[Admit(service, body_bytes, listen.max_grpc_calls, observers)],
        maximum_concurrent_rpcs=listen.max_grpc_calls,
        options=[
            ("grpc.max_receive_message_length", cap),
            ("grpc.max_send_message_length", -1),
            ("grpc.max_allowed_incoming_connections", listen.max_connections),
            ("grpc.server_handshake_timeout_ms", max(1, int(listen.header_timeout * 1000))),
            ("grpc.max_connection_idle_ms", max(1, int(listen.grpc_idle_timeout * 1000))),
            ("grpc.http2.bdp_probe", 0),
            ("grpc.http2.lookahead_bytes", 65536),
        ],
    )
    server.add_generic_rpc_handlers(tuple(handlers))
    return server
