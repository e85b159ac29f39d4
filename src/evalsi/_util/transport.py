"""The HTTP client of evalsi's callers that keep many requests open to an upstream: aiohttp, evalsi's retries.

aiohttp underneath, the shared :class:`~evalsi._util.retry.RetryPolicy` on top.

Run targets, judges, reward models and job generation send hundreds of requests at once to vLLM or SGLang.
httpx's async connection pool slows as its connections grow (256 requests over 64 connections took ~4 s where
raw sockets take 0.23 s), and httpx's request and response models cost about as much CPU again as the whole
aiohttp request; ``bench/generation_concurrency.py`` measures the candidates side by side. So these callers talk
to aiohttp directly, through :class:`HttpClient`:

- **One retry loop.** An answer the policy calls retryable (408, 409, 425, 429, 5xx, unless ``x-should-retry``
  says otherwise), a timeout or a failed or dropped connection is tried again after the policy's backoff (a
  ``Retry-After`` wins, no wait beyond 30 s), up to its attempts; then the last answer is returned, or
  :class:`TransportFailure` raised.
- **One timeout story.** ``timeout`` bounds each wait of one attempt: connecting, and then each read of the
  answer (its headers, and every piece of its body), as httpx's did: a stream that keeps sending never times out.
- **Keep-alive, and connections that follow the bound.** HTTP/1.1 connections are reused; at most
  ``max_connections`` are open to each server, the same number as the caller keeps requests in flight.
- **Replicas.** Given several base URLs (a model served data-parallel), each attempt goes to the replica with the
  fewest requests in flight among those not set aside; a replica that fails an attempt (refuses or drops the
  connection, times out, or answers a retryable status) is set aside for a cooldown (1 s, doubling while it keeps
  failing, at most 30 s) and the request's next attempt goes at once to another replica. A request makes
  ``retries + 1`` attempts, and at least one on every replica.
- **Bodies read whole or as a stream.** A 200 answer may be handed to a reader (``read=``) as its bytes arrive,
  for server-sent events; a failure while reading is a failed attempt like any other.

Sync callers (a judge's thread) run their requests on :func:`background_loop`, one daemon event loop per process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import itertools
import logging
import os
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import orjson

from evalsi._util.retry import RetryPolicy, retryable, timed_out
from evalsi._util.upstream import slot_async

if TYPE_CHECKING:  # aiohttp is imported on first use: commands that never call an upstream do not pay for it
    import aiohttp

log = logging.getLogger("evalsi.http")

T = TypeVar("T")

BodyReader = Callable[["aiohttp.StreamReader"], Awaitable[Any]]
"""Reads a 200 answer's body as it arrives (``aiohttp.StreamReader``); what it returns becomes :attr:`Reply.data`."""

COOLDOWN = 1.0
"""Seconds a replica that failed an attempt is set aside for; doubled while it keeps failing."""
MAX_COOLDOWN = 30.0
"""The longest a failing replica is set aside for."""


class TransportFailure(Exception):
    """No answer: the attempt timed out, or its connection failed (refused, reset, dropped mid-answer).

    Its text is ``timed out`` or ``connection failed``, never the remote's error text (which is logged at debug
    level on ``evalsi.http``, and kept as the ``__cause__``).
    """

    def __init__(self, timed_out: bool, url: str, attempts: int = 1) -> None:
        super().__init__("timed out" if timed_out else "connection failed")
        self.timed_out = timed_out
        self.url = url
        self.attempts = attempts
        """Attempts the request made in all (this one included)."""


@dataclass(frozen=True, slots=True)
class Reply:
    """One answer: status, headers, the body (read whole) or what the caller's reader made of it, and its URL."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes
    url: str
    data: Any = None
    """What ``read=`` returned for a 200 answer (``content`` is then empty)."""
    attempts: int = 1
    """Attempts the request made in all, this answer's included."""

    def json(self) -> Any:
        """The body as JSON.

        Raises:
            orjson.JSONDecodeError: The body is not JSON (a ``ValueError``).

        """
        return orjson.loads(self.content)

    @property
    def text(self) -> str:
        """The body as text (UTF-8, undecodable bytes replaced)."""
        return self.content.decode("utf-8", "replace")


@dataclass(slots=True)
class _Replica:
    base: str
    outstanding: int = 0
    failures: int = 0
    down_until: float = 0.0


@dataclass(slots=True)
class _Session:
    """The aiohttp session of one event loop (a session never crosses loops)."""

    loop: asyncio.AbstractEventLoop
    session: aiohttp.ClientSession
    timeout: aiohttp.ClientTimeout = field(repr=False)
    errors: tuple[type[BaseException], ...] = ()


