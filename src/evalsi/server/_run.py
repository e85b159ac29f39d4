"""Running the server: database, service, HTTP and gRPC listeners on one event loop, and a draining SIGTERM.

On SIGTERM (or SIGINT) the health endpoint turns 503 (the HTTP port stays open, so load balancers see the drain),
new calls are refused ``unavailable``, calls in flight (and calls already waiting for capacity) finish and are
answered; then the listeners close, pools and evaluators close and the process exits 0. The whole drain is
bounded by ``drain_timeout``: past it, the process exits 1 without the work still running.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import importlib
import importlib.util
import logging
import os
import platform
import resource
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
import uvicorn

from evalsi.evaluators import close_all
from evalsi.server._config import ServerConfig
from evalsi.server._db import migrate, open_engine
from evalsi.server._metrics import Metrics
from evalsi.server._token_store import TokenStore
from evalsi.server.evaluation._datasets import Datasets
from evalsi.server.evaluation._metrics import EvaluationMetrics
from evalsi.server.evaluation._overview_store import EvaluationOverview
from evalsi.server.evaluation._work_owners import Heartbeat, new_instance
from evalsi.server.evaluation.evaluators._service import Evaluators
from evalsi.server.evaluation.jobs._service import Jobs
from evalsi.server.rewards._score_store import SharedScores
from evalsi.server.rewards._service import RewardService
from evalsi.server.runs._listing_store import RunListing
from evalsi.server.transport._connections import limited_protocol
from evalsi.server.transport._evaluation import EvaluationServices
from evalsi.server.transport._grpc import make_grpc_server
from evalsi.server.transport._http import ServerState, build_app, build_metrics_app
from evalsi.server.ui._app import ServerUi
from evalsi.server.ui._catalog import ProjectCatalog, job_run_id
from evalsi.server.ui._jobs import CompletedJobs
from evalsi.server.ui._pages import create_pages
from evalsi.server.ui._runs import StoredRuns
from evalsi.server.ui._session_store import Sessions
from evalsi.view import RunCache

if TYPE_CHECKING:
    from sqlalchemy import Engine

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
    evaluation: EvaluationServices
    heartbeat: Heartbeat


_M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter for the size from which blocks are mapped on their own (and unmapped when freed)."""
_MMAP_THRESHOLD = 512 << 10
"""Above a typical batch's request body (256 rollouts of a few KiB of reasoning are ~300 KiB): mapping and unmapping
every call's body costs page faults on each call; below the bodies whose memory matters (MiBs)."""


def return_large_blocks() -> None:
    """Have glibc map blocks of 512 KiB and more on their own, so freeing one gives its memory back to the system.

    glibc raises this threshold to the largest block freed so far (up to 32 MiB): after one large request body,
    the next ones come from the heap, which keeps their memory when they are freed, and the process stays at the
    peak a burst of large calls reached. Fixing the threshold keeps a server's memory at what it holds. Elsewhere
    than on glibc this does nothing.
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)


def freeze_startup_objects() -> None:
    """Move every object alive now out of the garbage collector's reach (``gc.freeze``), once the server is built.

    The imported libraries (database, HTTP, gRPC, metrics) and the built services live as long as the server, so
    a collection has nothing to find in them, yet each full collection walked them all again; uncached batches
    allocate enough to trigger collections often. Objects made afterwards (calls, cached scores) are collected
    as usual.
    """
    gc.collect()
    gc.freeze()


def build(config: ServerConfig) -> Parts:
    """Import configured evaluator modules, open and migrate the database, and make the service.

    Args:
        config: The server configuration.

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
    evaluation, heartbeat = _evaluation(config, engine, service)
    ui = _ui(config, engine, service, evaluation) if config.spec.ui.enabled else None
    state = ServerState(service, evaluation, ui)
    return Parts(engine, tokens, shared, metrics, service, state, evaluation, heartbeat)


def _ui(config: ServerConfig, engine: Engine, service: RewardService, evaluation: EvaluationServices) -> ServerUi:
    """The results viewer: sessions in the database, each project's runs and jobs read from it, one run cache."""
    overview = EvaluationOverview(engine)
    runs, jobs = StoredRuns(RunListing(engine)), CompletedJobs(overview, evaluation.datasets)
    return ServerUi(
        service.authenticate,
        Sessions(engine, config.spec.ui.session_ttl),
        lambda project: ProjectCatalog(project, runs, jobs),
        RunCache(config.spec.ui.cache_bytes),
        service.metrics.registry,
        create_pages(overview, job_run_id),
    )


