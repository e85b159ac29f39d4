"""Evaluators, datasets and evaluation jobs over HTTP JSON, Connect and gRPC, from ``evaluation.proto``.

Each RPC is one entry of :data:`EvaluationApi.methods`: its request and response messages and the service call
answering it, which reads the request into the service's plain data and writes its plain answer as the response
(see :mod:`._evaluation_messages`; run off the event loop: services query the database). HTTP JSON bodies and
answers are the messages' JSON form (camelCase; 64-bit integers as numbers); Connect and gRPC carry the messages
themselves.
Every call is authenticated from its ``authorization`` header or metadata; errors carry the same message in
every protocol.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import orjson
from connectrpc.errors import ConnectError
from google.protobuf import json_format
from google.protobuf.message import Message
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from evalsi.server._errors import ServiceError, from_exception
from evalsi.server._proto.evalsi.v1alpha1 import evaluation_connect as connect
from evalsi.server._proto.evalsi.v1alpha1 import evaluation_pb2 as pb
from evalsi.server._status import status_of
from evalsi.server._tokens import Principal
from evalsi.server.evaluation._datasets import Datasets
from evalsi.server.evaluation.evaluators._service import Evaluators
from evalsi.server.evaluation.jobs._service import Jobs
from evalsi.server.transport import _evaluation_messages as out
from evalsi.server.transport._connect import decoding
from evalsi.server.transport._grpc import MalformedRequest, decoder
from evalsi.server.transport._guard import PRINCIPAL_KEY

PACKAGE = "evalsi.v1alpha1"
QUERY = "?"
"""A route whose request message is its query parameters (``?pageSize=10&state=RUNNING``)."""
Handler = Callable[[Principal, Any], Message]
Authenticator = Callable[[str | None], Awaitable[Principal]]


@dataclass(frozen=True)
class Method:
    """One RPC: its service, name, messages and the service call answering it."""

    service: str
    name: str
    request: type[Message]
    response: type[Message]
    handler: Handler

    @property
    def snake(self) -> str:
        """The method's Python name in connect-python's generated code (``CreateEvaluator`` -> ``create_evaluator``)."""
        return "".join("_" + c.lower() if c.isupper() else c for c in self.name).lstrip("_")


class EvaluationApi:
    """The three services' methods, and their HTTP routes, Connect applications and gRPC handlers."""

    def __init__(
        self,
        evaluators: Evaluators,
        datasets: Datasets,
        jobs: Jobs,
        authenticate: Authenticator,
        draining: Callable[[], bool] = lambda: False,
    ) -> None:
        self.draining = draining
        """True once SIGTERM arrived: further calls are refused ``unavailable``, as scoring calls are."""
        self.evaluators = evaluators
        self.datasets = datasets
        self.jobs = jobs
        self.authenticate = authenticate
        e, d, j = evaluators, datasets, jobs
        self.methods = [
            Method("EvaluatorService", "CreateEvaluator", pb.CreateEvaluatorRequest, pb.Evaluator,
                   lambda p, r: out.evaluator(e.create(p, r.evaluator_id, r.entry, r.archive))),
            Method("EvaluatorService", "GetEvaluator", pb.GetEvaluatorRequest, pb.Evaluator,
                   lambda p, r: out.evaluator(e.get(p, r.evaluator_id))),
            Method("EvaluatorService", "GetEvaluatorBuildLog", pb.GetEvaluatorRequest, pb.EvaluatorBuildLog,
                   lambda p, r: out.build_log(e.build_log(p, r.evaluator_id))),
            Method("EvaluatorService", "ListEvaluators", pb.ListEvaluatorsRequest, pb.ListEvaluatorsResponse,
                   lambda p, r: out.evaluators(e.listing(p, r.page_size, r.page_token))),
            Method("EvaluatorService", "DeleteEvaluator", pb.GetEvaluatorRequest, pb.DeleteEvaluatorResponse,
                   lambda p, r: pb.DeleteEvaluatorResponse(name=e.delete(p, r.evaluator_id))),
            Method("DatasetService", "CreateDataset", pb.CreateDatasetRequest, pb.Dataset,
                   lambda p, r: out.dataset(d.create(p, r.dataset_id, r.jsonl))),
            Method("DatasetService", "GetDataset", pb.GetDatasetRequest, pb.Dataset,
                   lambda p, r: out.dataset(d.get(p, r.dataset_id, r.rows))),
            Method("DatasetService", "DeleteDataset", pb.GetDatasetRequest, pb.DeleteDatasetResponse,
                   lambda p, r: pb.DeleteDatasetResponse(name=d.delete(p, r.dataset_id))),
            Method("DatasetService", "ListDatasets", pb.ListDatasetsRequest, pb.ListDatasetsResponse,
                   lambda p, r: out.datasets(d.listing(p, r.page_size, r.page_token))),
            Method("EvaluationJobService", "CreateEvaluationJob", pb.CreateEvaluationJobRequest, pb.EvaluationJob,
                   lambda p, r: out.job(j.create(p, out.job_spec(r.evaluation_job), r.evaluation_job_id))),
            Method("EvaluationJobService", "GetEvaluationJob", pb.GetEvaluationJobRequest, pb.EvaluationJob,
                   lambda p, r: out.job(j.get(p, r.evaluation_job_id))),
            Method("EvaluationJobService", "CancelEvaluationJob", pb.GetEvaluationJobRequest, pb.EvaluationJob,
                   lambda p, r: out.job(j.cancel(p, r.evaluation_job_id))),
            Method("EvaluationJobService", "ListEvaluationJobs", pb.ListEvaluationJobsRequest,
                   pb.ListEvaluationJobsResponse,
                   lambda p, r: out.jobs(j.listing(p, r.page_size, r.page_token, r.state, r.evaluator))),
            Method("EvaluationJobService", "DeleteEvaluationJob", pb.GetEvaluationJobRequest,
                   pb.DeleteEvaluationJobResponse,
                   lambda p, r: pb.DeleteEvaluationJobResponse(name=j.delete(p, r.evaluation_job_id))),
        ]  # fmt: skip
        self._by_name = {m.name: m for m in self.methods}

    async def call(self, principal: Principal, name: str, request: Message) -> Message:
        """Answer one call (the store works on a thread: it queries the database)."""
        if self.draining():
            raise ServiceError("unavailable", "the server is shutting down; retry (another replica will answer)")
        return await asyncio.to_thread(self._by_name[name].handler, principal, request)

    # HTTP JSON

    def routes(self) -> list[Route]:
        """The HTTP JSON routes (listed in ``evaluation.proto``)."""
        base = "/v1alpha1"
        table = [
            (f"{base}/evaluators", "POST", "CreateEvaluator", None),
            (f"{base}/evaluators", "GET", "ListEvaluators", QUERY),
            (f"{base}/evaluators/{{id}}", "GET", "GetEvaluator", "evaluator_id"),
            (f"{base}/evaluators/{{id}}", "DELETE", "DeleteEvaluator", "evaluator_id"),
            (f"{base}/evaluators/{{id}}/log", "GET", "GetEvaluatorBuildLog", "evaluator_id"),
            (f"{base}/datasets", "POST", "CreateDataset", None),
            (f"{base}/datasets", "GET", "ListDatasets", QUERY),
            (f"{base}/datasets/{{id}}", "GET", "GetDataset", "dataset_id"),
            (f"{base}/datasets/{{id}}", "DELETE", "DeleteDataset", "dataset_id"),
            (f"{base}/evaluationJobs", "POST", "CreateEvaluationJob", None),
            (f"{base}/evaluationJobs", "GET", "ListEvaluationJobs", QUERY),
            (f"{base}/evaluationJobs/{{id}}", "GET", "GetEvaluationJob", "evaluation_job_id"),
            (f"{base}/evaluationJobs/{{id}}", "DELETE", "DeleteEvaluationJob", "evaluation_job_id"),
            (f"{base}/evaluationJobs/{{id}}/cancel", "POST", "CancelEvaluationJob", "evaluation_job_id"),
        ]
        return [Route(path, self._endpoint(name, field), methods=[verb]) for path, verb, name, field in table]

    def _endpoint(self, name: str, id_field: str | None) -> Callable[[Request], Awaitable[Response]]:
        method = self._by_name[name]

        async def endpoint(request: Request) -> Response:
            try:
                principal = request.scope.get(PRINCIPAL_KEY)
                if principal is None:
                    principal = await self.authenticate(request.headers.get("authorization"))
                message = method.request()
                if id_field == QUERY:
                    _parse_query(dict(request.query_params), message, name)
                elif id_field is None:
                    _parse(await request.body(), message, name)
                else:
                    setattr(message, id_field, request.path_params["id"])
                    if request.query_params.get("rows", "").lower() in ("1", "true") and hasattr(message, "rows"):
                        message.rows = True
                answer = await self.call(principal, name, message)
                return _json(
                    json_format.MessageToDict(
                        answer, always_print_fields_with_no_presence=True, unquote_int64_if_possible=True
                    )
                )
            except Exception as exc:
                error = from_exception(exc)
                return _json(error.payload(), error.http_status)

        return endpoint

    def is_post_route(self, path: str) -> bool:
        """Whether ``path`` is one of this API's POST routes (the guard checks their token before the body)."""
        return path in ("/v1alpha1/evaluators", "/v1alpha1/datasets", "/v1alpha1/evaluationJobs") or (
            path.startswith("/v1alpha1/evaluationJobs/") and path.endswith("/cancel")
        )

    # Connect

    def connect_apps(self, read_max_bytes: int) -> list[Any]:
        """connect-python's ASGI applications for the three services (mounted at each one's ``path``)."""
        apps: list[Any] = []
        for cls, service in (
            (connect.EvaluatorServiceASGIApplication, "EvaluatorService"),
            (connect.DatasetServiceASGIApplication, "DatasetService"),
            (connect.EvaluationJobServiceASGIApplication, "EvaluationJobService"),
        ):
            adapter = _ConnectAdapter(self, [m for m in self.methods if m.service == service])
            application = decoding(cls, f"{service} request")  # a malformed body is the caller's error
            apps.append(application(adapter, read_max_bytes=read_max_bytes))  # type: ignore[arg-type]
        return apps

    # gRPC

    def grpc_handlers(self) -> list[grpc.GenericRpcHandler]:
        """One generic handler per service for a ``grpc.aio`` server."""
        handlers: list[grpc.GenericRpcHandler] = []
        for service in ("EvaluatorService", "DatasetService", "EvaluationJobService"):
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
            try:
                if isinstance(request, MalformedRequest):
                    raise ServiceError("invalid_argument", f"the message is not a valid {method.request.__name__}")
                metadata = dict(context.invocation_metadata() or ())
                raw = metadata.get("authorization")
                principal = await self.authenticate(raw.decode() if isinstance(raw, bytes) else raw)
                return await self.call(principal, method.name, request)
            except Exception as exc:
                error = from_exception(exc)
                code = status_of(error.status).grpc
                await context.abort(code, error.message)

        return handle


