"""Calls to an OpenAI-compatible ``/chat/completions`` endpoint, bounded and retried.

One :class:`JudgeClient` per endpoint (URL, key variable, timeout, concurrency) holds one
:class:`~evalsi._util.transport.HttpClient` (aiohttp, keep-alive, as many connections as requests in flight), so
every ``score_batch`` in the process, from any thread, shares the bound of ``max_concurrency`` requests in flight.
Requests run on the process's HTTP event loop (:func:`~evalsi._util.transport.background_loop`), not on threads:
any number of judge endpoints costs one thread. A timeout, a connection failure or a retryable status is retried
by the shared policy of :mod:`evalsi._util.retry` (``Retry-After`` honoured); anything else, and a reply without a
message, is a :class:`JudgeCallError` whose message holds the status, never the body.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import orjson

from evalsi._util.http import MalformedReply, json_headers, read_reply, transport_failure
from evalsi._util.retry import attempts_phrase, retryable
from evalsi._util.transport import TransportFailure, background_loop, endpoint_client

MAX_REPLY_CHARS = 16_384
"""The most of a judge reply kept in a score's details (its end, where verdicts are): caches hold details."""


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
    """A shared HTTP client for one endpoint, at most ``max_concurrency`` requests in flight."""

    def __init__(self, endpoint: ChatEndpoint) -> None:
        self.endpoint = endpoint
        self._http = endpoint_client(endpoint)
        self._loop = background_loop()
        self._slots = asyncio.Semaphore(endpoint.max_concurrency)
        self._lock = threading.Lock()
        self._pending: set[Future[str]] = set()
        self._closed = False
        self._retiring = False

    @property
    def calls(self) -> int:
        """HTTP requests made, retries included."""
        return self._http.attempts

    def submit(self, body: Mapping[str, Any]) -> Future[str]:
        """Queue one chat request; the future gives the reply's text or raises :class:`JudgeCallError`.

        Cancelling the future drops the request if it has not been sent (and stops it if it has).
        """
        with self._lock:
            if self._closed:
                future: Future[str] = Future()
                future.set_exception(JudgeCallError("the llm-judge evaluator was closed before the call ran"))
                return future
            future = self._loop.submit(self._call(orjson.dumps(body)))
            self._pending.add(future)
        future.add_done_callback(self._finished)
        return future

    async def _call(self, content: bytes) -> str:
        async with self._slots:
            reply = await self._post(content)
        return _message_content(reply)

    def _finished(self, future: Future[str]) -> None:
        with self._lock:
            self._pending.discard(future)
            idle = self._retiring and not self._pending
        if idle:
            self.close()

    def retire(self) -> None:
        """Close once the requests already queued have run (the client is no longer handed out)."""
        with self._lock:
            self._retiring = True
            idle = not self._pending
        if idle:
            self.close()

    def complete(self, body: Mapping[str, Any]) -> str:
        """One chat request, retried; the first choice's message content."""
        return self.submit(body).result()

    async def _post(self, content: bytes) -> Any:
        endpoint = self.endpoint
        try:
            response = await self._http.post("", content, json_headers(endpoint.api_key_env))
        except TransportFailure as exc:
            raise JudgeCallError(transport_failure(exc, endpoint.timeout) + _gave_up(exc.attempts)) from None
        try:
            reply, reason = read_reply(response)
        except MalformedReply as exc:
            raise JudgeCallError(f"malformed reply: {exc}") from None
        if reason:  # a judge that said not to retry (x-should-retry: false) was asked once: nothing was given up
            raise JudgeCallError(reason + (_gave_up(response.attempts) if retryable(response) else ""))
        return reply

    def close(self) -> None:
        """Drop requests not yet answered and close the connections."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pending, self._pending = list(self._pending), set()
        for future in pending:
            future.cancel()
        self._loop.submit(self._http.aclose())


def _gave_up(attempts: int) -> str:
    return f" (gave up after {attempts_phrase(attempts)})"


def _message_content(reply: Any) -> str:
    choices = reply.get("choices") if isinstance(reply, Mapping) else None
    if not isinstance(choices, Sequence) or not choices or not isinstance(choices[0], Mapping):
        raise JudgeCallError("malformed reply: no choices[0] object")
    message = choices[0].get("message")
    content = message.get("content") if isinstance(message, Mapping) else None
    if isinstance(content, list):  # content parts: keep the text ones
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    if not isinstance(content, str):
        refusal = message.get("refusal") if isinstance(message, Mapping) else None
        detail = f" (refusal: {refusal})" if refusal else ""
        raise JudgeCallError(f"malformed reply: choices[0].message has no text content{detail}")
    return content
