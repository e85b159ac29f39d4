"""The pool's coordinator: one async Ray actor that queues rollouts, batches them and spreads them over scorers.

Every caller of a pool (a trainer's driver, each of verl's reward workers, a Ray Data task) finds this one named
actor. A caller's whole batches (``pool.score``) of a spec with no group-level component go straight to the
scorer actors (:mod:`evalsi.ray._direct`): the coordinator hands the caller the actors' handles
(:meth:`Coordinator.route`), is told of each call's counters afterwards (:meth:`Coordinator.tally`), keeps and
forwards the verdicts the actors publish (:meth:`Coordinator.publish`), and takes over a chunk whose actor died or
hung (:meth:`Coordinator.rescue`).
Everything else passes through it:

- **Batching across callers.** Rollouts scored one at a time (``score_one``) gather for ``window_ms`` (or until
  ``max_batch`` are queued) into one chunk; whole batches go out at once, split evenly over the live actors:
  what is queued when a chunk is first taken from it is cut into one equal share per live actor (at most
  ``max_batch`` each), so a batch of 256 on two actors is two chunks of 128, not 128, 64, 32...
- **Whole groups.** A spec with a group-level component (``group-diversity``) scores each rollout with the rest
  of its group, as the call that sent it groups them (``metadata.group_id``, the prompt, or the component's
  ``group_by``): a call's rollouts are cut into units that no group crosses, a chunk holds whole units of one
  call only, and such rollouts are never merged with equal ones of other calls.
- **Computed once cluster-wide.** A rollout whose component keys equal those of one already queued or being
  scored (GRPO's repeats, in one batch or across concurrent calls) waits for that computation instead of
  starting another; the pool's cache serves the ones scored before. Its shared tier is held here (``cache="ray"``):
  a chunk goes out with the verdicts held for its keys, and its scores that were not held are kept under the
  keys computed here once they come back, so sharing them costs no message of its own.
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
import contextlib
import importlib
import itertools
import math
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from evalsi.engine import ComponentJob
from evalsi.engine._keys import record_key
from evalsi.errors import EvalsiError
from evalsi.evaluators._group import group_of
from evalsi.ray._cache import keep, look_up, shared_tier, tier_stats
from evalsi.ray._metrics import PoolMetrics, quantiles
from evalsi.ray._options import PoolOptions
from evalsi.ray._scorer import CONTROL, ScorerActor
from evalsi.ray._wire import (
    PackedRecord,
    PackedRow,
    PackedScore,
    from_parts,
    join_keys,
    split_keys,
    to_parts,
    unpack_records,
)
from evalsi.records import Record
from evalsi.rewards import from_mapping

MAX_SPECS = 64
"""Specs whose component jobs the coordinator keeps (for rollout signatures)."""
PROBE_TIMEOUT = 60.0
"""Seconds one look at a restarting actor may take before it is looked at again."""
PROBE_BACKOFF = (0.5, 5.0)
"""First and longest pause between looks at a restarting actor (doubling in between)."""
KEEP_DELAY = 0.002
"""Seconds a chunk's new verdicts wait before the shared tier stores them, so the replies to the calls they
answer are sent first (storing them holds the interpreter that sends the replies). A look-up stores every
waiting verdict first, so a later chunk still finds them."""
INFO_TIMEOUT = 10.0
"""Seconds :meth:`Coordinator.stats` waits for an actor's counters before it reports the last ones it saw."""

Outcome = tuple[Any, ...]
"""What a call answers: ``("ok", rows)``, ``("failed", position, message)`` or ``("spec_error", message)``.

Records come in and rows of scores go out as tuples (:mod:`evalsi.ray._wire`): the coordinator passes them
between callers and actors as they are, building a ``Record`` only to read a rollout's group (and its keys, when
the caller did not send them)."""


