"""Running the server: database, service, HTTP and gRPC listeners on one event loop, and a draining SIGTERM.

On SIGTERM (or SIGINT) the health endpoint turns 503 (the port stays open, so load balancers see the drain), new
calls are refused ``unavailable``, calls in flight (and calls already waiting for capacity) finish and are
answered; then the listeners close, pools and evaluators close and the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import logging
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import uvicorn
from sqlalchemy import Engine

from evalsi.evaluators import close_all
from evalsi.server._config import ServerConfig
from evalsi.server._db import migrate, open_engine
from evalsi.server._grpc import make_grpc_server
from evalsi.server._http import ServerState, build_app, build_metrics_app
from evalsi.server._metrics import Metrics
from evalsi.server._service import RewardService
from evalsi.server._shared_cache import SharedScores
from evalsi.server._tokens import TokenStore

log = logging.getLogger("evalsi.server")
ReadyHook = Callable[[dict[str, Any]], None]


@dataclass
class Parts:
    """Everything a running server holds."""

    engine: Engine
    tokens: TokenStore
    shared: SharedScores | None
    metrics: Metrics
    service: RewardService
    state: ServerState


def build(config: ServerConfig) -> Parts:
    """Import configured evaluator modules, open and migrate the database, and make the service.

    Raises:
        ModuleNotFoundError: A module in ``imports`` cannot be imported.

    """
    for module in config.spec.imports:
        importlib.import_module(module)
    engine = open_engine(config.database_url)
    migrate(engine)
    rewards = config.spec.rewards
    tokens = TokenStore(engine)
    shared = SharedScores(engine, rewards.shared_cache_ttl) if rewards.shared_cache else None
    metrics = Metrics()
    service = RewardService(config, tokens, shared, metrics)
    return Parts(engine, tokens, shared, metrics, service, ServerState(service))


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: SIGTERM is ours, to drain gRPC and HTTP together."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def default_ready(info: dict[str, Any]) -> None:
    """Print the ready line (one JSON object) on stdout: scripts and tests wait for it."""
    sys.stdout.write(orjson.dumps({"event": "ready", **info}).decode() + "\n")
    sys.stdout.flush()


async def serve_async(config: ServerConfig, ready: ReadyHook = default_ready) -> None:
    """Serve until SIGTERM or SIGINT, then drain and return."""
    parts = build(config)
    listen = config.spec.listen
    drain = config.spec.drain_timeout
    http = _Uvicorn(uvicorn.Config(
        build_app(parts.state), host=listen.host, port=listen.port, lifespan="off", log_level="warning",
        loop="asyncio", http="httptools" if importlib.util.find_spec("httptools") else "h11",
        timeout_graceful_shutdown=int(drain) or None, access_log=False,
    ))
    grpc_server = None
    grpc_port = None
    if listen.grpc_port is not None:
        grpc_server = make_grpc_server(parts.service)
        grpc_port = grpc_server.add_insecure_port(f"{listen.host}:{listen.grpc_port}")
        await grpc_server.start()

    metrics_http = _metrics_listener(config, parts)
    drainer: list[asyncio.Task[None]] = []

    async def drain_then_close() -> None:
        try:
            await asyncio.wait_for(parts.service.admission.wait_idle(), timeout=drain or None)
        except TimeoutError:
            log.error("drain timeout (%ss) exceeded with calls still in flight", drain)
        http.should_exit = True

    def stop() -> None:
        if drainer:
            return
        parts.state.draining = parts.service.draining = True
        drainer.append(asyncio.create_task(drain_then_close()))

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    pruner = asyncio.create_task(_prune_forever(parts)) if parts.shared is not None else None
    serving = asyncio.create_task(http.serve())
    scraping = asyncio.create_task(metrics_http.serve()) if metrics_http is not None else None
    while not (http.started and (metrics_http is None or metrics_http.started)) and not serving.done() and not (
        scraping is not None and scraping.done()
    ):
        await asyncio.sleep(0.01)
    if http.started:
        port = http.servers[0].sockets[0].getsockname()[1]
        grpc_address = None if grpc_port is None else f"{listen.host}:{grpc_port}"
        info = {"http": f"http://{listen.host}:{port}", "grpc": grpc_address}
        if metrics_http is not None:
            host, metrics_port = metrics_http.servers[0].sockets[0].getsockname()[:2]
            info["metrics"] = f"http://{host}:{metrics_port}/metrics"
        ready(info)
    try:
        await serving
    finally:
        if metrics_http is not None and scraping is not None:
            metrics_http.should_exit = True
            await scraping
        await _shutdown(parts, grpc_server, pruner, drain)


def _metrics_listener(config: ServerConfig, parts: Parts) -> _Uvicorn | None:
    """The operator's unauthenticated ``/metrics`` listener, when ``metrics.port`` is set."""
    metrics = config.spec.metrics
    if metrics.port is None:
        return None
    return _Uvicorn(uvicorn.Config(
        build_metrics_app(parts.state), host=metrics.host or config.spec.listen.host, port=metrics.port,
        lifespan="off", log_level="warning", loop="asyncio", access_log=False,
    ))


async def _shutdown(parts: Parts, grpc_server: Any, pruner: asyncio.Task[None] | None, drain: float) -> None:
    if grpc_server is not None:
        await grpc_server.stop(grace=drain)
    try:
        await asyncio.wait_for(parts.service.admission.wait_idle(), timeout=drain or None)
    except TimeoutError:
        log.error("drain timeout (%ss) exceeded with calls still in flight", drain)
    if pruner is not None:
        pruner.cancel()
    parts.service.close()
    await asyncio.to_thread(close_all)
    parts.engine.dispose()


async def _prune_forever(parts: Parts) -> None:
    shared = parts.shared
    if shared is None:
        return
    period = min(3600.0, max(1.0, shared.ttl / 10))
    while True:
        removed = await asyncio.to_thread(shared.prune)
        if removed:
            parts.metrics.shared_cache_pruned.inc(removed)
        await asyncio.sleep(period)


def serve(config: ServerConfig, ready: ReadyHook = default_ready) -> None:
    """Run the server in this process until SIGTERM or SIGINT (blocking)."""
    asyncio.run(serve_async(config, ready))
