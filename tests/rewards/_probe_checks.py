"""Evaluation tests used as reward components by the probe tests: a lenient one and an exact one."""

from __future__ import annotations

from evalsi.testing import EvaluationRow, evaluation_test


@evaluation_test(input_rows=[])
def test_contains(row: EvaluationRow) -> EvaluationRow:
    row.score = 1.0 if str(row.ground_truth) in row.last_text else 0.0
    return row


@evaluation_test(input_rows=[])
def test_exact(row: EvaluationRow) -> EvaluationRow:
    row.score = 1.0 if row.last_text.strip() == str(row.ground_truth) else 0.0
    return row
