"""The limiter's logic without Ray: leases per holder, reclaiming silent holders, limit changes, the token bucket."""

from __future__ import annotations

import asyncio
import math

import pytest

from evalsi.ray import Limit
from evalsi.ray._leases import LeaseBook
from evalsi.ray._limiter import LimiterActor


class Clock:
    """A monotonic clock a test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_silent_holder_loses_its_leases_after_holder_timeout_and_a_beating_one_keeps_them() -> None:
    clock = Clock()
    book = LeaseBook(Limit(max_concurrency=4, holder_timeout=9.0), clock)
    dead = [book.grant("dead") for _ in range(2)]
    alive = [book.grant("alive") for _ in range(2)]
    assert None not in dead + alive and book.grant("other") is None  # all four slots taken
    for _ in range(4):  # the live holder beats every 3 s, as asked; the dead one is never heard from again
        clock.now += 3.0
        assert book.heartbeat("alive") == 3.0
    assert book.stats()["held"] == 2 and book.reclaimed == 2
    assert book.stats()["holders"] == ["alive"]
    assert book.grant("other") is not None and book.grant("other") is not None and book.grant("other") is None
    assert (
        dead[0] is not None and book.release(dead[0]) is False
    )  # given back after it was reclaimed: ignored, nothing freed
    assert book.stats()["held"] == 4


def test_a_release_renews_the_holder_and_the_last_release_forgets_it() -> None:
    clock = Clock()
    book = LeaseBook(Limit(max_concurrency=4, holder_timeout=9.0), clock)
    first, second = book.grant("h"), book.grant("h")
    assert first is not None and second is not None
    clock.now += 8.0
    assert book.release(first) is True  # heard from: its other lease is kept 9 s from now
    clock.now += 8.0
    assert book.stats()["held"] == 1
    assert book.release(second) is True and book.holders == {}
    assert book.heartbeat("h") == 3.0 and book.holders == {}  # a beat with nothing held tracks nothing


def test_lease_timeout_reclaims_a_lease_of_a_beating_holder_and_one_without_a_holder() -> None:
    clock = Clock()
    book = LeaseBook(Limit(max_concurrency=2, lease_timeout=60.0, holder_timeout=30.0), clock)
    book.grant("h")
    book.grant(None)
    for _ in range(6):
        clock.now += 10.0
        book.heartbeat("h")
    assert book.stats()["held"] == 0 and book.reclaimed == 2 and book.holders == {}


def test_wait_names_the_next_moment_a_refused_grant_could_succeed() -> None:
    clock = Clock()
    book = LeaseBook(Limit(max_concurrency=1, lease_timeout=100.0, holder_timeout=12.0), clock)
    assert book.wait() == math.inf  # nothing held, no rate: only a release changes anything
    book.grant("h")
    clock.now += 2.0
    assert book.grant("x") is None and book.wait() == pytest.approx(10.0)  # the holder's timeout
    rated = LeaseBook(Limit(rate=4.0, burst=1), clock)
    assert rated.grant() is not None and rated.grant() is None
    assert rated.wait() == pytest.approx(0.25)


def test_configure_lowers_the_concurrency_and_lets_the_leases_held_past_it_drain() -> None:
    clock = Clock()
    book = LeaseBook(Limit(max_concurrency=4), clock)
    leases = [book.grant("h") for _ in range(4)]
    old = book.configure(Limit(max_concurrency=2))
    assert old == Limit(max_concurrency=4)
    assert book.stats()["held"] == 4  # nothing revoked
    for lease in leases[:2]:
        assert lease is not None and book.release(lease)
        assert book.grant("h") is None  # still at or past the new limit
    assert leases[2] is not None and book.release(leases[2])
    assert book.grant("h") is not None and book.grant("h") is None
    assert book.stats()["max_concurrency"] == 2


def test_configure_changes_the_rate_the_bucket_refills_at() -> None:
    clock = Clock()
    book = LeaseBook(Limit(rate=1.0, burst=1), clock)
    assert book.grant() is not None and book.grant() is None
    clock.now += 0.5  # half a token earned at the old rate
    book.configure(Limit(rate=8.0, burst=1))
    assert book.grant() is None and book.wait() == pytest.approx(0.0625)  # the other half at the new rate
    clock.now += 0.0625
    assert book.grant() is not None
    book.configure(Limit(rate=None))
    assert all(book.grant() is not None for _ in range(20))


def test_configure_with_a_shorter_holder_timeout_counts_it_from_the_change() -> None:
    clock = Clock()
    book = LeaseBook(Limit(holder_timeout=60.0), clock)
    book.grant("h")
    clock.now += 20.0
    book.configure(Limit(holder_timeout=6.0))
    assert book.stats()["held"] == 1  # silent for 20 s, past the new bound, but it has not heard of it yet
    assert book.heartbeat("h") == 2.0
    clock.now += 6.0
    assert book.stats()["held"] == 0 and book.reclaimed == 1


def test_limit_checks_its_fields() -> None:
    with pytest.raises(ValueError, match="holder_timeout"):
        Limit(holder_timeout=0)
    with pytest.raises(ValueError, match="lease_timeout"):
        Limit(lease_timeout=-1)
    assert Limit(holder_timeout=12.0).heartbeat == 4.0


def test_actor_waiters_take_the_slots_a_dead_holder_loses_within_its_timeout() -> None:
    async def scenario() -> None:
        actor = LimiterActor(Limit(max_concurrency=2, holder_timeout=0.3))
        await actor.acquire("dead")
        await actor.acquire("dead")
        waiters = [asyncio.create_task(actor.acquire("alive")) for _ in range(2)]
        leases = await asyncio.wait_for(asyncio.gather(*waiters), timeout=60)  # woken by the reclaim, not polled
        assert len(set(leases)) == 2
        assert actor.stats()["reclaimed"] == 2 and actor.stats()["held"] == 2

    asyncio.run(scenario())


def test_actor_waiters_are_woken_by_a_raised_limit_and_by_a_release() -> None:
    async def scenario() -> None:
        actor = LimiterActor(Limit(max_concurrency=1))
        first = await actor.acquire("a")
        waiters = [asyncio.create_task(actor.acquire("b")) for _ in range(3)]
        await asyncio.sleep(0)  # let them start waiting
        assert not any(w.done() for w in waiters)
        assert actor.configure(Limit(max_concurrency=3)) == (Limit(max_concurrency=1), actor.started)
        await asyncio.wait_for(_until(lambda: sum(w.done() for w in waiters) == 2), timeout=60)
        assert actor.stats()["held"] == 3  # the third waiter still waits
        actor.release(first)
        await asyncio.wait_for(asyncio.gather(*waiters), timeout=60)
        assert actor.stats()["held"] == 3 and actor.stats()["most"] == 3

    asyncio.run(scenario())


async def _until(condition: object) -> None:
    """Yield to the loop until ``condition()`` holds (the other tasks run in between; no clock involved)."""
    assert callable(condition)
    while not condition():
        await asyncio.sleep(0)
