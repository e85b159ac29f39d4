"""Evaluation tests written for Eval Protocol run with only their import changed: the hosted platform guide's own
example (a ``fireworks_ai/...`` model, ``row.messages[-1].content``, ``row.evaluation_result.score``), the
``EvaluateResult``/``MetricResult``/``Message`` shapes, and ``evalsi local-test --entry``."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalsi.cli.main import app
from evalsi.testing import EvaluateResult, EvaluationRow, Message, stored_results
from tests.helpers.openai_server import OpenAIServer

GUIDE_ROWS = [
    {"messages": [{"role": "user", "content": "What is the capital of France?"}], "ground_truth": "Paris"},
    {"messages": [{"role": "user", "content": "What is the capital of Japan?"}], "ground_truth": "Tokyo"},
]

# The guide's test_capital.py, word for word but for its two import lines.
GUIDE_TEST = """
from evalsi.testing import evaluation_test, SingleTurnRolloutProcessor
from evalsi.testing import EvaluationRow

@evaluation_test(
    input_dataset=["capitals.jsonl"],
    completion_params=[{
        "model": "fireworks_ai/accounts/fireworks/models/gpt-oss-120b",
        "temperature": 0.0,
    }],
    rollout_processor=SingleTurnRolloutProcessor(),
    passed_threshold=0.8,
    mode="pointwise",
)
def test_capital_cities(row: EvaluationRow) -> EvaluationRow:
    expected = row.ground_truth
    answer = row.messages[-1].content or ""
    row.evaluation_result.score = 1.0 if expected.lower() in answer.lower() else 0.0
    return row
"""


def write_guide_project(directory: Path) -> None:
    (directory / "capitals.jsonl").write_text("".join(json.dumps(row) + "\n" for row in GUIDE_ROWS))
    (directory / "test_capital.py").write_text(GUIDE_TEST)


@pytest.fixture
def fireworks(server: OpenAIServer, monkeypatch: pytest.MonkeyPatch) -> OpenAIServer:
    """The loopback server standing in for the provider the guide's model names, configured as a user would."""
    monkeypatch.setenv("FIREWORKS_AI_BASE_URL", server.base_url)
    monkeypatch.setenv("FIREWORKS_AI_API_KEY", "fw-test-key")
    monkeypatch.delenv("EVALSI_PROVIDERS", raising=False)
    return server


def test_the_guides_example_test_passes_with_only_its_import_changed(
    pytester: pytest.Pytester, fireworks: OpenAIServer
) -> None:
    write_guide_project(pytester.path)
    result = pytester.runpytest_inprocess("-s", "test_capital.py")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_capital_cities*: score 1.0000*over 2 rollouts*"])
    assert [body["model"] for body in fireworks.requests] == ["accounts/fireworks/models/gpt-oss-120b"] * 2
    assert all(body["temperature"] == 0.0 for body in fireworks.requests)
    assert {h["authorization"] for h in fireworks.headers} == {"Bearer fw-test-key"}
    [document] = stored_results()
    assert document["evaluationTest"]["passed"] is True
    assert document["target"]["completionParams"][0]["model"].startswith("fireworks_ai/")  # as declared