@dataclass(eq=False, slots=True)
class _Call:
    """One scoring call's rows as its rollouts finish; ``done`` resolves once every position is settled.

    One future per call, not one per rollout: a chunk's rows are handed to their calls with plain assignments,
    where a future per rollout cost a callback scheduled on the event loop for each (milliseconds a batch).
    """

    done: asyncio.Future[None]
    rows: list[PackedRow]
    left: int
    spec_id: str
    resource: dict[str, Any]
    eager: bool
    """Send its rollouts at once (or let them wait up to ``window_ms`` for company)."""
    parts: tuple[bytes, ...] = ()
    """Its records as the caller pickled them (:func:`evalsi.ray._wire.to_parts`)."""
    unpacked: list[PackedRecord] | None = None
    """Its records as tuples, once a chunk needed them one by one (unpickled at most once)."""
    failures: dict[int, str] = field(default_factory=dict)
    """The positions that could not be scored, and why."""

    def packed(self) -> list[PackedRecord]:
        """The call's records as tuples (unpickled from its parts on first use)."""
        if self.unpacked is None:
            self.unpacked = from_parts(self.parts)
        return self.unpacked

    def settle(self, position: int, row: PackedRow | None, error: str | None) -> None:
        """Position ``position`` is scored (``row``) or failed (``error``); the last one resolves ``done``."""
        if error is not None:
            self.failures[position] = error
        elif row is not None:
            self.rows[position] = row
        self.left -= 1
        if self.left == 0 and not self.done.done():
            self.done.set_result(None)


@dataclass(eq=False, slots=True)
class _Item:
    signature: bytes
    source: _Call
    """The call whose rollout this is (the first one, when equal rollouts of several calls share it)."""
    position: int
    """Its position in that call."""
    spec_id: str
    resource: dict[str, Any]
    eager: bool
    waiters: list[tuple[_Call, int]]
    """The calls (and positions in them) that this computation answers: several when equal rollouts share it."""
    keys: tuple[bytes, ...] = ()
    """The rollout's content key under each component of the spec (what the shared tier is looked up by)."""
    queued_at: float = field(default_factory=time.monotonic)
    attempts: int = 0
    share: int = 0
    """The chunk size of the wave this item was first dispatched in (0: not yet); a retried chunk keeps it."""
    call: int | None = None
    """The call that sent the item, for specs with a group-level component (a chunk holds one call's items)."""
    unit: int | None = None
    """The unit of whole groups the item belongs to (chunks never split one); None for record-level specs."""
    settled: bool = False
    """Whether its result (or failure) was handed to its calls: the first attempt to finish counts, once."""

    @property
    def record(self) -> PackedRecord:
        """The rollout's fields as a tuple."""
        return self.source.packed()[self.position]


class GroupTooLarge(EvalsiError, ValueError):
    """A unit of whole groups is larger than the pool's bounded queue, so it could never be admitted."""

    def __init__(self, position: int, size: int, room: int) -> None:
        self.position = position
        super().__init__(
            f"its group has {size} rollouts (with the groups it shares rollouts with), more than the pool's "
            f"max_queued ({room}) lets wait at once; raise max_queued to at least {size}"
        )


