"""The retry policy every HTTP client of evalsi shares: the rules, and their httpx transports (sync and async).

One policy: a request whose answer is in :data:`RETRY_STATUSES`, or that timed out or lost its connection, is
sent again after exponential backoff (``backoff × 2**attempt`` seconds), or after the server's ``Retry-After``
(seconds or an HTTP date), never waiting more than :data:`MAX_DELAY`. A server may decide for itself with
``x-should-retry: true`` or ``false`` (as OpenAI's clients honour it): a model server that knows its failure will
repeat says ``false`` and is asked once. Any other answer comes back at once. When the tries run out, the last
answer is returned (or the last transport error raised), so a client sees a retryable answer or a
:class:`httpx.TransportError` only after ``retries + 1`` attempts.

Request bodies must be bytes (``content=`` or ``json=``), which every evalsi client sends: they are re-sent as is.

The clients that keep many requests in flight (run targets, judges, reward models, job generation) apply the same
:class:`RetryPolicy` through :mod:`evalsi._util.transport` (aiohttp underneath); the httpx transports here serve
the clients that send one request at a time (``server=``).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Protocol

import httpx

from evalsi._util.upstream import slot, slot_async

RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
"""Answers worth another try: request timeout (408), conflict (409: a lock timeout, as OpenAI's client treats
it), too early (425), rate limit (429), and server-side failures (500, 502, 503, 504)."""

SHOULD_RETRY_HEADER = "x-should-retry"
"""A server's own verdict on retrying its answer (``true`` or ``false``), which wins over the status."""

MAX_DELAY = 30.0
"""No wait between tries exceeds this many seconds, whatever the backoff or a server's ``Retry-After``."""


class Answer(Protocol):
    """What the policy reads of an answer: its status and headers (an ``httpx.Response`` or a transport reply)."""

    @property
    def status_code(self) -> int:
        """The HTTP status."""
        ...

    @property
    def headers(self) -> httpx.Headers | Mapping[str, str]:
        """The headers, looked up case-insensitively."""
        ...


def timed_out(error: BaseException) -> bool:
    """Whether a failed attempt timed out (else its connection failed)."""
    return isinstance(error, httpx.TimeoutException | TimeoutError) or bool(getattr(error, "timed_out", False))


def retryable(response: Answer) -> bool:
    """Whether an answer is worth another try: the server says so (``x-should-retry``), else its status does.

    Example:
        >>> retryable(httpx.Response(503)), retryable(httpx.Response(500, headers={"x-should-retry": "false"}))
        (True, False)
        >>> retryable(httpx.Response(400)), retryable(httpx.Response(400, headers={"x-should-retry": "true"}))
        (False, True)

    """
    verdict = str(response.headers.get(SHOULD_RETRY_HEADER, "")).strip().lower()
    if verdict in ("true", "false"):
        return verdict == "true"
    return response.status_code in RETRY_STATUSES


def retry_delay(attempt: int, backoff: float, retry_after: str | None = None, cap: float = MAX_DELAY) -> float:
    """Seconds to wait before try ``attempt + 1``: exponential backoff, or the server's ``Retry-After``.

    Example:
        >>> retry_delay(0, 0.5), retry_delay(3, 0.5), retry_delay(1, 0.5, "2"), retry_delay(9, 1.0)
        (0.5, 4.0, 2.0, 30.0)

    """
    if retry_after is not None:
        seconds = _retry_after_seconds(retry_after)
        if seconds is not None:
            return min(max(seconds, 0.0), cap)
    return float(min(backoff * 2**attempt, cap))


def _retry_after_seconds(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None  # garbage: fall back to backoff
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - datetime.now(UTC)).total_seconds()


