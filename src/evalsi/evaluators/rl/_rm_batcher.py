"""The micro-batcher of ``reward-model``: rollouts requested together go to the server in one HTTP call.

One background thread runs an asyncio loop for the evaluator. Each endpoint (URL, protocol, model, call and
batching settings) has an :class:`EndpointBatcher` with one shared :class:`~evalsi._util.transport.HttpClient`
(aiohttp, the shared retry policy, as many connections as calls in flight). Any thread submits
inputs with :meth:`BatcherHub.submit` and gets one ``concurrent.futures.Future`` per input. Pending inputs are
sent when ``max_batch`` of them are waiting, or ``wait_ms`` after the first of them arrived, whichever comes
first, so concurrent ``score_batch`` calls (several rewards, trainer threads) share calls. At most
``max_concurrency`` calls per endpoint are in flight; while all are busy, pending inputs keep gathering (up to
``max_batch`` per call), so a loaded server gets fewer, fuller calls.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from evalsi._util.http import MalformedReply, json_headers, read_reply, transport_failure
from evalsi._util.retry import attempts_phrase, retryable
from evalsi._util.transport import TransportFailure, endpoint_client, start_loop_thread
from evalsi.evaluators.rl._rm_protocol import Protocol, ReplyError, RMInput, parse_reply, request_body

log = logging.getLogger(__name__)


class CallError(Exception):
    """A call to the reward model failed (after its retries); its reason becomes each rollout's error."""


@dataclass(frozen=True)
class Endpoint:
    """Everything that decides how calls to one reward model are made; one batcher per distinct value."""

    url: str
    protocol: Protocol
    model: str | None
    api_key_env: str | None
    timeout: float
    retries: int
    backoff: float
    wait_ms: float
    max_batch: int
    max_concurrency: int
    label_index: int | None
    extra_body: str
    """Extra request fields, as canonical JSON (so the endpoint stays hashable)."""

    def headers(self) -> dict[str, str]:
        """Request headers; a bearer token when ``api_key_env`` names a set variable."""
        return json_headers(self.api_key_env)


@dataclass
class _Entry:
    item: RMInput
    future: concurrent.futures.Future[float]