class Coordinator:
    """The coordinator of one pool (run as an async Ray actor, named after the pool)."""

    def __init__(self, options: PoolOptions) -> None:
        for module in options.imports:
            importlib.import_module(module)
        import ray

        self.ray = ray
        self.options = options
        self.shared = shared_tier(options)
        """The pool's shared verdict cache (``cache="ray"``), looked up for each chunk before it goes out."""
        scorer = ray.remote(concurrency_groups={CONTROL: 2})(ScorerActor).options(
            num_cpus=options.num_cpus,
            resources=dict(options.resources),
            max_restarts=-1,
            max_task_retries=0,  # a died chunk is re-dispatched here, to whichever actor is idle first
            runtime_env=dict(options.runtime_env) if options.runtime_env else None,
        )
        me = ray.get_runtime_context().current_actor
        self.actors = [scorer.remote(options, index, me) for index in range(options.num_workers)]
        self.metrics = PoolMetrics(options.name)
        self._jobs: OrderedDict[str, list[ComponentJob]] = OrderedDict()
        self._ids = itertools.count()
        self._down: set[int] = set()
        """Actors that died or were killed and have not answered since: left out of the even split."""
        self._recovering: set[int] = set()
        self._generation = uuid.uuid4().hex
        """This coordinator's life (it and its actors are created anew when Ray restarts it)."""
        self._incarnation = [0] * options.num_workers
        """How often each actor was seen dead or killed: a caller's report of a death already seen is not acted on."""
        self._pending: OrderedDict[str, deque[_Item]] = OrderedDict()
        self._queued = 0
        self._eager = 0
        self._inflight: dict[bytes, _Item] = {}
        """Items queued or on an actor, by signature: an equal rollout of any call waits for that computation."""
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
        self._keeping: list[tuple[int, list[_Item], list[PackedRow], dict[bytes, PackedScore]]] = []
        """Chunks whose new verdicts the shared tier has not stored yet (see :data:`KEEP_DELAY`)."""
        self._keep_timer: asyncio.TimerHandle | None = None
        self._forwarding: list[tuple[int, list[tuple[bytes, PackedScore]]]] = []
        """New verdicts (and the actor that computed them) not yet forwarded to the other actors."""
        self._forward_timer: asyncio.TimerHandle | None = None
        self._sends: set[asyncio.Task[Any]] = set()

    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        self._room = asyncio.Semaphore(self.options.max_queued)
        self._unit_lock = asyncio.Lock()  # one unit at a time gathers room for all its items
        self._work = asyncio.Event()
        self._idle: asyncio.Queue[int] = asyncio.Queue()
        for index in range(len(self.actors)):
            self._idle.put_nowait(index)
        self._tasks: set[asyncio.Task[None]] = set()  # the chunks on actors (held: the loop keeps weak references)
        self._dispatcher = asyncio.get_running_loop().create_task(self._dispatch())

    async def ready(self) -> list[dict[str, Any]]:
        """Wait until every scorer actor has started; where each runs."""
        self._start()

        async def hello(index: int) -> dict[str, Any]:
            info: dict[str, Any] = await self.actors[index].where.remote()
            self.actor_info[index] = {**self.actor_info.get(index, {}), **info}
            return info

        return list(await asyncio.gather(*(hello(index) for index in range(len(self.actors)))))

    async def score(
        self, spec_id: str, resource: dict[str, Any], eager: bool, count: int, keys: list[bytes] | None, *parts: bytes
    ) -> Outcome:
        """Raw component scores of the ``count`` records by record, packed (the caller composes them).

        The records come as tuples pickled in parts (:func:`evalsi.ray._wire.to_parts`), each part an argument
        of its own so that Ray sends it inside the call. ``keys`` are their content keys, computed by the caller
        (:func:`content_keys`, joined by :func:`evalsi.ray._wire.join_keys`); None has them computed here. A
        record-level call whose keys came along is not unpickled here unless a chunk needs its records one by
        one: a chunk holding the whole call, in order, goes out in the caller's parts as they are. ``eager``
        sends the rollouts at once; otherwise they wait up to ``window_ms`` for company (``score_one``).
        """
        return await self._score(spec_id, resource, eager, count, keys, parts)

    async def route(self) -> dict[str, Any]:
        """What a caller needs to send chunks straight to the scorer actors: their handles and the pool's limits.

        ``down`` are the actors that died or were killed and have not answered since; ``incarnations`` count
        how often each was: a caller names the one it saw fail in :meth:`rescue`.
        """
        self._start()
        return {
            "actors": list(self.actors),
            "generation": self._generation,
            "down": sorted(self._down),
            "incarnations": list(self._incarnation),
            "max_batch": self.options.max_batch,
            "max_queued": self.options.max_queued,
            "max_retries": self.options.max_retries,
            "chunk_timeout": self.options.chunk_timeout,
        }

    async def rescue(
        self,
        index: int,
        generation: str,
        incarnation: int,
        cause: str,
        spec_id: str,
        resource: dict[str, Any],
        count: int,
        keys: list[bytes] | None,
        *parts: bytes,
    ) -> Outcome:
        """Score a chunk a caller sent straight to actor ``index`` and could not get back from it.

        ``cause``: the actor died (``"died"``) or hung (``"timeout"``), or the caller did not send it there because
        it saw that actor fail earlier in the call (``"moved"``). A death is counted as a retry and the actor is
        left out until it answers again (a hung one is killed and restarted first, unless a report of the same
        incarnation did that already, or the caller's actors were those of this coordinator's previous life,
        before Ray restarted it); the chunk is then scored as a call of its own here, with its remaining
        attempts.
        """
        self._start()
        if cause != "moved":
            kind = "timeout" if cause == "timeout" else "actor_died"
            self._count_retry(kind)
            if generation == self._generation and incarnation == self._incarnation[index]:
                self._lost(index, kill=kind == "timeout")
        attempts = 0 if cause == "moved" else 1
        return await self._score(spec_id, resource, True, count, keys, parts, counted=False, attempts=attempts)

    async def publish(self, origin: int, entries: list[tuple[bytes, PackedScore]]) -> None:
        """Keep verdicts actor ``origin`` computed for a caller's chunk, and forward them to the other actors."""
        if self.shared is not None:
            keep(self.shared, entries)
        self._forward(origin, entries)

    async def tally(self, counts: dict[str, Any]) -> None:
        """Count a call a caller sent straight to the actors: its rollouts, chunks, failures and latency."""
        for name in ("calls", "rollouts", "deduplicated", "chunks", "failed_rollouts"):
            self.counters[name] += int(counts.get(name, 0))
        self.counters["max_admitted"] = max(self.counters["max_admitted"], int(counts.get("max_admitted", 0)))
        if counts.get("deduplicated"):
            self.metrics.shared.inc(int(counts["deduplicated"]))
        for status in ("ok", "failed"):
            if counts.get(status):
                self.metrics.rollouts.inc(int(counts[status]), tags={"status": status})
        if "seconds" in counts:
            self.metrics.observe_call(float(counts["seconds"]))

    async def _score(
        self,
        spec_id: str,
        resource: dict[str, Any],
        eager: bool,
        count: int,
        keys: list[bytes] | None,
        parts: tuple[bytes, ...],
        *,
        counted: bool = True,
        attempts: int = 0,
    ) -> Outcome:
        """A call's scores (see :meth:`score`); a rescued chunk (``counted=False``) is not counted as a call.

        ``attempts`` its rollouts have had already (a rescued chunk's first one went straight to its actor).
        """
        self._start()
        started = time.perf_counter()
        self.counters["calls"] += counted
        try:
            jobs = self._spec_jobs(spec_id, resource)
        except EvalsiError as exc:
            return ("spec_error", str(exc))
        if not count:
            return ("ok", [])
        done = asyncio.get_running_loop().create_future()
        call = _Call(done, [()] * count, count, spec_id, resource, eager, parts)
        given = split_keys(keys, count)
        rows = list(zip(*given, strict=True)) if given is not None and len(given) == len(jobs) else None
        group_bys = [getattr(job.params, "group_by", None) for job in jobs if job.evaluator.scope == "group"]
        if group_bys:
            records = unpack_records(call.packed())
            try:
                new = self._unit_items(call, records, rows or content_keys(jobs, records), group_bys)
            except GroupTooLarge as exc:
                return ("failed", exc.position, str(exc))
        else:
            new = self._record_items(call, rows or content_keys(jobs, unpack_records(call.packed())))
        for item in new:
            item.attempts = attempts
        # shielded: were this call cancelled while it waits for room, its rollouts are still admitted and
        # scored, so another call waiting on the same computation is never left waiting for good
        await asyncio.shield(self._admit(new))
        await call.done
        if not counted:  # the caller counts its call once it has every chunk back (:meth:`tally`)
            first = min(call.failures, default=None)
            return ("ok", call.rows) if first is None else ("failed", first, call.failures[first])
        self.counters["rollouts"] += count
        self.metrics.observe_call(time.perf_counter() - started)
        if call.failures:
            self.metrics.rollouts.inc(count, tags={"status": "failed"})
            position = min(call.failures)
            return ("failed", position, call.failures[position])
        self.metrics.rollouts.inc(count, tags={"status": "ok"})
        return ("ok", call.rows)

    async def stats(self) -> dict[str, Any]:
        """Counters, queue depth, in-flight, retries, latencies (p50/p99) and cache figures of the pool."""
        self._store_kept()
        await asyncio.gather(*(self._refresh_info(index) for index in range(len(self.actors))))
        cache = tier_stats(self.shared) if self.shared is not None else None
        actors = []
        for index in range(len(self.actors)):
            info = dict(self.actor_info.get(index, {"index": index}))
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

    async def _refresh_info(self, index: int) -> None:
        """Take actor ``index``'s current counters (chunks callers sent it straight count there only)."""
        if index in self._down:
            return
        try:
            ref = self.actors[index].info.options(concurrency_group=CONTROL).remote()
            info = await asyncio.wait_for(_awaitable(ref), timeout=INFO_TIMEOUT)
        except Exception:  # restarting or busy beyond the bound: the counters it last reported stand
            return
        self.actor_info[index] = {**self.actor_info.get(index, {}), **info}

    async def warm(self, spec_id: str, resource: dict[str, Any], records: list[Record]) -> Outcome:
        """Have every scorer actor score ``records`` outside the caches (see ``ScorerActor.warm``); where each runs."""
        self._start()
        try:
            self._spec_jobs(spec_id, resource)
        except EvalsiError as exc:
            return ("spec_error", str(exc))
        calls = (_awaitable(actor.warm.remote(spec_id, resource, records)) for actor in self.actors)
        return ("ok", list(await asyncio.gather(*calls)))

    async def stop(self, timeout: float) -> list[dict[str, Any]]:
        """Stop every scorer actor, its math workers and sandboxes first; wait up to ``timeout`` s for them to die.

        Each actor closes its evaluators' processes (so none outlives it), then is killed for good; a call to it
        then fails, which is how its death is seen. Queued rollouts fail with the cause.

        Returns:
            Where each actor ran (node, host, pid) and the child processes it could not stop, and ``dead``:
            whether it was seen dead in time.

        """
        deadline = time.monotonic() + timeout
        if self._started:
            self._dispatcher.cancel()
        for queue in self._pending.values():
            self._fail(list(queue), "the reward pool was shut down")
        self._pending.clear()

        async def close(index: int) -> dict[str, Any]:
            actor = self.actors[index]
            info: dict[str, Any] = {"index": index, **self.actor_info.get(index, {})}
            if "pid" not in info or index in self._down:  # never started, or restarting: nothing to close
                self.ray.kill(actor, no_restart=True)
                info["dead"] = await self._dead(actor, deadline)
                return info
            try:
                remaining = max(1.0, deadline - time.monotonic())
                info.update(await asyncio.wait_for(_awaitable(actor.close.remote(remaining / 2)), timeout=remaining))
            except Exception as exc:  # dead, restarting or hung: killed all the same
                info["close_error"] = f"{type(exc).__name__}: {exc}"
            self.ray.kill(actor, no_restart=True)
            info["dead"] = await self._dead(actor, deadline)
            return info

        return list(await asyncio.gather(*(close(index) for index in range(len(self.actors)))))

    async def _dead(self, actor: Any, deadline: float) -> bool:
        """Whether ``actor`` (killed for good) is seen dead before ``deadline``: a call to it fails."""
        while time.monotonic() < deadline:
            try:
                await asyncio.wait_for(_awaitable(actor.where.remote()), timeout=max(0.5, deadline - time.monotonic()))
            except self.ray.exceptions.RayActorError:
                return True
            except TimeoutError:
                return False
            await asyncio.sleep(0.2)
        return False

    async def where(self) -> list[dict[str, Any]]:
        """The node and process of every scorer actor (waits for restarting ones)."""
        return list(await asyncio.gather(*(self._where(index) for index in range(len(self.actors)))))

    def _record_items(self, call: _Call, keys: list[tuple[bytes, ...]]) -> list[_Item]:
        """The items to queue for a call: one per distinct computation not already under way (any call's).

        Rollouts are the same computation when their content keys are (the keys joined are the signature).
        """
        spec_id, resource, eager = call.spec_id, call.resource, call.eager
        new: list[_Item] = []
        shared = 0
        for position, row in enumerate(keys):
            signature = b"".join(row)
            item = self._inflight.get(signature)
            if item is None:
                item = self._inflight[signature] = _Item(signature, call, position, spec_id, resource, eager, [], row)
                new.append(item)
            else:
                shared += 1
            item.waiters.append((call, position))
        if shared:
            self.counters["deduplicated"] += shared
            self.metrics.shared.inc(shared)
        return new

    def _unit_items(
        self, call: _Call, records: list[Record], keys: list[tuple[bytes, ...]], group_bys: list[str | None]
    ) -> list[_Item]:
        """One item per record, queued unit by unit (whole groups together); none shared with other calls.

        A group-level score depends on the rest of the group as this call sent it, so equal rollouts of other
        calls are not the same computation.

        Raises:
            GroupTooLarge: A unit could never be admitted whole (names its first rollout).

        """
        spec_id, resource, eager = call.spec_id, call.resource, call.eager
        call_id = next(self._ids)
        new: list[_Item] = []
        for unit in group_units(records, group_bys):
            if len(unit) > self.options.max_queued:
                raise GroupTooLarge(unit[0], len(unit), self.options.max_queued)
            unit_id = next(self._ids)
            for position in unit:
                item = _Item(b"", call, position, spec_id, resource, eager, [(call, position)], call=call_id)
                item.keys = keys[position]
                item.unit = unit_id
                new.append(item)
        return new

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
        """Queue each item once the bounded queue has room for it (back-pressure on the caller).

        The items of one unit of whole groups wait for room for all of them and are queued together, so they
        sit next to each other in the queue and a chunk can take them whole.
        """
        self._waiting += len(items)
        self.metrics.waiting.set(self._waiting)
        for unit in _runs(items):
            waits = len(unit) > 1 or self._room.locked()
            if len(unit) == 1:
                await self._room.acquire()
            else:
                async with self._unit_lock:  # one unit at a time holds part of the room while it waits
                    for _ in unit:
                        await self._room.acquire()
            self._waiting -= len(unit)
            self._admitted += len(unit)
            self.counters["max_admitted"] = max(self.counters["max_admitted"], self._admitted)
            now = time.monotonic()
            for item in unit:
                item.queued_at = now
                self._enqueue(item)
            if waits:  # the gauges follow a call that waits for room; one that does not sets them once, after
                self._gauge_queue()
        self._gauge_queue()

    def _gauge_queue(self) -> None:
        """Set the gauges of rollouts waiting for room and queued (per admission, not per rollout: they cost)."""
        self.metrics.waiting.set(self._waiting)
        self.metrics.queued.set(self._queued)

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
        self._work.set()

    def _take_chunk(self) -> list[_Item]:
        """The next chunk of the spec whose turn it is (specs take turns): one live actor's share of its wave.

        Items queued and never dispatched form a wave when the first chunk is taken from them: each gets the
        share ``ceil(wave / live actors)`` (at most ``max_batch``), and every chunk of the wave is that size
        (the last one what is left), so a batch is split evenly instead of each chunk halving what remains.
        A chunk never splits a unit of whole groups, nor mixes two calls' units.
        """
        spec_id, queue = next(iter(self._pending.items()))
        if not queue[0].share:
            fresh = [item for item in queue if not item.share]
            live = max(1, len(self.actors) - len(self._down))
            share = min(self.options.max_batch, max(1, math.ceil(len(fresh) / live)))
            for item in fresh:
                item.share = share
        size = queue[0].share
        chunk = [queue.popleft()]
        while queue:
            following = queue[0]
            same_unit = following.unit is not None and following.unit == chunk[-1].unit
            if not same_unit and (len(chunk) >= size or following.call != chunk[0].call):
                break
            chunk.append(queue.popleft())
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
            if index in self._down:  # lost since it went idle: it is given back once it answers again
                continue
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
        cause: str | None = None
        try:
            found, asked = self._look_up(chunk)
            parts = _chunk_parts(chunk)
            keys = join_keys([item.keys for item in chunk])
            ref = actor.score.remote(first.spec_id, first.resource, found, asked, keys, *parts)
            rows, info = await asyncio.wait_for(_awaitable(ref), timeout=self.options.chunk_timeout)
        except TimeoutError:
            cause = f"actor {index} took longer than chunk_timeout ({self.options.chunk_timeout:g} s) and was restarted"
            self._lost(index, kill=True)
        except self.ray.exceptions.RayActorError as exc:
            cause = f"actor {index} died ({type(exc).__name__})"
            self._lost(index, kill=False)
        except self.ray.exceptions.RayTaskError as exc:
            self._fail(chunk, f"actor {index} failed: {task_cause(exc)}")
        except Exception as exc:
            self._fail(chunk, f"actor {index} failed: {type(exc).__name__}: {exc}")
        else:
            self.actor_info[index] = info
            for item, row in zip(chunk, rows, strict=True):
                self._finish(item, row)
            if self.shared is not None:
                self._keeping.append((index, chunk, rows, found))
                if self._keep_timer is None:
                    self._keep_timer = asyncio.get_running_loop().call_later(KEEP_DELAY, self._store_kept)
        finally:
            self._on_actors -= len(chunk)
            self.metrics.inflight.set(self._on_actors)
            if cause is None:
                self._idle.put_nowait(index)
        if cause is not None:
            self._retry(chunk, cause)

    def _lost(self, index: int, *, kill: bool) -> None:
        """Actor ``index`` died (or hung: ``kill`` restarts it): leave it out until it answers again."""
        self._incarnation[index] += 1
        self._down.add(index)
        if kill:
            self.ray.kill(self.actors[index], no_restart=False)
        if index not in self._recovering:
            self._recovering.add(index)
            task = asyncio.get_running_loop().create_task(self._recover(index))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _store_kept(self) -> None:
        """Store the new verdicts of every chunk that waits for it (:data:`KEEP_DELAY`), in the order they came."""
        if self._keep_timer is not None:
            self._keep_timer.cancel()
            self._keep_timer = None
        waiting, self._keeping = self._keeping, []
        for index, chunk, rows, found in waiting:
            self._keep(index, chunk, rows, found)

    def _keep(self, index: int, chunk: list[_Item], rows: list[PackedRow], found: dict[bytes, PackedScore]) -> None:
        """Store a chunk's scores that the shared tier did not hold (record-level ones), and forward them.

        They go under each rollout's keys to the shared tier, and to every actor but ``index``, that scored them.
        """
        jobs = self._jobs.get(chunk[0].spec_id)
        if jobs is None or self.shared is None:  # the spec's jobs were dropped meanwhile (least recently used)
            return
        cached = [column for column, job in enumerate(jobs) if job.evaluator.scope != "group"]
        new = [
            (item.keys[column], row[column])
            for item, row in zip(chunk, rows, strict=True)
            for column in cached
            if item.keys[column] not in found
        ]
        keep(self.shared, new)
        self._forward(index, new)

    def _forward(self, origin: int, entries: list[tuple[bytes, PackedScore]]) -> None:
        """Send new verdicts to every actor but ``origin`` (gathered for :data:`KEEP_DELAY`, one message per actor)."""
        if not entries or len(self.actors) < 2 or self.shared is None:
            return
        self._forwarding.append((origin, entries))
        if self._forward_timer is None:
            self._forward_timer = asyncio.get_running_loop().call_later(KEEP_DELAY, self._send_forwarded)

    def _send_forwarded(self) -> None:
        self._forward_timer = None
        waiting, self._forwarding = self._forwarding, []
        for index, actor in enumerate(self.actors):
            if index in self._down:
                continue
            entries = [entry for origin, batch in waiting if origin != index for entry in batch]
            if entries:
                task = asyncio.get_running_loop().create_task(self._send(actor, entries))
                self._sends.add(task)
                task.add_done_callback(self._sends.discard)

    async def _send(self, actor: Any, entries: list[tuple[bytes, PackedScore]]) -> None:
        """Forward verdicts to one actor; one that died meanwhile misses them (its cache restarts empty anyway)."""
        with contextlib.suppress(Exception):
            await actor.replicate.options(concurrency_group=CONTROL).remote(entries)

    def _look_up(self, chunk: list[_Item]) -> tuple[dict[bytes, PackedScore], int]:
        """The shared tier's verdicts for a chunk's keys (packed, sent with it), and how many keys were looked up."""
        if self.shared is None:
            return {}, 0
        self._store_kept()
        keys = list(dict.fromkeys(key for item in chunk for key in item.keys))
        return look_up(self.shared, keys), len(keys)

    async def _recover(self, index: int) -> None:
        """Give a died (or killed) actor chunks again once it answers: Ray restarts it, elsewhere if need be.

        Until then a call to it fails at once (``ActorUnavailableError``) or waits for its placement, so the
        dispatcher leaves it out and the other actors take the queue.
        """
        info = await self._where(index)
        self.actor_info[index] = {**self.actor_info.get(index, {}), **info}
        self._down.discard(index)
        self._recovering.discard(index)
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

    def _count_retry(self, kind: str) -> None:
        self.retries[kind] = self.retries.get(kind, 0) + 1
        self.metrics.retries.inc(tags={"cause": kind})

    def _retry(self, chunk: list[_Item], cause: str) -> None:
        self._count_retry("timeout" if "chunk_timeout" in cause else "actor_died")
        for item in reversed(chunk):  # back to the front of the queue, in their order
            item.attempts += 1
            if item.attempts > self.options.max_retries:
                self._fail([item], f"gave up after {item.attempts} attempts; last: {cause}")
            else:
                self._enqueue(item, front=True)
        self.metrics.queued.set(self._queued)

    def _finish(self, item: _Item, row: PackedRow) -> None:
        self._settle(item, row, None)
        self._release()

    def _fail(self, chunk: list[_Item], message: str) -> None:
        self.counters["failed_rollouts"] += len(chunk)
        for item in chunk:
            self._settle(item, None, message)
            self._release()

    def _settle(self, item: _Item, row: PackedRow | None, error: str | None) -> None:
        """Hand an item's row (or failure) to every call waiting on it, once; it is then no longer under way."""
        if item.settled:
            return
        item.settled = True
        if self._inflight.get(item.signature) is item:
            del self._inflight[item.signature]
        for call, position in item.waiters:
            call.settle(position, row, error)

    def _release(self) -> None:
        self._admitted -= 1
        self._room.release()


