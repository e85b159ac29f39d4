"""One evaluator for CI and RL: evaluation tests built from a RewardSpec or RunSpec, an evaluation test used as a
reward component, rollouts from a remote service, and ``evalsi local-test``'s exit codes."""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from typer.testing import CliRunner

import evalsi.rewards
from evalsi.cli.main import app
from evalsi.errors import SpecError
from evalsi.testing import EvaluationRow, Remote, stored_results
from tests.helpers.openai_server import OpenAIServer
from tests.rewards._servers import ServerThread

REWARD = {
    "apiVersion": "evals.si/v1alpha1",
    "kind": "RewardSpec",
    "metadata": {"name": "names-capital"},
    "spec": {"components": [{"ref": "contains", "name": "capital"}]},
}


def test_from_spec_scores_rollouts_with_the_reward_total(
    pytester: pytest.Pytester, server: OpenAIServer, capitals: Path, tmp_path: Path
) -> None:
    spec = tmp_path / "reward.yaml"
    spec.write_text(yaml.safe_dump(REWARD))
    pytester.makepyfile(
        test_from_spec=f"""
        from evalsi.testing import evaluation_test

        test_reward_spec = evaluation_test.from_spec(
            {str(spec)!r}, input_dataset=[{str(capitals)!r}],
            completion_params=[{{"model": "strong", "base_url": {server.base_url!r}}}], passed_threshold=0.8,
        )
    """
    )
    pytester.runpytest_inprocess().assert_outcomes(passed=1)
    document = stored_results()[0]
    assert document["evaluationTest"]["score"] == pytest.approx(0.8)
    chad = next(r for r in document["records"] if r["id"] == "chad")
    assert "capital: ok False" in chad["samples"][0]["scores"]["score"]["reason"]


def test_from_spec_takes_a_run_specs_dataset_and_target(
    pytester: pytest.Pytester, server: OpenAIServer, tmp_path: Path
) -> None:
    data = tmp_path / "qa.jsonl"
    data.write_text(
        "\n".join(
            json.dumps({"id": c.lower(), "question": f"Capital of {c}?", "answer": a})
            for c, a in {"France": "Paris", "Peru": "Lima"}.items()
        )
    )
    run = {
        "apiVersion": "evals.si/v1alpha1",
        "kind": "RunSpec",
        "metadata": {"name": "capitals-run"},
        "spec": {
            "target": {"baseUrl": server.base_url, "model": "strong"},
            "dataset": {"path": str(data), "fields": {"prompt": "question"}},
            "evaluators": [{"ref": "contains"}],
        },
    }
    spec = tmp_path / "run.yaml"
    spec.write_text(yaml.safe_dump(run))
    pytester.makepyfile(
        test_run_spec=f"""
        from evalsi.testing import evaluation_test

        test_run_spec = evaluation_test.from_spec({str(spec)!r}, passed_threshold=1.0)
    """
    )
    pytester.runpytest_inprocess().assert_outcomes(passed=1)
    assert server.request_count() == 2 and server.requests[0]["model"] == "strong"


def test_from_spec_refuses_a_file_without_a_reward_or_run_spec(tmp_path: Path) -> None:
    from evalsi.testing import evaluation_test

    spec = tmp_path / "server.yaml"
    spec.write_text(
        yaml.safe_dump(
            {"apiVersion": "evals.si/v1alpha1", "kind": "ServerConfig", "metadata": {"name": "s"}, "spec": {}}
        )
    )
    with pytest.raises(SpecError, match="holds no RewardSpec or RunSpec"):
        evaluation_test.from_spec(spec)


TEST_MODULE = """
from evalsi.testing import EvaluationRow, evaluation_test

@evaluation_test(input_rows=[{"prompt": "unused", "ground_truth": "x"}])
def test_mentions_reference(row: EvaluationRow) -> EvaluationRow:
    row.score = 1.0 if str(row.ground_truth) in row.last_text else 0.0
    row.reason = f"looked for {row.ground_truth!r} after {row.messages[0]['content']!r}"
    return row
"""


