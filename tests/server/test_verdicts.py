"""Verdicts of fully cached rows: composed and encoded once, equal to composing and encoding anew, bounded."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from evalsi.errors import DataError, RewardBatchError
from evalsi.evaluators import Score
from evalsi.rewards import from_mapping
from evalsi.rewards.wire import results_json
from evalsi.server.rewards._verdicts import Verdicts


def _reward(**extra: Any) -> Any:
    components = [
        {"ref": "exact-match", "name": "exact", "weight": 2.0},
        {"ref": "exact-match", "name": "gate", "gate": True, "onError": "none"},
    ]
    return from_mapping({"components": components, **extra})


def _columns(count: int) -> list[list[Score]]:
    exact = [Score(i % 2 == 0, "ok", f"row {i}") for i in range(count)]
    gate = [Score(i % 3 != 0, "ok") if i % 5 else Score(None, "error", "upstream down") for i in range(count)]
    return [exact, gate]


def test_kept_rows_compose_and_encode_as_the_reward_does() -> None:
    reward, columns, verdicts = _reward(), _columns(30), Verdicts(100)
    first = verdicts.compose(reward, columns)
    assert first == reward.compose(columns)
    assert orjson.loads(verdicts.encode(first)) == results_json(first)
    again = verdicts.compose(reward, [list(column) for column in columns])
    assert all(a is b for a, b in zip(again, first, strict=True))  # the same row: the result kept for it
    assert verdicts.encode(again) == orjson.dumps(results_json(again))  # byte for byte, the JSON built once
    reordered = verdicts.compose(reward, [column[::-1] for column in columns])
    assert reordered == reward.compose([column[::-1] for column in columns])
    assert verdicts.encode(reordered) == orjson.dumps(results_json(reordered))  # each at its own index
    assert len(verdicts) == 30


def test_rows_are_told_apart_by_their_score_objects_and_reward() -> None:
    columns, verdicts = _columns(6), Verdicts(100)
    doubled, clipped = _reward(), _reward(clip=[0.0, 1.0])
    first = verdicts.compose(doubled, columns)
    other = verdicts.compose(clipped, columns)
    assert other == clipped.compose(columns) != first
    equal_not_same = [[Score(s.value, s.status, s.reason) for s in column] for column in columns]
    fresh = verdicts.compose(doubled, equal_not_same)
    assert fresh == first and all(a is not b for a, b in zip(fresh, first, strict=True))
    encoded = Verdicts(100).encode(fresh)  # results this store never kept are encoded as usual
    assert encoded == orjson.dumps(results_json(fresh))


def test_a_refused_batch_raises_as_composition_does_and_nothing_is_kept() -> None:
    reward, verdicts = from_mapping({"components": [{"ref": "exact-match", "name": "exact"}]}), Verdicts(100)
    columns = [[Score(True, "ok"), Score(None, "error", "boom")]]
    with pytest.raises(RewardBatchError) as raised:
        verdicts.compose(reward, columns)
    assert (raised.value.index, raised.value.component) == (1, "exact")
    huge = from_mapping({"components": [{"ref": "exact-match", "name": "exact", "weight": 1e308}], "clip": None})
    with pytest.raises(DataError):
        verdicts.compose(huge, [[Score(1e308, "ok")]])
    assert len(verdicts) == 0


def test_the_store_keeps_at_most_its_limit_and_starts_over_when_full() -> None:
    reward, verdicts = _reward(), Verdicts(10)
    big = _columns(11)
    assert verdicts.compose(reward, big) == reward.compose(big)
    assert len(verdicts) == 0  # a batch past the limit is not kept
    first = _columns(6)
    verdicts.compose(reward, first)
    assert len(verdicts) == 6
    verdicts.compose(reward, _columns(6))  # 12 would pass the limit: the store starts over with these
    assert len(verdicts) == 6
    again = verdicts.compose(reward, first)
    assert again == reward.compose(first)
