"""The httpx transports that apply :class:`~evalsi._util.retry.RetryPolicy` (sync and async), and a server's client.

The clients that send one request at a time (``server=``, the runs service) retry through these. Each attempt
holds a slot of the process's upstream gate (:mod:`evalsi._util.upstream`) for the request's upstream.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import time

import httpx

from evalsi._util.retry import RetryPolicy
from evalsi._util.upstream import slot, slot_async


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
