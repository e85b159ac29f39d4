"""Per-rollout scoring time: measured in the engine per component, summed per rollout, and logged as percentiles
(``reward/latency_ms/p50``, ``/p90``, ``/p99``) by the TRL, verl and OpenRLHF adapters beside the per-call time."""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import evalsi.rewards
import evalsi.rewards.openrlhf
import evalsi.rewards.verl
from evalsi.rewards._latency import PERCENTILE_KEYS, RecentLatencies, latency_percentiles, percentile
from evalsi.rewards._scorer import clear_shared
from evalsi.rewards.trl import reward_funcs
from tests.rewards import _adapter_evaluators  # noqa: F401  (registers the test evaluators)

pytestmark = pytest.mark.timeout(120)

P50, P90, P99 = PERCENTILE_KEYS
SLOW = "sleep:0.5"
# one rollout of ten sleeps 0.5 s: the median stays near zero, the 99th percentile is that rollout's time
BATCH = [SLOW] + [f"fast {i}" for i in range(9)]


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    clear_shared()
    yield
    clear_shared()


def spec(*components: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "evals.si/v1alpha1",
        "kind": "RewardSpec",
        "metadata": {"name": "lat"},
        "spec": {"components": list(components)},
    }


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "reward.yaml"
    path.write_text(yaml.safe_dump(spec({"ref": "test-adapters-sleepy", "name": "sleepy"})))
    return path


def assert_tail(percentiles: dict[str, float]) -> None:
    """The slow rollout shows in p99 alone; generous bounds: the machine is shared."""
    assert percentiles[P99] >= 500.0
    assert percentiles[P50] < 250.0 and percentiles[P90] < 250.0


# --- the engine's measurement --------------------------------------------------------------------------------------


def test_each_rollout_carries_the_time_its_own_components_took() -> None:
    reward = evalsi.rewards.from_mapping(spec({"ref": "test-adapters-sleepy"}))
    results = reward.score([{"completion": c} for c in BATCH])
    times = [r.latency_ms for r in results]
    assert all(t is not None for t in times)
    assert times[0] is not None and times[0] >= 500.0
    assert all(t is not None and t < 250.0 for t in times[1:])


def test_components_add_up_a_batch_call_is_shared_and_a_cached_score_costs_nothing() -> None:
    reward = evalsi.rewards.from_mapping(
        spec({"ref": "test-adapters-sleepy", "name": "each"}, {"ref": "test-adapters-sleepy-batch", "name": "batch"})
    )
    rollouts = [{"completion": "sleep:0.2"}, {"completion": "x"}, {"completion": "y"}]
    first = [r.latency_ms or 0.0 for r in reward.score(rollouts)]
    assert first[0] >= 200.0 + 100.0  # its own 0.2 s, and a third of the batch component's 0.3 s
    assert all(t >= 100.0 for t in first[1:]) and all(t < first[0] for t in first[1:])
    again = [r.latency_ms for r in reward.score(rollouts)]
    assert again == [0.0, 0.0, 0.0]  # every score came from the cache


def test_percentiles_are_nearest_rank_and_a_one_rollout_call_uses_the_recent_window() -> None:
    values = [float(v) for v in range(1, 101)]
    assert [percentile(values, q) for q in (50, 90, 99)] == [50.0, 90.0, 99.0]
    assert percentile([7.0], 99) == 7.0
    recent = RecentLatencies(size=3)
    one = evalsi.rewards.RewardResult(1.0, "ok", {}, latency_ms=10.0)
    assert latency_percentiles([one], recent) == {P50: 10.0, P90: 10.0, P99: 10.0}
    for ms in (20.0, 30.0, 40.0):
        latency_percentiles([evalsi.rewards.RewardResult(1.0, "ok", {}, latency_ms=ms)], recent)
    assert latency_percentiles([one], recent) == {P50: 30.0, P90: 40.0, P99: 40.0}  # the last three: 30, 40, 10
    unmeasured = evalsi.rewards.RewardResult(1.0, "ok", {})
    assert latency_percentiles([unmeasured, unmeasured], recent) == {}


