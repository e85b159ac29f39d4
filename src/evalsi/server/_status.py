"""The one table of canonical status codes: how HTTP JSON, Connect and gRPC each answer a refused call.

A :class:`~evalsi.server._errors.ServiceError` carries a canonical ``status`` (gRPC's code names, lower case).
Every protocol renders it from :data:`STATUSES`, so the same refusal is the same answer on every route. The HTTP
statuses of the JSON routes are the library's (:data:`evalsi.rewards.wire.HTTP_STATUS`, which a ``server=``
client reads back), plus ``deadline_exceeded`` (a request body that did not arrive in time: 408). A status the
table does not know is answered ``internal``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import grpc
from connectrpc.code import Code

from evalsi.rewards.wire import HTTP_STATUS


@dataclass(frozen=True)
class Status:
    """One canonical status as each protocol answers it."""

    http: int
    """The HTTP status of the JSON routes (a body too large to serve is 413 instead, see ``http_status``)."""
    connect_http: int
    """The HTTP status of a Connect call the server refuses before the call is read (the body's size or time)."""
    grpc: grpc.StatusCode
    """The gRPC status code."""
    connect: Code
    """The Connect code."""


def _status(name: str, connect_http: int, http: int | None = None) -> Status:
    code = name.upper()
    return Status(HTTP_STATUS[name] if http is None else http, connect_http, grpc.StatusCode[code], Code[code])


STATUSES: Mapping[str, Status] = MappingProxyType(
    {
        "invalid_argument": _status("invalid_argument", 400),
        "unauthenticated": _status("unauthenticated", 401),
        "permission_denied": _status("permission_denied", 403),
        "not_found": _status("not_found", 404),
        "failed_precondition": _status("failed_precondition", 400),
        "deadline_exceeded": _status("deadline_exceeded", 408, http=408),
        "resource_exhausted": _status("resource_exhausted", 429),
        "unavailable": _status("unavailable", 503),
        "internal": _status("internal", 500),
    }
)
"""Each canonical status the server answers, by name."""


def status_of(name: str) -> Status:
    """How each protocol answers the canonical status ``name`` (``internal`` when the table does not know it)."""
    return STATUSES.get(name) or STATUSES["internal"]


def http_status(status: str, code: str) -> int:
    """The HTTP status of the JSON routes for a ``status`` with contract ``code``.

    A request too large to serve (``resource_exhausted`` with a ``*_too_large`` code) is 413, not 429: retrying
    the same body cannot succeed.
    """
    if status == "resource_exhausted" and code.endswith("_too_large"):
        return 413
    return status_of(status).http
