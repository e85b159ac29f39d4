"""The Run Service over protobuf (gRPC and Connect): messages to the service's JSON form and back.

Both protocols call :class:`RunMessages`; they only differ in how a request arrives, how the token travels and
how an error is rendered.
"""

from __future__ import annotations

import asyncio
from typing import Any

from google.protobuf import json_format

from evalsi.server._convert import message_dict
from evalsi.server._proto.evalsi.v1alpha1 import rewards_pb2 as pb
from evalsi.server._tokens import Principal
from evalsi.server.runs._service import RunService


def _plain(message: Any, where: str = "request") -> dict[str, Any]:
    return message_dict(message, where)


def _message(data: dict[str, Any], message: Any) -> Any:
    return json_format.ParseDict(data, message, ignore_unknown_fields=True)


class RunMessages:
    """Each Run Service call with protobuf messages in and out."""

    def __init__(self, service: RunService) -> None:
        self.service = service

    async def create_run(self, principal: Principal, request: pb.CreateRunRequest) -> pb.Run:
        """``CreateRun``."""
        # A whole run's document: converted off the event loop, like a large HTTP JSON body.
        results = await asyncio.to_thread(_plain, request.results, "results") if request.HasField("results") else None
        body = {"results": results, "labels": dict(request.labels), "requestId": request.request_id}
        run: pb.Run = _message(await self.service.create(principal, body), pb.Run())
        return run

    async def get_run(self, principal: Principal, request: pb.GetRunRequest) -> pb.GetRunResponse:
        """``GetRun``."""
        answer = await self.service.get(
            principal, request.id, request.include_records, request.page_size, request.page_token
        )
        response: pb.GetRunResponse = await asyncio.to_thread(_message, answer, pb.GetRunResponse())
        return response

    async def list_runs(self, principal: Principal, request: pb.ListRunsRequest) -> pb.ListRunsResponse:
        """``ListRuns``."""
        answer = await self.service.list_runs(principal, dict(request.labels), request.page_size, request.page_token)
        response: pb.ListRunsResponse = _message(answer, pb.ListRunsResponse())
        return response

    async def compare_runs(self, principal: Principal, request: pb.CompareRunsRequest) -> pb.CompareRunsResponse:
        """``CompareRuns``."""
        response: pb.CompareRunsResponse = _message(
            await self.service.compare(principal, _plain(request)), pb.CompareRunsResponse()
        )
        return response

    async def delete_run(self, principal: Principal, request: pb.DeleteRunRequest) -> pb.DeleteRunResponse:
        """``DeleteRun``."""
        response: pb.DeleteRunResponse = _message(
            await self.service.delete(principal, request.id), pb.DeleteRunResponse()
        )
        return response
