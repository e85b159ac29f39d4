"""Checkpoint evaluations feed the training monitors: reward up while the held-out results go down fires."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalsi.monitors import Monitor, Observation
from evalsi.training import StepResult
from evalsi.training._evaluator import SpecStep
from evalsi.training._monitoring import heldout_values
from evalsi.training.callback import _EvalsiCallbackMixin
from tests.server.runs_data import RECORDS, results_document


def _outcome(folder: Path, name: str, step: int | None, wrong: int) -> StepResult:
    results_document(folder, name, wrong=wrong)
    path = folder / f"{name}.results.json"
    return StepResult(step, [SpecStep(spec="heldout", path=path, status="complete", gates_passed=True)])


def _batch(mean: float, step: int) -> Observation:
    return Observation(
        totals=[mean - 0.1, mean + 0.1],
        components={},
        lengths=[3, 4],
        texts=["one two three", "four five six seven"],
        group_keys=[0, 0],
        step=step,
    )


def test_heldout_values_per_record_from_the_results_file(tmp_path: Path) -> None:
    outcome = _outcome(tmp_path, "base", None, wrong=5)
    values = heldout_values(outcome)
    assert values is not None and len(values) == RECORDS
    assert sum(v[0] for v in values.values()) == RECORDS - 5  # exact-match: the first metric
    has_one = heldout_values(outcome, "heldout/has-1")
    assert has_one is not None and has_one != values
    assert heldout_values(outcome, "heldout/nope") is None
    assert heldout_values(outcome, "other/exact-match") is None


@pytest.mark.parametrize(("wrong", "fires"), [(12, True), (0, False)], ids=["held-out-down", "held-out-up"])
def test_callback_pairs_evaluations_for_the_monitor(tmp_path: Path, wrong: int, fires: bool) -> None:
    monitor = Monitor(window=1)
    callback = _EvalsiCallbackMixin(None, None, False, False, None, False, False, False, monitor=monitor)
    monitor.observe(_batch(0.2, 1))
    assert callback._heldout(None, _outcome(tmp_path, "base", None, wrong=4)) == {}  # nothing to pair yet
    monitor.observe(_batch(0.9, 2))
    logs = callback._heldout(2, _outcome(tmp_path, "step-2", 2, wrong=wrong))
    assert logs["monitor/reward_vs_heldout"] == pytest.approx((4 - wrong) / RECORDS)
    assert logs["monitor/reward_vs_heldout/fired"] == (1.0 if fires else 0.0)
    assert ("reward_vs_heldout" in monitor.fired) is fires
