"""What evalsi's JSON-over-HTTP clients share: headers, and one attempt's outcome as data."""

from __future__ import annotations

import os
from typing import Any

import httpx
import orjson


class MalformedReply(ValueError):
    """A 200 answer whose body is not JSON."""


def json_headers(api_key_env: str | None) -> dict[str, str]:
    """JSON content type, plus a bearer token when ``api_key_env`` names a set variable (read on each call)."""
    headers = {"Content-Type": "application/json"}
    key = os.environ.get(api_key_env) if api_key_env else None
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return headers


def transport_failure(exc: httpx.TransportError, timeout: float) -> str:
    """Why an attempt got no answer: a timeout, or a failed connection."""
    if isinstance(exc, httpx.TimeoutException):
        return f"no reply within {timeout:g} s"
    return f"connection failed ({type(exc).__name__}: {exc})"


def read_reply(response: httpx.Response) -> tuple[Any, str]:
    """``(decoded JSON, "")`` for a 200 answer, else ``(None, "HTTP <status>: <body start>")``.

    Raises:
        MalformedReply: The answer is 200 but its body is not JSON.

    """
    if response.status_code == 200:
        try:
            return orjson.loads(response.content), ""
        except orjson.JSONDecodeError:
            raise MalformedReply(f"the body is not JSON: {response.text[:120]!r}") from None
    return None, f"HTTP {response.status_code}: {response.text[:200]}"
