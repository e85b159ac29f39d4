"""What every Connect service of the server shares: undecodable bodies answered ``invalid_argument``."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar

from connectrpc.code import Code
from connectrpc.errors import ConnectError


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


App = TypeVar("App", bound=type)


def decoding(application: App, message: str) -> App:
    """``application`` (a class connect-python generated) answering a body its codec rejects ``invalid_argument``.

    connect-python answers such a body (a field of the wrong type, nesting past protobuf's limit) ``unknown``, an
    HTTP 500; for the caller it is a bad argument, named as a ``message`` it is not.
    """

    class Decoding(application):  # type: ignore[misc,valid-type]
        async def _read_post_request(self, *args: Any, **kwargs: Any) -> Any:
            return await decoded(super()._read_post_request(*args, **kwargs), message)

        async def _read_get_request(self, *args: Any, **kwargs: Any) -> Any:
            return await decoded(super()._read_get_request(*args, **kwargs), message)

    Decoding.__name__ = Decoding.__qualname__ = f"Decoding{application.__name__}"
    return Decoding  # type: ignore[return-value]
