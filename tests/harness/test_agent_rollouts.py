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


def roll(server: OpenAIServer, **params: Any) -> EvaluationRow:
    import asyncio

    row = EvaluationRow(
        [{"role": "user", "content": "write the greeting"}],
        completion_params={"model": "solver", "base_url": server.base_url, **params},
    )
    [done] = asyncio.run(AgentLoop(example("write-file"), use_tools=False).process([row], 1))
    return done


def test_every_completion_param_reaches_each_request_of_the_episode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_TEST_KEY", "sk-agent")
    params: dict[str, Any] = {
        "temperature": 0.3,
        "top_p": 0.95,
        "max_tokens": 77,
        "seed": 5,
        "stop": ["</s>"],
        "top_k": 20,  # any other key goes into the body as it is
        "headers": {"X-Run": "r1"},
        "api_key_env": "AGENT_TEST_KEY",
        "max_retries": 2,
        "retry_backoff": 0.0,
        "timeout": 30,
    }
    with OpenAIServer(default=reply) as server:
        server.inject(status=503, times=2)
        done = roll(server, **params)
        requests, headers, statuses = server.requests, server.headers, list(server.statuses)
    assert done.rollout_error is None and done.metadata["reward"] == 1.0
    assert statuses == [503, 503, 200, 200]  # retried through the shared transport, within max_retries
    for body in requests:
        assert {k: body[k] for k in ("temperature", "top_p", "max_tokens", "seed", "stop", "top_k")} == {
            "temperature": 0.3,
            "top_p": 0.95,
            "max_tokens": 77,
            "seed": 5,
            "stop": ["</s>"],
            "top_k": 20,
        }
        assert not {"headers", "api_key_env", "max_retries", "retry_backoff", "timeout", "base_url"} & set(body)
    assert all(h["x-run"] == "r1" and h["authorization"] == "Bearer sk-agent" for h in headers)


def test_an_episode_whose_model_keeps_failing_is_a_failed_rollout_after_the_retries() -> None:
    with OpenAIServer(default=reply) as server:
        server.inject(status=503, times=10)
        done = roll(server, max_retries=1, retry_backoff=0.0)
        count = server.request_count()
    assert count == 2
    assert done.rollout_error is not None and "503" in done.rollout_error


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": -1}, "temperature"),
        ({"api_key_env": "NO_SUCH_AGENT_KEY"}, "NO_SUCH_AGENT_KEY"),
        ({"api": "completions"}, "chat API"),
    ],
)
def test_invalid_completion_params_are_a_failed_rollout_naming_the_field(
    params: dict[str, Any], named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_SUCH_AGENT_KEY", raising=False)
    with OpenAIServer(default=reply) as server:
        done = roll(server, **params)
        count = server.request_count()
    assert count == 0
    assert done.rollout_error is not None and named in done.rollout_error