def group_units(records: list[Record], group_bys: list[str | None]) -> list[list[int]]:
    """Positions of the records cut into units no group crosses, in order of first appearance.

    Two records are in one unit when some group-level component (grouping by its ``group_by``) puts them in
    one group; a record no component can group (no group field) is a unit of its own, as it is scored alone.
    """
    parent = list(range(len(records)))

    def root(position: int) -> int:
        while parent[position] != position:
            parent[position] = parent[parent[position]]
            position = parent[position]
        return position

    for group_by in dict.fromkeys(group_bys):
        first: dict[bytes, int] = {}
        for position, record in enumerate(records):
            key = group_of(record, group_by)
            if key is None:
                continue
            other = first.setdefault(key, position)
            if other != position:
                parent[root(position)] = root(other)
    units: dict[int, list[int]] = {}
    for position in range(len(records)):
        units.setdefault(root(position), []).append(position)
    return list(units.values())


def _runs(items: list[_Item]) -> list[list[_Item]]:
    """The items cut into runs of one unit each (an item of no unit is a run of its own)."""
    runs: list[list[_Item]] = []
    for item in items:
        if runs and item.unit is not None and runs[-1][-1].unit == item.unit:
            runs[-1].append(item)
        else:
            runs.append([item])
    return runs


def content_keys(jobs: Sequence[ComponentJob], records: Sequence[Record]) -> list[tuple[bytes, ...]]:
    """Each record's content key under each component of the spec: what its scores depend on.

    Args:
        jobs: The spec's component jobs, in spec order.
        records: The records.

    """
    return [tuple(record_key(job.key_prefix, record, job.fields) for job in jobs) for record in records]


def _chunk_parts(chunk: list[_Item]) -> Sequence[bytes]:
    """A chunk's records pickled in parts: the caller's own parts when the chunk is its whole call, in order."""
    call = chunk[0].source
    whole = len(chunk) == len(call.rows) and all(
        item.source is call and item.position == at for at, item in enumerate(chunk)
    )
    return call.parts if whole and call.parts else to_parts([item.record for item in chunk])


async def _awaitable(ref: Any) -> Any:
    return await ref


def task_cause(exc: Any) -> str:
    """The exception an actor's call raised, as ``Type: message`` (Ray wraps it in a ``RayTaskError``)."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
