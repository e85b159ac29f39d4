"""Calls to an OpenAI-compatible ``/chat/completions`` endpoint, bounded and retried.

One :class:`JudgeClient` per endpoint (URL, key variable, timeout, concurrency) holds one ``httpx.Client``,
so every ``score_batch`` in the process, from any thread, shares the bound of ``max_concurrency`` requests in
flight. Requests run on one thread pool shared by every client (:data:`SHARED_POOL`), which grows with the
bounds of the open clients and never past :data:`MAX_THREADS`. A timeout, a connection failure or a retryable status is
retried by the shared transport of :mod:`evalsi._util.retry` (``Retry-After`` honoured); anything else, and a
reply without a message, is a :class:`JudgeCallError` whose message holds the status, never the body.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from evalsi._util.http import MalformedReply, json_headers, read_reply, transport_failure
from evalsi._util.retry import RETRY_STATUSES, RetryPolicy, RetryTransport, attempts_phrase

MAX_THREADS = 256
"""The most threads the shared judge pool holds, however many judge endpoints are in use."""

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


class _SharedPool:
    """One thread pool for every judge client of the process, as large as their bounds add up to (capped)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._size = 0
        self._wanted = 0

    def reserve(self, threads: int) -> None:
        """A client with ``threads`` requests in flight at most opened; grow when that many more are useful."""
        with self._lock:
            self._wanted += threads
            want = min(self._wanted, MAX_THREADS)
            if self._pool is None or want > self._size:
                old, self._size = self._pool, want
                self._pool = ThreadPoolExecutor(max_workers=want, thread_name_prefix="evalsi-judge")
                if old is not None:
                    old.shutdown(wait=False)  # its threads finish what they hold, then exit

    def release(self, threads: int) -> None:
        """A client closed: the last one to close stops the pool's threads (a later client starts a new pool)."""
        with self._lock:
            self._wanted = max(self._wanted - threads, 0)
            idle = self._pool if self._wanted == 0 else None
            if idle is not None:
                self._pool, self._size = None, 0
        if idle is not None:
            idle.shutdown(wait=False)  # requests already handed over still run to the end

    def submit(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the pool."""
        with self._lock:
            pool = self._pool
        if pool is None:
            raise RuntimeError("no judge client has reserved threads")
        pool.submit(fn)

    @property
    def size(self) -> int:
        """Threads the current pool may hold."""
        return self._size


SHARED_POOL = _SharedPool()
"""Where every judge client's requests run; clients never block a thread while they wait for a slot."""


class JudgeClient:
    """A shared HTTP client for one endpoint, at most ``max_concurrency`` requests in flight on the shared pool."""

    def __init__(self, endpoint: ChatEndpoint) -> None:
        self.endpoint = endpoint
        limit = endpoint.max_concurrency
        limits = httpx.Limits(max_connections=limit, max_keepalive_connections=limit)
        self._transport = RetryTransport(
            RetryPolicy(endpoint.retries, endpoint.backoff), httpx.HTTPTransport(limits=limits)
        )
        self._http = httpx.Client(timeout=endpoint.timeout, transport=self._transport)
        self._lock = threading.Lock()
        self._queue: deque[tuple[Mapping[str, Any], Future[str]]] = deque()
        self._running = 0
        self._closed = False
        self._retiring = False
        SHARED_POOL.reserve(limit)

    @property
    def calls(self) -> int:
        """HTTP requests made, retries included."""
        return self._transport.attempts

    def submit(self, body: Mapping[str, Any]) -> Future[str]:
        """Queue one chat request; the future gives the reply's text or raises :class:`JudgeCallError`."""
        future: Future[str] = Future()
        with self._lock:
            if self._closed:
                future.set_exception(JudgeCallError("the llm-judge evaluator was closed before the call ran"))
                return future
            self._queue.append((body, future))
        self._dispatch()
        return future

    def _dispatch(self) -> None:
        """Hand queued requests to the pool while fewer than ``max_concurrency`` of this client's are running."""
        ready: list[tuple[Mapping[str, Any], Future[str]]] = []
        with self._lock:
            while self._queue and self._running < self.endpoint.max_concurrency:
                body, future = self._queue.popleft()
                if future.set_running_or_notify_cancel():
                    self._running += 1
                    ready.append((body, future))
        for body, future in ready:
            SHARED_POOL.submit(functools.partial(self._run, body, future))

    def _run(self, body: Mapping[str, Any], future: Future[str]) -> None:
        try:
            future.set_result(self.complete(body))
        except Exception as exc:  # a failed request is the caller's to read, not the pool's
            future.set_exception(exc)
        finally:
            with self._lock:
                self._running -= 1
                idle = self._retiring and not self._queue and self._running == 0
            if idle:
                self.close()
            else:
                self._dispatch()

    def retire(self) -> None:
        """Close once the requests already queued have run (the client is no longer handed out)."""
        with self._lock:
            self._retiring = True
            idle = not self._queue and self._running == 0
        if idle:
            self.close()

    def complete(self, body: Mapping[str, Any]) -> str:
        """One chat request, retried; the first choice's message content."""
        reply = self._post(orjson.dumps(body))
        return _message_content(reply)

    def _post(self, content: bytes) -> Any:
        endpoint = self.endpoint
        gave_up = f" (gave up after {attempts_phrase(endpoint.retries + 1)})"
        try:
            response = self._http.post(endpoint.url, content=content, headers=json_headers(endpoint.api_key_env))
        except httpx.TransportError as exc:
            raise JudgeCallError(transport_failure(exc, endpoint.timeout) + gave_up) from None
        try:
            reply, reason = read_reply(response)
        except MalformedReply as exc:
            raise JudgeCallError(f"malformed reply: {exc}") from None
        if reason:
            raise JudgeCallError(reason + (gave_up if response.status_code in RETRY_STATUSES else ""))
        return reply

    def close(self) -> None:
        """Fail requests that have not started, close the connections, and give back the pool's threads."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            queued, self._queue = list(self._queue), deque()
        for _, future in queued:
            future.cancel()
        self._http.close()
        SHARED_POOL.release(self.endpoint.max_concurrency)


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
