"""How the pool's coordinator sends a chunk: the caller's keys are the engine's, and a whole call goes as it came."""

from __future__ import annotations

import asyncio

from evalsi.engine import ScoreCache
from evalsi.ray._coordinator import _Call, _chunk_parts, _Item, content_keys
from evalsi.ray._wire import from_parts, pack_records, to_parts
from evalsi.records import Record
from evalsi.rewards import from_mapping

SPEC = {"components": [{"ref": "exact-match"}, {"ref": "overlong-penalty", "params": {"max_length": 10, "buffer": 4}}]}


def test_the_keys_a_caller_computes_are_those_the_engine_caches_scores_under() -> None:
    reward = from_mapping(SPEC)
    records = reward.records([{"completion": f"answer {i}", "reference": str(i % 3)} for i in range(6)])
    cache = ScoreCache(100)
    reward.component_scores(records, cache=cache)
    keys = content_keys([component.job for component in reward.components], records)
    assert len(keys) == 6 and all(len(row) == 2 for row in keys)
    for column in range(2):
        assert all(score is not None for score in cache.get_many([row[column] for row in keys]))


def chunk_of(call: _Call, positions: list[int]) -> list[_Item]:
    return [_Item(b"", call, at, "spec", {}, True, [(call, at)]) for at in positions]


def test_a_chunk_holding_its_whole_call_in_order_goes_in_the_callers_parts() -> None:
    records = [Record(completion=f"rollout {i}") for i in range(5)]
    parts = tuple(to_parts(pack_records(records)))
    loop = asyncio.new_event_loop()
    try:
        call = _Call(loop.create_future(), [()] * 5, 5, "spec", {}, True, parts)
        assert _chunk_parts(chunk_of(call, [0, 1, 2, 3, 4])) is parts
        assert call.unpacked is None  # the records were never unpickled
        assert from_parts(_chunk_parts(chunk_of(call, [1, 3]))) == pack_records([records[1], records[3]])
        assert from_parts(_chunk_parts(chunk_of(call, [4, 3, 2, 1, 0]))) == pack_records(records[::-1])
    finally:
        loop.close()
