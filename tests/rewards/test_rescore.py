"""Re-scoring stored rollouts under a new spec: flips, paired intervals, and scores reused by content key."""

from __future__ import annotations

import math
from typing import Any

import pytest

import evalsi.rewards
from evalsi.errors import DataError
from evalsi.evaluators import Score
from evalsi.rewards import RowSource, StoredRollout, rescore, score_keys, stored_from_scores
from evalsi.rewards.wire import result_json
from evalsi.stats import estimate
from tests.helpers.counting import Counting

ROLLOUTS: list[dict[str, Any]] = [
    {"id": "a", "prompt": "2+2?", "completion": "The answer is 4", "answer": "4"},
    {"id": "b", "prompt": "3+3?", "completion": "6", "answer": "6"},
    {"id": "c", "prompt": "5+5?", "completion": "I think 10 or 11", "answer": "10"},
    {"id": "d", "prompt": "1+1?", "completion": "\\boxed{3}", "answer": "2"},
    {"id": "e", "prompt": "9-3?", "completion": "six", "answer": "6"},
]


def spec(*components: dict[str, Any]) -> evalsi.rewards.Reward:
    return evalsi.rewards.from_mapping({"components": list(components)})


def stored_by(reward: evalsi.rewards.Reward, rollouts: list[dict[str, Any]]) -> list[StoredRollout]:
    """What `rewards score --keep-rollouts` writes, read back."""
    records = reward.records(rollouts)
    results = reward.score(rollouts)
    lines = [
        {**result_json(r, i, record_id=rec.id), "rollout": rollout, "keys": keys}
        for i, (r, rec, rollout, keys) in enumerate(
            zip(results, records, rollouts, score_keys(reward, records), strict=True)
        )
    ]
    return stored_from_scores(lines, RowSource("old.jsonl", tuple(range(1, len(lines) + 1))))


@pytest.fixture(autouse=True)
def _count() -> None:
    Counting.reset()


def test_the_same_spec_reuses_every_score_and_calls_no_evaluator() -> None:
    old = spec({"ref": "test-counting", "name": "parity"}, {"ref": "contains", "name": "loose"})
    stored = stored_by(old, ROLLOUTS)
    Counting.reset()
    report = rescore(spec({"ref": "test-counting", "name": "parity"}, {"ref": "contains", "name": "loose"}), stored)
    assert Counting.scored() == 0
    assert (report.reused, report.computed) == (10, 0)
    assert report.changed_rollouts == 0 and report.flip_rate == 0.0
    assert [d.kind for d in report.components] == ["unchanged", "unchanged"]
    assert report.total is not None and report.total.kind == "unchanged"


def test_a_changed_component_is_scored_again_and_its_flips_listed() -> None:
    old = spec({"ref": "test-counting", "name": "parity", "weight": 0.5}, {"ref": "contains", "name": "right"})
    stored = stored_by(old, ROLLOUTS)
    Counting.reset()
    new = spec({"ref": "test-counting", "name": "parity", "weight": 0.5}, {"ref": "math-equiv", "name": "right"})
    report = rescore(new, stored)
    assert Counting.scored() == 0  # its evaluator and params did not change: reused
    parity, right = report.components
    assert (parity.kind, parity.reused, right.reused) == ("unchanged", 5, 0)
    direct = new.score(ROLLOUTS)
    flipped = [
        i
        for i, (s, r) in enumerate(zip(stored, direct, strict=True))
        if s.old["right"].value != r.components["right"].value
    ]
    assert [c.index for c in right.changes] == flipped == [2]  # "10 or 11" hedges: contains paid it
    assert all(c.direction == "down" for c in right.changes)
    assert right.changes[0].new is not None and right.changes[0].new.reason
    old_values = [float(bool(s.old["right"].value)) for s in stored]
    new_values = [float(bool(r.components["right"].value)) for r in direct]
    expected = estimate([b - a for a, b in zip(old_values, new_values, strict=True)])
    assert right.comparison is not None
    assert right.comparison.difference.mean == pytest.approx(expected.mean)
    assert right.comparison.difference.ci_low == pytest.approx(expected.ci_low)
    assert right.comparison.difference.ci_high == pytest.approx(expected.ci_high)
    assert report.total is not None and [c.index for c in report.total.changes] == [2]
    assert report.changed_rollouts == 1 and report.flip_rate == pytest.approx(0.2)