def _evaluation(config: ServerConfig, engine: Engine, service: RewardService) -> tuple[EvaluationServices, Heartbeat]:
    """Uploaded evaluators, datasets and jobs, owned by a new instance id; work whose server stopped is failed."""
    # Imported here, not at the top: importing it registers the `evaluator` component, for a built server only.
    from evalsi.server.evaluation.evaluators._reward import EvaluatorRefs

    rung = config.spec.sandbox.min_isolation
    instance = new_instance()
    evaluators = Evaluators(config, engine, rung, instance)
    datasets = Datasets(config, engine)
    jobs = Jobs(config, engine, evaluators, datasets, rung, instance)
    heartbeat = Heartbeat(config.spec.jobs, (evaluators, jobs))
    heartbeat.sweep()  # work of replicas still beating is left alone
    evaluators.metrics = jobs.metrics = EvaluationMetrics(service.metrics.registry)
    service.resolver = EvaluatorRefs(evaluators)
    return EvaluationServices(evaluators, datasets, jobs), heartbeat


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: SIGTERM is ours, to drain gRPC and HTTP together."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def default_ready(info: dict[str, Any]) -> None:
    """Print the ready line (one JSON object) on stdout: scripts and tests wait for it."""
    sys.stdout.write(orjson.dumps({"event": "ready", **info}).decode() + "\n")
    sys.stdout.flush()


