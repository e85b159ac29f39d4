"""The OpenRLHF remote reward protocol over HTTP: what ``evalsi rewards serve`` runs.

``POST /`` (or ``/get_reward``, the path of OpenRLHF's own reward server) takes
``{"query": [str], "prompts": [str], "labels": [...]}`` and answers ``{"rewards": [float], "scores": [float],
"extra_logs": {component: [float]}}`` (see :mod:`evalsi.rewards.openrlhf` for how a query becomes a rollout).
A one-sample request with a string ``query`` gets numbers instead of lists; empty lists get empty lists.
``GET /health`` answers ``{"status": "ok", "spec", "components", "queued"}`` (requests waiting for a batch).

Scoring runs on a worker thread, never on the event loop. Requests that arrive while a batch is being scored
are merged into the next batch (OpenRLHF sends one sample per request), and each request is still composed on
its own, so one request's ``onError: raise`` failure does not fail another's. SIGTERM stops accepting
connections, lets requests in flight finish, and exits 0.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from evalsi.errors import DataError, EvalsiError
from evalsi.evaluators import close_all
from evalsi.records import Record
from evalsi.rewards._compose import RewardResult
from evalsi.rewards._latency import elapsed_ms
from evalsi.rewards._reward import Reward
from evalsi.rewards._scorer import require_totals
from evalsi.rewards._skips import watch_skips
from evalsi.rewards.openrlhf import records as openrlhf_records
from evalsi.rewards.openrlhf import reward_response
from evalsi.rewards.wire import error_for

__all__ = ["Batcher", "create_app", "listening_socket", "run"]

log = logging.getLogger(__name__)


@dataclass
class _Request:
    records: list[Record]
    future: asyncio.Future[list[RewardResult]] = field(repr=False)


class Batcher:
    """Scores requests on a worker thread, merging the ones that wait into one engine call.

    Args:
        reward: The loaded spec to score with.
        max_batch: The most records merged into one engine call (a larger request is scored alone).

    """

    def __init__(self, reward: Reward, max_batch: int = 4096) -> None:
        self.reward = reward
        self.max_batch = max_batch
        self._pending: list[_Request] = []
        self._task: asyncio.Task[None] | None = None

    @property
    def queued(self) -> int:
        """Requests waiting for the batch being scored to finish."""
        return len(self._pending)

    async def score(self, records: list[Record]) -> list[RewardResult]:
        """The results of one request's records (an exception of this request's own composition is raised).

        Args:
            records: The request's records.

        """
        if not records:
            return []
        future: asyncio.Future[list[RewardResult]] = asyncio.get_running_loop().create_future()
        self._pending.append(_Request(records, future))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())
        return await future

    def _take(self) -> list[_Request]:
        """The waiting requests, oldest first, up to ``max_batch`` rollouts (always at least one request)."""
        taken, size = 0, 0
        for request in self._pending:
            if taken and size + len(request.records) > self.max_batch:
                break
            size += len(request.records)
            taken += 1
        batch, self._pending = self._pending[:taken], self._pending[taken:]
        return batch

    async def _drain(self) -> None:
        while self._pending:
            batch = self._take()
            try:
                outcomes = await asyncio.to_thread(score_groups, self.reward, [r.records for r in batch])
            except Exception as exc:  # the engine failed as a whole: every request of the batch gets the cause
                outcomes = [exc] * len(batch)
            for request, outcome in zip(batch, outcomes, strict=True):
                if request.future.done():  # the client went away
                    continue
                if isinstance(outcome, Exception):
                    request.future.set_exception(outcome)
                else:
                    request.future.set_result(outcome)


def score_groups(reward: Reward, groups: Sequence[Sequence[Record]]) -> list[list[RewardResult] | Exception]:
    """Score several requests' records in one engine call, then compose each request on its own."""
    records = [r for group in groups for r in group]
    columns = reward.component_scores(records)
    out: list[list[RewardResult] | Exception] = []
    start = 0
    for group in groups:
        end = start + len(group)
        try:
            out.append(reward.compose([column[start:end] for column in columns]))
        except EvalsiError as exc:
            out.append(exc)
        start = end
    return out


