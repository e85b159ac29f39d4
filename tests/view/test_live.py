"""A run in progress: listed from its journal before its results file exists, filling in as records finish."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import yaml
from starlette.testclient import TestClient

from evalsi.runs._results import ResultsWriter, journal_path
from evalsi.view import create_app
from tests.helpers.openai_server import OpenAIServer
from tests.runs.conftest import write_jsonl
from tests.view.conftest import ids
from tests.view.make import record, simple_run

ROOT = Path(__file__).resolve().parents[2]
CHILD = "import sys; from evalsi.runs import Runner, load_run; Runner(load_run(sys.argv[1])).run()"
RECORDS = 12


def wait_for(condition: Callable[[], Any], what: str, seconds: float = 120.0) -> Any:
    """Poll until ``condition`` gives a true value (the machine may be loaded: the bound is generous)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def listed(client: TestClient, name: str) -> dict[str, Any] | None:
    return next((r for r in client.get("/api/sources").json()["runs"] if r["name"] == name), None)


def test_a_run_in_progress_is_listed_with_its_progress_and_fills_in(tmp_path: Path) -> None:
    rows = [{"id": f"r{i}", "prompt": f"q{i}", "answer": f"a{i}"} for i in range(RECORDS)]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    results = tmp_path / "results"
    results.mkdir()
    out = results / "live.results.json"
    with OpenAIServer(answers={f"q{i}": f"a{i}" for i in range(RECORDS)}, delay=0.4) as server:
        spec = tmp_path / "run.yaml"
        spec.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "evals.si/v1alpha1",
                    "kind": "RunSpec",
                    "metadata": {"name": "live"},
                    "spec": {
                        "target": {"baseUrl": server.base_url, "model": "m", "maxConcurrency": 1},
                        "dataset": {"path": str(data)},
                        "evaluators": [{"ref": "exact-match"}],
                        "output": str(out),
                        "batchSize": 1,
                    },
                }
            )
        )
        client = TestClient(create_app([results]))
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(spec)], env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            first = wait_for(lambda: listed(client, "live"), "the run to be listed")
            assert first["status"] == "running" and not out.exists()  # its journal alone so far
            assert first["progress"]["total"] == RECORDS and first["progress"]["done"] < RECORDS
            assert first["target"] == f"m @ {server.base_url}"
            page = client.get("/").text
            assert "live" in page and f"of {RECORDS} records" in page
            rid = first["id"]
            more = wait_for(
                lambda: (item := listed(client, "live")) and 2 <= item["progress"]["done"] < RECORDS and item,
                "records to finish",
            )
            run = client.get(f"/api/runs/{rid}").json()  # the run page reads what the journal holds so far
            assert run["status"] == "running" and run["records"] >= more["progress"]["done"] - 1
            assert run["summary"]["metrics"]["exact-match"]["mean"] == 1.0
            assert child.wait(180) == 0
        finally:
            if child.poll() is None:
                child.kill()
    done = listed(client, "live")
    assert done is not None and done["id"] == rid  # the same run, now from its results file
    assert done["status"] == "complete" and done["progress"] is None and done["metrics"]["exact-match"] == 1.0


def test_a_journal_from_an_earlier_evalsi_is_not_listed_alone(tmp_path: Path) -> None:
    journal = journal_path(tmp_path / "old.results.json")
    journal.write_bytes(orjson.dumps({"fingerprints": {}}) + b"\n" + orjson.dumps(record(0, [True]).to_json()) + b"\n")
    simple_run(tmp_path / "done.results.json", "done", [True, False])
    client = TestClient(create_app([tmp_path]))
    assert [r["name"] for r in client.get("/api/sources").json()["runs"]] == ["done"]


def test_a_step_being_evaluated_shows_on_its_curve_as_running(tmp_path: Path) -> None:
    curve = tmp_path / "logs" / "grpo-1" / "forgetting"
    curve.mkdir(parents=True)
    for step in (None, 100):
        label = "base" if step is None else str(step)
        section = {"trainingRun": "grpo-1", "step": step, "label": label}
        simple_run(
            curve / f"{'base' if step is None else f'step-{step}'}.json",
            f"grpo-1 {label}",
            [True] * 4,
            checkpoint=section,
        )
    writer = ResultsWriter(
        curve / "step-200.json",
        {
            "name": "grpo-1 200",
            "fingerprints": {},
            "spec": {},
            "metrics": [{"name": "acc", "threshold": 1.0}],
            "onError": "zero",
        },
    )
    writer.begin(4)
    writer.append([record(0, [True]), record(1, [False])])
    writer.close(remove_journal=False)
    client = TestClient(create_app([tmp_path]))
    cid = next(iter(ids(client.get("/").text, "curves").values()))
    points = client.get(f"/api/curves/{cid}").json()["points"]
    assert [(p["step"], p["status"]) for p in points] == [("base", "complete"), (100, "complete"), (200, "running")]
    assert points[2]["estimates"]["acc"]["mean"] == 0.5
    entry = next(r for r in client.get("/api/sources").json()["runs"] if r["name"] == "grpo-1 200")
    assert entry["status"] == "running" and entry["progress"] == {"done": 2, "total": 4}
