"""The Reward Service's method table: ``ScoreRewards`` on every protocol, calling :meth:`RewardService.score`.

HTTP JSON is ``POST /v1alpha1/rewards:score``.

The HTTP JSON body is read with orjson (not protobuf's JSON form: a batch of rollouts is the server's largest
request), and the answer is the library's own results JSON; Connect and gRPC carry ``ScoreRewardsRequest`` and
``ScoreRewardsResponse``. Large bodies and answers are converted off the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from evalsi.rewards import RewardResult
from evalsi.server._convert import request_parts, results_message
from evalsi.server._errors import ServiceError
from evalsi.server._metrics import Metrics
from evalsi.server._proto.evalsi.v1alpha1 import rewards_pb2 as pb
from evalsi.server._tokens import RUN, Principal
from evalsi.server.rewards._service import RewardService
from evalsi.server.rewards._verdicts import Verdicts
from evalsi.server.transport._methods import HttpRoute, Method, Observer, Scope

SCORE_PATH = "/v1alpha1/rewards:score"
_OFFLOAD_BYTES = 4 * 1024 * 1024  # bodies larger than this (a few ms of JSON) are decoded off the event loop
_OFFLOAD_RESULTS = 8192  # answers with more results than this are encoded off the event loop


def parse_score_body(data: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The spec and rollouts of an HTTP JSON request body.

    Raises:
        ServiceError: ``invalid_argument`` naming what is missing or of the wrong type (and the rollout index).

    """
    if not isinstance(data, dict):
        raise ServiceError("invalid_argument", 'the body must be a JSON object {"spec": ..., "rollouts": [...]}')
    spec = data.get("spec")
    if not isinstance(spec, dict):
        raise ServiceError("invalid_argument", "`spec` must be a RewardSpec object", "invalid_spec", path="spec")
    rollouts = data.get("rollouts")
    if not isinstance(rollouts, list):
        raise ServiceError("invalid_argument", "`rollouts` must be a list of rollout objects")
    for index, rollout in enumerate(rollouts):
        if not isinstance(rollout, dict):
            raise ServiceError(
                "invalid_argument",
                f"rollout {index}: must be an object, got {type(rollout).__name__}",
                "invalid_rollout",
                index=index,
            )
    return spec, rollouts


async def read_score(request: Request) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The spec and rollouts of a ``rewards:score`` body (decoded off the event loop when large)."""
    body = await request.body()
    try:
        data = await asyncio.to_thread(orjson.loads, body) if len(body) > _OFFLOAD_BYTES else orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ServiceError("invalid_argument", f"the body is not valid JSON: {exc}") from None
    return parse_score_body(data)


def results_writer(verdicts: Verdicts) -> Callable[[list[RewardResult]], Awaitable[Response]]:
    """The answer's writer: the results as the library's JSON, a cached verdict's JSON built once (``verdicts``)."""

    async def write_results(results: list[RewardResult]) -> Response:
        many = len(results) > _OFFLOAD_RESULTS  # encoded off the event loop
        encoded = await asyncio.to_thread(verdicts.encode, results) if many else verdicts.encode(results)
        return Response(encoded, media_type="application/json")

    return write_results


def count_calls(metrics: Metrics) -> Observer:
    """``evalsi_reward_calls`` and ``evalsi_reward_call_seconds`` by protocol (refusals are not timed)."""

    def observe(method: str, protocol: str, code: str, seconds: float | None) -> None:
        metrics.child(metrics.calls, protocol, code).inc()
        if seconds is not None:
            metrics.child(metrics.call_seconds, protocol).observe(seconds)

    return observe


def reward_methods(service: RewardService) -> list[Method]:
    """The Reward Service's methods."""

    async def score(principal: Principal, parts: tuple[Any, Any]) -> list[RewardResult]:
        spec, rollouts = parts
        del parts
        return await service.score(principal, spec, rollouts)

    return [
        Method(
            "RewardService",
            "ScoreRewards",
            pb.ScoreRewardsRequest,
            pb.ScoreRewardsResponse,
            score,
            scopes=(Scope(RUN),),
            decode=request_parts,
            encode=results_message,
            http=(HttpRoute("POST", SCORE_PATH, read_score, results_writer(service.verdicts), body=True),),
            observe=count_calls(service.metrics),
        )
    ]
