"""The pool's coordinator: one async Ray actor that queues rollouts, batches them and spreads them over scorers.

Every caller of a pool (a trainer's driver, each of verl's reward workers, a Ray Data task) talks to this one
named actor, so:

- **Batching across callers.** Rollouts scored one at a time (``score_one``) gather for ``window_ms`` (or until
  ``max_batch`` are queued) into one chunk; whole batches go out at once, split evenly over the actors.
- **Computed once cluster-wide.** A rollout whose component keys equal those of one already queued or being
  scored (GRPO's repeats, in one batch or across concurrent calls) waits for that computation instead of
  starting another; the pool's cache serves the ones scored before.
- **Back-pressure.** At most ``max_queued`` distinct rollouts are admitted (queued or on an actor); a call
  beyond that waits for room, so memory stays bounded while every actor is busy.
- **Faults.** A chunk whose actor died (killed, out of memory, its node lost) is scored again on another actor,
  and a chunk that outlives ``chunk_timeout`` (a hung worker) has its actor killed and restarted and is scored
  again; after ``max_retries`` further attempts its rollouts fail with the cause. An actor that died takes no
  chunk until it answers again (Ray recreates it, on a surviving node when its node was lost), so an attempt
  is never spent on an actor that is still down. A rollout's result is taken
  from the first attempt that finishes, once: none is lost, none counted twice. The other actors keep taking
  chunks meanwhile, so one hung actor never stalls the pool.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import math
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from evalsi.engine import ComponentJob
from evalsi.engine._keys import record_key
from evalsi.errors import EvalsiError
from evalsi.evaluators import Score
from evalsi.ray._cache import CacheActor
from evalsi.ray._metrics import PoolMetrics, quantiles
from evalsi.ray._options import NAMESPACE, PoolOptions
from evalsi.ray._scorer import ScorerActor
from evalsi.records import Record
from evalsi.rewards import from_mapping

MAX_SPECS = 64
"""Specs whose component jobs the coordinator keeps (for rollout signatures)."""
PROBE_TIMEOUT = 60.0
"""Seconds one look at a restarting actor may take before it is looked at again."""
PROBE_BACKOFF = (0.5, 5.0)
"""First and longest pause between looks at a restarting actor (doubling in between)."""

Outcome = tuple[Any, ...]
"""What a call answers: ``("ok", rows)``, ``("failed", position, message)`` or ``("spec_error", message)``."""


class ChunkFailed(EvalsiError, RuntimeError):
    """A chunk could not be scored (its actor raised, or every attempt failed)."""


@dataclass
class _Item:
    signature: bytes
    record: Record
    spec_id: str
    resource: dict[str, Any]
    eager: bool
    future: asyncio.Future[list[Score]]
    queued_at: float = field(default_factory=time.monotonic)
    attempts: int = 0


class Coordinator:
    """The coordinator of one pool (run as an async Ray actor, named after the pool)."""

    def __init__(self, options: PoolOptions) -> None:
        for module in options.imports:
            importlib.import_module(module)
        import ray

        self.ray = ray
        self.options = options
        lifetime = "detached" if options.detached else None
        self.cache_handle: Any = None
        if options.cache == "ray":
            self.cache_handle = (
                ray.remote(CacheActor)
                .options(
                    name=options.cache_name,
                    namespace=NAMESPACE,
                    get_if_exists=True,
                    lifetime=lifetime,
                    max_restarts=-1,
                    num_cpus=0,
                    max_concurrency=1,
                )
                .remote(options.cache_size)
            )
        scorer = ray.remote(ScorerActor).options(
            num_cpus=options.num_cpus,
            resources=dict(options.resources),
            max_restarts=-1,
            max_task_retries=0,  # a died chunk is re-dispatched here, to whichever actor is idle first
            runtime_env=dict(options.runtime_env) if options.runtime_env else None,
        )
        self.actors = [scorer.remote(options, index, self.cache_handle) for index in range(options.num_workers)]
        self.metrics = PoolMetrics(options.name)
        self._jobs: OrderedDict[str, list[ComponentJob]] = OrderedDict()
        self._pending: OrderedDict[str, deque[_Item]] = OrderedDict()
        self._queued = 0
        self._eager = 0
        self._inflight: dict[bytes, asyncio.Future[list[Score]]] = {}
        self._on_actors = 0
        self._waiting = 0
        self._admitted = 0
        self._started = False
        self.counters: dict[str, int] = {
            "calls": 0,
            "rollouts": 0,
            "deduplicated": 0,
            "chunks": 0,
            "failed_rollouts": 0,
            "max_admitted": 0,
        }
        self.retries: dict[str, int] = {}
        self.actor_info: dict[int, dict[str, Any]] = {}
        self.actor_latency: dict[int, deque[float]] = {i: deque(maxlen=1024) for i in range(options.num_workers)}

    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        self._room = asyncio.Semaphore(self.options.max_queued)
        self._work = asyncio.Event()
        self._idle: asyncio.Queue[int] = asyncio.Queue()
        for index in range(len(self.actors)):
            self._idle.put_nowait(index)
        self._tasks: set[asyncio.Task[None]] = set()  # the chunks on actors (held: the loop keeps weak references)
        self._dispatcher = asyncio.get_running_loop().create_task(self._dispatch())

    async def ready(self) -> list[dict[str, Any]]:
        """Wait until every scorer actor has started; where each runs."""
        self._start()
        return list(await asyncio.gather(*(actor.where.remote() for actor in self.actors)))

    async def score(self, spec_id: str, resource: dict[str, Any], records: list[Record], eager: bool = True) -> Outcome:
        """Raw component scores of ``records`` by record (the caller composes them).

        ``eager`` sends the rollouts at once; otherwise they wait up to ``window_ms`` for company (``score_one``).
        """
        self._start()
        started = time.perf_counter()
        self.counters["calls"] += 1
        try:
            jobs = self._spec_jobs(spec_id, resource)
        except EvalsiError as exc:
            return ("spec_error", str(exc))
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[list[Score]]] = []
        new: list[_Item] = []
        for record in records:
            signature = _signature(jobs, record)
            future = self._inflight.get(signature)
            if future is None:
                future = loop.create_future()
                self._inflight[signature] = future
                future.add_done_callback(self._forget(signature))
                new.append(_Item(signature, record, spec_id, resource, eager, future))
            else:
                self.counters["deduplicated"] += 1
                self.metrics.shared.inc()
            futures.append(future)
        # shielded: were this call cancelled while it waits for room, its rollouts are still admitted and
        # scored, so another call waiting on the same computation is never left waiting for good
        await asyncio.shield(self._admit(new))
        rows = await asyncio.gather(*futures, return_exceptions=True)
        self.counters["rollouts"] += len(records)
        self.metrics.observe_call(time.perf_counter() - started)
        for position, row in enumerate(rows):
            if isinstance(row, BaseException):
                self.metrics.rollouts.inc(len(records), tags={"status": "failed"})
                return ("failed", position, str(row))
        self.metrics.rollouts.inc(len(records), tags={"status": "ok"})
        return ("ok", rows)

    async def stats(self) -> dict[str, Any]:
        """Counters, queue depth, in-flight, retries, latencies (p50/p99) and cache figures of the pool."""
        cache: dict[str, int] | None = None
        if self.cache_handle is not None:
            try:
                cache = await asyncio.wait_for(self.cache_handle.stats.remote(), timeout=30)
            except Exception:
                cache = None
        actors = []
        for index in range(len(self.actors)):
            info = dict(self.actor_info.get(index, {"index": index}))
            info.update(quantiles(self.actor_latency[index]))
            actors.append(info)
        return {
            **self.counters,
            "queued": self._queued,
            "inflight": self._on_actors,
            "waiting": self._waiting,
            "admitted": self._admitted,
            "retries": dict(self.retries),
            "latency": quantiles(self.metrics.recent),
            "actors": actors,
            "cache": cache,
        }

    async def where(self) -> list[dict[str, Any]]:
        """The node and process of every scorer actor (waits for restarting ones)."""
        return list(await asyncio.gather(*(self._where(index) for index in range(len(self.actors)))))

    def _forget(self, signature: bytes) -> Any:
        def forget(future: asyncio.Future[list[Score]]) -> None:
            if self._inflight.get(signature) is future:
                del self._inflight[signature]

        return forget

    def _spec_jobs(self, spec_id: str, resource: dict[str, Any]) -> list[ComponentJob]:
        jobs = self._jobs.get(spec_id)
        if jobs is None:
            reward = from_mapping(resource)
            jobs = [component.job for component in reward.components]
            reward.close()
            self._jobs[spec_id] = jobs
            while len(self._jobs) > MAX_SPECS:
                self._jobs.popitem(last=False)
        else:
            self._jobs.move_to_end(spec_id)
        return jobs

    async def _admit(self, items: list[_Item]) -> None:
        """Queue each item once the bounded queue has room for it (back-pressure on the caller)."""
        self._waiting += len(items)
        self.metrics.waiting.set(self._waiting)
        for item in items:
            await self._room.acquire()
            self._waiting -= 1
            self.metrics.waiting.set(self._waiting)
            self._admitted += 1
            self.counters["max_admitted"] = max(self.counters["max_admitted"], self._admitted)
            item.queued_at = time.monotonic()
            self._enqueue(item)

    def _enqueue(self, item: _Item, front: bool = False) -> None:
        queue = self._pending.get(item.spec_id)
        if queue is None:
            queue = self._pending[item.spec_id] = deque()
        if front:
            queue.appendleft(item)
        else:
            queue.append(item)
        self._queued += 1
        self._eager += item.eager
        self.metrics.queued.set(self._queued)
        self._work.set()

    def _take_chunk(self) -> list[_Item]:
        """Up to ``max_batch`` items of the spec whose turn it is (specs take turns), split evenly over actors."""
        spec_id, queue = next(iter(self._pending.items()))
        size = min(self.options.max_batch, max(1, math.ceil(len(queue) / len(self.actors))))
        chunk = [queue.popleft() for _ in range(min(size, len(queue)))]
        del self._pending[spec_id]
        if queue:
            self._pending[spec_id] = queue  # to the back: the next chunk goes to another spec, if any waits
        self._queued -= len(chunk)
        self._eager -= sum(item.eager for item in chunk)
        self.metrics.queued.set(self._queued)
        return chunk

    async def _dispatch(self) -> None:
        window = self.options.window_ms / 1000
        while True:
            await self._work.wait()
            index = await self._idle.get()
            if not self._queued:
                self._work.clear()
                self._idle.put_nowait(index)
                continue
            if window and not self._eager and self._queued < self.options.max_batch:
                oldest = min(queue[0].queued_at for queue in self._pending.values() if queue)
                delay = oldest + window - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)  # let rollouts scored one at a time gather into a chunk
            chunk = self._take_chunk()
            if not self._queued:
                self._work.clear()
            task = asyncio.get_running_loop().create_task(self._run(index, chunk))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, index: int, chunk: list[_Item]) -> None:
        actor = self.actors[index]
        first = chunk[0]
        self._on_actors += len(chunk)
        self.metrics.inflight.set(self._on_actors)
        self.counters["chunks"] += 1
        started = time.perf_counter()
        cause: str | None = None
        try:
            ref = actor.score.remote(first.spec_id, first.resource, [item.record for item in chunk])
            rows, info = await asyncio.wait_for(_awaitable(ref), timeout=self.options.chunk_timeout)
        except TimeoutError:
            cause = f"actor {index} took longer than chunk_timeout ({self.options.chunk_timeout:g} s) and was restarted"
            self.ray.kill(actor, no_restart=False)
        except self.ray.exceptions.RayActorError as exc:
            cause = f"actor {index} died ({type(exc).__name__})"
        except self.ray.exceptions.RayTaskError as exc:
            self._fail(chunk, f"actor {index} failed: {_cause(exc)}")
        except Exception as exc:
            self._fail(chunk, f"actor {index} failed: {type(exc).__name__}: {exc}")
        else:
            self.actor_info[index] = info
            self.actor_latency[index].append(time.perf_counter() - started)
            for item, row in zip(chunk, rows, strict=True):
                self._finish(item, row)
        finally:
            self._on_actors -= len(chunk)
            self.metrics.inflight.set(self._on_actors)
            if cause is None:
                self._idle.put_nowait(index)
        if cause is not None:
            self._retry(chunk, cause)
            await self._recover(index)

    async def _recover(self, index: int) -> None:
        """Give a died (or killed) actor chunks again once it answers: Ray restarts it, elsewhere if need be.

        Until then a call to it fails at once (``ActorUnavailableError``) or waits for its placement, so the
        dispatcher leaves it out and the other actors take the queue.
        """
        info = await self._where(index)
        self.actor_info[index] = {**self.actor_info.get(index, {}), **info}
        self._idle.put_nowait(index)

    async def _where(self, index: int) -> dict[str, Any]:
        """Where actor ``index`` runs, once it answers (a restarting actor refuses calls until it is back)."""
        actor = self.actors[index]
        pause, longest = PROBE_BACKOFF
        while True:
            try:
                info: dict[str, Any] = await asyncio.wait_for(_awaitable(actor.where.remote()), timeout=PROBE_TIMEOUT)
            except (TimeoutError, self.ray.exceptions.RayActorError):
                await asyncio.sleep(pause)
                pause = min(pause * 2, longest)
                continue
            return info

    def _retry(self, chunk: list[_Item], cause: str) -> None:
        kind = "timeout" if "chunk_timeout" in cause else "actor_died"
        self.retries[kind] = self.retries.get(kind, 0) + 1
        self.metrics.retries.inc(tags={"cause": kind})
        for item in reversed(chunk):  # back to the front of the queue, in their order
            item.attempts += 1
            if item.attempts > self.options.max_retries:
                self._fail([item], f"gave up after {item.attempts} attempts; last: {cause}")
            else:
                self._enqueue(item, front=True)

    def _finish(self, item: _Item, row: list[Score]) -> None:
        if not item.future.done():
            item.future.set_result(row)
        self._release()

    def _fail(self, chunk: list[_Item], message: str) -> None:
        self.counters["failed_rollouts"] += len(chunk)
        for item in chunk:
            if not item.future.done():
                item.future.set_exception(ChunkFailed(message))
            self._release()

    def _release(self) -> None:
        self._admitted -= 1
        self._room.release()


def _signature(jobs: list[ComponentJob], record: Record) -> bytes:
    """What a rollout's scores depend on: its content keys under every component of the spec."""
    digest = hashlib.sha256()
    for job in jobs:
        digest.update(record_key(job.key_prefix, record, job.fields))
    return digest.digest()


async def _awaitable(ref: Any) -> Any:
    return await ref


def _cause(exc: Any) -> str:
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