def test_local_test_runs_the_guides_test_named_with_entry(
    pytester: pytest.Pytester, fireworks: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_guide_project(pytester.path)
    monkeypatch.chdir(pytester.path)
    runner = CliRunner()
    ran = runner.invoke(app, ["local-test", "--entry", "test_capital.py::test_capital_cities"])
    assert ran.exit_code == 0, ran.output
    assert len(fireworks.requests) == 2
    discovered = runner.invoke(app, ["local-test"])  # the only evaluation test here
    assert discovered.exit_code == 0, discovered.output
    assert "evaluation test: test_capital.py::test_capital_cities" in discovered.output
    both = runner.invoke(app, ["local-test", "test_capital.py::test_capital_cities", "--entry", "other.py::x"])
    assert both.exit_code == 2 and "name different tests" in both.output


def test_a_provider_that_is_not_configured_fails_naming_how_to_configure_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("FIREWORKS_AI_BASE_URL", "FIREWORKS_AI_API_KEY", "FIREWORKS_API_KEY", "EVALSI_PROVIDERS"):
        monkeypatch.delenv(name, raising=False)
    write_guide_project(pytester.path)
    result = pytester.runpytest_inprocess("test_capital.py")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*set FIREWORKS_API_KEY (the API key of provider 'fireworks_ai')*"])


def test_evaluate_result_metric_results_and_message_objects(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_shapes=textwrap.dedent("""
        from evalsi.testing import (
            EvaluateResult, EvaluationRow, Message, MetricResult, NoOpRolloutProcessor, evaluation_test,
        )

        def conversation(question, reply):
            return [Message(role="user", content=question), Message(role="assistant", content=reply)]

        ROWS = [
            EvaluationRow(messages=conversation("Capital of France?", "Paris."), ground_truth="Paris", row_id="fr"),
            EvaluationRow(messages=conversation("Capital of Peru?", "Cusco."), ground_truth="Lima", row_id="pe"),
            {"id": "jp", "messages": [{"role": "user", "content": "Capital of Japan?"},
                                      {"role": "assistant", "content": "Tokyo."}], "ground_truth": "Tokyo"},
        ]

        @evaluation_test(input_rows=ROWS, rollout_processor=NoOpRolloutProcessor(), passed_threshold=0.6)
        def test_shapes(row: EvaluationRow) -> EvaluationRow:
            reply = row.last_assistant_message()
            assert reply is not None and reply.role == "assistant" and row.messages[0].role == "user"
            assert row.messages[-1]["content"] == reply.content  # the same message, read either way
            exact = reply.content.rstrip(".") == row.ground_truth
            row.evaluation_result = EvaluateResult(
                score=1.0 if exact else 0.0,
                reason="names the capital" if exact else "names " + reply.content.rstrip("."),
                metrics={"exact": MetricResult(score=float(exact), reason="exact match"), "length": 1.0},
            )
            assert row.score == row.evaluation_result.score and row.metric_values()["exact"] == float(exact)
            return row
    """)
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(passed=1)
    [document] = stored_results()
    reasons = {r["id"]: r["samples"][0]["scores"]["score"]["reason"] for r in document["records"]}
    assert reasons == {"fr": "names the capital", "pe": "names Cusco", "jp": "names the capital"}
    assert document["evaluationTest"]["score"] == pytest.approx(2 / 3)


def test_a_score_marked_invalid_counts_as_zero_with_its_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_invalid=textwrap.dedent("""
        from evalsi.testing import EvaluateResult, EvaluationRow, evaluation_test

        ROWS = [{"id": str(i), "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": a}]}
                for i, a in enumerate(["yes", "?"])]

        @evaluation_test(input_rows=ROWS, passed_threshold=0.9)
        def test_invalid(row: EvaluationRow) -> EvaluationRow:
            if row.messages[-1].content == "?":
                row.evaluation_result = EvaluateResult(score=1.0, is_score_valid=False, reason="no verdict in reply")
            else:
                row.evaluation_result.score = 1.0
            return row
    """)
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*score 0.5000*", "*0.000*the scoring function marked the score invalid: no verdict*"])


def test_a_row_reads_and_writes_either_way() -> None:
    row = EvaluationRow([{"role": "user", "content": "hi"}], "x")
    row.messages.append({"role": "assistant", "content": "hello"})
    row.messages += [Message(role="user", content="again?")]
    assert all(isinstance(m, Message) for m in row.messages)
    assert row.messages[1].content == "hello" and row.messages[1].tool_calls is None
    assert row.last_text == "hello" and row.get_user_messages()[-1].content == "again?"
    row.evaluation_result.score = 0.5
    assert row.score == 0.5
    row.score, row.reason = 0.25, "partly"
    assert row.evaluation_result == EvaluateResult(score=0.25, reason="partly")
    row.evaluation_result = None  # cleared: an empty result, never None to write into
    assert row.score is None and row.evaluation_result.metrics == {}
    row.messages = [{"role": "assistant", "content": "replaced"}]
    assert row.messages[0].content == "replaced"
    with pytest.raises(AttributeError, match="no field 'colour'"):
        _ = row.messages[0].colour
    assert json.loads(json.dumps(row.messages)) == [{"role": "assistant", "content": "replaced"}]
