"""Calls to an OpenAI-compatible ``/chat/completions`` endpoint, bounded and retried.

One :class:`JudgeClient` per endpoint (URL, key variable, timeout, concurrency) holds one ``httpx.Client`` and
a pool of ``max_concurrency`` threads, so every ``score_batch`` in the process, from any thread, shares the
bound. A timeout, a connection failure, 429 or 5xx is retried with exponential backoff (``Retry-After``
honoured); anything else, and a reply without a message, is a :class:`JudgeCallError`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from evalsi._util.http import MalformedReply, json_headers, read_reply, transport_failure
from evalsi._util.retry import RETRY_STATUSES, retry_delay


class JudgeCallError(Exception):
    """The judge could not be asked (after retries) or answered outside the chat-completions format."""


@dataclass(frozen=True)
class ChatEndpoint:
    """How requests reach one judge endpoint; one client per distinct value."""

    base_url: str
    api_key_env: str | None
    timeout: float
    retries: int
    backoff: float
    max_concurrency: int

    @property
    def url(self) -> str:
        """The chat-completions URL."""
        return self.base_url.rstrip("/") + "/chat/completions"


class JudgeClient:
    """A shared HTTP client and thread pool for one endpoint."""

    def __init__(self, endpoint: ChatEndpoint) -> None:
        self.endpoint = endpoint
        limit = endpoint.max_concurrency
        self._http = httpx.Client(
            timeout=endpoint.timeout, limits=httpx.Limits(max_connections=limit, max_keepalive_connections=limit)
        )
        self._pool = ThreadPoolExecutor(max_workers=limit, thread_name_prefix="evalsi-judge")
        self.calls = 0
        """HTTP requests made, retries included."""
        self._count_lock = threading.Lock()

    def submit(self, body: Mapping[str, Any]) -> Future[str]:
        """Queue one chat request; the future gives the reply's text or raises :class:`JudgeCallError`."""
        return self._pool.submit(self.complete, body)

    def complete(self, body: Mapping[str, Any]) -> str:
        """One chat request, retried; the first choice's message content."""
        reply = self._post(orjson.dumps(body))
        return _message_content(reply)

    def _post(self, content: bytes) -> Any:
        endpoint = self.endpoint
        reason = ""
        for attempt in range(endpoint.retries + 1):
            delay = retry_delay(attempt, endpoint.backoff)
            with self._count_lock:
                self.calls += 1
            try:
                response = self._http.post(endpoint.url, content=content, headers=json_headers(endpoint.api_key_env))
            except httpx.TransportError as exc:
                reason = transport_failure(exc, endpoint.timeout)
            else:
                try:
                    reply, reason = read_reply(response)
                except MalformedReply as exc:
                    raise JudgeCallError(f"malformed reply: {exc}") from None
                if not reason:
                    return reply
                if response.status_code not in RETRY_STATUSES:
                    raise JudgeCallError(reason)
                delay = retry_delay(attempt, endpoint.backoff, response.headers.get("Retry-After"))
            if attempt < endpoint.retries:
                time.sleep(delay)
        raise JudgeCallError(f"{reason} (gave up after {endpoint.retries + 1} attempts)")

    def close(self) -> None:
        """Stop the threads (queued requests are dropped) and close the connections."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._http.close()


def _message_content(reply: Any) -> str:
    choices = reply.get("choices") if isinstance(reply, Mapping) else None
    if not isinstance(choices, Sequence) or not choices or not isinstance(choices[0], Mapping):
        raise JudgeCallError(f"malformed reply: no choices in {_short(reply)}")
    message = choices[0].get("message")
    content = message.get("content") if isinstance(message, Mapping) else None
    if isinstance(content, list):  # content parts: keep the text ones
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    if not isinstance(content, str):
        refusal = message.get("refusal") if isinstance(message, Mapping) else None
        detail = f" (refusal: {refusal})" if refusal else ""
        raise JudgeCallError(f"malformed reply: choices[0].message has no text content{detail}")
    return content


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
