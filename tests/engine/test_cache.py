"""The content cache: repeated rollouts cost no evaluator call; errors are never cached; the LRU is bounded."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import evalsi.rewards
from evalsi.engine import ScoreCache, finish_components
from evalsi.engine._keys import record_key
from evalsi.evaluators import Score
from tests.helpers.counting import Counting


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    Counting.reset()
    yield
    Counting.reset()


def reward(**cache: object) -> evalsi.rewards.Reward:
    spec: dict[str, object] = {"components": [{"ref": "test-counting", "onError": "zero"}]}
    if cache:
        spec["cache"] = cache
    return evalsi.rewards.from_mapping(spec)


def test_repeated_rollouts_across_batches_cost_no_call() -> None:
    r = reward()
    batch = [{"completion": f"c{i}"} for i in range(10)]
    first = r.score(batch)
    assert Counting.scored() == 10
    second = r.score(batch)
    assert Counting.scored() == 10
    assert [x.total for x in first] == [x.total for x in second]
    assert r.cache is not None and r.cache.stats.hits == 10


def test_duplicates_within_a_batch_are_scored_once() -> None:
    r = reward()
    results = r.score([{"completion": "same"}] * 8 + [{"completion": "other"}])
    assert Counting.calls == [2]
    assert len(results) == 9
    assert r.cache is not None
    stats = r.cache.stats
    assert (stats.hits, stats.misses, stats.deduplicated) == (0, 2, 7)  # the repeats are not counted as misses


def test_only_fields_the_evaluator_reads_make_the_key() -> None:
    r = reward()
    r.score([{"completion": "x", "answer": "1", "meta": 1}])
    r.score([{"completion": "x", "answer": "2", "meta": 2}])
    assert Counting.scored() == 1


def test_different_params_do_not_share_entries() -> None:
    a = evalsi.rewards.from_mapping({"components": [{"ref": "test-counting"}]})
    b = evalsi.rewards.from_mapping({"components": [{"ref": "test-counting", "params": {"fail_on": "zz"}}]})
    assert a.cache is not b.cache
    cache = ScoreCache()
    a.cache = b.cache = cache
    a.score([{"completion": "x"}])
    b.score([{"completion": "x"}])
    assert Counting.scored() == 2


def test_errors_are_never_cached() -> None:
    r = reward()
    r.score([{"completion": "bad"}])
    r2 = evalsi.rewards.from_mapping(
        {"components": [{"ref": "test-counting", "onError": "zero", "params": {"fail_on": "bad"}}]}
    )
    r2.score([{"completion": "bad"}])
    r2.score([{"completion": "bad"}])
    assert Counting.calls == [1, 1, 1]


def test_disabled_cache_calls_every_time() -> None:
    r = reward(enabled=False)
    r.score([{"completion": "x"}])
    r.score([{"completion": "x"}])
    assert Counting.scored() == 2


def test_lru_is_bounded_and_evicts_least_recent() -> None:
    cache = ScoreCache(max_entries=2)
    cache.put_many([(b"a", Score.ok(1.0)), (b"b", Score.ok(2.0))])
    assert cache.get_many([b"a"])[0] is not None  # a is now most recent
    cache.put_many([(b"c", Score.ok(3.0))])
    assert len(cache) == 2
    assert cache.get_many([b"b"]) == [None]
    assert cache.stats.evictions == 1


def test_evaluator_exception_becomes_error_scores_for_its_records() -> None:
    r = evalsi.rewards.from_mapping(
        {"components": [{"ref": "test-counting", "onError": "zero", "params": {"raise_on": "boom"}}]}
    )
    results = r.score([{"completion": "ok"}, {"completion": "boom"}])
    for result in results:
        score = result.components["test-counting"]
        assert score.status == "error"
        assert "evaluator exploded" in (score.reason or "")


def test_the_lru_is_bounded_by_bytes_too() -> None:
    cache = ScoreCache(max_entries=1000, max_bytes=10_000)
    big = Score.ok(True, details={"raw": "x" * 3000})
    cache.put_many([(bytes([i]) * 32, big) for i in range(10)])
    assert len(cache) == 3 and cache.bytes <= 10_000 and cache.stats.evictions == 7
    assert cache.get_many([bytes([9]) * 32]) == [big]  # the newest are kept
    cache.put_many([(b"h" * 32, Score.ok(True, details={"raw": "x" * 20_000}))])  # larger than the whole cache
    assert cache.get_many([b"h" * 32]) == [None] and len(cache) == 3


def test_an_evaluator_cache_version_changes_every_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scores persisted under an evaluator's earlier verdict rule (a shared cache) are not served for the new."""
    from evalsi.engine._runner import ComponentJob
    from evalsi.evaluators import get_evaluator

    evaluator = get_evaluator("test-counting")
    params = evaluator.parse_params({})
    before = ComponentJob("c", evaluator, params).key_prefix
    monkeypatch.setattr(type(evaluator), "cache_version", "2")
    after = ComponentJob("c", evaluator, params).key_prefix
    assert before != after and ComponentJob("c", evaluator, params).key_prefix == after
    assert get_evaluator("code-exec-tests").cache_version  # its extraction rule changed the verdicts


def test_a_look_up_with_keys_given_uses_them_and_finds_what_the_computed_keys_would() -> None:
    reward = evalsi.rewards.from_mapping({"components": [{"ref": "exact-match", "name": "exact"}]})
    records = reward.records([{"completion": "a", "reference": "a"}, {"completion": "b", "reference": "a"}])
    job = reward.components[0].job
    computed = [record_key(job.key_prefix, record, job.fields) for record in records]
    cache = ScoreCache()
    first = finish_components(reward.look_up(records, cache=cache, keys=[computed]), cache)
    assert first == reward.component_scores(records, cache=None)
    assert reward.look_up(records, cache=cache).done  # stored under the keys given, which are the computed ones
    other = [bytes([i]) * 32 for i in range(2)]
    looked = reward.look_up(records, cache=cache, keys=[other])
    assert not looked.done and list(looked.pending[0].todo) == other