@dataclass(frozen=True, slots=True)
class RetryNotice:
    """Told to ``on_retry`` before each wait: which attempt failed, why, and how long until the next."""

    attempt: int
    """The attempt that failed, from 1."""
    attempts: int
    """How many attempts the policy allows in all."""
    reason: str
    """``HTTP 503``, ``timed out`` or ``connection failed``: never the server's body or error text."""
    delay: float
    """Seconds until the next attempt."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many further attempts, the backoff, and who hears about retries."""

    retries: int = 3
    """Further attempts after the first."""
    backoff: float = 1.0
    """Seconds before the first retry, doubling each time."""
    on_retry: Callable[[RetryNotice], None] | None = None
    """Called before each wait (for progress displays); must not raise."""

    @property
    def attempts(self) -> int:
        """Attempts in all."""
        return self.retries + 1

    def next_delay(
        self, attempt: int, outcome: Answer | Exception, attempts: int | None = None, at_once: bool = False
    ) -> float | None:
        """Seconds before retrying after ``outcome`` of try ``attempt`` (from 0), or None to stop there.

        ``attempts`` (default :attr:`attempts`) is the budget of this request; ``at_once`` means the next try goes
        to another server (a replica), which need not wait for this one to recover.
        """
        budget = self.attempts if attempts is None else attempts
        if attempt + 1 >= budget:
            return None
        if isinstance(outcome, Exception):
            delay = retry_delay(attempt, self.backoff)
            reason = "timed out" if timed_out(outcome) else "connection failed"
        else:
            if not retryable(outcome):
                return None
            delay = retry_delay(attempt, self.backoff, outcome.headers.get("Retry-After"))
            reason = f"HTTP {outcome.status_code}"
        if at_once:
            delay = 0.0
        if self.on_retry is not None:
            self.on_retry(RetryNotice(attempt + 1, budget, reason, delay))
        return delay


def _settle(policy: RetryPolicy, attempt: int, outcome: httpx.Response | Exception) -> httpx.Response | float:
    """The final answer (or raise the final error), or the seconds to wait before the next attempt."""
    delay = policy.next_delay(attempt, outcome)
    if delay is not None:
        return delay
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


class _Retrying:
    """What both transports keep: the policy, and the attempts made through them, retries included."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self._attempts = 0
        self._lock = threading.Lock()

    @property
    def attempts(self) -> int:
        """HTTP attempts made so far, retries included (read by clients that report call counts)."""
        return self._attempts

    def _count(self) -> None:
        with self._lock:
            self._attempts += 1


class RetryTransport(_Retrying, httpx.BaseTransport):
    """Retries requests through ``inner`` (default: a plain :class:`httpx.HTTPTransport`) under ``policy``."""

    def __init__(self, policy: RetryPolicy, inner: httpx.BaseTransport | None = None) -> None:
        super().__init__(policy)
        self.inner = inner if inner is not None else httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request``, retrying as the policy says; the last answer, or the last transport error."""
        for attempt in itertools.count():
            self._count()
            try:
                with slot(request.url):
                    outcome: httpx.Response | Exception = self.inner.handle_request(request)
            except httpx.TransportError as exc:
                outcome = exc
            step = _settle(self.policy, attempt, outcome)
            if isinstance(step, httpx.Response):
                return step
            if isinstance(outcome, httpx.Response):
                outcome.close()
            time.sleep(step)
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Close the inner transport."""
        self.inner.close()


class AsyncRetryTransport(_Retrying, httpx.AsyncBaseTransport):
    """The async twin of :class:`RetryTransport` (the wait is an ``asyncio.sleep``, so it can be cancelled)."""

    def __init__(self, policy: RetryPolicy, inner: httpx.AsyncBaseTransport | None = None) -> None:
        super().__init__(policy)
        self.inner = inner if inner is not None else httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request``, retrying as the policy says; the last answer, or the last transport error."""
        for attempt in itertools.count():
            self._count()
            try:
                async with slot_async(request.url):
                    outcome: httpx.Response | Exception = await self.inner.handle_async_request(request)
            except httpx.TransportError as exc:
                outcome = exc
            step = _settle(self.policy, attempt, outcome)
            if isinstance(step, httpx.Response):
                return step
            if isinstance(outcome, httpx.Response):
                await outcome.aclose()
            await asyncio.sleep(step)
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        """Close the inner transport."""
        await self.inner.aclose()


def attempts_phrase(count: int) -> str:
    """``1 attempt`` or ``N attempts``.

    Example:
        >>> attempts_phrase(1), attempts_phrase(4)
        ('1 attempt', '4 attempts')

    """
    return f"{count} attempt" if count == 1 else f"{count} attempts"


def server_client(token: str | None, timeout: float, retries: int, backoff: float) -> httpx.Client:
    """A JSON client of an evalsi server: the bearer ``token`` (else ``EVALSI_TOKEN``) and the shared retries."""
    token = token if token is not None else os.environ.get("EVALSI_TOKEN")
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.Client(
        headers=headers,
        timeout=httpx.Timeout(timeout, connect=10.0),
        transport=RetryTransport(RetryPolicy(retries, backoff)),
    )
