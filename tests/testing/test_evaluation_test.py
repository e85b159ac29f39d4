"""@evaluation_test run by pytest against a loopback OpenAI-compatible server: pass, fail with the worst rows,
the standard-error condition, CI overrides, groupwise comparison, pre-generated rows, stored results."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from evalsi.testing import stored_results
from tests.helpers.openai_server import OpenAIServer


def write_test(
    pytester: pytest.Pytester,
    server: OpenAIServer,
    capitals: Path,
    decorator_args: str,
    body: str | None = None,
    name: str = "test_capitals",
) -> None:
    body = (
        body
        or """
        def {name}(row: EvaluationRow) -> EvaluationRow:
            row.score = 1.0 if row.ground_truth.lower() in row.last_text.lower() else 0.0
            row.reason = "names the capital" if row.score else "does not name " + row.ground_truth
            return row
    """
    )
    source = textwrap.dedent(f"""
        from evalsi.testing import EvaluationRow, SingleTurn, evaluation_test

        @evaluation_test(
            input_dataset=[{str(capitals)!r}],
            completion_params=[{{"model": "strong", "base_url": {server.base_url!r}, "temperature": 0,
                                 "retry_backoff": 0.01}}],
            {decorator_args}
        )
    """) + textwrap.dedent(body.format(name=name))
    pytester.makepyfile(**{f"{name}_file": source})


def test_a_test_above_its_threshold_passes_and_is_stored(
    pytester: pytest.Pytester, server: OpenAIServer, capitals: Path
) -> None:
    write_test(pytester, server, capitals, "passed_threshold=0.8,")
    result = pytester.runpytest_inprocess("-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_capitals[[]strong[]]: score 0.8000 ± 0.2000 (standard error) over 5 rollouts*"])
    assert server.request_count() == 5
    [document] = stored_results()
    assert document["kind"] == "RunResults" and document["evaluationTest"]["passed"] is True
    assert len(document["records"]) == 5
    assert document["summary"]["metrics"]["score"]["mean"] == pytest.approx(0.8)
    chad = next(r for r in document["records"] if r["id"] == "chad")
    assert chad["samples"][0]["scores"]["score"]["value"] == 0.0


def test_below_the_threshold_fails_with_a_table_of_the_worst_rows(
    pytester: pytest.Pytester, server: OpenAIServer, capitals: Path
) -> None:
    write_test(pytester, server, capitals, "passed_threshold=0.9,")
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*EvaluationFailed*score 0.8000*the pass rule is score >= 0.9*",
            "*worst rows:*",
            "*row*prompt*score*reason / reply*",
            "*chad*Capital of Chad?*0.000*does not name N'Djamena*",
        ]
    )
    assert stored_results()[0]["evaluationTest"]["passed"] is False


def test_a_standard_error_condition_fails_a_noisy_score(
    pytester: pytest.Pytester, server: OpenAIServer, capitals: Path
) -> None:
    write_test(pytester, server, capitals, 'passed_threshold={"success": 0.5, "standard_error": 0.05},')
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the pass rule is score >= 0.5 and standard error <= 0.05*"])
    write_test(pytester, server, capitals, 'passed_threshold={"success": 0.5, "standard_error": 0.25},')
    pytester.runpytest_inprocess().assert_outcomes(passed=1)


def test_environment_overrides_change_the_run_without_code_edits(
    pytester: pytest.Pytester, server: OpenAIServer, capitals: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_test(pytester, server, capitals, "passed_threshold=0.9,")
    monkeypatch.setenv("EVALSI_PASSED_THRESHOLD", '{"success": 0.75}')
    monkeypatch.setenv("EVALSI_MAX_ROWS", "4")  # Chad, the wrong one, is the fifth
    monkeypatch.setenv("EVALSI_NUM_RUNS", "2")
    pytester.runpytest_inprocess().assert_outcomes(passed=1)
    assert server.request_count() == 8
    monkeypatch.setenv("EVALSI_COMPLETION_PARAMS", f'{{"model": "weak", "base_url": "{server.base_url}"}}')
    pytester.runpytest_inprocess().assert_outcomes(failed=1)
    assert server.requests[-1]["model"] == "weak"


def test_the_command_line_options_set_the_same_overrides(
    pytester: pytest.Pytester, server: OpenAIServer, capitals: Path
) -> None:
    write_test(pytester, server, capitals, "passed_threshold=0.9,")
    pytester.runpytest_inprocess("--evalsi-passed-threshold", "0.8").assert_outcomes(passed=1)


def test_an_invalid_override_names_the_variable(
    pytester: pytest.Pytester, server: OpenAIServer, capitals: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_test(pytester, server, capitals, "passed_threshold=0.9,")
    monkeypatch.setenv("EVALSI_NUM_RUNS", "zero")
    result = pytester.runpytest_inprocess()
    result.stdout.fnmatch_lines(["*EVALSI_NUM_RUNS='zero' must be a positive integer*"])


def test_groupwise_compares_two_completion_params(
    pytester: pytest.Pytester, server: OpenAIServer, capitals: Path
) -> None:
    source = textwrap.dedent(f"""
        from evalsi.testing import EvaluationRow, evaluation_test

        PARAMS = [{{"model": "strong", "base_url": {server.base_url!r}}},
                  {{"model": "weak", "base_url": {server.base_url!r}}}]
        SEEN = []

        @evaluation_test(input_dataset=[{str(capitals)!r}], completion_params=PARAMS, mode="groupwise",
                         passed_threshold=0.4)
        def test_strong_beats_weak(rows: list[EvaluationRow]) -> list[EvaluationRow]:
            SEEN.append(sorted(r.completion_params["model"] for r in rows))
            right = [r.ground_truth.lower() in r.last_text.lower() for r in rows]
            for row, ok in zip(rows, right):
                row.score = 1.0 if ok and not all(right) else 0.5 if all(right) == ok else 0.0
            return rows

        def test_each_group_held_both_models():
            assert SEEN == [["strong", "weak"]] * 5
    """)
    pytester.makepyfile(test_groupwise=source)
    result = pytester.runpytest_inprocess("-s", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    per_variant = stored_results()[0]["evaluationTest"]["perVariant"]
    assert per_variant["strong"] > per_variant["weak"]


def test_pre_generated_rows_are_scored_as_they_are(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_pregenerated="""
        from evalsi.testing import EvaluationRow, evaluation_test

        ROWS = [{"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
                 "ground_truth": "4"},
                {"messages": [{"role": "user", "content": "3+3?"}, {"role": "assistant", "content": "7"}],
                 "ground_truth": "6"}]

        @evaluation_test(input_rows=ROWS, passed_threshold=0.5)
        def test_exact(row: EvaluationRow) -> EvaluationRow:
            row.score = float(row.last_text == row.ground_truth)
            return row
    """
    )
    pytester.runpytest_inprocess().assert_outcomes(passed=1)
    assert stored_results()[0]["evaluationTest"]["score"] == 0.5


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        ('mode="sideways"', "mode must be one of pointwise, groupwise, all"),
        ("passed_threshold=1.5", "passed_threshold must be within [0, 1], got 1.5"),
        ('passed_threshold={"succes": 0.5}', "expected {success, standard_error}"),
        ("num_runs=0", "num_runs and max_concurrent_rollouts must be at least 1"),
    ],
)
def test_bad_declarations_fail_at_import_naming_the_argument(
    pytester: pytest.Pytester, declaration: str, message: str
) -> None:
    pytester.makepyfile(
        test_bad=f"""
        from evalsi.testing import evaluation_test

        @evaluation_test(input_rows=[{{"prompt": "x"}}], {declaration})
        def test_x(row):
            return row
    """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(errors=1)
    assert message in result.stdout.str()


def test_a_function_that_sets_no_score_is_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_noscore="""
        from evalsi.testing import evaluation_test

        @evaluation_test(input_rows=[{"messages": [{"role": "user", "content": "x"}], "id": "r1"}])
        def test_forgets(row):
            return row
    """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_forgets did not set `score` on row 'r1'*"])


def test_each_run_is_also_a_results_file_that_compare_and_the_viewer_open(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    from evalsi.runs import compare_runs, load_results
    from evalsi.view._catalog import Catalog

    pytester.makepyfile(
        test_stored="""
        from evalsi.testing import EvaluationRow, evaluation_test

        ROWS = [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}],
                 "ground_truth": g, "id": q} for q, a, g in (("2+2?", "4", "4"), ("3+3?", "7", "6"))]

        @evaluation_test(input_rows=ROWS)
        def test_exact(row: EvaluationRow) -> EvaluationRow:
            row.score = float(row.last_text == row.ground_truth)
            return row
    """
    )
    pytester.runpytest_inprocess().assert_outcomes(passed=1)
    pytester.runpytest_inprocess().assert_outcomes(passed=1)
    import os

    files = sorted((Path(os.environ["EVALSI_RESULTS_DB"]).parent / "evaluation-tests").rglob("*.results.json"))
    assert [f.name for f in files] == ["000001.results.json", "000002.results.json"]
    first, second = load_results(files[0]), load_results(files[1])
    [comparison] = compare_runs(first, second)
    assert comparison.metric == "score" and comparison.comparison.pairs == 2
    sources = Catalog([files[0].parent]).scan()
    assert sorted(s.path for s in sources if s.kind == "run") == files
