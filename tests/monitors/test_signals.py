"""The monitor signals as pure functions, and the monitor's windows, thresholds and stop file."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from evalsi.monitors import (
    Monitor,
    Observation,
    Signal,
    Thresholds,
    component_shares,
    duplicate_fraction,
    groups_of,
    metrics,
    near_duplicate,
    parse_stop_on,
    pearson,
    verdict_of,
    verdict_rates,
    zero_variance_fraction,
)


def _obs(
    totals: Sequence[float | None],
    *,
    components: Mapping[str, Sequence[float | None]] | None = None,
    lengths: Sequence[float] | None = None,
    texts: Sequence[str] | None = None,
    groups: Sequence[object] | None = None,
    truncated: Sequence[bool] | None = None,
    verdicts: Sequence[str | None] | None = None,
    step: int | None = None,
) -> Observation:
    n = len(totals)
    return Observation(
        totals=totals,
        components=components or {},
        lengths=lengths if lengths is not None else [5.0] * n,
        texts=texts if texts is not None else [f"distinct answer number {i}" for i in range(n)],
        group_keys=groups if groups is not None else [i // 4 for i in range(n)],
        truncated=truncated,
        verdicts=verdicts or (),
        step=step,
    )


def _fired(signals: list[Signal], name: str) -> bool:
    return next(s for s in signals if s.name == name).fired


def _value(signals: list[Signal], name: str) -> float | None:
    return next(s for s in signals if s.name == name).value


# -- pure functions ------------------------------------------------------------------------------------------------


def test_component_shares_split_the_variance_of_a_weighted_sum() -> None:
    fmt = [1.0, 0.0, 1.0, 0.0]
    correct = [1.0, 1.0, 0.0, 0.0]
    totals = [0.5 * f + c for f, c in zip(fmt, correct, strict=True)]
    shares = component_shares(totals, {"format": fmt, "correct": correct}, {"format": 0.5, "correct": 1.0})
    assert shares["format"] + shares["correct"] == pytest.approx(1.0)
    assert shares["correct"] == pytest.approx(0.8)  # variance 1 against 0.25 of the format's
    # a component that does not vary has no share; weight-0 components are left out
    shares = component_shares(
        correct, {"format": [1.0] * 4, "correct": correct, "info": fmt}, {"format": 0.5, "correct": 1.0, "info": 0.0}
    )
    assert shares == {"format": pytest.approx(0.0), "correct": pytest.approx(1.0)}
    assert component_shares([1.0, 1.0], {"a": [1.0, 1.0]}, {"a": 1.0}) == {}


def test_skipped_components_and_rows_without_total() -> None:
    shares = component_shares([1.0, 0.0, None], {"a": [1.0, None, 5.0]}, {"a": 1.0})
    assert shares == {"a": pytest.approx(1.0)}


def test_groups_are_runs_of_equal_prompts() -> None:
    assert groups_of(["p", "p", "q", "q", "q", "p"]) == [[0, 1], [2, 3, 4], [5]]


def test_zero_variance_fraction_counts_flat_groups() -> None:
    groups = [[0, 1], [2, 3], [4]]
    assert zero_variance_fraction([1.0, 1.0, 0.0, 1.0, 3.0], groups) == 0.5
    assert zero_variance_fraction([1.0, None, 0.0, 1.0], [[0, 1], [2, 3]]) == 0.0  # one scored rollout: not a group
    assert zero_variance_fraction([1.0], [[0]]) is None


def test_near_duplicates() -> None:
    assert near_duplicate("The  answer is 4", "the answer is 4\n", 0.9)
    long = " ".join(f"w{i}" for i in range(40))
    assert near_duplicate(long, long + " w40", 0.9)
    assert not near_duplicate("the answer is 4", "the answer is 5", 0.9)
    texts = ["a b c", "a  b c", "x y z", "p q r", "p q r", "p q r"]
    assert duplicate_fraction(texts, [[0, 1, 2], [3, 4, 5]], 0.9) == pytest.approx(3 / 6)
    assert duplicate_fraction(["a"], [[0]], 0.9) is None


def test_pearson() -> None:
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert pearson([1, 1, 1], [1, 2, 3]) is None
    with pytest.raises(ValueError, match="one length"):
        pearson([1, 2], [1])


def test_verdicts_from_code_scores() -> None:
    code = {"passed": 1, "total": 2, "isolation": "bubblewrap"}
    assert verdict_of("ok", None, {"passed": 2, "total": 2, "isolation": "bubblewrap"}) == "pass"
    assert verdict_of("ok", "x", {**code, "first_failure": {"reason": "timeout"}}) == "timeout"
    assert verdict_of("ok", "x", {**code, "first_failure": {"reason": "output limit"}}) == "output"
    assert verdict_of("ok", "x", {**code, "first_failure": {"reason": "crash: exit status 1"}}) == "crash"
    assert verdict_of("ok", "x", {**code, "first_failure": {"reason": "wrong answer: printed 3"}}) == "wrong"
    assert verdict_of("error", "the bubblewrap sandbox failed: no bwrap", None) == "sandbox"
    assert verdict_of("ok", None, {"matched": True}) is None  # not a code-running score
    rates = verdict_rates(["timeout", "pass", None, "timeout", "crash"])
    assert rates["timeout"] == 0.5 and rates["crash"] == 0.25 and rates["output"] == 0.0
    assert verdict_rates([None, None]) == {}


def test_stop_on_names() -> None:
    assert parse_stop_on("monitor:length_drift") == "length_drift"
    assert parse_stop_on("zero_variance_groups") == "zero_variance_groups"
    with pytest.raises(ValueError, match="monitor:length_drift"):
        parse_stop_on("monitor:lenght")


def test_observation_rows_must_align() -> None:
    with pytest.raises(ValueError, match="lengths has 1 rows, the totals 2"):
        Observation(totals=[1.0, 0.0], components={}, lengths=[1], texts=["a", "b"], group_keys=[0, 0])
    with pytest.raises(ValueError, match="component 'a'"):
        Observation(totals=[1.0], components={"a": [1.0, 2.0]}, lengths=[1], texts=["a"], group_keys=[0])


# -- the monitor over steps ------------------------------------------------------------------------------------------


def test_length_drift_fires_only_once_the_window_leaves_the_baseline() -> None:
    monitor = Monitor(baseline=2, window=2)
    for step in (1, 2):
        signals = monitor.observe(_obs([0.0, 1.0, 0.5, 0.2], lengths=[4, 4, 4, 4], step=step))
        assert not _fired(signals, "length_drift")
    signals = monitor.observe(_obs([0.0, 1.0, 0.5, 0.2], lengths=[7, 7, 7, 7], step=3))
    # window (4 + 7) / 2 = 5.5 over 4: 1.375, below 1.5
    assert _value(signals, "length_drift") == pytest.approx(1.375) and not _fired(signals, "length_drift")
    signals = monitor.observe(_obs([0.0, 1.0, 0.5, 0.2], lengths=[8, 8, 8, 8], step=4))
    assert _value(signals, "length_drift") == pytest.approx(7.5 / 4) and _fired(signals, "length_drift")
    assert monitor.fired == {"length_drift": 4}


def test_length_reward_correlation() -> None:
    monitor = Monitor()
    signals = monitor.observe(_obs([1.0, 2.0, 3.0, 4.0], lengths=[10, 20, 30, 40]))
    assert _fired(signals, "length_reward_correlation")
    monitor = Monitor()
    signals = monitor.observe(_obs([1.0, 0.0, 1.0, 0.0], lengths=[10, 20, 30, 40]))
    assert not _fired(signals, "length_reward_correlation")


def test_truncation_rise_not_level() -> None:
    monitor = Monitor(baseline=1, window=1)
    monitor.observe(_obs([0.0, 1.0, 0.0, 1.0], truncated=[True, True, True, True]))
    signals = monitor.observe(_obs([0.0, 1.0, 0.0, 1.0], truncated=[True, True, True, True]))
    assert _value(signals, "truncation_rate") == 1.0 and not _fired(signals, "truncation_rate")
    monitor = Monitor(baseline=1, window=1)
    monitor.observe(_obs([0.0, 1.0, 0.0, 1.0], truncated=[False, False, False, True]))
    signals = monitor.observe(_obs([0.0, 1.0, 0.0, 1.0], truncated=[False, True, True, True]))
    assert _fired(signals, "truncation_rate")


def test_duplicates_rising_in_groups() -> None:
    monitor = Monitor(baseline=1, window=1)
    monitor.observe(_obs([0.0, 1.0, 0.0, 1.0]))
    signals = monitor.observe(_obs([0.0, 1.0, 0.0, 1.0], texts=["same thing said"] * 4))
    assert _value(signals, "duplicate_completions") == pytest.approx(0.75)
    assert _fired(signals, "duplicate_completions")


def test_zero_variance_groups() -> None:
    monitor = Monitor(window=2)
    signals = monitor.observe(_obs([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0]))  # two groups of 4: one flat
    assert _value(signals, "zero_variance_groups") == 0.5 and _fired(signals, "zero_variance_groups")
    signals = monitor.observe(_obs([1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0]))
    assert _value(signals, "zero_variance_groups") == 0.25 and not _fired(signals, "zero_variance_groups")


def test_component_dominance_needs_two_weighted_components() -> None:
    weights = {"format": 1.0, "correct": 1.0}
    monitor = Monitor(weights=weights)
    fmt = [1.0, 0.0, 1.0, 0.0]
    signals = monitor.observe(_obs(fmt, components={"format": fmt, "correct": [0.0] * 4}))
    assert _fired(signals, "component_dominance")
    assert next(s for s in signals if s.name == "component_dominance").detail == "format"
    monitor = Monitor(weights=weights)
    correct = [1.0, 1.0, 0.0, 0.0]
    totals = [f + c for f, c in zip(fmt, correct, strict=True)]
    signals = monitor.observe(_obs(totals, components={"format": fmt, "correct": correct}))
    assert _value(signals, "component_dominance") == pytest.approx(0.5)
    assert not _fired(signals, "component_dominance")
    signals = Monitor(weights={"correct": 1.0}).observe(_obs(correct, components={"correct": correct}))
    assert _value(signals, "component_dominance") is None


def test_sandbox_verdict_shift() -> None:
    monitor = Monitor(baseline=1, window=1)
    monitor.observe(_obs([0.0, 1.0, 0.0, 1.0], verdicts=["pass", "wrong", "pass", "timeout"]))
    signals = monitor.observe(_obs([0.0, 1.0, 0.0, 1.0], verdicts=["timeout", "timeout", "pass", "timeout"]))
    signal = next(s for s in signals if s.name == "sandbox_verdicts")
    assert signal.fired and signal.detail == "timeout" and signal.value == pytest.approx(0.5)
    assert monitor.verdict_metrics()["monitor/sandbox/timeout"] == 0.75
    assert _value(Monitor().observe(_obs([0.0, 1.0])), "sandbox_verdicts") is None


def test_reward_up_heldout_flat_fires_reward_up_heldout_up_does_not() -> None:
    monitor = Monitor(window=1)
    monitor.observe(_obs([0.0, 0.2, 0.0, 0.2], step=1))
    base = {f"r{i}": [float(i % 2)] for i in range(10)}
    assert monitor.observe_heldout(1, base).value is None
    monitor.observe(_obs([0.8, 1.0, 0.8, 1.0], step=2))
    worse = {f"r{i}": [0.0] for i in range(10)}
    signal = monitor.observe_heldout(2, worse)
    assert signal.fired and signal.value == pytest.approx(-0.5)
    assert "train reward +0.800" in signal.detail

    monitor = Monitor(window=1)
    monitor.observe(_obs([0.0, 0.2, 0.0, 0.2], step=1))
    monitor.observe_heldout(1, base)
    monitor.observe(_obs([0.8, 1.0, 0.8, 1.0], step=2))
    better = {f"r{i}": [1.0] for i in range(10)}
    signal = monitor.observe_heldout(2, better)
    assert not signal.fired and signal.value == pytest.approx(0.5)


def test_heldout_flat_but_reward_not_up_does_not_fire() -> None:
    monitor = Monitor(window=1)
    values = {f"r{i}": [float(i % 2)] for i in range(10)}
    monitor.observe(_obs([0.5, 0.5, 0.4, 0.6], step=1))
    monitor.observe_heldout(1, values)
    monitor.observe(_obs([0.5, 0.5, 0.4, 0.62], step=2))
    assert not monitor.observe_heldout(2, values).fired


def test_stop_file_written_once_for_a_stop_on_signal(tmp_path: Path) -> None:
    stop = tmp_path / "stop.json"
    monitor = Monitor(baseline=1, window=1, stop_on=["monitor:duplicate_completions"], stop_file=stop)
    monitor.observe(_obs([0.0, 1.0, 0.0, 1.0], lengths=[1, 1, 1, 1], step=1))
    signals = monitor.observe(_obs([0.0, 1.0, 0.0, 1.0], lengths=[9, 9, 9, 9], step=2))
    assert _fired(signals, "length_drift") and not stop.exists()  # fired, but not one to stop on
    monitor.observe(_obs([0.0, 1.0, 0.0, 1.0], texts=["one answer"] * 4, step=3))
    body = json.loads(stop.read_text())
    assert body["reason"] == "monitor" and body["monitor"] == "duplicate_completions" and body["step"] == 3
    assert body["threshold"] == Thresholds().duplicate_rise


def test_stop_on_needs_a_stop_file() -> None:
    with pytest.raises(ValueError, match="stop_file"):
        Monitor(stop_on=["length_drift"])
    with pytest.raises(ValueError, match="unknown monitor"):
        Monitor(stop_on=["nope"], stop_file="x")


def test_metrics_leave_out_signals_that_do_not_apply() -> None:
    signals = Monitor().observe(_obs([1.0, 2.0, 3.0, 4.0], lengths=[1, 2, 3, 4]))
    logged = metrics(signals)
    assert logged["monitor/length_reward_correlation"] == pytest.approx(1.0)
    assert logged["monitor/length_reward_correlation/fired"] == 1.0
    assert "monitor/component_dominance" not in logged and "monitor/reward_vs_heldout" not in logged


def test_metrics_log_the_level_each_signal_fires_at_a_rise_over_its_run_s_baseline() -> None:
    monitor = Monitor(baseline=2, window=1)
    monitor.observe(_obs([0.0, 1.0, 0.0, 1.0], truncated=[False, False, False, True]))
    monitor.observe(_obs([0.0, 1.0, 0.0, 1.0], truncated=[False, False, True, True]))
    logged = metrics(monitor.observe(_obs([0.0, 1.0, 0.0, 1.0], truncated=[False, True, True, True])))
    # baseline (0.25 + 0.5) / 2 = 0.375: the truncation rate fires at 0.375 + 0.2 (the value 0.75 passed it)
    assert logged["monitor/truncation_rate/threshold"] == pytest.approx(0.575)
    assert logged["monitor/truncation_rate"] == 0.75 and logged["monitor/truncation_rate/fired"] == 1.0
    # duplicates: the baseline had none, so the level is the rise itself
    assert logged["monitor/duplicate_completions/threshold"] == pytest.approx(Thresholds().duplicate_rise)
    # a signal compared with a fixed level logs that level
    assert logged["monitor/length_drift/threshold"] == Thresholds().length_ratio
    assert logged["monitor/zero_variance_groups/threshold"] == Thresholds().zero_variance
