"""The admission gates: first come first served, weighted by rollouts, cancellation-safe, per-project quotas."""

from __future__ import annotations

import asyncio

import pytest

from evalsi.server._limits import Admission, RolloutGate


def test_gate_admits_in_order_and_a_large_call_is_not_starved() -> None:
    async def run() -> list[str]:
        gate = RolloutGate(4)
        order: list[str] = []
        await gate.acquire(3)

        async def call(name: str, units: int) -> None:
            await gate.acquire(units)
            order.append(name)

        big = asyncio.create_task(call("big", 4))
        await asyncio.sleep(0)
        small = asyncio.create_task(call("small", 1))  # would fit now, but waits behind "big"
        await asyncio.sleep(0)
        assert order == []
        gate.release(3)
        await big
        assert order == ["big"] and not small.done()
        gate.release(4)
        await small
        return order

    assert asyncio.run(run()) == ["big", "small"]


def test_a_cancelled_waiter_gives_its_place_back() -> None:
    async def run() -> int:
        gate = RolloutGate(2)
        await gate.acquire(2)
        waiter = asyncio.create_task(gate.acquire(2))
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        gate.release(2)
        await gate.acquire(2)
        return gate.used

    assert asyncio.run(run()) == 2


def test_a_call_larger_than_the_capacity_takes_all_of_it() -> None:
    assert RolloutGate(8).weight(100) == 8
    assert RolloutGate(8).weight(0) == 1


def test_quota_waiters_hold_no_global_capacity() -> None:
    async def run() -> None:
        changes: list[tuple[str, str, int]] = []
        admission = Admission(10, {"a": 2}, lambda *c: changes.append(c))
        release = asyncio.Event()

        async def hold(project: str, count: int) -> None:
            async with admission.hold(project, count):
                await release.wait()

        first = asyncio.create_task(hold("a", 2))
        second = asyncio.create_task(hold("a", 2))
        await asyncio.sleep(0.01)
        assert (admission.inflight, admission.waiting, admission.global_gate.used) == (2, 2, 2)
        async with admission.hold("b", 8):  # fits next to a's first call; a's waiting call holds nothing global
            assert admission.global_gate.used == 10
        release.set()
        await asyncio.gather(first, second)
        assert (admission.inflight, admission.waiting, admission.global_gate.used) == (0, 0, 0)
        await asyncio.wait_for(admission.wait_idle(), 1)
        assert ("waiting", "a", 2) in changes

    asyncio.run(run())
