"""An evaluation test whose rollouts are agent episodes: AgentLoop drives a TaskEnv with the model the completion
params name, and the test scores the checker's reward."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evalsi.testing import EvaluationFailed, EvaluationRow, evaluation_test, stored_results
from evalsi_harness.rollouts import AgentLoop
from tests.helpers.openai_server import OpenAIServer

from .conftest import example

SOLVE = ['{"tool": "write_file", "path": "greeting.txt", "content": "hello, world\\n"}', '{"tool": "submit"}']
GIVE_UP = ['{"tool": "submit"}']


def reply(prompt: str, body: dict[str, Any]) -> str:
    """Model `solver` writes the file then submits; model `quitter` submits at once."""
    plan = SOLVE if body["model"] == "solver" else GIVE_UP
    turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
    return plan[min(turn, len(plan) - 1)]


def declare(server: OpenAIServer, threshold: float) -> Any:
    params = [{"model": "solver", "base_url": server.base_url}, {"model": "quitter", "base_url": server.base_url}]

    @evaluation_test(
        input_rows=[{"prompt": "write the greeting", "id": "greeting"}],
        completion_params=params,
        rollout_processor=AgentLoop(example("write-file"), use_tools=False),
        passed_threshold=threshold,
    )
    def test_agent(row: EvaluationRow) -> EvaluationRow:
        reward = row.metadata["reward"]
        row.score = float(reward) if reward is not None else 0.0
        row.reason = f"{row.metadata['steps']} steps"
        return row

    return test_agent


def test_agent_episodes_are_rollouts_and_the_checker_scores_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALSI_RESULTS_DB", str(tmp_path / "results.sqlite"))
    with OpenAIServer(default=reply) as server:
        declared = declare(server, 0.9).evaluation
        solver, quitter = declared.cases()  # each model is its own case, with its own verdict
        declared.check(solver)
        with pytest.raises(EvaluationFailed, match=r"test_agent\[quitter\]: score 0\.0000"):
            declared.check(quitter)
    stored = {d["evaluationTest"]["case"]: d["evaluationTest"] for d in stored_results()}
    assert stored["solver"]["perVariant"] == {"solver": 1.0} and stored["solver"]["passed"] is True
    assert stored["quitter"]["perVariant"] == {"quitter": 0.0} and stored["quitter"]["passed"] is False


def test_a_row_without_a_task_is_a_failed_rollout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    monkeypatch.setenv("EVALSI_RESULTS_DB", str(tmp_path / "results.sqlite"))
    row = EvaluationRow([{"role": "user", "content": "x"}], completion_params={"model": "m", "base_url": "u"})
    [done] = asyncio.run(AgentLoop().process([row], 1))
    assert done.rollout_error is not None and "no task" in done.rollout_error
