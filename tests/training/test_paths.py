"""One rule for paths: what is given on the command line or to a Python API is relative to the working directory,
what is written in a spec is relative to the spec file. A spec kept in another folder (``-f evals/spec.yaml``)
must not move the results away from where ``eval``, ``watch``, ``curve`` and the trainer hooks look for them."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from evalsi.cli.main import app
from evalsi.training import CheckpointEvaluator, CheckpointRunner, Endpoint, Watcher
from tests.helpers.openai_server import OpenAIServer
from tests.training.conftest import QUESTIONS, write_model, write_spec

BASE = "org/base"


def only_the_base_is_right(prompt: str, body: dict[str, Any]) -> str:
    """The base model (requested by its name) answers every question; a checkpoint none of them."""
    return QUESTIONS.get(prompt, "?") if body.get("model") == BASE else "wrong"


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(answers={q: only_the_base_is_right for q in QUESTIONS}, default="?") as srv:
        yield srv


@pytest.fixture
def project(workdir: Path) -> Path:
    """The working directory: a project with its spec (and dataset) in ``evals/`` and a checkpoint in ``ckpts/``."""
    write_spec(workdir / "evals")
    write_model(workdir / "ckpts" / "checkpoint-10")
    old = 1_000_000_000  # long settled
    for path in (workdir / "ckpts" / "checkpoint-10", *(workdir / "ckpts" / "checkpoint-10").iterdir()):
        os.utime(path, (old, old))
    return workdir


def checkpoints(*args: str) -> Any:
    return CliRunner().invoke(app, ["checkpoints", *args], terminal_width=200)


def served(server: OpenAIServer, *extra: str) -> list[str]:
    return ["-f", "evals/forgetting.yaml", "--training-run", "p1", "--serve", "endpoint", "--base-url",
            server.base_url, *extra]  # fmt: skip


def test_a_spec_in_another_folder_keeps_results_where_eval_and_curve_look(project: Path, server: OpenAIServer) -> None:
    base = checkpoints("eval", BASE, "--step", "base", *served(server), "-q")
    assert base.exit_code == 0, base.output
    step = checkpoints(
        "eval", "ckpts/checkpoint-10", "--step", "10", *served(server, "--regression", "exact-match:0.02")
    )
    assert step.exit_code == 3, step.output  # the drop from 1.0 to 0.0 is a regression, not a "partial" step
    assert "step 10: regressed" in step.output and "exact-match 0.000 (-1.000!)" in step.output
    logs = project / "evalsi-logs" / "p1" / "forgetting"
    assert sorted(p.name for p in logs.iterdir()) == ["base.json", "step-10.json"]
    assert not (project / "evals" / "evalsi-logs").exists()
    curve = checkpoints(
        "curve", "-f", "evals/forgetting.yaml", "--training-run", "p1", "--regression", "exact-match:0.02"
    )
    assert curve.exit_code == 3, curve.output
    rows = [line.split() for line in curve.stdout.splitlines()]
    assert ["base", "1.000", "ok"] in rows and ["10", "0.000", "(-1.000!)", "regressed"] in rows


def test_watch_takes_its_directory_log_dir_and_stop_file_from_the_working_directory(
    project: Path, server: OpenAIServer
) -> None:
    assert checkpoints("eval", BASE, "--step", "base", *served(server, "--log-dir", "logs"), "-q").exit_code == 0
    result = checkpoints(
        "watch", "ckpts", *served(server, "--log-dir", "logs", "--regression", "exact-match:0.02"),
        "--stop-file", "STOP", "--once", "--settle", "1",
    )  # fmt: skip
    assert result.exit_code == 3, result.output
    assert (project / "logs" / "p1" / "forgetting" / "step-10.json").exists()
    assert json.loads((project / "STOP").read_text())["step"] == 10
    assert not (project / "evals" / "logs").exists() and not (project / "evals" / "STOP").exists()


def test_paths_set_on_the_command_line_are_the_working_directory_s(project: Path, server: OpenAIServer) -> None:
    asked = list(QUESTIONS.items())[:4]
    (project / "mine.jsonl").write_text(
        "".join(json.dumps({"id": f"m{i}", "prompt": q, "answer": a}) + "\n" for i, (q, a) in enumerate(asked))
    )
    result = checkpoints("eval", BASE, "--step", "base", *served(server, "--set", "dataset.path=mine.jsonl", "--json"))
    assert result.exit_code == 0, result.output
    data = orjson.loads(project.joinpath("evalsi-logs", "p1", "forgetting", "base.json").read_bytes())
    assert [r["id"] for r in data["records"]] == ["m0", "m1", "m2", "m3"]


def test_relative_paths_given_to_the_evaluator_hold_after_the_working_directory_changes(
    project: Path, server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    evaluator = CheckpointEvaluator(
        "evals/forgetting.yaml", "p1", Endpoint(server.base_url), regression=["exact-match:0.02"], log_dir="logs"
    )
    watcher = Watcher(evaluator, Path("ckpts"), settle=0, once=True, stop_file=Path("STOP"))
    monkeypatch.chdir(tmp_path)  # a trainer or notebook changing directory after setting evaluation up
    runner = CheckpointRunner(evaluator, wait=True)
    runner.submit(BASE, None)
    report = watcher.run()
    assert [r.status for _, r in report.evaluated] == ["regressed"]
    # what evalsi_callback logs into the trainer's history: the metric of each evaluation
    assert runner.results[0][1].log_metrics() == {"eval/forgetting/exact-match": 1.0}
    assert report.evaluated[0][1].log_metrics() == {"eval/forgetting/exact-match": 0.0}
    assert (project / "logs" / "p1" / "forgetting" / "step-10.json").exists() and (project / "STOP").exists()
    assert not list(tmp_path.iterdir())
