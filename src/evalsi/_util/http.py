"""What evalsi's JSON-over-HTTP clients to upstream services share: headers, and one answer's outcome as data.

An upstream's body never reaches a reason (a score's reason may travel back to whoever sent the spec): a
failed answer is its status and the standard phrase for it, and a failed connection is "connection failed",
without the remote's error text. The body is logged at debug level on the ``evalsi.http`` logger.
"""

from __future__ import annotations

import logging
import os
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import orjson

from evalsi._util.retry import timed_out
from evalsi._util.transport import Reply

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("evalsi.http")


class MalformedReply(ValueError):
    """A 200 answer whose body is not JSON."""


def json_headers(api_key_env: str | None) -> dict[str, str]:
    """JSON content type, plus a bearer token when ``api_key_env`` names a set variable (read on each call)."""
    headers = {"Content-Type": "application/json"}
    key = os.environ.get(api_key_env) if api_key_env else None
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return headers


def transport_failure(exc: Exception, timeout: float) -> str:
    """Why a request got no answer: a timeout, or a failed connection (the error's own text is only logged)."""
    log.debug("HTTP transport error: %r", exc.__cause__ or exc)
    if timed_out(exc):
        return f"no reply within {timeout:g} s"
    return "connection failed"


def status_text(status: int) -> str:
    """``HTTP 503 Service Unavailable``: a status and its standard phrase, nothing from the body.

    Example:
        >>> status_text(503), status_text(599)
        ('HTTP 503 Service Unavailable', 'HTTP 599')

    """
    try:
        return f"HTTP {status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


def read_reply(response: httpx.Response | Reply) -> tuple[Any, str]:
    """``(decoded JSON, "")`` for a 200 answer, else ``(None, status_text)``.

    Raises:
        MalformedReply: The answer is 200 but its body is not JSON.

    """
    url = response.url if isinstance(response, Reply) else response.request.url
    if response.status_code == 200:
        try:
            return orjson.loads(response.content), ""
        except orjson.JSONDecodeError:
            log.debug("non-JSON 200 body from %s: %r", url, response.content[:2000])
            raise MalformedReply(f"the body is not JSON ({len(response.content):,} bytes)") from None
    log.debug("HTTP %d from %s: %r", response.status_code, url, response.content[:2000])
    return None, status_text(response.status_code)
