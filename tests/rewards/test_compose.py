"""The composition rules: the shared vectors, and properties over random component scores."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalsi.errors import RewardBatchError
from evalsi.evaluators import Score
from evalsi.rewards import ComponentRule, compose_batch
from evalsi.rewards.vectors import check_vectors, load_vectors

VECTORS = Path(__file__).parents[2] / "testdata" / "reward_vectors.json"


def test_vectors_file_covers_every_rule_with_enough_vectors() -> None:
    vectors = load_vectors(VECTORS)
    assert len(vectors) >= 40
    covered = {rule for v in vectors for rule in v["rules"]}
    assert covered >= {1, 2, 3, 4, 5, 6}
    assert len({v["name"] for v in vectors}) == len(vectors)


def test_every_vector_passes_in_process() -> None:
    report = check_vectors(VECTORS)
    assert report.failures == []
    assert report.passed == len(load_vectors(VECTORS))


def test_vectors_command_prints_counts_last_and_fails_on_a_wrong_vector(tmp_path: Path) -> None:
    ok = subprocess.run([sys.executable, "-m", "evalsi.rewards.vectors", str(VECTORS)], capture_output=True, text=True)
    assert ok.returncode == 0
    assert ok.stdout.strip().splitlines()[-1].endswith(" passed, 0 failed")
    broken = tmp_path / "broken.json"
    broken.write_text(
        VECTORS.read_text().replace(
            '"expect": {"total": 0.7, "status": "ok"}', '"expect": {"total": 0.1, "status": "ok"}', 1
        )
    )
    bad = subprocess.run([sys.executable, "-m", "evalsi.rewards.vectors", str(broken)], capture_output=True, text=True)
    assert bad.returncode == 1
    assert "FAIL one component, weight 1" in bad.stdout
    assert bad.stdout.strip().splitlines()[-1].endswith(" passed, 1 failed")


values = st.floats(min_value=-10, max_value=10, allow_nan=False)
ok_scores = st.one_of(values.map(Score.ok), st.booleans().map(Score.ok))
any_scores = st.one_of(ok_scores, st.just(Score.skipped("n/a")), st.just(Score.error("e")))
rules = st.builds(
    ComponentRule,
    name=st.just(""),
    weight=values,
    gate=st.booleans(),
    threshold=values,
    on_error=st.sampled_from(["zero", "none"]),
)


def named(rule_list: list[ComponentRule]) -> list[ComponentRule]:
    return [ComponentRule(f"c{i}", r.weight, r.gate, r.threshold, r.on_error) for i, r in enumerate(rule_list)]


@given(st.lists(st.tuples(values, ok_scores), min_size=1, max_size=6))
def test_without_gates_or_errors_the_total_is_the_weighted_sum(pairs: list[tuple[float, Score]]) -> None:
    rule_list = [ComponentRule(f"c{i}", w) for i, (w, _) in enumerate(pairs)]
    [result] = compose_batch(rule_list, [[s] for _, s in pairs])
    expected = sum(w * float(s.value or 0) for w, s in pairs)
    assert result.status == "ok"
    assert result.total is not None and math.isclose(result.total, expected, abs_tol=1e-9)


@given(
    st.lists(st.tuples(rules, any_scores), min_size=1, max_size=6),
    values,
    st.tuples(values, values).map(sorted),
)
def test_clip_always_bounds_and_gated_totals_are_the_clipped_floor(
    pairs: list[tuple[ComponentRule, Score]], floor: float, clip: list[float]
) -> None:
    rule_list = named([r for r, _ in pairs])
    [result] = compose_batch(rule_list, [[s] for _, s in pairs], floor, (clip[0], clip[1]))
    scores = [s for _, s in pairs]
    has_none_error = any(s.status == "error" and r.on_error == "none" for r, s in zip(rule_list, scores, strict=True))
    if has_none_error:
        assert (result.total, result.status) == (None, "no_total")
        return
    assert result.total is not None and clip[0] <= result.total <= clip[1]
    if result.status == "gated":
        assert result.total == min(max(floor, clip[0]), clip[1])
    assert list(result.components) == [r.name for r in rule_list]


@given(st.lists(st.booleans(), min_size=1, max_size=20))
def test_a_raise_error_fails_the_batch_at_its_lowest_rollout(errors: list[bool]) -> None:
    column = [Score.error("boom") if e else Score.ok(1.0) for e in errors]
    rule_list = [ComponentRule("a", on_error="raise")]
    if not any(errors):
        assert len(compose_batch(rule_list, [column])) == len(errors)
        return
    with pytest.raises(RewardBatchError) as info:
        compose_batch(rule_list, [column])
    assert info.value.index == errors.index(True)
    assert info.value.component == "a"
    assert "rollout" in str(info.value) and "onError" in str(info.value)


def test_non_finite_values_become_errors() -> None:
    assert Score.ok(float("nan")).status == "error"
    assert Score.ok(float("inf")).status == "error"