class _ConnectAdapter:
    """The object connect-python calls: ``create_evaluator(request, ctx)`` and the like, for one service."""

    def __init__(self, api: EvaluationApi, methods: list[Method]) -> None:
        for method in methods:
            setattr(self, method.snake, self._bind(api, method))

    @staticmethod
    def _bind(api: EvaluationApi, method: Method) -> Callable[[Any, Any], Awaitable[Any]]:
        async def handle(request: Any, ctx: Any) -> Any:
            try:
                principal = await api.authenticate(ctx.request_headers().get("authorization"))
                return await api.call(principal, method.name, request)
            except Exception as exc:
                error = from_exception(exc)
                raise ConnectError(status_of(error.status).connect, error.message) from None

        return handle


def _parse(body: bytes, message: Message, name: str) -> None:
    try:
        json_format.Parse(body or b"{}", message)
    except json_format.ParseError as exc:
        raise ServiceError(
            "invalid_argument", f"the body is not a valid {type(message).__name__} for {name}: {exc}"
        ) from None


def _parse_query(params: dict[str, str], message: Message, name: str) -> None:
    try:
        json_format.ParseDict(params, message)
    except json_format.ParseError as exc:
        raise ServiceError("invalid_argument", f"the query is not valid for {name}: {exc}") from None


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")
