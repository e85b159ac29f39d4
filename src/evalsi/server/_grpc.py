"""The gRPC side: a ``grpc.aio`` server on the same event loop as HTTP, calling the same service."""

from __future__ import annotations

import time
from dataclasses import dataclass

import grpc
from google.protobuf.message import DecodeError

from evalsi.server._convert import request_parts, results_message
from evalsi.server._errors import ServiceError, from_exception
from evalsi.server._proto.evalsi.v1alpha1 import rewards_pb2 as pb
from evalsi.server._proto.evalsi.v1alpha1 import rewards_pb2_grpc as pb_grpc
from evalsi.server._service import RewardService

GRPC_CODES = {
    "invalid_argument": grpc.StatusCode.INVALID_ARGUMENT,
    "unauthenticated": grpc.StatusCode.UNAUTHENTICATED,
    "permission_denied": grpc.StatusCode.PERMISSION_DENIED,
    "failed_precondition": grpc.StatusCode.FAILED_PRECONDITION,
    "resource_exhausted": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "unavailable": grpc.StatusCode.UNAVAILABLE,
    "not_found": grpc.StatusCode.NOT_FOUND,
}
MAX_MESSAGE_BYTES = 512 * 1024 * 1024  # a 16k-rollout batch of long completions is far beyond gRPC's 4 MiB default
SERVICE_NAME = "evalsi.v1alpha1.RewardService"


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

    def __init__(self, service: RewardService) -> None:
        self.service = service

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


def make_grpc_server(service: RewardService) -> grpc.aio.Server:
    """A gRPC server with the Reward Service added (ports are added by the caller)."""
    server = grpc.aio.server(options=[
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ])
    servicer = GrpcRewardService(service)
    handlers = {"ScoreRewards": grpc.unary_unary_rpc_method_handler(
        servicer.ScoreRewards, request_deserializer=decode_request,
        response_serializer=pb.ScoreRewardsResponse.SerializeToString,
    )}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    return server
