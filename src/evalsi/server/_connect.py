"""What every Connect service of the server shares: canonical codes as Connect codes, undecodable bodies."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError

CONNECT_CODES = {
    "invalid_argument": Code.INVALID_ARGUMENT,
    "unauthenticated": Code.UNAUTHENTICATED,
    "permission_denied": Code.PERMISSION_DENIED,
    "failed_precondition": Code.FAILED_PRECONDITION,
    "resource_exhausted": Code.RESOURCE_EXHAUSTED,
    "unavailable": Code.UNAVAILABLE,
    "not_found": Code.NOT_FOUND,
    "deadline_exceeded": Code.DEADLINE_EXCEEDED,
}
"""The Connect code of each canonical status (anything else is ``internal``)."""


async def decoded(reading: Awaitable[Any], message: str = "ScoreRewardsRequest") -> Any:
    """The request connect-python decoded; a body its codec rejects is the caller's ``invalid_argument``.

    connect-python reports such a body (not JSON, a field of the wrong type, nesting past protobuf's limit)
    as ``unknown``.
    """
    try:
        return await reading
    except ConnectError:
        raise
    except Exception as exc:
        raise ConnectError(Code.INVALID_ARGUMENT, f"the body is not a valid {message}: {exc}") from None