async def serve_async(config: ServerConfig, ready: ReadyHook = default_ready) -> bool:
    """Serve until SIGTERM or SIGINT, then drain for at most ``drain_timeout`` seconds and return.

    Returns True when everything drained, False when work was still running at the deadline (its threads
    cannot be stopped from outside: :func:`serve` then ends the process).

    Args:
        config: The server configuration.
        ready: Called once with the listening addresses (``http``, ``grpc`` and, when enabled, ``metrics``).

    """
    return_large_blocks()
    parts = build(config)
    listen = config.spec.listen
    drain = config.spec.drain_timeout
    _descriptors_for(listen.max_connections)
    app = build_app(parts.state)
    freeze_startup_objects()
    http = _Uvicorn(
        uvicorn.Config(
            app,
            host=listen.host,
            port=listen.port,
            lifespan="off",
            log_level="warning",
            loop="asyncio",
            http=limited_protocol(_http_protocol(), listen.max_connections, listen.header_timeout),
            timeout_keep_alive=listen.idle_timeout,  # type: ignore[arg-type]  # seconds; a float works
            timeout_graceful_shutdown=max(1, int(drain)),
            access_log=False,
            # X-Forwarded-Proto/-For only from the operator's proxies (uvicorn would trust loopback by default)
            proxy_headers=bool(listen.trusted_proxies),
            forwarded_allow_ips=list(listen.trusted_proxies),
        )
    )
    grpc_server = None
    grpc_port = None
    if listen.grpc_port is not None:
        api = parts.state.api
        grpc_server = make_grpc_server(parts.service, parts.state.body_bytes, api.grpc_handlers(), api.observers())
        grpc_port = grpc_server.add_insecure_port(f"{listen.host}:{listen.grpc_port}")
        await grpc_server.start()
    loop = asyncio.get_running_loop()
    metrics_http = _metrics_listener(config, parts)
    stopping: list[asyncio.Task[None]] = []
    deadline: list[float] = []

    async def drain_then_close() -> None:
        # The HTTP port stays open while calls in flight finish: health answers 503, new calls `unavailable`.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(parts.service.admission.wait_idle(), timeout=max(0.0, deadline[0] - loop.time()))
        http.should_exit = True

    def stop() -> None:
        if deadline:
            return
        deadline.append(loop.time() + drain)
        parts.state.draining = parts.service.draining = True
        stopping.append(asyncio.ensure_future(drain_then_close()))
        if grpc_server is not None:  # both listeners drain at once, within the same bound
            stopping.append(asyncio.ensure_future(grpc_server.stop(grace=drain)))

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    pruner = asyncio.create_task(_prune_forever(parts)) if parts.shared is not None else None
    parts.heartbeat.start()
    serving = asyncio.create_task(http.serve())
    scraping = asyncio.create_task(metrics_http.serve()) if metrics_http is not None else None
    while (
        not (http.started and (metrics_http is None or metrics_http.started))
        and not serving.done()
        and not (scraping is not None and scraping.done())
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
        stop()
        if metrics_http is not None and scraping is not None:
            metrics_http.should_exit = True
            await scraping
        drained = await _shutdown(parts, stopping, pruner, deadline[0])
    return drained


def _http_protocol() -> type[asyncio.Protocol]:
    """The HTTP/1.1 protocol class of uvicorn: httptools when installed (the ``server`` extra), else h11."""
    if importlib.util.find_spec("httptools"):
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        return HttpToolsProtocol
    from uvicorn.protocols.http.h11_impl import H11Protocol

    return H11Protocol


_SPARE_DESCRIPTORS = 256
"""File descriptors kept for everything but client connections: the database, sandboxes, upstream calls."""


def _descriptors_for(max_connections: int) -> None:
    """Raise the soft limit on open files towards the hard one, so both listeners' connection caps fit in it."""
    needed = 2 * max_connections + _SPARE_DESCRIPTORS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    if soft != resource.RLIM_INFINITY and soft < needed:
        log.warning(
            "the open-file limit (%d) is below what listen.max_connections=%d needs (%d): lower max_connections "
            "or raise the limit (ulimit -n), or the server stops accepting at the limit",
            soft,
            max_connections,
            needed,
        )


def _metrics_listener(config: ServerConfig, parts: Parts) -> _Uvicorn | None:
    """The operator's unauthenticated ``/metrics`` listener, when ``metrics.port`` is set."""
    metrics = config.spec.metrics
    if metrics.port is None:
        return None
    return _Uvicorn(
        uvicorn.Config(
            build_metrics_app(parts.state),
            host=metrics.host or config.spec.listen.host,
            port=metrics.port,
            lifespan="off",
            log_level="warning",
            loop="asyncio",
            access_log=False,
            proxy_headers=False,
        )
    )


async def _shutdown(
    parts: Parts, stopping: list[asyncio.Task[None]], pruner: asyncio.Task[None] | None, deadline: float
) -> bool:
    """Wait (until ``deadline``) for the listeners and the calls in flight, then close; True if all drained."""
    loop = asyncio.get_running_loop()
    if pruner is not None:
        pruner.cancel()
    drained = True
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*stopping), timeout=max(0.0, deadline - loop.time()))
    try:
        await asyncio.wait_for(parts.service.admission.wait_idle(), timeout=max(0.0, deadline - loop.time()))
    except TimeoutError:
        drained = False
        log.error("drain timeout exceeded with calls still in flight; exiting without them")
    parts.heartbeat.close()
    parts.evaluation.jobs.close()
    parts.evaluation.evaluators.close()
    parts.service.close()
    closing = loop.run_in_executor(None, close_all)
    try:  # evaluator pools may wait on their own stuck work: never past the deadline (and a second for this)
        await asyncio.wait_for(asyncio.shield(closing), timeout=max(1.0, deadline - loop.time()))
    except TimeoutError:
        drained = False
        log.error("evaluator pools did not close before the drain deadline")
    parts.engine.dispose()
    if parts.state.ui is not None:
        parts.state.ui.close()
    return drained


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


def _event_loop() -> asyncio.AbstractEventLoop:
    """The event loop of uvloop when it is installed (the ``server`` extra), else asyncio's.

    Its transports and scheduling in C cost ~8% less of the server's CPU per warm 256-rollout call (measured back
    to back against asyncio's loop); HTTP, gRPC, signals and draining behave alike on both.
    """
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def serve(config: ServerConfig, ready: ReadyHook = default_ready) -> None:
    """Run the server in this process until SIGTERM or SIGINT (blocking).

    When work is still running at the drain deadline, the process ends at once with status 1: its threads
    (an evaluator waiting on a hung upstream) cannot be stopped, and waiting for them would break the bound.

    Args:
        config: The server configuration.
        ready: Called once with the listening addresses (``http``, ``grpc`` and, when enabled, ``metrics``).

    """
    loop = _event_loop()
    try:
        drained = loop.run_until_complete(serve_async(config, ready))
        if drained:
            loop.run_until_complete(loop.shutdown_asyncgens())
    except BaseException:
        loop.close()
        raise
    if not drained:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    loop.close()
