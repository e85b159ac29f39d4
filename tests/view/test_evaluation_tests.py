"""Evaluation-test results in the viewer: each case of a test (one per completion-params entry) is its own run."""

from __future__ import annotations

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
