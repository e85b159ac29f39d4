"""The one status table: each canonical status answered alike by HTTP JSON, Connect and gRPC."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import orjson
import pytest
from connectrpc.code import Code

from evalsi.rewards.wire import HTTP_STATUS
from evalsi.server._errors import ServiceError
from evalsi.server._status import STATUSES, status_of
from evalsi.server.transport._guard import refuse, too_large


def _refused(error: ServiceError, connect: bool) -> tuple[int, dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    asyncio.run(refuse(send, error, connect))
    return sent[0]["status"], orjson.loads(sent[1]["body"])


@pytest.mark.parametrize("name", sorted(STATUSES))
def test_each_status_is_the_grpc_and_connect_code_of_its_name(name: str) -> None:
    status = status_of(name)
    assert status.grpc is grpc.StatusCode[name.upper()]
    assert status.connect is Code[name.upper()]


def test_json_routes_answer_the_library_s_http_status_for_each_status_it_knows() -> None:
    for name, http in HTTP_STATUS.items():
        assert ServiceError(name, "refused").http_status == http, name


def test_an_unknown_status_is_answered_internal_on_every_protocol() -> None:
    status = status_of("no_such_status")
    assert (status.http, status.connect_http, status.grpc, status.connect) == (
        500,
        500,
        grpc.StatusCode.INTERNAL,
        Code.INTERNAL,
    )
    assert ServiceError("no_such_status", "refused").http_status == 500


def test_a_body_too_large_is_413_on_json_and_resource_exhausted_on_connect() -> None:
    error = too_large(10, 5)
    assert error.http_status == 413
    assert _refused(error, connect=False)[0] == 413
    status, body = _refused(error, connect=True)
    assert (status, body["code"]) == (429, "resource_exhausted")
    assert status_of(error.status).grpc is grpc.StatusCode.RESOURCE_EXHAUSTED


def test_a_late_body_is_408_on_both_http_routes() -> None:
    error = ServiceError("deadline_exceeded", "the request body did not arrive", "body_timeout")
    assert error.http_status == 408
    assert _refused(error, connect=False)[0] == 408
    assert _refused(error, connect=True)[0] == 408


def test_a_refusal_carries_the_same_status_and_message_on_json_and_connect() -> None:
    error = ServiceError("unauthenticated", "no token", "missing_token")
    json_status, json_body = _refused(error, connect=False)
    connect_status, connect_body = _refused(error, connect=True)
    assert json_status == connect_status == 401
    assert json_body["error"]["status"] == connect_body["code"] == "unauthenticated"
    assert json_body["error"]["message"] == connect_body["message"] == "no token"
