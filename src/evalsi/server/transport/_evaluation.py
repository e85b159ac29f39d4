"""Evaluators, datasets and evaluation jobs: their method table, from ``evaluation.proto``.

Each RPC is one :class:`~._methods.Method`: its request and response messages, the permission it needs, and the
service call answering it, which reads the request into the service's plain data and writes its plain answer as the
response (see :mod:`._evaluation_messages`; run off the event loop: services query the database). HTTP JSON bodies
and answers are the messages' JSON form (camelCase; 64-bit integers as numbers); Connect and gRPC carry the
messages themselves. :class:`~._api.Api` serves the table on every protocol.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from starlette.requests import Request
from starlette.responses import Response

from evalsi.server._errors import ServiceError
from evalsi.server._proto.evalsi.v1alpha1 import evaluation_pb2 as pb
from evalsi.server._tokens import EVALUATORS_WRITE, RUN, RUNS_CODE, Principal
from evalsi.server.evaluation._datasets import Datasets
from evalsi.server.evaluation.evaluators._service import Evaluators
from evalsi.server.evaluation.jobs._service import Jobs
from evalsi.server.transport import _evaluation_messages as out
from evalsi.server.transport._methods import HttpRoute, Method, Scope, json_response

BASE = "/v1alpha1"
QUERY = "?"
"""A route whose request message is its query parameters (``?pageSize=10&state=RUNNING``)."""
BODY = None
"""A route whose request message is its JSON body."""
Call = Callable[[Principal, Any], Message]

RUNS = (Scope(RUN),)
READS_EVALUATORS = (Scope(RUN, "reading evaluators needs evaluations.run or evaluators.write", EVALUATORS_WRITE),)
WRITES_EVALUATORS = (Scope(EVALUATORS_WRITE), Scope(RUNS_CODE, "an evaluator is code: it runs in the sandbox"))


class EvaluationServices:
    """The three services, and the methods that serve them."""

    def __init__(self, evaluators: Evaluators, datasets: Datasets, jobs: Jobs) -> None:
        self.evaluators = evaluators
        self.datasets = datasets
        self.jobs = jobs

    def methods(self) -> list[Method]:
        """Every method of the evaluator, dataset and evaluation-job services."""
        e, d, j = self.evaluators, self.datasets, self.jobs
        return [
            _method("EvaluatorService", "CreateEvaluator", pb.CreateEvaluatorRequest, pb.Evaluator, WRITES_EVALUATORS,
                    lambda p, r: out.evaluator(e.create(p, r.evaluator_id, r.entry, r.archive)),
                    ("POST", "/evaluators", BODY)),
            _method("EvaluatorService", "GetEvaluator", pb.GetEvaluatorRequest, pb.Evaluator, READS_EVALUATORS,
                    lambda p, r: out.evaluator(e.get(p, r.evaluator_id)),
                    ("GET", "/evaluators/{id}", "evaluator_id")),
            _method("EvaluatorService", "GetEvaluatorBuildLog", pb.GetEvaluatorRequest, pb.EvaluatorBuildLog,
                    READS_EVALUATORS, lambda p, r: out.build_log(e.build_log(p, r.evaluator_id)),
                    ("GET", "/evaluators/{id}/log", "evaluator_id")),
            _method("EvaluatorService", "ListEvaluators", pb.ListEvaluatorsRequest, pb.ListEvaluatorsResponse,
                    (Scope(RUN, "listing evaluators needs evaluations.run"),),
                    lambda p, r: out.evaluators(e.listing(p, r.page_size, r.page_token)),
                    ("GET", "/evaluators", QUERY)),
            _method("EvaluatorService", "DeleteEvaluator", pb.GetEvaluatorRequest, pb.DeleteEvaluatorResponse,
                    (Scope(EVALUATORS_WRITE, "deleting an evaluator needs evaluators.write"),),
                    lambda p, r: pb.DeleteEvaluatorResponse(name=e.delete(p, r.evaluator_id)),
                    ("DELETE", "/evaluators/{id}", "evaluator_id")),
            _method("DatasetService", "CreateDataset", pb.CreateDatasetRequest, pb.Dataset, RUNS,
                    lambda p, r: out.dataset(d.create(p, r.dataset_id, r.jsonl)),
                    ("POST", "/datasets", BODY)),
            _method("DatasetService", "GetDataset", pb.GetDatasetRequest, pb.Dataset, RUNS,
                    lambda p, r: out.dataset(d.get(p, r.dataset_id, r.rows)),
                    ("GET", "/datasets/{id}", "dataset_id")),
            _method("DatasetService", "DeleteDataset", pb.GetDatasetRequest, pb.DeleteDatasetResponse, RUNS,
                    lambda p, r: pb.DeleteDatasetResponse(name=d.delete(p, r.dataset_id)),
                    ("DELETE", "/datasets/{id}", "dataset_id")),
            _method("DatasetService", "ListDatasets", pb.ListDatasetsRequest, pb.ListDatasetsResponse, RUNS,
                    lambda p, r: out.datasets(d.listing(p, r.page_size, r.page_token)),
                    ("GET", "/datasets", QUERY)),
            _method("EvaluationJobService", "CreateEvaluationJob", pb.CreateEvaluationJobRequest, pb.EvaluationJob,
                    RUNS, lambda p, r: out.job(j.create(p, out.job_spec(r.evaluation_job), r.evaluation_job_id)),
                    ("POST", "/evaluationJobs", BODY)),
            _method("EvaluationJobService", "GetEvaluationJob", pb.GetEvaluationJobRequest, pb.EvaluationJob, RUNS,
                    lambda p, r: out.job(j.get(p, r.evaluation_job_id)),
                    ("GET", "/evaluationJobs/{id}", "evaluation_job_id")),
            _method("EvaluationJobService", "CancelEvaluationJob", pb.GetEvaluationJobRequest, pb.EvaluationJob,
                    RUNS, lambda p, r: out.job(j.cancel(p, r.evaluation_job_id)),
                    ("POST", "/evaluationJobs/{id}/cancel", "evaluation_job_id")),
            _method("EvaluationJobService", "ListEvaluationJobs", pb.ListEvaluationJobsRequest,
                    pb.ListEvaluationJobsResponse, RUNS,
                    lambda p, r: out.jobs(j.listing(p, r.page_size, r.page_token, r.state, r.evaluator)),
                    ("GET", "/evaluationJobs", QUERY)),
            _method("EvaluationJobService", "DeleteEvaluationJob", pb.GetEvaluationJobRequest,
                    pb.DeleteEvaluationJobResponse, RUNS,
                    lambda p, r: pb.DeleteEvaluationJobResponse(name=j.delete(p, r.evaluation_job_id)),
                    ("DELETE", "/evaluationJobs/{id}", "evaluation_job_id")),
        ]  # fmt: skip


def _method(
    service: str,
    name: str,
    request: type[Message],
    response: type[Message],
    scopes: tuple[Scope, ...],
    call: Call,
    route: tuple[str, str, str | None],
) -> Method:
    """A method whose service call runs on a thread (the stores query the database), with its one JSON route."""

    async def handler(principal: Principal, message: Any) -> Message:
        return await asyncio.to_thread(call, principal, message)

    verb, path, source = route
    read = _reader(request, name, source)
    return Method(
        service,
        name,
        request,
        response,
        handler,
        scopes,
        http=(HttpRoute(verb, BASE + path, read, _write, body=verb == "POST"),),
    )


def _reader(request: type[Message], name: str, source: str | None) -> Callable[[Request], Awaitable[Message]]:
    async def read(http: Request) -> Message:
        message = request()
        if source == QUERY:
            _parse_query(dict(http.query_params), message, name)
        elif source is BODY:
            _parse(await http.body(), message, name)
        else:
            setattr(message, source, http.path_params["id"])
            if http.query_params.get("rows", "").lower() in ("1", "true") and hasattr(message, "rows"):
                message.rows = True
        return message

    return read


async def _write(answer: Message) -> Response:
    return json_response(
        json_format.MessageToDict(answer, always_print_fields_with_no_presence=True, unquote_int64_if_possible=True)
    )


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