def test_an_evaluation_test_is_a_reward_component(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "test_checks.py").write_text(textwrap.dedent(TEST_MODULE))
    monkeypatch.chdir(tmp_path)
    reward = evalsi.rewards.from_mapping(
        {
            "components": [
                {"ref": "evaluation-test/test_checks.py::test_mentions_reference", "name": "check", "weight": 2.0}
            ]
        }
    )
    results = reward.score(
        [
            {"prompt": "Capital of Peru?", "completion": "It is Lima.", "answer": "Lima"},
            {"prompt": "Capital of Chad?", "completion": "No idea.", "answer": "N'Djamena"},
        ]
    )
    assert [r.total for r in results] == [2.0, 0.0]
    assert results[0].components["check"].reason == "looked for 'Lima' after 'Capital of Peru?'"


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("evaluation-test/test_checks.py::test_missing", "has no evaluation test 'test_missing'"),
        ("exact-match/extra", "'exact-match' takes no argument after '/'"),
    ],
)
def test_bad_evaluation_test_refs_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ref: str, message: str
) -> None:
    (tmp_path / "test_checks.py").write_text(textwrap.dedent(TEST_MODULE))
    monkeypatch.chdir(tmp_path)
    try:
        reward = evalsi.rewards.from_mapping({"components": [{"ref": ref, "name": "check", "onError": "zero"}]})
    except SpecError as exc:
        assert message in str(exc)
        return
    result = reward.score([{"prompt": "p", "completion": "c", "answer": "a"}])[0]
    assert message in (result.components["check"].reason or "")


class RolloutService:
    """A rollout service speaking the Remote protocol: the first poll says running, the next says done."""

    def __init__(self) -> None:
        self.started: dict[str, dict[str, Any]] = {}
        self.polls: dict[str, int] = {}

    def app(self) -> Starlette:
        async def start(request: Request) -> JSONResponse:
            body = await request.json()
            self.started[body["rollout_id"]] = body
            self.polls[body["rollout_id"]] = 0
            return JSONResponse({"status": "running"})

        async def status(request: Request) -> JSONResponse:
            rollout = request.path_params["rollout_id"]
            self.polls[rollout] += 1
            if self.polls[rollout] < 2:
                return JSONResponse({"status": "running"})
            body = self.started[rollout]
            if "fail" in body["messages"][0]["content"]:
                return JSONResponse({"status": "failed", "error": "the agent crashed"})
            reply = {"role": "assistant", "content": "done: " + body["messages"][0]["content"]}
            return JSONResponse({"status": "done", "messages": [*body["messages"], reply]})

        return Starlette(
            routes=[
                Route("/rollouts", start, methods=["POST"]),
                Route("/rollouts/{rollout_id}", status, methods=["GET"]),
            ]
        )


def test_remote_rollouts_are_polled_until_done_and_failures_are_kept() -> None:
    service = RolloutService()
    rows = [EvaluationRow([{"role": "user", "content": text}], row_id=text) for text in ("task a", "fail b")]
    with ServerThread(service.app()) as server:
        done = asyncio.run(Remote(server.url, poll_interval=0.01).process(rows, 4))
    assert done[0].last_text == "done: task a" and done[0].rollout_error is None
    assert "the agent crashed" in (done[1].rollout_error or "")
    assert all(service.polls[r] == 2 for r in service.polls)


def test_local_test_exits_0_on_pass_and_3_below_the_threshold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "test_local.py").write_text(
        textwrap.dedent("""
        from evalsi.testing import EvaluationRow, evaluation_test

        ROWS = [{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": a}],
                 "ground_truth": "yes", "id": str(i)} for i, a in enumerate(["yes", "yes", "no", "yes"])]

        @evaluation_test(input_rows=ROWS, passed_threshold=0.7)
        def test_says_yes(row: EvaluationRow) -> EvaluationRow:
            row.score = float(row.last_text == row.ground_truth)
            return row
    """)
    )
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    passed = runner.invoke(app, ["local-test", "test_local.py::test_says_yes"])
    assert passed.exit_code == 0, passed.output
    failed = runner.invoke(app, ["local-test", "test_local.py::test_says_yes", "--passed-threshold", "0.9"])
    assert failed.exit_code == 3, failed.output
    missing = runner.invoke(app, ["local-test", "test_local.py::test_nothing"])
    assert missing.exit_code == 2
