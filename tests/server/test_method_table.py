"""The method table: every method of every service is let in the same way on HTTP JSON, Connect and gRPC, and a
method that does not declare what a token needs is not served."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator

import orjson
import pytest

from evalsi.server._errors import ServiceError
from evalsi.server._proto.evalsi.v1alpha1 import evaluation_pb2 as epb
from evalsi.server._proto.evalsi.v1alpha1 import rewards_pb2 as pb
from evalsi.server._tokens import EVALUATORS_WRITE, METRICS, PERMISSIONS, RUN, RUNS_CODE, Principal
from evalsi.server.transport._methods import Method, Scope, admit
from tests.server.calls import PROTOCOLS, Call
from tests.server.harness import ServerProcess, make_token, write_config

LIMIT = 64 << 10
"""The server's ``rewards.max_request_bytes`` here."""


def _calls(payload: str) -> list[Call]:
    """A call with a body of every service, carrying ``payload`` where the request has room for free text."""
    archive = base64.b64encode(payload.encode()).decode()
    row = orjson.dumps({"messages": [{"role": "user", "content": payload}]}).decode()
    run = {"version": 1, "kind": "RunResults", "name": "r", "records": [], "summary": {"note": payload}}
    job = {"evaluator": "none", "inputDataset": "none", "outputDataset": "out", "target": payload}
    return [
        Call("RewardService", "ScoreRewards", "/v1alpha1/rewards:score", pb.ScoreRewardsRequest,
             {"spec": {"components": [{"ref": "exact-match"}]}, "rollouts": [{"completion": payload}]}),
        Call("RunService", "CreateRun", "/v1alpha1/runs", pb.CreateRunRequest, {"results": run}),
        Call("RunService", "CompareRuns", "/v1alpha1/runs:compare", pb.CompareRunsRequest,
             {"baseRunId": "run_x", "candidateRunId": "run_y", "metrics": [payload]}),
        Call("EvaluatorService", "CreateEvaluator", "/v1alpha1/evaluators", epb.CreateEvaluatorRequest,
             {"evaluatorId": "e", "entry": "t.py::test_t", "archive": archive}),
        Call("DatasetService", "CreateDataset", "/v1alpha1/datasets", epb.CreateDatasetRequest,
             {"datasetId": "d", "jsonl": row}),
        Call("EvaluationJobService", "CreateEvaluationJob", "/v1alpha1/evaluationJobs",
             epb.CreateEvaluationJobRequest, {"evaluationJob": job}),
        Call("EvaluationJobService", "CancelEvaluationJob", "/v1alpha1/evaluationJobs/j/cancel",
             epb.GetEvaluationJobRequest, {"evaluationJobId": "j" + payload}),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    directory = tmp_path_factory.mktemp("method-table")
    url = f"sqlite:///{directory / 's.db'}"
    config = write_config(directory, {"database": {"url": url}, "rewards": {"max_request_bytes": LIMIT}})
    tokens = {
        "every": make_token(url, "p", [RUN, EVALUATORS_WRITE, RUNS_CODE]),
        "metrics": make_token(url, "p", [METRICS]),
        "unknown": "evalsi_" + "0" * 40,
    }
    with ServerProcess(config) as server:
        yield server, tokens


HTTP_STATUS = {"unauthenticated": "401", "permission_denied": "403", "resource_exhausted": "413"}


@pytest.mark.parametrize(
    ("token", "size", "status"),
    [
        ("unknown", 16, "unauthenticated"),
        ("unknown", 4 * LIMIT, "unauthenticated"),
        ("metrics", 16, "permission_denied"),
        ("every", 4 * LIMIT, "resource_exhausted"),
    ],
    ids=["bad-token", "bad-token-oversized", "token-without-the-scope", "oversized"],
)
def test_every_method_is_refused_alike_on_every_protocol(
    served: tuple[ServerProcess, dict[str, str]], token: str, size: int, status: str
) -> None:
    server, tokens = served
    for call in _calls("x" * size):
        answers = {protocol: call.answer(protocol, server, tokens[token]) for protocol in PROTOCOLS}
        statuses = {protocol: answer.status for protocol, answer in answers.items()}
        assert statuses == {"http": HTTP_STATUS[status], "connect": status, "grpc": status}, (call.method, answers)
        if status != "resource_exhausted":  # gRPC itself refuses a message past its cap, in its own words
            messages = {answer.message for answer in answers.values()}
            assert len(messages) == 1, (call.method, answers)


def test_a_method_without_a_declared_scope_is_refused_whatever_the_token_holds() -> None:
    called: list[object] = []

    async def handler(principal: Principal, request: object) -> object:
        called.append(request)
        return request

    undeclared = Method("RunService", "NewMethod", pb.GetRunRequest, pb.GetRunResponse, handler)
    everything = Principal("p", frozenset(PERMISSIONS))

    async def authenticate(authorization: str | None) -> Principal:
        return everything

    with pytest.raises(ServiceError) as refused:
        asyncio.run(admit(undeclared, None, "Bearer t", authenticate, lambda: False))
    assert refused.value.status == "permission_denied" and "RunService.NewMethod" in refused.value.message
    declared = Method("RunService", "NewMethod", pb.GetRunRequest, pb.GetRunResponse, handler, (Scope(RUN),))
    assert asyncio.run(admit(declared, None, "Bearer t", authenticate, lambda: False)) is everything
    assert called == []


def test_a_scope_names_the_permission_and_an_alternative_serves_instead() -> None:
    scope = Scope(RUN, "reading needs it", unless=EVALUATORS_WRITE)
    scope.check(Principal("p", frozenset({EVALUATORS_WRITE})))
    with pytest.raises(ServiceError) as refused:
        scope.check(Principal("p", frozenset({METRICS})))
    assert refused.value.status == "permission_denied"
    assert refused.value.message == "the token for project 'p' lacks the evaluations.run permission (reading needs it)"


def test_a_draining_server_refuses_before_the_scope_is_checked() -> None:
    async def authenticate(authorization: str | None) -> Principal:
        return Principal("p", frozenset())

    async def handler(principal: Principal, request: object) -> object:
        return request

    method = Method("RunService", "GetRun", pb.GetRunRequest, pb.GetRunResponse, handler, (Scope(RUN),))
    with pytest.raises(ServiceError) as refused:
        asyncio.run(admit(method, None, "Bearer t", authenticate, lambda: True))
    assert refused.value.status == "unavailable"
