"""The Run Service's method table: each call over HTTP JSON, Connect and gRPC, all calling :class:`RunService`.

The service takes and gives the messages' JSON form (``camelCase`` keys), so HTTP JSON serves it as it is and
Connect and gRPC convert their messages to and from it. JSON routes::

    POST /v1alpha1/runs            CreateRun: {"results": <results document>, "labels": {...}}
    GET  /v1alpha1/runs/{id}       GetRun: ?records=true&pageSize=N&pageToken=T
    GET  /v1alpha1/runs            ListRuns: ?label=KEY=VALUE (repeatable)&pageSize=N&pageToken=T
    POST /v1alpha1/runs:compare    CompareRuns: {"baseRunId", "candidateRunId", "metrics", "regression"}
    DELETE /v1alpha1/runs/{id}     DeleteRun

The two POST routes and Connect go through the server's guard (token before body, size limits, body timeout,
the project's share of in-flight bytes); the GET and DELETE routes carry no body.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from google.protobuf import json_format
from starlette.requests import Request
from starlette.responses import Response

from evalsi.server._convert import message_dict
from evalsi.server._errors import ServiceError
from evalsi.server._metrics import Metrics
from evalsi.server._proto.evalsi.v1alpha1 import rewards_pb2 as pb
from evalsi.server._tokens import RUN, Principal
from evalsi.server.runs._service import RunService
from evalsi.server.transport._methods import HttpRoute, Method, Observer, Scope, json_response

RUNS_PATH = "/v1alpha1/runs"
COMPARE_PATH = "/v1alpha1/runs:compare"
_OFFLOAD_BYTES = 4 * 1024 * 1024
_TRUE = {"1", "true", "yes"}


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


async def _get_query(request: Request) -> tuple[Any, ...]:
    query = request.query_params
    records = query.get("records", "").lower() in _TRUE
    return request.path_params["run_id"], records, query.get("pageSize"), query.get("pageToken", "")


async def _list_query(request: Request) -> tuple[Any, ...]:
    query = request.query_params
    return _query_labels(request), query.get("pageSize"), query.get("pageToken", "")


async def _path_id(request: Request) -> tuple[Any, ...]:
    return (request.path_params["run_id"],)


async def _json(answer: Any) -> Response:
    return json_response(answer)


async def _create_body(request: pb.CreateRunRequest) -> dict[str, Any]:
    # A whole run's document: converted off the event loop, like a large HTTP JSON body.
    has = request.HasField("results")
    results = await asyncio.to_thread(message_dict, request.results, "results") if has else None
    return {"results": results, "labels": dict(request.labels), "requestId": request.request_id}


def _message(data: dict[str, Any], message: Any) -> Any:
    return json_format.ParseDict(data, message, ignore_unknown_fields=True)


async def _get_response(answer: dict[str, Any]) -> pb.GetRunResponse:
    response: pb.GetRunResponse = await asyncio.to_thread(_message, answer, pb.GetRunResponse())
    return response


def count_run_calls(metrics: Metrics) -> Observer:
    """``evalsi_run_calls`` and ``evalsi_run_call_seconds`` by method and protocol (refusals are not timed)."""

    def observe(method: str, protocol: str, code: str, seconds: float | None) -> None:
        metrics.on_run_call(method, protocol, code, seconds)

    return observe


def run_methods(service: RunService) -> list[Method]:
    """The Run Service's methods (every one needs ``evaluations.run``; a project sees only its own runs)."""
    observe = count_run_calls(service.metrics)
    scopes = (Scope(RUN),)

    async def create(principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
        return await service.create(principal, body)

    async def get(principal: Principal, args: tuple[Any, ...]) -> dict[str, Any]:
        return await service.get(principal, *args)

    async def listing(principal: Principal, args: tuple[Any, ...]) -> dict[str, Any]:
        return await service.list_runs(principal, *args)

    async def compare(principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
        return await service.compare(principal, body)

    async def delete(principal: Principal, args: tuple[Any, ...]) -> dict[str, Any]:
        return await service.delete(principal, *args)

    return [
        Method("RunService", "CreateRun", pb.CreateRunRequest, pb.Run, create, scopes,
               decode=_create_body, encode=lambda answer: _message(answer, pb.Run()),
               http=(HttpRoute("POST", RUNS_PATH, _body, _json, body=True),), observe=observe),
        Method("RunService", "GetRun", pb.GetRunRequest, pb.GetRunResponse, get, scopes,
               decode=lambda r: (r.id, r.include_records, r.page_size, r.page_token), encode=_get_response,
               http=(HttpRoute("GET", RUNS_PATH + "/{run_id}", _get_query, _json),), observe=observe),
        Method("RunService", "ListRuns", pb.ListRunsRequest, pb.ListRunsResponse, listing, scopes,
               decode=lambda r: (dict(r.labels), r.page_size, r.page_token),
               encode=lambda answer: _message(answer, pb.ListRunsResponse()),
               http=(HttpRoute("GET", RUNS_PATH, _list_query, _json),), observe=observe),
        Method("RunService", "CompareRuns", pb.CompareRunsRequest, pb.CompareRunsResponse, compare, scopes,
               decode=lambda r: message_dict(r, "request"),
               encode=lambda answer: _message(answer, pb.CompareRunsResponse()),
               http=(HttpRoute("POST", COMPARE_PATH, _body, _json, body=True),), observe=observe),
        Method("RunService", "DeleteRun", pb.DeleteRunRequest, pb.DeleteRunResponse, delete, scopes,
               decode=lambda r: (r.id,), encode=lambda answer: _message(answer, pb.DeleteRunResponse()),
               http=(HttpRoute("DELETE", RUNS_PATH + "/{run_id}", _path_id, _json),), observe=observe),
    ]  # fmt: skip
