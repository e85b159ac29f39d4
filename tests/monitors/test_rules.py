"""Each monitor's documented threshold, as the viewer draws it beside the logged value."""

from __future__ import annotations

from evalsi.monitors import SIGNALS, Rule, Thresholds, rule


def known(signal: str, thresholds: Thresholds | None = None) -> Rule:
    found = rule(signal, thresholds)
    assert found is not None, signal
    return found


def test_every_monitor_has_a_rule_from_its_thresholds_field() -> None:
    defaults = Thresholds()
    rules = [known(signal) for signal in SIGNALS]
    for signal, found in zip(SIGNALS, rules, strict=True):
        assert found.signal == signal and found.threshold == getattr(defaults, found.field)
        assert f"({found.field})" in found.text
    assert {found.kind for found in rules} == {"at_least", "at_most", "rise"}


def test_a_rule_follows_the_thresholds_given_and_names_the_way_it_fires() -> None:
    custom = Thresholds(length_ratio=2.0, truncation_rise=0.3, heldout_margin=-0.01, reward_gain=0.1)
    assert known("length_drift", custom).text == "≥ 2 (length_ratio)"
    assert known("truncation_rate", custom).text == "risen ≥ 0.3 over the baseline's (truncation_rise)"
    heldout = known("reward_vs_heldout", custom)
    assert heldout.kind == "at_most" and heldout.threshold == -0.01
    assert "≥ 0.1 (reward_gain)" in heldout.text


def test_a_verdict_rate_or_an_unknown_name_has_no_rule() -> None:
    assert rule("sandbox/timeout") is None and rule("nonsense") is None
