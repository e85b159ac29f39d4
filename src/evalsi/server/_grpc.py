"""The gRPC side: a ``grpc.aio`` server on the same event loop as HTTP, calling the same service."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from evalsi.server._convert import request_parts, results_message
from evalsi.server._errors import ServiceError, from_exception
from evalsi.server._proto.evalsi.v1alpha1 import rewards_pb2 as pb
from evalsi.server._proto.evalsi.v1alpha1 import rewards_pb2_grpc as pb_grpc
from evalsi.server._service import RewardService

BodyGate = Callable[[str, int], AbstractAsyncContextManager[None]]
"""Holds a project's message bytes in ``rewards.max_inflight_bytes`` (see :func:`evalsi.server._http.held_body`)."""

GRPC_CODES = {
    "invalid_argument": grpc.StatusCode.INVALID_ARGUMENT,
    "unauthenticated": grpc.StatusCode.UNAUTHENTICATED,
    "permission_denied": grpc.StatusCode.PERMISSION_DENIED,
    "failed_precondition": grpc.StatusCode.FAILED_PRECONDITION,
    "resource_exhausted": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "unavailable": grpc.StatusCode.UNAVAILABLE,
    "not_found": grpc.StatusCode.NOT_FOUND,
}
_HEADROOM = 64 << 10
"""Bytes a message may carry beyond ``rewards.max_request_bytes``: its framing, so equal limits mean equal bodies."""
SERVICE_NAME = "evalsi.v1alpha1.RewardService"
RUN_SERVICE_NAME = "evalsi.v1alpha1.RunService"


@dataclass(frozen=True)
class MalformedRequest:
    """A request body protobuf could not decode (nesting past its limit, bad bytes)."""

    detail: str


def decode_request(data: bytes) -> pb.ScoreRewardsRequest | MalformedRequest:
    """The request message, or what was wrong with it (the servicer answers ``invalid_argument``).

    A decoder that raises makes gRPC answer ``unknown``, naming the exception class; a malformed body is the
    caller's error, so it is returned, not raised.
    """
    try:
        return pb.ScoreRewardsRequest.FromString(data)
    except DecodeError as exc:
        return MalformedRequest(str(exc))


class GrpcRewardService(pb_grpc.RewardServiceServicer):
    """``RewardService.ScoreRewards`` over gRPC; the token travels as ``authorization: Bearer ...`` metadata."""

    def __init__(self, service: RewardService, held: BodyGate) -> None:
        self.service = service
        self.held = held

    async def ScoreRewards(
        self,
        request: pb.ScoreRewardsRequest | MalformedRequest,
        context: grpc.aio.ServicerContext[pb.ScoreRewardsRequest, pb.ScoreRewardsResponse],
    ) -> pb.ScoreRewardsResponse:
        """Score a batch; errors abort with the matching status code and the shared message."""
        metrics = self.service.metrics
        started = time.perf_counter()
        code = "ok"
        try:
            metadata = dict(context.invocation_metadata() or ())
            principal = await self.service.authenticate(_text(metadata.get("authorization")))
            if isinstance(request, MalformedRequest):
                raise ServiceError("invalid_argument", f"the body is not a valid ScoreRewardsRequest: {request.detail}")
            async with self.held(principal.project, request.ByteSize()):
                spec, rollouts = request_parts(request)
                return results_message(await self.service.score(principal, spec, rollouts))
        except Exception as exc:
            error = from_exception(exc)
            code = error.status
            await context.abort(GRPC_CODES.get(error.status, grpc.StatusCode.INTERNAL), error.message)
            raise  # abort raises; this line is for type checkers
        finally:
            metrics.calls.labels("grpc", code).inc()
            metrics.call_seconds.labels("grpc").observe(time.perf_counter() - started)


def _text(value: str | bytes | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


class Authenticate(grpc.aio.ServerInterceptor):
    """Checks the token from the metadata before the handler runs: an unknown caller's message is never decoded.

    A refused call gets a handler without a deserializer that aborts with the service's status and message.
    """

    def __init__(self, service: RewardService) -> None:
        self.service = service

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        """The real handler for an authenticated call, else one that refuses it."""
        metadata = dict(details.invocation_metadata or ())
        try:
            await self.service.authenticate(_text(metadata.get("authorization")))
        except Exception as exc:
            error = from_exception(exc)
            service, _, method = (details.method or "").strip("/").partition("/")
            if service == RUN_SERVICE_NAME:  # counted where its calls are, by method
                self.service.metrics.on_run_call(method, "grpc", error.status)
            else:
                self.service.metrics.calls.labels("grpc", error.status).inc()
            code = GRPC_CODES.get(error.status, grpc.StatusCode.INTERNAL)

            async def refuse(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
                await context.abort(code, error.message)

            return grpc.unary_unary_rpc_method_handler(refuse)
        return await continuation(details)


def max_message_bytes(max_request_bytes: int) -> int:
    """The gRPC message cap for a configured ``rewards.max_request_bytes``."""
    return max_request_bytes + _HEADROOM


def make_grpc_server(
    service: RewardService, held: BodyGate, extra: Sequence[grpc.GenericRpcHandler] = ()
) -> grpc.aio.Server:
    """A gRPC server with the Reward Service added (ports are added by the caller).

    Messages past ``rewards.max_request_bytes`` are refused by gRPC itself with ``RESOURCE_EXHAUSTED``; a
    message's size is held in ``rewards.max_inflight_bytes`` (within its project's share) while it is scored.
    ``extra`` adds further services' handlers (evaluators, datasets, evaluation jobs) behind the same token check.
    """
    cap = max_message_bytes(service.config.spec.rewards.max_request_bytes)
    server = grpc.aio.server(
        interceptors=[Authenticate(service)],
        options=[("grpc.max_receive_message_length", cap), ("grpc.max_send_message_length", -1)],
    )
    servicer = GrpcRewardService(service, held)
    handlers = {
        "ScoreRewards": grpc.unary_unary_rpc_method_handler(
            servicer.ScoreRewards,
            request_deserializer=decode_request,
            response_serializer=pb.ScoreRewardsResponse.SerializeToString,
        )
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers), *extra))
    return server