def check_url(url: str, what: str = "URL") -> str:
    """``url`` if it is an ``http://`` or ``https://`` URL (one without a host fails as a connection would).

    Raises:
        ValueError: It is not, naming ``what``.

    """
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise ValueError(f"{what} must be an http:// or https:// URL, got {url!r}")
    return url


class HttpClient:
    """Requests to one upstream (one or several replicas of it), retried under ``policy``. Safe to share.

    Args:
        base_urls: The upstream's URL, or its replicas' (each request's ``path`` is appended).
        policy: How failed attempts are retried.
        timeout: Seconds each wait of an attempt may take (connect, then every read).
        max_connections: Connections kept open to each replica (the caller's bound on requests in flight).
        headers: Sent with every request (per-request headers are added to them).

    Raises:
        ValueError: A URL is not ``http(s)://host...``, or none is given.

    """

    def __init__(
        self,
        base_urls: str | Sequence[str],
        *,
        policy: RetryPolicy,
        timeout: float,
        max_connections: int,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        urls = [base_urls] if isinstance(base_urls, str) else list(base_urls)
        if not urls:
            raise ValueError("an HTTP client needs at least one URL")
        self._replicas = [_Replica(check_url(url)) for url in urls]
        self.policy = policy
        self.timeout = timeout
        self.max_connections = max_connections
        self._headers = dict(headers or {})
        self._session: _Session | None = None
        self._closed = False
        self._turn = itertools.count()
        self._attempts = 0
        self._lock = threading.Lock()

    @property
    def attempts(self) -> int:
        """HTTP attempts made so far, retries included."""
        return self._attempts

    @property
    def replicas(self) -> list[str]:
        """The base URLs requests are spread over."""
        return [r.base for r in self._replicas]

    def in_flight(self) -> dict[str, int]:
        """Requests open to each replica now."""
        return {r.base: r.outstanding for r in self._replicas}

    async def post(
        self,
        path: str,
        content: bytes,
        headers: Mapping[str, str] | None = None,
        read: BodyReader | None = None,
    ) -> Reply:
        """POST ``content`` to ``base + path``, retried as the policy says; the last answer.

        Raises:
            TransportFailure: No attempt got an answer (the last one's failure).

        """
        return await self.request("POST", path, content, headers, read)

    async def request(
        self,
        method: str,
        path: str,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        read: BodyReader | None = None,
    ) -> Reply:
        """Send one request, retried as the policy says; see :meth:`post`."""
        state = self._ready()
        sent = {**self._headers, **headers} if headers else self._headers
        tried: set[int] = set()
        several = len(self._replicas) > 1
        budget = max(self.policy.attempts, len(self._replicas))
        for attempt in itertools.count():
            index = self._choose(tried) if several else 0
            replica = self._replicas[index]
            outcome: Reply | TransportFailure
            replica.outstanding += 1
            self._attempts += 1
            try:
                url = replica.base + path
                async with slot_async(url):  # a cluster-wide limit on this upstream, when one is installed
                    outcome = await self._attempt(state, method, url, content, sent, read)
            finally:
                replica.outstanding -= 1
            failed = isinstance(outcome, TransportFailure) or retryable(outcome)
            if several:
                self._note(replica, failed)
                if failed:
                    tried.add(index)
            elsewhere = several and failed and self._available(tried)
            delay = self.policy.next_delay(attempt, outcome, budget, at_once=elsewhere)
            if delay is None:
                if isinstance(outcome, TransportFailure):
                    outcome.attempts = attempt + 1
                    raise outcome
                return dataclasses.replace(outcome, attempts=attempt + 1) if attempt else outcome
            if several and not elsewhere:
                tried.clear()  # every replica failed this request: after the wait, any may take it again
            if delay > 0:
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def _attempt(
        self,
        state: _Session,
        method: str,
        url: str,
        content: bytes | None,
        headers: Mapping[str, str],
        read: BodyReader | None,
    ) -> Reply | TransportFailure:
        try:
            async with state.session.request(
                method, url, data=content, headers=headers, timeout=state.timeout, allow_redirects=False
            ) as response:
                if read is not None and response.status == 200:
                    data = await read(response.content)
                    return Reply(response.status, response.headers, b"", url, data)
                body = await response.read()
                return Reply(response.status, response.headers, body, url)
        except state.errors as exc:
            log.debug("HTTP attempt to %s failed: %r", url, exc)
            failure = TransportFailure(timed_out(exc), url)
            failure.__cause__ = exc
            return failure

    def _choose(self, tried: set[int]) -> int:
        """The replica for the next attempt: fewest requests in flight among those up and not yet failed here."""
        now = time.monotonic()
        candidates = [i for i, r in enumerate(self._replicas) if i not in tried and r.down_until <= now]
        if not candidates:  # every untried replica is cooling down: the one back soonest
            untried = [i for i in range(len(self._replicas)) if i not in tried] or list(range(len(self._replicas)))
            return min(untried, key=lambda i: self._replicas[i].down_until)
        fewest = min(self._replicas[i].outstanding for i in candidates)
        tied = [i for i in candidates if self._replicas[i].outstanding == fewest]
        return tied[next(self._turn) % len(tied)]  # ties in turn, so an idle set of replicas shares the load

    def _available(self, tried: set[int]) -> bool:
        """Whether a replica this request has not failed on is there to try."""
        return len(tried) < len(self._replicas)

    @staticmethod
    def _note(replica: _Replica, failed: bool) -> None:
        if not failed:
            replica.failures = 0
            replica.down_until = 0.0
            return
        replica.failures += 1
        cooldown = min(COOLDOWN * 2 ** (replica.failures - 1), MAX_COOLDOWN)
        replica.down_until = time.monotonic() + cooldown

    def _ready(self) -> _Session:
        """The session of the running loop (made on first use there)."""
        loop = asyncio.get_running_loop()
        state = self._session
        if state is not None and state.loop is loop:
            return state
        with self._lock:
            if self._closed:
                raise RuntimeError("the HTTP client is closed")
            state = self._session
            if state is None or state.loop is not loop:
                if state is not None:
                    raise RuntimeError("an HTTP client is used from one event loop only")
                import aiohttp

                connector = aiohttp.TCPConnector(
                    limit=self.max_connections * len(self._replicas),
                    limit_per_host=self.max_connections,
                    enable_cleanup_closed=False,
                )
                session = aiohttp.ClientSession(
                    connector=connector,
                    trust_env=_proxies_configured(),
                    auto_decompress=True,
                    skip_auto_headers=("User-Agent",),
                    headers={"User-Agent": "evalsi"},
                )
                timeout = aiohttp.ClientTimeout(
                    total=None, connect=None, sock_connect=self.timeout, sock_read=self.timeout
                )
                errors = (aiohttp.ClientError, TimeoutError, OSError)
                state = self._session = _Session(loop, session, timeout, errors)
        return state

    async def aclose(self) -> None:
        """Close the connections (from the loop that used the client)."""
        with self._lock:
            self._closed = True
            state, self._session = self._session, None
        if state is not None and not state.session.closed:
            await state.session.close()


def _proxies_configured() -> bool:
    """Whether the environment names an HTTP proxy (only then does aiohttp look at it, on every request)."""
    return bool(urllib.request.getproxies_environment())


def start_loop_thread(name: str) -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    """A new event loop running forever on a daemon thread, returned once it runs.

    Args:
        name: The thread's name.

    Returns:
        The loop and its thread.

    """
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        loop.run_forever()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    ready.wait()
    return loop, thread


class BackgroundLoop:
    """One daemon thread running an event loop, where sync callers' requests run (started on first use).

    A process that forks gets a fresh loop in the child (a thread does not survive ``fork``).
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop (started now if needed)."""
        with self._lock:
            if self._loop is None or self._pid != os.getpid() or self._loop.is_closed():
                self._loop, _ = start_loop_thread(self._name)
                self._pid = os.getpid()
            return self._loop

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coroutine`` on the loop; its future (``cancel()`` cancels the coroutine)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coroutine`` on the loop and wait for its result."""
        return self.submit(coroutine).result(timeout)


_BACKGROUND = BackgroundLoop("evalsi-http")


def background_loop() -> BackgroundLoop:
    """The process's loop for sync callers' HTTP requests."""
    return _BACKGROUND


class EndpointSettings(Protocol):
    """What an evaluator's endpoint config says about reaching it (a judge's, a reward model's)."""

    @property
    def url(self) -> str:
        """The URL requests go to."""
        ...

    @property
    def timeout(self) -> float:
        """Seconds each wait of an attempt may take."""
        ...

    @property
    def retries(self) -> int:
        """Attempts after the first."""
        ...

    @property
    def backoff(self) -> float:
        """Seconds before the first retry (doubling after)."""
        ...

    @property
    def max_concurrency(self) -> int:
        """Requests in flight at once."""
        ...


def endpoint_client(endpoint: EndpointSettings) -> HttpClient:
    """An :class:`HttpClient` for one endpoint config: its retries, timeout and connection bound.

    Args:
        endpoint: The endpoint's config.

    """
    return HttpClient(
        endpoint.url,
        policy=RetryPolicy(endpoint.retries, endpoint.backoff),
        timeout=endpoint.timeout,
        max_connections=endpoint.max_concurrency,
    )
