"""The Run Service over gRPC: handlers added to the server's ``grpc.aio`` server beside the Reward Service.

The server's interceptor has checked the token and taken the message's room in the project's share of
``rewards.max_inflight_bytes`` before a handler runs (see :class:`evalsi.server.transport._grpc.Admit`), and gRPC itself
refuses messages past ``rewards.max_request_bytes``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from evalsi.server._errors import ServiceError, from_exception
from evalsi.server._proto.evalsi.v1alpha1 import rewards_pb2 as pb
from evalsi.server._status import status_of
from evalsi.server._tokens import Principal
from evalsi.server.runs._service import RunService
from evalsi.server.transport._grpc import RUN_SERVICE_NAME, MalformedRequest, decoder
from evalsi.server.transport._runs_proto import RunMessages

SERVICE_NAME = RUN_SERVICE_NAME


def run_handlers(service: RunService) -> grpc.GenericRpcHandler:
    """The Run Service's methods as one generic handler for ``server.add_generic_rpc_handlers``."""
    messages = RunMessages(service)

    def unary(
        name: str, request_type: Any, call: Callable[[Principal, Any], Awaitable[Any]]
    ) -> grpc.RpcMethodHandler[Any, Any]:
        async def handle(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            started = time.perf_counter()
            code = "ok"
            try:
                metadata = dict(context.invocation_metadata() or ())
                raw = metadata.get("authorization")
                principal = await service.authenticate(raw.decode() if isinstance(raw, bytes) else raw)
                if isinstance(request, MalformedRequest):
                    raise ServiceError("invalid_argument", f"the body is not a valid {name}Request: {request.detail}")
                return await call(principal, request)
            except Exception as exc:
                error = from_exception(exc)
                code = error.status
                await context.abort(status_of(error.status).grpc, error.message)
                raise  # abort raises; this line is for type checkers
            finally:
                service.metrics.on_run_call(name, "grpc", code, time.perf_counter() - started)

        return grpc.unary_unary_rpc_method_handler(
            handle, request_deserializer=decoder(request_type), response_serializer=lambda m: m.SerializeToString()
        )

    handlers = {
        "CreateRun": unary("CreateRun", pb.CreateRunRequest, messages.create_run),
        "GetRun": unary("GetRun", pb.GetRunRequest, messages.get_run),
        "ListRuns": unary("ListRuns", pb.ListRunsRequest, messages.list_runs),
        "CompareRuns": unary("CompareRuns", pb.CompareRunsRequest, messages.compare_runs),
        "DeleteRun": unary("DeleteRun", pb.DeleteRunRequest, messages.delete_run),
    }
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)