class EndpointBatcher:
    """Collects inputs for one endpoint on the loop and sends them in batches. Loop-thread only."""

    def __init__(self, endpoint: Endpoint, loop: asyncio.AbstractEventLoop) -> None:
        self.endpoint = endpoint
        self.loop = loop
        self.client = endpoint_client(endpoint)
        self._pending: list[_Entry] = []
        self._alone: list[_Entry] = []
        self._due = False
        self._timer: asyncio.TimerHandle | None = None
        self._in_flight = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._extra: dict[str, Any] = orjson.loads(endpoint.extra_body)

    @property
    def calls(self) -> int:
        """HTTP requests made, retries included."""
        return self.client.attempts

    def add(self, entries: Sequence[_Entry]) -> None:
        """Queue entries, then send what may leave now."""
        for entry in entries:
            # A conversation is a call of its own (vLLM's /pooling takes one per request).
            (self._alone if entry.item.messages is not None else self._pending).append(entry)
        self._pump()

    def _pump(self) -> None:
        """Send while a call slot is free: conversations, full batches, and pending rollouts whose wait is over.

        While every slot is busy, rollouts keep gathering, so the next free slot takes a fuller batch.
        """
        size = self.endpoint.max_batch
        while self._in_flight < self.endpoint.max_concurrency:
            if self._alone:
                batch = [self._alone.pop(0)]
            elif len(self._pending) >= size or (self._due and self._pending):
                batch, self._pending = self._pending[:size], self._pending[size:]
            else:
                break
            self._launch(batch)
        if not self._pending:
            self._due = False
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        elif not self._due and self._timer is None:
            self._timer = self.loop.call_later(self.endpoint.wait_ms / 1000.0, self._expire)

    def _expire(self) -> None:
        self._timer = None
        self._due = True
        self._pump()

    def _launch(self, batch: list[_Entry]) -> None:
        batch = [entry for entry in batch if not entry.future.cancelled()]  # their callers went away
        if not batch:
            return
        self._in_flight += 1
        task = self.loop.create_task(self._send(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: list[_Entry]) -> None:
        endpoint = self.endpoint
        items = [e.item for e in batch]
        try:
            body = request_body(endpoint.protocol, items, endpoint.model, self._extra)
            reply = await self._post(body)
            outcomes = parse_reply(endpoint.protocol, reply, len(items), endpoint.label_index)
        except (CallError, ReplyError) as exc:
            kind = "malformed reply" if isinstance(exc, ReplyError) else "call failed"
            reason = f"reward model at {endpoint.url}: {kind}: {exc}"
            outcomes = [reason] * len(batch)
        except asyncio.CancelledError:  # closed while the call was in flight: the callers must still hear
            for entry in batch:
                _resolve(entry.future, f"reward model at {endpoint.url}: the evaluator was closed during the call")
            raise
        except Exception:  # never leave a caller waiting on a future nobody will resolve
            log.exception("reward-model call to %s failed unexpectedly", endpoint.url)
            outcomes = [f"reward model at {endpoint.url}: the call failed unexpectedly (see the log)"] * len(batch)
        finally:
            self._in_flight -= 1
        for entry, outcome in zip(batch, outcomes, strict=True):
            _resolve(entry.future, outcome)
        self._pump()

    async def _post(self, body: Mapping[str, Any]) -> Any:
        """POST through the retrying transport; the JSON reply, or CallError with a status, never a body."""
        endpoint = self.endpoint
        try:
            response = await self.client.post("", orjson.dumps(body), endpoint.headers())
        except TransportFailure as exc:
            raise CallError(transport_failure(exc, endpoint.timeout) + _gave_up(exc.attempts)) from None
        try:
            reply, reason = read_reply(response)
        except MalformedReply as exc:
            raise ReplyError(str(exc)) from None
        if reason:  # a server that said not to retry (x-should-retry: false) was asked once: nothing was given up
            raise CallError(reason + (_gave_up(response.attempts) if retryable(response) else ""))
        return reply

    async def aclose(self) -> None:
        """Fail what is still queued, cancel calls in flight, close the client."""
        if self._timer is not None:
            self._timer.cancel()
        for entry in self._pending + self._alone:
            _resolve(entry.future, "the reward-model evaluator was closed")
        self._pending.clear()
        self._alone.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.client.aclose()


def _gave_up(attempts: int) -> str:
    return f" (gave up after {attempts_phrase(attempts)})"


def _resolve(future: concurrent.futures.Future[float], outcome: float | str) -> None:
    """Set a caller's result; a future the caller gave up on (cancelled) is left alone."""
    try:
        if isinstance(outcome, str):
            future.set_exception(CallError(outcome))
        else:
            future.set_result(outcome)
    except concurrent.futures.InvalidStateError:
        pass


class BatcherHub:
    """The background loop thread and the batchers of every endpoint used by one evaluator instance."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._batchers: dict[Endpoint, EndpointBatcher] = {}

    def submit(self, endpoint: Endpoint, items: Sequence[RMInput]) -> list[concurrent.futures.Future[float]]:
        """Queue inputs for ``endpoint``; each future gives the raw score or raises :class:`CallError`."""
        entries = [_Entry(item, concurrent.futures.Future()) for item in items]
        with self._lock:
            loop = self._running_loop()
            batcher = self._batchers.get(endpoint)
            if batcher is None:
                batcher = self._batchers[endpoint] = EndpointBatcher(endpoint, loop)
            loop.call_soon_threadsafe(batcher.add, entries)
        return [e.future for e in entries]

    def calls(self, endpoint: Endpoint) -> int:
        """HTTP requests made to ``endpoint`` so far (0 if never used)."""
        with self._lock:
            batcher = self._batchers.get(endpoint)
            return batcher.calls if batcher is not None else 0

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is not None:
            return self._loop
        loop, thread = start_loop_thread("evalsi-reward-model")
        self._loop, self._thread = loop, thread
        return loop

    def close(self) -> None:
        """Stop the loop thread after closing every batcher; a later submit starts afresh."""
        with self._lock:
            loop, thread, batchers = self._loop, self._thread, list(self._batchers.values())
            self._loop, self._thread, self._batchers = None, None, {}
        if loop is None or thread is None:
            return

        async def shutdown() -> None:
            await asyncio.gather(*(b.aclose() for b in batchers), return_exceptions=True)

        # A stuck close must not hang the process; the daemon thread dies with it.
        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        if not thread.is_alive():
            loop.close()
