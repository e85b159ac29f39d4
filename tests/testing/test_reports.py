"""What a failing evaluation test says: rows named by id (or where they came from) and prompt, never by a hash;
repeated rows counted as rows; no ``± nan``; ``evalsi local-test`` without pytest's rewrite warning."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from evalsi.testing import stored_results

HASH = re.compile(r"\b[0-9a-f]{16}\b")
"""A row's content hash (what tables printed for rows without an id)."""


def test_the_worst_rows_are_named_by_line_and_prompt_when_rows_have_no_id(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    data = tmp_path / "sums.jsonl"
    rows = [(f"What is {a}+{a}?", str(2 * a)) for a in range(1, 6)]
    data.write_text("".join(json.dumps({"prompt": q, "ground_truth": g}) + "\n" for q, g in rows))
    pytester.makepyfile(
        test_sums=f"""
        from evalsi.testing import EvaluationRow, NoOp, evaluation_test

        @evaluation_test(input_dataset=[{str(data)!r}], passed_threshold=0.9)
        def test_even_sums(row: EvaluationRow) -> EvaluationRow:
            row.score = 0.0 if "3+3" in row.prompt_text else 1.0
            row.reason = "wrong" if row.score == 0 else "right"
            return row
    """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*worst rows:*", "*sums.jsonl:3 *What is 3+3?*0.000*wrong*"])
    assert not HASH.search(result.stdout.str())
    document = stored_results()[0]
    assert [r["id"] for r in document["records"]] == [None] * 5  # no id was given: none is made up


def test_repeated_rows_are_separate_rows_and_the_summary_has_no_nan(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_repeats="""
        from evalsi.testing import EvaluationRow, evaluation_test

        ROW = {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
               "ground_truth": "4"}

        @evaluation_test(input_rows=[ROW, ROW, ROW], passed_threshold={"success": 0.5, "standard_error": 0.1})
        def test_repeated(row: EvaluationRow) -> EvaluationRow:
            row.score = float(row.last_text == row.ground_truth)
            return row

        @evaluation_test(input_rows=[ROW], passed_threshold=0.5)
        def test_single(row: EvaluationRow) -> EvaluationRow:
            row.score = 1.0
            return row
    """
    )
    result = pytester.runpytest_inprocess("-s", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    assert not re.search(r"\bnan\b", result.stdout.str())
    result.stdout.fnmatch_lines(
        [
            "*test_repeated: score 1.0000 ± 0.0000 (standard error) over 3 rollouts*",
            "*test_single: score 1.0000 (no standard error: it needs two or more rows) over 1 rollouts*",
        ]
    )
    repeated = stored_results("test_repeats::test_repeated")[0]
    assert len(repeated["records"]) == 3
    assert len({r["key"] for r in repeated["records"]}) == 3
    assert repeated["evaluationTest"]["standardError"] == 0.0


def test_a_repeated_id_gets_a_suffix_in_the_table(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_ids="""
        from evalsi.testing import EvaluationRow, evaluation_test

        ROWS = [{"id": "q1", "messages": [{"role": "user", "content": c}, {"role": "assistant", "content": "x"}]}
                for c in ("first asking", "second asking")]

        @evaluation_test(input_rows=ROWS, passed_threshold=0.9)
        def test_x(row: EvaluationRow) -> EvaluationRow:
            row.score = 0.0 if row.prompt_text == "second asking" else 1.0
            return row
    """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*q1#2 *second asking*0.000*"])


def test_local_test_prints_no_assertion_rewrite_warning(tmp_path: Path) -> None:
    """Run as a user runs it: a fresh ``evalsi`` process, which has imported evalsi before pytest starts."""
    (tmp_path / "test_local.py").write_text(
        textwrap.dedent("""
        from evalsi.testing import EvaluationRow, evaluation_test

        ROWS = [{"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": a}],
                 "ground_truth": "yes"} for i, a in enumerate(["yes", "no", "yes"])]

        @evaluation_test(input_rows=ROWS, passed_threshold=0.9)
        def test_says_yes(row: EvaluationRow) -> EvaluationRow:
            assert isinstance(row.last_text, str)
            row.score = float(row.last_text == row.ground_truth)
            return row
    """)
    )
    env = {**os.environ, "EVALSI_RESULTS_DB": str(tmp_path / "results.sqlite")}
    for name in ("EVALSI_PASSED_THRESHOLD", "EVALSI_NUM_RUNS", "EVALSI_MAX_ROWS", "EVALSI_COMPLETION_PARAMS"):
        env.pop(name, None)
    proc = subprocess.run(
        [sys.executable, "-m", "evalsi", "local-test", "test_local.py::test_says_yes"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 3, output
    assert "PytestAssertRewriteWarning" not in output
    assert "warnings summary" not in output
    assert "q1 " in output  # the failing row, by prompt
