"""Whole batches sent straight from a caller to the scorer actors: one message out and one back per chunk.

Through the coordinator a batch took four messages (caller → coordinator → actor → coordinator → caller), each
waking a process, and the one coordinator did every caller's bookkeeping. Here the caller holds the actors'
handles (the coordinator's :meth:`~evalsi.ray._coordinator.Coordinator.route`) and does what the coordinator did
for its own batches:

- **De-duplication and the even split.** Equal rollouts of a call (GRPO's repeats) are sent once; the distinct
  ones are cut into one equal share per live actor (at most ``max_batch`` each), in waves of one chunk per actor.
  Which actor takes the first share follows the call's first content key, so the same batch goes to the same
  actors (whose own caches hold it); actors this client has chunks on already come last.
- **Back-pressure.** At most ``max_queued`` of this client's rollouts are on actors at once; a call beyond that
  waits for room (:class:`Room`, for threads and event loops alike).
- **Faults.** A chunk whose actor died, or that outlived ``chunk_timeout``, is handed to the coordinator
  (:meth:`~evalsi.ray._coordinator.Coordinator.rescue`), which counts the retry, restarts a hung actor, leaves
  it out until it answers and scores the chunk with its remaining attempts. Each rollout is answered once.
- **Counters.** Each call's counts go to the coordinator as it returns (a message the caller does not wait
  for), so ``pool.stats()`` from any process counts every caller's calls.

Verdicts the actors compute reach the shared tier and the other actors through the coordinator, after the reply
(:mod:`evalsi.ray._cache`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evalsi.ray._wire import PackedRecord, PackedRow, join_keys, to_parts

log = logging.getLogger("evalsi.ray")

ROUTE_TTL = 1.0
"""Seconds a route with actors down is used before the coordinator is asked again (to take recovered ones back)."""

Outcome = tuple[Any, ...]
"""``("ok", rows)``, ``("failed", position, message)`` or ``("spec_error", message)``, as the coordinator answers."""


class Room:
    """The most rollouts one client has on actors at once, taken by threads and event loops alike (FIFO for loops).

    Args:
        size: Rollouts that may be out at once.

    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.held = 0
        self.waiting = 0
        self.peak = 0
        self._cond = threading.Condition()
        self._waiters: deque[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()

    def take(self, n: int) -> None:
        """Wait (this thread) until ``n`` rollouts fit, then hold them."""
        with self._cond:
            if self.held + n > self.size or self._waiters:
                self.waiting += n
                self._cond.wait_for(lambda: self.held + n <= self.size and not self._waiters)
                self.waiting -= n
            self._hold(n)

    async def take_async(self, n: int) -> None:
        """Wait (this event loop) until ``n`` rollouts fit, then hold them."""
        loop = asyncio.get_running_loop()
        with self._cond:
            if self.held + n <= self.size and not self._waiters:
                self._hold(n)
                return
            future: asyncio.Future[None] = loop.create_future()
            self._waiters.append((n, loop, future))
            self.waiting += n
        try:
            await future
        except asyncio.CancelledError:
            with self._cond:
                if future.done() and not future.cancelled():
                    self._give_back(n)  # the room came as the caller left: hand it on
                else:
                    self._waiters = deque(w for w in self._waiters if w[2] is not future)
                    self.waiting -= n
            raise

    def release(self, n: int) -> None:
        """Give back ``n`` rollouts' room."""
        with self._cond:
            self._give_back(n)

    def _hold(self, n: int) -> None:
        self.held += n
        self.peak = max(self.peak, self.held)

    def _give_back(self, n: int) -> None:
        self.held -= n
        while self._waiters and self.held + self._waiters[0][0] <= self.size:
            size, loop, future = self._waiters.popleft()
            self.waiting -= size
            self._hold(size)
            loop.call_soon_threadsafe(_resolve, future)
        self._cond.notify_all()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@dataclass(slots=True)
class Chunk:
    """One share of a call's distinct rollouts and the actor it goes to."""

    actor: int
    positions: list[int]
    """Positions in the call of the rollouts it holds (one per distinct rollout)."""


@dataclass(slots=True)
class Plan:
    """How a call goes out: its distinct rollouts in waves of chunks, and which one answers each position."""

    distinct: list[int]
    """The call position of each distinct rollout, in order of first appearance."""
    answers: list[int]
    """For each call position, the call position of the distinct rollout that answers it."""
    waves: list[list[Chunk]]


def plan(keys: Sequence[Sequence[bytes]], live: Sequence[int], busy: dict[int, int], max_batch: int, room: int) -> Plan:
    """Cut a call's rollouts into waves of chunks over the ``live`` actors.

    Args:
        keys: Each rollout's content key under each component (equal keys: the same computation).
        live: The actors that take chunks, by index.
        busy: Chunks this client has on each actor now (those with more come last).
        max_batch: Most rollouts in a chunk.
        room: Most rollouts out at once (a wave never holds more, unless one chunk does).

    """
    first: dict[bytes, int] = {}
    answers = [first.setdefault(b"".join(row), position) for position, row in enumerate(keys)]
    distinct = list(first.values())
    share = max(1, min(max_batch, room, math.ceil(len(distinct) / len(live))))
    start = keys[distinct[0]][0][0] % len(live) if distinct and keys[distinct[0]] else 0
    order = sorted([*live[start:], *live[:start]], key=lambda index: busy.get(index, 0))
    per_wave = max(1, min(len(order), room // share))
    shares = [distinct[at : at + share] for at in range(0, len(distinct), share)]
    waves = [
        [Chunk(order[slot], positions) for slot, positions in enumerate(shares[at : at + per_wave])]
        for at in range(0, len(shares), per_wave)
    ]
    return Plan(distinct, answers, waves)


class DirectRoute:
    """One client's route to a pool's scorer actors (see the module's description).

    Args:
        ray: The ``ray`` module.
        coordinator: The pool's coordinator actor.

    """

    def __init__(self, ray: Any, coordinator: Any) -> None:
        self._ray = ray
        self._coordinator = coordinator
        self._route: dict[str, Any] | None = None
        self._fetched = 0.0
        self._lock = threading.Lock()
        self.room: Room | None = None
        self._busy: dict[int, int] = {}

    # The route.
    def _stale(self) -> bool:
        route = self._route
        return route is None or (bool(route["down"]) and time.monotonic() - self._fetched > ROUTE_TTL)

    def _take(self, route: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._route, self._fetched = route, time.monotonic()
            if self.room is None:
                self.room = Room(int(route["max_queued"]))
        return route

    def current(self) -> dict[str, Any]:
        """The route, asked of the coordinator when there is none yet or actors were down a while ago."""
        route = self._route
        if route is None or self._stale():
            return self._take(self._ray.get(self._coordinator.route.remote()))
        return route

    async def current_async(self) -> dict[str, Any]:
        """:meth:`current` for an event loop."""
        route = self._route
        if route is None or self._stale():
            return self._take(await self._coordinator.route.remote())
        return route

    def live(self, route: dict[str, Any]) -> list[int]:
        """The actors that take chunks now (none: the call goes through the coordinator, which waits for them)."""
        down = set(route["down"])
        return [index for index in range(len(route["actors"])) if index not in down]

    def _lost(self, route: dict[str, Any], index: int) -> None:
        """Actor ``index`` failed a chunk: leave it out of the route until the coordinator is asked again."""
        with self._lock:
            current = self._route or route
            self._route = {**current, "down": sorted({*current["down"], index})}
            self._fetched = time.monotonic()

    # Scoring.
    def score(
        self, spec_id: str, resource: dict[str, Any], packed: list[PackedRecord], keys: list[tuple[bytes, ...]]
    ) -> Outcome | None:
        """Score a call's records on the actors, waiting in this thread; None when no actor is live now."""
        route = self.current()
        call = self._begin(route, keys)
        if call is None:
            return None
        assert self.room is not None
        for wave in call.plan.waves:
            sent, failed = [], []
            for chunk in wave:
                if chunk.actor in self._route_down(route):  # lost earlier in this call: the coordinator places it
                    failed.append((chunk, *self._prepare(packed, keys, chunk), "moved"))
                    continue
                self.room.take(len(chunk.positions))
                sent.append(
                    (chunk, self._send(route, spec_id, resource, packed, keys, chunk))
                )  # gives room back if it raises
            deadline = time.monotonic() + (route["chunk_timeout"] or math.inf)
            for chunk, (ref, parts, joined) in sent:
                try:
                    timeout = max(0.0, deadline - time.monotonic()) if deadline != math.inf else None
                    rows, _ = self._ray.get(ref, timeout=timeout)
                    call.answer(chunk, rows)
                except Exception as exc:  # classified: a died or hung actor is rescued, a raised error fails
                    cause = call.fault(chunk, exc)
                    if cause is not None:
                        failed.append((chunk, parts, joined, cause))
                finally:
                    self._done(chunk)
            rescues = [
                (chunk, self._rescue(route, chunk, cause, spec_id, resource, parts, joined))
                for chunk, parts, joined, cause in failed
            ]
            for chunk, ref in rescues:
                call.rescued(chunk, self._ray.get(ref))
        return call.finish()

    async def score_async(
        self, spec_id: str, resource: dict[str, Any], packed: list[PackedRecord], keys: list[tuple[bytes, ...]]
    ) -> Outcome | None:
        """:meth:`score` for an event loop."""
        route = await self.current_async()
        call = self._begin(route, keys)
        if call is None:
            return None
        timeout = route["chunk_timeout"]

        async def one(chunk: Chunk) -> None:
            assert self.room is not None
            if chunk.actor in self._route_down(route):  # lost earlier in this call: the coordinator places it
                parts, joined = self._prepare(packed, keys, chunk)
                call.rescued(chunk, await self._rescue(route, chunk, "moved", spec_id, resource, parts, joined))
                return
            await self.room.take_async(len(chunk.positions))
            ref, parts, joined = self._send(route, spec_id, resource, packed, keys, chunk)
            try:
                rows, _ = await asyncio.wait_for(_awaitable(ref), timeout=timeout)
                call.answer(chunk, rows)
                return
            except Exception as exc:
                cause = call.fault(chunk, exc)
            finally:
                self._done(chunk)
            if cause is not None:
                call.rescued(chunk, await self._rescue(route, chunk, cause, spec_id, resource, parts, joined))

        for wave in call.plan.waves:
            await asyncio.gather(*(one(chunk) for chunk in wave))
        return call.finish()

    def _begin(self, route: dict[str, Any], keys: list[tuple[bytes, ...]]) -> _CallState | None:
        """A call's state, its chunks planned over the live actors; None when none is live."""
        live = self.live(route)
        if not live:
            return None
        return _CallState(self, plan(keys, live, self._busy, route["max_batch"], route["max_queued"]))

    def _send(
        self,
        route: dict[str, Any],
        spec_id: str,
        resource: dict[str, Any],
        packed: list[PackedRecord],
        keys: list[tuple[bytes, ...]],
        chunk: Chunk,
    ) -> tuple[Any, list[bytes], list[bytes] | None]:
        """Send a chunk to its actor (its room taken already; given back if it cannot be sent)."""
        try:
            parts, joined = self._prepare(packed, keys, chunk)
            ref = route["actors"][chunk.actor].score_direct.remote(spec_id, resource, joined, *parts)
        except BaseException:
            assert self.room is not None
            self.room.release(len(chunk.positions))
            raise
        with self._lock:
            self._busy[chunk.actor] = self._busy.get(chunk.actor, 0) + 1
        return ref, parts, joined

    @staticmethod
    def _prepare(
        packed: list[PackedRecord], keys: list[tuple[bytes, ...]], chunk: Chunk
    ) -> tuple[list[bytes], list[bytes] | None]:
        """A chunk's records pickled in parts, and its keys joined (:mod:`evalsi.ray._wire`)."""
        positions = chunk.positions
        whole = len(positions) == len(packed)  # every rollout distinct and in one chunk, in order
        parts = to_parts(packed if whole else [packed[p] for p in positions])
        return parts, join_keys(keys if whole else [keys[p] for p in positions])

    def _route_down(self, route: dict[str, Any]) -> list[int]:
        """The actors known down now, as this client last heard or saw (``route`` or a newer copy of it)."""
        current = self._route
        return list(current["down"]) if current is not None else list(route["down"])

    def _done(self, chunk: Chunk) -> None:
        assert self.room is not None
        self.room.release(len(chunk.positions))
        with self._lock:
            self._busy[chunk.actor] -= 1

    def _rescue(
        self,
        route: dict[str, Any],
        chunk: Chunk,
        cause: str,
        spec_id: str,
        resource: dict[str, Any],
        parts: list[bytes],
        joined: list[bytes] | None,
    ) -> Any:
        if cause != "moved":
            self._lost(route, chunk.actor)
        incarnation = route["incarnations"][chunk.actor]
        generation = route["generation"]
        return self._coordinator.rescue.remote(
            chunk.actor, generation, incarnation, cause, spec_id, resource, len(chunk.positions), joined, *parts
        )

    # Counters.
    def tally(self, counts: dict[str, Any]) -> None:
        """Send a call's counters to the coordinator (not waited for; a later call of this process comes after)."""
        try:
            self._coordinator.tally.remote(counts)
        except Exception as exc:  # the pool was shut down meanwhile: nothing left to count
            log.debug("reward pool: a call's counters were not counted: %s", exc)


class _CallState:
    """One call's rows as its chunks come back, its failures, and its counters."""

    def __init__(self, client: DirectRoute, plan: Plan) -> None:
        self.client = client
        self.plan = plan
        self.started = time.perf_counter()
        self.rows: dict[int, PackedRow] = {}
        self.failure: tuple[int, str] | None = None
        self.spec_error: str | None = None
        self.chunks = 0
        self.failed = 0

    def answer(self, chunk: Chunk, rows: list[PackedRow]) -> None:
        self.chunks += 1
        for position, row in zip(chunk.positions, rows, strict=True):
            self.rows[position] = row

    def fault(self, chunk: Chunk, exc: Exception) -> str | None:
        """What a chunk's exception means: a cause to rescue it for (``died``, ``timeout``), or None (it failed)."""
        self.chunks += 1
        ray = self.client._ray
        if isinstance(exc, (TimeoutError, ray.exceptions.GetTimeoutError)):
            return "timeout"
        if isinstance(exc, ray.exceptions.RayActorError):
            return "died"
        from evalsi.errors import SpecError
        from evalsi.ray._coordinator import task_cause

        cause = getattr(exc, "cause", None)
        if isinstance(cause, SpecError):
            self.spec_error = str(cause)
            return None
        self._fail(chunk.positions[0], f"actor {chunk.actor} failed: {task_cause(exc)}", len(chunk.positions))
        return None

    def rescued(self, chunk: Chunk, outcome: Outcome) -> None:
        """The coordinator's answer for a chunk it took over."""
        if outcome[0] == "ok":
            for position, row in zip(chunk.positions, outcome[1], strict=True):
                self.rows[position] = row
        elif outcome[0] == "spec_error":
            self.spec_error = outcome[1]
        else:
            self._fail(chunk.positions[outcome[1]], outcome[2], 0)  # the coordinator counted its failures

    def _fail(self, position: int, message: str, count: int) -> None:
        self.failed += count
        if self.failure is None or position < self.failure[0]:
            self.failure = (position, message)

    def finish(self) -> Outcome:
        """The call's outcome, its counters sent to the coordinator."""
        total = len(self.plan.answers)
        ok = self.spec_error is None and self.failure is None
        self.client.tally(
            {
                "calls": 1,
                "rollouts": total,
                "deduplicated": total - len(self.plan.distinct),
                "chunks": self.chunks,
                "failed_rollouts": self.failed,
                "ok" if ok else "failed": total,
                "seconds": time.perf_counter() - self.started,
                "max_admitted": self.client.room.peak if self.client.room is not None else 0,
            }
        )
        if self.spec_error is not None:
            return ("spec_error", self.spec_error)
        if self.failure is not None:
            return ("failed", *self.failure)
        rows = self.rows
        return ("ok", [rows[source] for source in self.plan.answers])


async def _awaitable(ref: Any) -> Any:
    return await ref
