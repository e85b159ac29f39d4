"""The process's gate without Ray: a wait for a lease cancelled after the limiter granted it gives the lease back,
and a limiter restarted since the gate configured it is configured again by the gate's next heartbeat."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from evalsi.ray import Limit
from evalsi.ray._heartbeat import Heartbeat
from evalsi.ray._limiter import LimiterActor, RayGate

UPSTREAM = "http://rm.internal:5000"


class Method:
    """An actor method: ``remote`` records the call and returns what the test set (a future for acquire)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.result: Any = None

    def remote(self, *args: Any) -> Any:
        self.calls.append(args)
        return self.result


class Limiter:
    """A limiter actor's handle."""

    def __init__(self) -> None:
        self.acquire = Method()
        self.release = Method()
        self.heartbeat = Method()
        self.configure = Method()


class Ref:
    """An ObjectRef: every await waits on a future of its own, so cancelling one wait leaves the answer be."""

    def __init__(self, answer: asyncio.Future[int]) -> None:
        self.answer = answer

    def __await__(self) -> Any:
        return asyncio.shield(self.answer).__await__()


class FakeRay:
    def __init__(self) -> None:
        self.cancelled: list[Any] = []

    def cancel(self, ref: Any) -> None:
        self.cancelled.append(ref)

    def get(self, ref: Any, timeout: float | None = None) -> Any:
        return ref  # the fake methods answer at once


def gate(limiter: Limiter) -> RayGate:
    """A gate on one upstream's limiter, built around the fakes (its constructor would join a Ray cluster)."""
    made = RayGate.__new__(RayGate)
    made._ray = FakeRay()
    made.holder = "host:1:test"
    made.handles = {UPSTREAM: limiter}
    made.limits = {UPSTREAM: Limit(max_concurrency=2)}
    made._started = {UPSTREAM: "first"}
    made.heartbeat = Heartbeat(lambda upstreams: {}, {UPSTREAM: 5.0})
    made._returning = set()
    return made


def test_a_wait_cancelled_after_the_grant_gives_the_lease_back() -> None:
    async def scenario() -> None:
        limiter = Limiter()
        answer: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        limiter.acquire.result = Ref(answer)
        waiting = asyncio.create_task(gate(limiter).acquire_async(UPSTREAM))
        await asyncio.sleep(0)  # the wait has started
        answer.set_result(7)  # granted ...
        waiting.cancel()  # ... and cancelled before the wait saw the answer
        await asyncio.gather(waiting, return_exceptions=True)
        await asyncio.wait_for(_until(lambda: limiter.release.calls), timeout=60)
        assert waiting.cancelled() and limiter.release.calls == [(7,)]
        assert limiter.acquire.calls == [("host:1:test",)]

    asyncio.run(scenario())


def test_a_wait_cancelled_before_the_grant_gives_nothing_back() -> None:
    async def scenario() -> None:
        limiter = Limiter()
        answer: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        limiter.acquire.result = Ref(answer)
        made = gate(limiter)
        waiting = asyncio.create_task(made.acquire_async(UPSTREAM))
        await asyncio.sleep(0)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        answer.set_exception(RuntimeError("cancelled at the limiter"))  # what the cancelled call answers
        await asyncio.wait_for(_until(lambda: not made._returning), timeout=60)
        assert made._ray.cancelled == [limiter.acquire.result] and limiter.release.calls == []

    asyncio.run(scenario())


async def _until(condition: Any) -> None:
    """Yield to the loop until ``condition()`` holds (no clock involved)."""
    while not condition():
        await asyncio.sleep(0)


def test_a_heartbeat_configures_a_restarted_limiter_again_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    limiter = Limiter()
    made = gate(limiter)
    limiter.heartbeat.result = (4.0, "first")
    assert made._beat([UPSTREAM]) == {UPSTREAM: 4.0}
    assert limiter.configure.calls == []  # the same limiter as when the gate was installed
    limiter.heartbeat.result = (5.0, "second")  # restarted: back at the limit it was created with
    limiter.configure.result = (Limit(max_concurrency=8), "second")
    assert made._beat([UPSTREAM]) == {UPSTREAM: 5.0}
    assert limiter.configure.calls == [(Limit(max_concurrency=2),)] and made._started[UPSTREAM] == "second"
    (warning,) = [r.getMessage() for r in caplog.records if "changes from" in r.getMessage()]
    assert "max_concurrency=8" in warning and "max_concurrency=2" in warning and UPSTREAM in warning
    assert made._beat([UPSTREAM]) == {UPSTREAM: 5.0} and len(limiter.configure.calls) == 1
    assert limiter.heartbeat.calls == [("host:1:test",)] * 3


def test_every_run_of_a_limiter_has_a_name_of_its_own() -> None:
    first, second = LimiterActor(Limit()), LimiterActor(Limit())
    assert first.started != second.started
    assert first.heartbeat("h") == (Limit().heartbeat, first.started)
