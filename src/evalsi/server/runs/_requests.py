"""Client-chosen request ids of ``CreateRun``: the id's shape, and the fingerprint that tells a retry from a reuse.

A retry resends the same request, so it has the same fingerprint: the server answers it with the run the first
attempt stored. The same id with another fingerprint is a client reusing an id for a different run, refused.
The fingerprint is taken over the request's JSON form with whole-number floats as integers, because gRPC and
Connect carry every number of a ``Struct`` as a double: the same request over any protocol has one fingerprint.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

import orjson

from evalsi.server._errors import ServiceError

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,200}$")


def check_request_id(value: Any, where: str = "requestId") -> str | None:
    """The request id, or None when the caller gave none.

    Raises:
        ServiceError: ``invalid_argument`` for an id that is not 1-200 letters, digits, '.', '_', ':' or '-'.

    """
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not _REQUEST_ID.match(value):
        raise ServiceError(
            "invalid_argument",
            f"`{where}` must be 1-200 letters, digits, '.', '_', ':' or '-' (a UUID, say)",
            path=where,
        )
    return value


def _plain_numbers(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {k: _plain_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_numbers(v) for v in value]
    return value


def request_fingerprint(document: Any, labels: Mapping[str, str]) -> str:
    """The sha256 (hex) of a create's results document and labels, the same over every protocol."""
    body = {"labels": dict(labels), "results": _plain_numbers(document)}
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS, default=str)).hexdigest()


def reused(request_id: str) -> ServiceError:
    """The refusal of a request id already used in the project for a different request."""
    return ServiceError(
        "invalid_argument",
        f"`requestId` {request_id!r} already stored a run of this project from a different request (other results "
        "or labels); a retry must resend the same request, and a new run needs a new requestId",
        "request_id_reused",
        path="requestId",
    )
