"""The monitor the verl and OpenRLHF adapters share: rollouts read a step at a time, every call the same keys."""

from __future__ import annotations

import math

import pytest

from evalsi.evaluators import Score
from evalsi.monitors import Monitor
from evalsi.rewards._compose import RewardResult
from evalsi.rewards._monitoring import ADAPTER_SIGNALS, AdapterMonitor, stop_on_list


def _result(total: float) -> RewardResult:
    return RewardResult(total=total, status="ok", components={"ok": Score.ok(total)})


def test_rollouts_are_read_a_batch_at_a_time_and_every_call_gets_every_key() -> None:
    adapter = AdapterMonitor(Monitor(weights={"ok": 1.0}), batch=3)
    first = adapter.feed(["a b"], ["p"], [_result(1.0)])
    assert set(first) == {f"monitor/{n}{s}" for n in ADAPTER_SIGNALS for s in ("", "/fired", "/threshold")}
    assert all(math.isnan(v) for v in first.values()) and adapter.steps == 0
    second = adapter.feed(["c d e", "f"], ["p", "p"], [_result(0.0), _result(0.5)])
    assert adapter.steps == 1 and second["monitor/zero_variance_groups"] == 0.0
    assert second["monitor/zero_variance_groups/threshold"] == 0.5
    # one call of seven rollouts closes two batches and keeps the seventh for the next
    adapter.feed(["x"] * 7, ["q"] * 7, [_result(1.0)] * 7)
    assert adapter.steps == 3


def test_a_batch_below_one_rollout_and_stop_on_lists() -> None:
    with pytest.raises(ValueError, match="at least 1 rollout"):
        AdapterMonitor(Monitor(), batch=0)
    assert stop_on_list("monitor:length_drift, monitor:truncation_rate") == [
        "monitor:length_drift",
        "monitor:truncation_rate",
    ]
    assert stop_on_list(None) == [] and stop_on_list(["length_drift"]) == ["length_drift"]