def test_the_sorted_window_reads_the_percentiles_of_exactly_the_last_rollouts() -> None:
    rng = random.Random(7)
    recent = RecentLatencies(size=50)
    kept: deque[float] = deque(maxlen=50)
    for step in range(400):
        # repeated values (cached scores all read 0.0), one at a time and in batches, as the adapters add them
        values = [float(rng.choice([0, 0, 1, 2, rng.randint(0, 500)])) for _ in range(1 if step % 3 else 7)]
        kept.extend(values)
        if step % 3:
            ranked = recent.add_and_rank(values)
        else:  # a batch call only remembers its rollouts; the next one-rollout call reads them too
            recent.add(values)
            ranked = recent.add_and_rank([])
        assert list(ranked) == [percentile(list(kept), q) for q in (50, 90, 99)]


def test_one_rollout_at_a_time_reads_the_window_even_when_an_equal_value_replaces_the_oldest() -> None:
    rng = random.Random(11)
    recent = RecentLatencies(size=40)
    kept: deque[float] = deque(maxlen=40)
    for step in range(600):
        if step % 50 == 49:  # a batch call in between leaves the sorted copy to rebuild
            batch = [float(rng.randint(0, 9)) for _ in range(5)]
            recent.add(batch)
            kept.extend(batch)
        # mostly 0.0 (cached scores), so the arriving value often equals the one leaving
        value = float(rng.choice([0, 0, 0, 0, rng.randint(0, 30)])) if step % 97 != 96 else math.nan
        ranked = recent.add_one(value)
        if value == value:
            kept.append(value)
        assert list(ranked) == [percentile(list(kept), q) for q in (50, 90, 99)]


def test_a_nan_latency_is_not_kept_in_the_window() -> None:
    recent = RecentLatencies(size=3)
    assert recent.add_and_rank([math.nan]) == ()
    nan_result = evalsi.rewards.RewardResult(1.0, "ok", {}, latency_ms=math.nan)
    assert latency_percentiles([nan_result], recent) == {}
    for ms in (1.0, math.nan, 2.0, 3.0, 4.0):
        recent.add_and_rank([ms])
    assert recent.add_and_rank([]) == (3.0, 4.0, 4.0)  # the last three numbers: 2, 3, 4
    recent.add([math.nan, 5.0, math.nan])
    assert recent.add_and_rank([]) == (4.0, 5.0, 5.0)  # 3, 4, 5


# --- the adapters ----------------------------------------------------------------------------------------------------


def test_verl_batch_dicts_carry_the_percentiles_beside_the_call_latency(spec_file: Path) -> None:
    out = evalsi.rewards.verl.compute_score_batch(["d"] * 10, BATCH, [None] * 10, None, spec=str(spec_file))
    assert out[0]["reward/latency_ms"] >= 500.0
    assert_tail({key: out[0][key] for key in PERCENTILE_KEYS})
    assert all({key: o[key] for key in PERCENTILE_KEYS} == {key: out[0][key] for key in PERCENTILE_KEYS} for o in out)
    single = evalsi.rewards.verl.compute_score("d", "fast", None, None, spec=str(spec_file))
    assert set(PERCENTILE_KEYS) <= set(single)
    assert single[P99] >= 500.0  # over the process's recent rollouts, which include the slow one


def test_openrlhf_extra_logs_carry_the_percentiles(spec_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALSI_REWARD_SPEC", str(spec_file))
    out = evalsi.rewards.openrlhf.reward_func([f"Q: {c}" for c in BATCH], ["Q: "] * 10, None)
    logs = out["extra_logs"]
    assert all(len(logs[key]) == 10 for key in PERCENTILE_KEYS)
    assert_tail({key: logs[key][0] for key in PERCENTILE_KEYS})
    assert logs["reward/latency_ms"][0] >= 500.0


def test_trl_logs_the_percentiles_once_per_batch(spec_file: Path) -> None:
    funcs, _ = reward_funcs(spec_file)
    logged: list[tuple[str, float]] = []
    kwargs = {"prompts": ["p"] * 10, "completions": BATCH, "log_metric": lambda n, v: logged.append((n, v))}
    for f in funcs:
        f(**kwargs)
    names = [name for name, _ in logged]
    assert names == ["reward/latency_ms", "reward/latency_ms_per_rollout", P50, P90, P99]
    assert_tail(dict(logged))
