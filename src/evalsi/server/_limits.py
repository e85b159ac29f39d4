"""Back-pressure: rollouts in flight are bounded across calls and per project; calls past a bound wait.

A call holds as many units as it has rollouts. It first takes its project's quota (when the project has one),
then the global ``rewards.max_inflight``: a project waiting on its own quota holds nothing global, so it never
delays another project. Both gates are first-come first-served, so a large call is not starved by small ones.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

GaugeHook = Callable[[str, str, int], None]
"""Called with (gauge, project, delta) where gauge is ``waiting`` or ``inflight``."""


class RolloutGate:
    """A first-come first-served weighted semaphore over rollouts, on one event loop."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    def weight(self, count: int) -> int:
        """Units a call of ``count`` rollouts takes: a call larger than the capacity takes all of it."""
        return max(1, min(count, self.capacity))

    async def acquire(self, units: int) -> None:
        """Wait until ``units`` fit, behind every earlier waiter."""
        if not self._waiters and self.used + units <= self.capacity:
            self.used += units
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (units, future)
        self._waiters.append(entry)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(units)  # granted just as the caller went away: give it back
            else:
                self._waiters.remove(entry)
                self._wake()
            raise

    def release(self, units: int) -> None:
        """Give units back and admit waiters that now fit, in order."""
        self.used -= units
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.used + self._waiters[0][0] <= self.capacity:
            units, future = self._waiters.popleft()
            if future.cancelled():
                continue
            self.used += units
            future.set_result(None)


class Admission:
    """The global gate and one gate per project with a quota."""

    def __init__(self, max_inflight: int, quotas: dict[str, int], on_change: GaugeHook | None = None) -> None:
        self.global_gate = RolloutGate(max_inflight)
        self.project_gates = {project: RolloutGate(limit) for project, limit in quotas.items()}
        self._on_change = on_change
        self.inflight = 0
        self.waiting = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @asynccontextmanager
    async def hold(self, project: str, count: int) -> AsyncIterator[None]:
        """Hold ``count`` rollouts' worth of capacity for the body of the ``async with``."""
        release = await self.enter(project, count)
        try:
            yield
        finally:
            release()

    async def enter(self, project: str, count: int) -> Callable[[], None]:
        """Wait for ``count`` rollouts' worth of capacity; returns the function that gives it back (once).

        The release can outlive the caller: a call whose caller went away keeps its capacity until its work
        really stops.
        """
        project_gate = self.project_gates.get(project)
        self._change("waiting", project, count)
        acquired: list[tuple[RolloutGate, int]] = []
        try:
            for gate in (project_gate, self.global_gate):
                if gate is not None:
                    units = gate.weight(count)
                    await gate.acquire(units)
                    acquired.append((gate, units))
        except BaseException:
            self._change("waiting", project, -count)
            for gate, units in reversed(acquired):
                gate.release(units)
            raise
        self._change("waiting", project, -count)
        self._change("inflight", project, count)
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            for gate, units in reversed(acquired):
                gate.release(units)
            self._change("inflight", project, -count)

        return release

    async def wait_idle(self) -> None:
        """Return once nothing is in flight or waiting (used to drain on shutdown)."""
        await self._idle.wait()

    def _change(self, gauge: str, project: str, delta: int) -> None:
        if gauge == "waiting":
            self.waiting += delta
        else:
            self.inflight += delta
        if self.waiting or self.inflight:
            self._idle.clear()
        else:
            self._idle.set()
        if self._on_change is not None:
            self._on_change(gauge, project, delta)


class SharedGate:
    """A global gate and, per project, a gate of ``share`` units: one project cannot take all of the capacity.

    Used for request-body bytes: a project's bodies beyond its share wait (unread) without delaying another
    project's. A project's gate exists only while it holds or waits for units, so idle projects cost nothing.
    """

    def __init__(self, capacity: int, share: int) -> None:
        self.global_gate = RolloutGate(capacity)
        self.share = max(1, min(share, capacity))
        self.project_gates: dict[str, RolloutGate] = {}
        self._users: dict[str, int] = {}

    def hold(self, project: str, units: int) -> AbstractAsyncContextManager[Held]:
        """Hold ``units`` (capped at the project's share) for the body of the ``async with``."""
        return holding(self.enter(project, units))

    async def enter(self, project: str, units: int, on_change: Callable[[int], None] | None = None) -> Held:
        """Wait for ``units`` (capped at the project's share); the :class:`Held` gives them back.

        ``on_change`` is told every change of the units held (+ once held, - as they are given back).
        """
        gate = self.project_gates.get(project)
        if gate is None:
            gate = self.project_gates[project] = RolloutGate(self.share)
        self._users[project] = self._users.get(project, 0) + 1
        weight = gate.weight(units)
        acquired: list[RolloutGate] = []
        try:
            for each in (gate, self.global_gate):
                await each.acquire(weight)
                acquired.append(each)
        except BaseException:
            for each in reversed(acquired):
                each.release(weight)
            self._left(project)
            raise
        if on_change is not None:
            on_change(weight)
        return Held(self, project, weight, on_change)

    def _left(self, project: str) -> None:
        left = self._users[project] - 1
        if left:
            self._users[project] = left
        else:
            del self._users[project]
            del self.project_gates[project]


@asynccontextmanager
async def holding(entered: Awaitable[Held]) -> AsyncIterator[Held]:
    """What ``entered`` waits for (a gate's ``enter``), held for the body of the ``async with``, then given back."""
    held = await entered
    try:
        yield held
    finally:
        held.release()


class Held:
    """Units a project holds in a :class:`SharedGate`: shrunk once the real size is known, released once."""

    def __init__(
        self, gate: SharedGate, project: str, units: int, on_change: Callable[[int], None] | None = None
    ) -> None:
        self._gate = gate
        self.project = project
        self.units = units
        self.released = False
        self._on_change = on_change

    def shrink(self, units: int) -> None:
        """Keep only ``units`` (when fewer than held), giving the rest back now."""
        units = max(1, units)
        if self.released or units >= self.units:
            return
        extra = self.units - units
        self.units = units
        self._gate.global_gate.release(extra)
        self._gate.project_gates[self.project].release(extra)
        if self._on_change is not None:
            self._on_change(-extra)

    def release(self) -> None:
        """Give every unit back (once; later calls do nothing)."""
        if self.released:
            return
        self.released = True
        self._gate.global_gate.release(self.units)
        self._gate.project_gates[self.project].release(self.units)
        self._gate._left(self.project)
        if self._on_change is not None:
            self._on_change(-self.units)
