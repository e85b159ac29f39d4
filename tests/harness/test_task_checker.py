"""The ``task-checker`` evaluator: the task's checker scores finished trajectories, also inside a RunSpec."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import evalsi
from evalsi.evaluators import Score, ScoreContext, close_all, get_evaluator
from evalsi.records import from_rollout
from evalsi.runs import Runner, load_run, run_from_mapping
from evalsi_harness.evaluator import trajectory_actions
from tests.helpers.openai_server import OpenAIServer

from .conftest import example

SOLVE = [{"tool": "write_file", "path": "greeting.txt", "content": "hello, world\n"}, {"tool": "submit"}]
WRONG = [{"tool": "write_file", "path": "greeting.txt", "content": "hi\n"}]


@pytest.fixture(autouse=True)
def _close_evaluators():
    yield
    close_all()


def score(completions: list[object], **params: object) -> list[Score]:
    evaluator = get_evaluator("task-checker")
    parsed = evaluator.parse_params({"task": str(example("write-file")), **params})
    records = [from_rollout({"prompt": "p", "completion": c}) for c in completions]
    return evaluator.score_batch(records, parsed, ScoreContext())


def test_trajectories_in_every_form_are_replayed_and_graded() -> None:
    arguments = json.dumps({"path": "greeting.txt", "content": "hello, world\n"})
    call = {"id": "1", "type": "function", "function": {"name": "write_file", "arguments": arguments}}
    chat = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "1", "content": "{}"},
    ]
    lines = "\n".join(json.dumps(a) for a in SOLVE)
    scores = score([json.dumps(SOLVE), json.dumps(WRONG), chat, lines, "", "[1, 2"])
    assert [s.value for s in scores[:5]] == [True, False, True, True, False]
    assert all(s.status == "ok" for s in scores[:5])
    assert scores[0].details is not None and scores[0].details["steps"] == 2
    assert scores[1].reason == "exit status 1"
    assert scores[5].status == "error" and "not a trajectory" in (scores[5].reason or "")


def test_a_checker_that_cannot_run_is_an_error_not_a_zero(tmp_path: Path) -> None:
    task = tmp_path / "task.yaml"
    task.write_text(example("write-file").read_text().replace("exit 1'", "exit 7'"))
    evaluator = get_evaluator("task-checker")
    record = from_rollout({"prompt": "p", "completion": json.dumps(WRONG)})
    (result,) = evaluator.score_batch([record], evaluator.parse_params({"task": str(task)}), ScoreContext())
    assert result.status == "error" and "exited with status 7" in (result.reason or "")


def test_a_missing_task_file_errors_every_record() -> None:
    evaluator = get_evaluator("task-checker")
    params = evaluator.parse_params({"task": "/nonexistent/task.yaml"})
    results = evaluator.score_batch([from_rollout({"prompt": "p", "completion": "[]"})] * 2, params, ScoreContext())
    assert [r.status for r in results] == ["error", "error"] and "task.yaml" in (results[0].reason or "")


def test_trajectory_actions_reads_only_the_assistant_turns() -> None:
    chat = [{"role": "user", "content": "do it"}, {"role": "assistant", "content": '{"tool": "submit"}'}]
    assert trajectory_actions(chat) == ['{"tool": "submit"}']
    with pytest.raises(ValueError, match="JSON list of actions"):
        trajectory_actions('[{"tool": "submit"}')


def test_the_same_checker_scores_a_run(tmp_path: Path) -> None:
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"id": i, "prompt": p}) + "\n" for i, p in enumerate(["solve", "fumble"])))
    answers = {"solve": json.dumps(SOLVE), "fumble": json.dumps(WRONG)}
    with OpenAIServer(answers=answers) as server:
        spec = {
            "target": {"baseUrl": server.base_url, "model": "test-model"},
            "dataset": {"path": str(data)},
            "evaluators": [{"ref": "task-checker", "params": {"task": str(example("write-file"))}}],
            "output": str(tmp_path / "run.results.json"),
        }
        outcome = Runner(run_from_mapping(spec)).run()
    assert outcome.verdict == "ok"
    assert outcome.summary.metrics["task-checker"].mean == pytest.approx(0.5)


def test_the_task_path_is_relative_to_the_spec_that_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    evals = tmp_path / "evals"
    evals.mkdir()
    shutil.copy(example("write-file"), evals / "task.yaml")
    (evals / "prompts.jsonl").write_text("".join(json.dumps({"id": i, "prompt": p}) + "\n" for i, p in enumerate("ab")))
    spec = {
        "apiVersion": "evals.si/v1alpha1",
        "kind": "RunSpec",
        "metadata": {"name": "agent"},
        "spec": {
            "target": {"baseUrl": "http://127.0.0.1:9/v1", "model": "m"},
            "dataset": {"path": "prompts.jsonl"},
            "evaluators": [{"ref": "task-checker", "params": {"task": "task.yaml"}}],
        },
    }
    (evals / "run.yaml").write_text(json.dumps(spec))
    reward = {"apiVersion": "evals.si/v1alpha1", "kind": "RewardSpec", "metadata": {"name": "agent"},
              "spec": {"components": [{"ref": "task-checker", "params": {"task": "task.yaml"}}]}}  # fmt: skip
    (evals / "reward.yaml").write_text(json.dumps(reward))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # neither the spec nor the task is here
    answers = {"a": json.dumps(SOLVE), "b": json.dumps(WRONG)}
    with OpenAIServer(answers=answers) as server:
        run = load_run(evals / "run.yaml", overrides=[f"target.baseUrl={server.base_url}", "output=a.results.json"])
        outcome = Runner(run).run()
    assert outcome.summary.metrics["task-checker"].mean == pytest.approx(0.5), outcome.summary.unscored
    assert outcome.path == elsewhere / "a.results.json"  # set on the command line: the working directory's
    totals = evalsi.rewards.load(os.path.relpath(evals / "reward.yaml")).score(
        [{"prompt": "p", "completion": json.dumps(SOLVE)}]
    )
    assert totals[0].total == 1.0, totals[0].components
    # a task path given with --set is typed here, so it is the working directory's
    shutil.copy(evals / "task.yaml", elsewhere / "mine.yaml")
    (evals / "task.yaml").unlink()
    overridden = load_run(evals / "run.yaml", overrides=["evaluators[0].params.task=mine.yaml"])
    assert overridden.reward.components[0].params.task == str(elsewhere / "mine.yaml")  # type: ignore[attr-defined]
