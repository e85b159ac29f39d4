"""Evaluation-test results in the viewer: each case of a test (one per completion-params entry) is its own run."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from evalsi.testing import EvaluationRow, NoOp, evaluation_test
from evalsi.view import create_app
from tests.view.conftest import ids

ROWS = [
    {"id": f"q{i}", "messages": [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": "a"}]}
    for i in range(4)
]
PARAMS = [
    {"model": "policy", "base_url": "http://127.0.0.1:8001/v1"},
    {"model": "policy", "base_url": "http://127.0.0.1:8002/v1"},
]


def checkpoints(row: EvaluationRow) -> EvaluationRow:
    good = row.completion_params["base_url"].endswith(":8001/v1")  # the other endpoint gets q0 right only
    row.score = 1.0 if good or row.row_id == "q0" else 0.0
    return row


def test_each_case_of_an_evaluation_test_is_its_own_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALSI_RESULTS_DB", str(tmp_path / ".evalsi" / "results.sqlite"))
    monkeypatch.delenv("EVALSI_COMPLETION_PARAMS", raising=False)
    declared = evaluation_test(input_rows=ROWS, completion_params=PARAMS, rollout_processor=NoOp())(
        checkpoints
    ).evaluation  # type: ignore[attr-defined]
    for case in declared.cases():
        declared.run(case)
    client = TestClient(create_app([tmp_path]))
    runs = ids(client.get("/").text, "runs")
    test = f"{__name__}::checkpoints"
    first, second = (f"{test}[policy,base_url={p['base_url']}]" for p in PARAMS)
    assert {first, second} <= set(runs)
    listing = {r["name"]: r for r in client.get("/api/sources").json()["runs"]}
    assert listing[first]["metrics"]["score"] == 1.0
    assert listing[second]["metrics"]["score"] == 0.25
    assert listing[first]["target"] == "policy @ http://127.0.0.1:8001/v1"
    assert listing[second]["target"] == "policy @ http://127.0.0.1:8002/v1"
    records = client.get(f"/api/runs/{runs[second]}/records", params={"sort": "score"}).json()["rows"]
    assert len(records) == 4  # one model's rollouts, not both endpoints' merged into each record


LONG_OUTPUT = "\n".join(f"line {i} of the test output" for i in range(40))


class RecordedEpisode:
    """Rolls each row out as the chat an agent episode leaves (what ``AgentLoop`` puts in the row): the model's
    tool call, the tool's long output, the model's answer; the checker's reward and reason in the metadata."""

    async def process(self, rows: Sequence[EvaluationRow], max_concurrency: int) -> list[EvaluationRow]:
        for row in rows:
            call = {"id": "call_0", "type": "function", "function": {"name": "run", "arguments": '{"cmd": "pytest"}'}}
            row.messages = [
                *row.messages,
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_0", "content": LONG_OUTPUT},
                {"role": "assistant", "content": "all tests pass: submit"},
            ]
            checker = {"score": 0.0, "passed": False, "reason": "hello.txt is missing", "output": "no such file"}
            row.metadata.update(reward=0.0, steps=2, truncated=False, checker=checker)
        return list(rows)


def graded(row: EvaluationRow) -> EvaluationRow:
    row.score = row.metadata["reward"]
    row.reason = row.metadata["checker"]["reason"]
    return row


def test_an_agent_episode_shows_every_turn_its_reward_and_the_checkers_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALSI_RESULTS_DB", str(tmp_path / ".evalsi" / "results.sqlite"))
    monkeypatch.delenv("EVALSI_COMPLETION_PARAMS", raising=False)
    rows = [{"id": "write-file", "messages": [{"role": "system", "content": "act"}, {"role": "user", "content": "go"}]}]
    declared = evaluation_test(input_rows=rows, completion_params=PARAMS[:1], rollout_processor=RecordedEpisode())(
        graded
    ).evaluation  # type: ignore[attr-defined]
    for case in declared.cases():
        with contextlib.suppress(AssertionError):  # the episode failed its task: the test's verdict, not ours
            declared.run(case)
    client = TestClient(create_app([tmp_path]))
    rid = next(iter(ids(client.get("/").text, "runs").values()))
    record = client.get(f"/api/runs/{rid}/records/0").json()
    assert record["prompt"] == rows[0]["messages"]  # the prompt holds no turn of the episode
    sample = record["samples"][0]
    assert [t["role"] for t in sample["transcript"]] == ["assistant", "tool", "assistant"]
    assert sample["episode"]["reward"] == 0.0 and sample["episode"]["checker"]["reason"] == "hello.txt is missing"
    page = client.get(f"/runs/{rid}/records/0").text
    turns = re.findall(r'<li class="turn turn-(\w+)">', page)
    assert turns == ["assistant", "tool", "assistant"]
    assert "<code>run</code>" in page and "{&#34;cmd&#34;: &#34;pytest&#34;}" in page  # the tool call
    assert '<details class="fold"><summary>line 0 of the test output … (40 lines)</summary>' in page  # folded
    assert "all tests pass: submit" in page
    assert '<dd class="reward">0.000</dd>' in page and "hello.txt is missing" in page and ">failed<" in page
