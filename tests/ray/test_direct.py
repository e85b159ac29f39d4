"""How a caller cuts a batch for the scorer actors, and the room its chunks take (no Ray needed)."""

from __future__ import annotations

import asyncio
import threading
from hashlib import sha256

import pytest

from evalsi.ray._direct import Room, plan


def keys_of(texts: list[str]) -> list[tuple[bytes, ...]]:
    """Content-key-like digests per text under each of two components (equal texts: equal keys)."""
    return [(sha256(b"a" + t.encode()).digest(), sha256(b"b" + t.encode()).digest()) for t in texts]


def test_equal_rollouts_are_sent_once_and_answer_every_position() -> None:
    keys = keys_of(["a", "b", "a", "c", "b", "a"])
    cut = plan(keys, [0, 1], {}, max_batch=256, room=1024)
    assert cut.distinct == [0, 1, 3]
    assert cut.answers == [0, 1, 0, 3, 1, 0]
    sent = [position for wave in cut.waves for chunk in wave for position in chunk.positions]
    assert sorted(sent) == [0, 1, 3]


def test_a_batch_is_cut_into_one_equal_share_per_live_actor() -> None:
    keys = keys_of([f"r{i}" for i in range(64)])
    [wave] = plan(keys, [0, 1], {}, max_batch=256, room=1024).waves
    assert sorted(chunk.actor for chunk in wave) == [0, 1]
    assert [len(chunk.positions) for chunk in wave] == [32, 32]
    [wave] = plan(keys, [2], {}, max_batch=256, room=1024).waves  # actors 0 and 1 down
    assert [(chunk.actor, len(chunk.positions)) for chunk in wave] == [(2, 64)]


def test_shares_beyond_one_per_actor_or_beyond_the_room_go_in_later_waves() -> None:
    keys = keys_of([f"r{i}" for i in range(96)])
    waves = plan(keys, [0, 1], {}, max_batch=16, room=1024).waves
    assert [[len(chunk.positions) for chunk in wave] for wave in waves] == [[16, 16]] * 3
    assert all(sorted(chunk.actor for chunk in wave) == [0, 1] for wave in waves)
    waves = plan(keys_of([f"r{i}" for i in range(8)]), [0], {}, max_batch=2, room=4).waves
    assert [[len(chunk.positions) for chunk in wave] for wave in waves] == [[2]] * 4
    waves = plan(keys_of([f"r{i}" for i in range(8)]), [0, 1], {}, max_batch=8, room=2).waves
    assert [[len(chunk.positions) for chunk in wave] for wave in waves] == [[2]] * 4  # no wave holds more than 2


def test_the_same_batch_goes_to_the_same_actors_and_busy_actors_come_last() -> None:
    keys = keys_of([f"r{i}" for i in range(10)])
    first = [(chunk.actor, chunk.positions) for chunk in plan(keys, [0, 1, 2], {}, 256, 1024).waves[0]]
    again = [(chunk.actor, chunk.positions) for chunk in plan(keys, [0, 1, 2], {}, 256, 1024).waves[0]]
    assert first == again
    starts = {plan(keys_of([f"one-{i}"]), [0, 1, 2], {}, 256, 1024).waves[0][0].actor for i in range(24)}
    assert starts == {0, 1, 2}  # one-rollout calls spread over the actors by their keys
    single = keys_of(["x"])
    usual = plan(single, [0, 1], {}, 256, 1024).waves[0][0].actor
    other = 1 - usual
    assert plan(single, [0, 1], {usual: 1}, 256, 1024).waves[0][0].actor == other


def test_room_makes_threads_wait_until_it_is_given_back() -> None:
    room = Room(4)
    room.take(3)
    took = threading.Event()

    def taker() -> None:
        room.take(2)
        took.set()

    thread = threading.Thread(target=taker)
    thread.start()
    assert not took.wait(0.2)
    assert room.waiting == 2
    room.release(3)
    assert took.wait(30)
    thread.join(30)
    assert (room.held, room.waiting, room.peak) == (2, 0, 3)


def test_room_serves_event_loops_in_order_and_a_cancelled_wait_gives_nothing_away() -> None:
    async def scenario() -> list[str]:
        room = Room(2)
        await room.take_async(2)
        order: list[str] = []

        async def take(name: str, n: int) -> None:
            await room.take_async(n)
            order.append(name)

        first = asyncio.create_task(take("first", 2))
        gone = asyncio.create_task(take("gone", 1))
        await asyncio.sleep(0)
        assert room.waiting == 3
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert room.waiting == 2
        room.release(2)
        await asyncio.wait_for(first, 30)
        assert (room.held, room.waiting) == (2, 0)
        room.release(2)
        assert room.held == 0
        return order

    assert asyncio.run(scenario()) == ["first"]