def create_app(reward: Reward, *, max_batch: int = 4096, on_ready: Callable[[], None] | None = None) -> Starlette:
    """The ASGI app serving ``reward``; ``on_ready()`` is called once it can take requests.

    Args:
        reward: The loaded spec to score with.
        max_batch: The most records merged into one engine call (a larger request is scored alone).
        on_ready: Called once the app can take requests.

    Raises:
        SpecError: The spec can leave a rollout without a total (``onError: none``), which OpenRLHF cannot take.

    """
    require_totals(reward, "OpenRLHF")
    batcher = Batcher(reward, max_batch)
    names = reward.component_names

    async def get_reward(request: Request) -> Response:
        try:
            queries, prompts, labels, single = _parse(await request.body())
            records = openrlhf_records(queries, prompts, labels)
            started = time.perf_counter()
            results = await batcher.score(records)
            latency_ms = elapsed_ms(started)
        except Exception as exc:
            status, payload = error_for(exc)
            # a malformed request is the client's to read; a failed batch or a crash is the operator's too
            if status >= 500:
                log.error("scoring failed: %s", payload["error"]["message"], exc_info=exc)
            elif status == 422:
                log.warning("%s", payload["error"]["message"])
            return _json(payload, status)
        watch_skips(names, results, "OpenRLHF (rewards serve)")
        answer = reward_response(names, results, rules=reward.rules, latency_ms=latency_ms)
        if single:
            answer = {
                "rewards": answer["rewards"][0],
                "scores": answer["scores"][0],
                "extra_logs": {k: v[0] for k, v in answer["extra_logs"].items()},
            }
        return _json(answer)

    async def health(request: Request) -> Response:
        return _json({"status": "ok", "spec": reward.name, "components": names, "queued": batcher.queued})

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if on_ready is not None:
            on_ready()
        yield
        reward.close()

    routes = [
        Route("/", get_reward, methods=["POST"]),
        Route("/get_reward", get_reward, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


def _parse(body: bytes) -> tuple[list[str], list[str] | None, list[Any] | None, bool]:
    """The request's queries, prompts and labels as aligned lists, and whether it was the one-sample form."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise DataError(f"the request body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise DataError('the request body must be a JSON object {"query": [...], "prompts": [...], "labels": [...]}')
    query = data.get("query", data.get("queries"))
    prompts = data.get("prompts", data.get("prompt"))
    labels = data.get("labels", data.get("label"))
    if isinstance(query, str):
        return [query], [_one(prompts)] if prompts is not None else None, [_one(labels)], True
    if not isinstance(query, list):
        raise DataError('"query" must be a list of strings (or one string)')
    for name, value in (("prompts", prompts), ("labels", labels)):
        if value is not None and not isinstance(value, list):
            raise DataError(f'"{name}" must be a list aligned with "query"')
    return query, prompts, labels, False


def _one(value: Any) -> Any:
    """A one-sample field, which clients send bare or as a list of one."""
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def _json(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (port 0: a free one).

    The protocol is named explicitly: asyncio turns Nagle off only on sockets whose ``proto`` is TCP, and a
    socket made with proto 0 leaves every keep-alive response waiting ~40 ms for a delayed ACK.

    Args:
        host: The address to bind.
        port: The port; 0 for a free one.

    Raises:
        OSError: The address cannot be bound.

    """
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def run(
    reward: Reward, host: str = "127.0.0.1", port: int = 5000, *, max_batch: int = 4096, log_level: str = "warning"
) -> None:
    """Serve ``reward`` until SIGTERM or SIGINT, then finish the requests in flight and return.

    Prints ``evalsi rewards serve: <spec> on http://HOST:PORT`` once ready (with the real port when ``port`` is 0).

    Args:
        reward: The loaded spec to score with.
        host: The address to bind.
        port: The port; 0 for a free one.
        max_batch: The most records merged into one engine call (a larger request is scored alone).
        log_level: uvicorn's log level.

    Raises:
        OSError: The address cannot be bound (port in use, no such host).

    """
    import uvicorn  # the server's dependency, imported only when serving

    sock = listening_socket(host, port)
    bound = sock.getsockname()[1]

    def ready() -> None:
        print(f"evalsi rewards serve: {reward.name} on http://{host}:{bound}", flush=True)

    app = create_app(reward, max_batch=max_batch, on_ready=ready)
    config = uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="on", timeout_graceful_shutdown=60)
    server = uvicorn.Server(config)
    # uvicorn re-raises the signal it stopped on once it has shut down; a no-op handler turns that into a
    # normal return, so the pools below are closed and the exit status is 0.
    stopped: list[int] = []

    def note(sig: int, frame: FrameType | None) -> None:
        stopped.append(sig)

    main = threading.current_thread() is threading.main_thread()  # signal handlers are the main thread's
    previous = {sig: signal.signal(sig, note) for sig in (signal.SIGTERM, signal.SIGINT)} if main else {}
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
        reward.close()
        close_all()
    if stopped:
        print(f"evalsi rewards serve: stopped ({signal.Signals(stopped[-1]).name})", file=sys.stderr, flush=True)
