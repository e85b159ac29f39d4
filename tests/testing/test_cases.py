"""Each completion-params entry of a pointwise or all-mode evaluation test is its own pytest case: its own id,
verdict, stored results and results file. Groupwise comparison stays one case."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalsi.testing import stored_results
from tests.helpers.openai_server import OpenAIServer

QUESTIONS = {"France": "Paris", "Japan": "Tokyo", "Italy": "Rome", "Peru": "Lima"}


def answer_all(prompt: str, body: dict[str, Any]) -> str:
    """Every capital, right."""
    return next(f"It is {capital}." for country, capital in QUESTIONS.items() if country in prompt)


def answer_one(prompt: str, body: dict[str, Any]) -> str:
    """Only France's capital: a quarter of the rows."""
    return "It is Paris." if "France" in prompt else "No idea."


def by_model(prompt: str, body: dict[str, Any]) -> str:
    """Checkpoint 150 knows every capital, checkpoint 20 only France's."""
    return answer_all(prompt, body) if body.get("model") == "org/ckpt150" else answer_one(prompt, body)


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "questions.jsonl"
    rows = [
        {"id": c.lower(), "messages": [{"role": "user", "content": f"Capital of {c}?"}], "ground_truth": a}
        for c, a in QUESTIONS.items()
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def two_endpoints() -> Iterator[tuple[OpenAIServer, OpenAIServer]]:
    """Two servers that both call their model ``policy``: a good checkpoint and a poor one."""
    with OpenAIServer(default=answer_all) as good, OpenAIServer(default=answer_one) as poor:
        yield good, poor


SCORER = """
def {name}(row: EvaluationRow) -> EvaluationRow:
    row.score = 1.0 if row.ground_truth in row.last_text else 0.0
    return row
"""


def write_module(pytester: pytest.Pytester, dataset: Path, params: list[dict[str, Any]], options: str) -> None:
    source = textwrap.dedent(f"""
        from evalsi.testing import EvaluationRow, evaluation_test

        @evaluation_test(input_dataset=[{str(dataset)!r}], completion_params={params!r}, {options})
    """) + textwrap.dedent(SCORER.format(name="test_checkpoints"))
    pytester.makepyfile(test_models=source)


def test_two_models_are_two_cases_with_their_own_verdicts(pytester: pytest.Pytester, dataset: Path) -> None:
    with OpenAIServer(default=by_model) as server:
        params = [{"model": m, "base_url": server.base_url, "retry_backoff": 0.01} for m in ("org/ckpt150", "ckpt20")]
        write_module(pytester, dataset, params, "passed_threshold=0.5")
        result = pytester.runpytest_inprocess("-v", "-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=1)  # not one verdict of (1.0 + 0.25) / 2 = 0.625 >= 0.5
    result.stdout.fnmatch_lines_random(
        [
            "*test_checkpoints[[]org/ckpt150[]] PASSED*",
            "*test_checkpoints[[]ckpt20[]] FAILED*",
            "*test_models::test_checkpoints[[]ckpt20[]]: score 0.2500*the pass rule is score >= 0.5*",
        ]
    )
    documents = {d["name"]: d for d in stored_results("test_models::test_checkpoints")}
    assert sorted(documents) == ["test_models::test_checkpoints[ckpt20]", "test_models::test_checkpoints[org/ckpt150]"]
    strong = documents["test_models::test_checkpoints[org/ckpt150]"]
    weak = documents["test_models::test_checkpoints[ckpt20]"]
    assert (strong["evaluationTest"]["score"], strong["evaluationTest"]["passed"]) == (1.0, True)
    assert (weak["evaluationTest"]["score"], weak["evaluationTest"]["passed"]) == (0.25, False)
    for document, model in ((strong, "org/ckpt150"), (weak, "ckpt20")):
        assert [p["model"] for p in document["spec"]["completionParams"]] == [model]
        assert [len(r["samples"]) for r in document["records"]] == [1, 1, 1, 1]  # one model's rollouts only
    files = sorted((Path(os.environ["EVALSI_RESULTS_DB"]).parent / "evaluation-tests").rglob("*.results.json"))
    assert len(files) == 2 and files[0].parent != files[1].parent


def test_one_case_is_selected_by_its_id(pytester: pytest.Pytester, dataset: Path) -> None:
    with OpenAIServer(default=by_model) as server:
        params = [{"model": m, "base_url": server.base_url} for m in ("org/ckpt150", "ckpt20")]
        write_module(pytester, dataset, params, "passed_threshold=0.5")
        result = pytester.runpytest_inprocess("test_models.py::test_checkpoints[org/ckpt150]")
        result.assert_outcomes(passed=1)
        assert {r["model"] for r in server.requests} == {"org/ckpt150"}


def test_the_same_model_name_at_two_endpoints_is_two_cases_named_by_endpoint(
    pytester: pytest.Pytester, dataset: Path, two_endpoints: tuple[OpenAIServer, OpenAIServer]
) -> None:
    good, poor = two_endpoints
    params = [{"model": "policy", "base_url": s.base_url, "temperature": 0} for s in (good, poor)]
    write_module(pytester, dataset, params, "passed_threshold=0.5")
    result = pytester.runpytest_inprocess("-v", "-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines_random(
        [
            f"*test_checkpoints[[]policy,base_url={good.base_url}[]] PASSED*",
            f"*test_checkpoints[[]policy,base_url={poor.base_url}[]] FAILED*",
        ]
    )
    scores = {tuple(d["spec"]["completionParams"][0].values()): d["evaluationTest"]["score"] for d in stored_results()}
    assert scores == {("policy", good.base_url, 0): 1.0, ("policy", poor.base_url, 0): 0.25}


def test_groupwise_stays_one_case_and_keeps_same_named_models_apart(
    pytester: pytest.Pytester, dataset: Path, two_endpoints: tuple[OpenAIServer, OpenAIServer]
) -> None:
    good, poor = two_endpoints
    source = textwrap.dedent(f"""
        from evalsi.testing import EvaluationRow, evaluation_test

        PARAMS = [{{"model": "policy", "base_url": {good.base_url!r}}},
                  {{"model": "policy", "base_url": {poor.base_url!r}}}]

        @evaluation_test(input_dataset=[{str(dataset)!r}], completion_params=PARAMS, mode="groupwise",
                         passed_threshold=0.5)
        def test_compare(rows: list[EvaluationRow]) -> list[EvaluationRow]:
            assert len(rows) == 2 and rows[0].variant != rows[1].variant
            for row in rows:
                row.score = 1.0 if row.ground_truth in row.last_text else 0.0
            return rows
    """)
    pytester.makepyfile(test_group=source)
    result = pytester.runpytest_inprocess("-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_group.py::test_compare PASSED*"])
    [document] = stored_results()
    assert document["name"] == "test_group::test_compare"
    assert document["evaluationTest"]["score"] == pytest.approx(0.625)  # both compared in one verdict, by design
    assert document["evaluationTest"]["perVariant"] == {
        f"policy,base_url={good.base_url}": 1.0,
        f"policy,base_url={poor.base_url}": 0.25,
    }


def test_all_mode_scores_each_models_rows_apart(pytester: pytest.Pytester, dataset: Path) -> None:
    source = textwrap.dedent("""
        from evalsi.testing import EvaluationRow, NoOp, evaluation_test

        SEEN = []

        @evaluation_test(input_rows=[{"prompt": "q", "id": str(i)} for i in range(4)], rollout_processor=NoOp(),
                         completion_params=[{"model": "a"}, {"model": "b"}], mode="all", passed_threshold=0.5)
        def test_batch(rows: list[EvaluationRow]) -> list[EvaluationRow]:
            SEEN.append(sorted({r.completion_params["model"] for r in rows}))
            for row in rows:
                row.score = 1.0 if row.completion_params["model"] == "a" else 0.0
            return rows

        def test_each_batch_held_one_model():
            assert sorted(SEEN) == [["a"], ["b"]]
    """)
    pytester.makepyfile(test_all=source)
    result = pytester.runpytest_inprocess("-p", "no:randomly")
    result.assert_outcomes(passed=2, failed=1)
    assert {d["name"]: d["evaluationTest"]["score"] for d in stored_results()} == {
        "test_all::test_batch[a]": 1.0,
        "test_all::test_batch[b]": 0.0,
    }


def test_a_repeated_completion_params_entry_is_refused_naming_both(pytester: pytest.Pytester, dataset: Path) -> None:
    params = [{"model": "m", "base_url": "http://127.0.0.1:9/v1"}] * 2
    write_module(pytester, dataset, params, "passed_threshold=0.5")
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(errors=1)
    assert "completion_params[0] and completion_params[1] are the same (m)" in result.stdout.str()


def test_an_override_of_the_completion_params_makes_the_cases(
    pytester: pytest.Pytester, dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with OpenAIServer(default=by_model) as server:
        write_module(pytester, dataset, [{"model": "org/ckpt150", "base_url": server.base_url}], "passed_threshold=0.5")
        pytester.runpytest_inprocess().assert_outcomes(passed=1)
        both = [{"model": m, "base_url": server.base_url} for m in ("org/ckpt150", "ckpt20")]
        monkeypatch.setenv("EVALSI_COMPLETION_PARAMS", json.dumps(both))
        pytester.runpytest_inprocess().assert_outcomes(passed=1, failed=1)


def test_marks_on_the_scoring_function_apply_to_every_case(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_marked="""
        import pytest
        from evalsi.testing import EvaluationRow, NoOp, evaluation_test

        @evaluation_test(input_rows=[{"prompt": "q"}], completion_params=[{"model": "a"}, {"model": "b"}],
                         rollout_processor=NoOp())
        @pytest.mark.nightly
        def test_marked(row: EvaluationRow) -> EvaluationRow:
            row.score = 1.0
            return row
    """
    )
    pytester.makeini("[pytest]\nmarkers = nightly: slow evaluations\n")
    pytester.runpytest_inprocess("-m", "not nightly").assert_outcomes(deselected=2)
    pytester.runpytest_inprocess("-m", "nightly").assert_outcomes(passed=2)