def test_a_new_cache_version_of_an_evaluator_is_not_served_old_scores(monkeypatch: pytest.MonkeyPatch) -> None:
    reward = spec({"ref": "test-counting", "name": "parity"})
    stored = stored_by(reward, ROLLOUTS)
    Counting.reset()
    monkeypatch.setattr(Counting, "cache_version", "2")
    report = rescore(spec({"ref": "test-counting", "name": "parity"}), stored)
    assert Counting.scored() == len(ROLLOUTS)
    assert (report.reused, report.computed) == (0, len(ROLLOUTS))


def test_changed_params_or_inputs_are_scored_again() -> None:
    stored = stored_by(spec({"ref": "exact-match", "name": "m"}), ROLLOUTS)
    assert rescore(spec({"ref": "exact-match", "name": "m", "params": {"ignore_case": True}}), stored).reused == 0
    moved = evalsi.rewards.from_mapping({"components": [{"ref": "exact-match", "name": "m"}], "referenceField": "id"})
    report = rescore(moved, stored)  # the reference it reads changed: so did every key
    assert report.reused == 0 and [c.index for c in report.components[0].changes] == [1]  # "6" is not "b"


def test_old_errors_are_computed_again() -> None:
    reward = spec({"ref": "test-counting", "name": "parity", "onError": "zero", "params": {"fail_on": "6"}})
    stored = stored_by(reward, ROLLOUTS)
    assert stored[1].old["parity"].status == "error"
    Counting.reset()
    report = rescore(reward, stored)
    assert Counting.scored() == 1 and report.reused == 4


def test_added_and_removed_components() -> None:
    stored = stored_by(spec({"ref": "exact-match", "name": "old"}), ROLLOUTS)
    report = rescore(spec({"ref": "contains", "name": "new"}), stored)
    kinds = {d.name: d.kind for d in report.components}
    assert kinds == {"new": "added", "old": "removed"}
    added = report.components[0]
    assert added.new_mean == pytest.approx(sum(1 for r in ROLLOUTS if r["answer"] in r["completion"]) / 5)


def test_scores_paired_with_a_rollouts_file_must_line_up() -> None:
    reward = spec({"ref": "exact-match"})
    lines = [
        {**result_json(r, i), "id": rollout["id"]}
        for i, (r, rollout) in enumerate(zip(reward.score(ROLLOUTS), ROLLOUTS, strict=True))
    ]
    source = RowSource("old.jsonl", tuple(range(1, 6)))
    stored = stored_from_scores(lines, source, ROLLOUTS, RowSource("rollouts.jsonl", tuple(range(1, 6))))
    assert [s.id for s in stored] == ["a", "b", "c", "d", "e"] and not stored[0].keys
    swapped = [ROLLOUTS[1], ROLLOUTS[0], *ROLLOUTS[2:]]
    with pytest.raises(
        DataError, match=r"old.jsonl:1: id 'a' does not match the rollout's id 'b' \(rollouts.jsonl:1\)"
    ):
        stored_from_scores(lines, source, swapped, RowSource("rollouts.jsonl", tuple(range(1, 6))))
    with pytest.raises(DataError, match="holds 5 scores but the rollouts file has 4"):
        stored_from_scores(lines, source, ROLLOUTS[:4])
    with pytest.raises(DataError, match=r"old\.jsonl:1: has no rollout"):
        stored_from_scores(lines, source)


def test_totals_that_change_status_are_changes() -> None:
    gate = {"ref": "regex", "name": "shape", "gate": True, "params": {"pattern": "^[0-9]+$"}}
    stored = stored_by(spec({"ref": "contains", "name": "right"}), ROLLOUTS)
    report = rescore(spec(gate, {"ref": "contains", "name": "right"}), stored)
    assert report.total is not None
    moved = {c.index: (c.old, c.new) for c in report.total.changes}
    old, new = moved[0]  # "The answer is 4": was 1, now gated to the floor
    assert old is not None and new is not None
    assert (old.value, new.value, new.reason) == (1.0, 0.0, "gated")
    assert not math.isnan(report.total.comparison.difference.mean) if report.total.comparison else False


def test_a_stored_score_keeps_its_status() -> None:
    stored = [StoredRollout(0, {"completion": "x"}, {"m": Score.skipped("no reference")}, 0.0, "ok")]
    report = rescore(spec({"ref": "exact-match", "name": "m"}), stored)
    assert report.components[0].kind == "unchanged" and report.components[0].changes == []
