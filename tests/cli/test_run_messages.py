"""What `evalsi run` says when generation fails or retries: the URL, live retries, one correct exit code."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from evalsi.cli.run import run_command
from tests.cli._questions import questions, write_questions
from tests.helpers.openai_server import OpenAIServer

app = typer.Typer()
app.command("run")(run_command)
app.command("noop")(lambda: None)  # a second command keeps "run" a subcommand
runner = CliRunner()

QUESTIONS = questions(6)


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(answers=dict(QUESTIONS), default="?") as srv:
        yield srv


def spec_args(tmp_path: Path, server: OpenAIServer, **target: Any) -> list[str]:
    write_questions(tmp_path / "d.jsonl", QUESTIONS)
    spec: dict[str, Any] = {
        "apiVersion": "evals.si/v1alpha1",
        "kind": "RunSpec",
        "metadata": {"name": "msg"},
        "spec": {
            "target": {"baseUrl": server.base_url, "model": "base", "retryBackoff": 0.01, **target},
            "dataset": {"path": "d.jsonl"},
            "evaluators": [{"ref": "exact-match"}],
            "gates": [{"metric": "exact-match", "min": 0.9}],
        },
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return ["run", "-f", str(path), "-o", str(tmp_path / "out.json")]


def test_a_failed_gate_beside_failed_records_says_exit_1_once(tmp_path: Path, server: OpenAIServer) -> None:
    server.answers = {p: "wrong" for p in QUESTIONS}
    server.inject(status=401, prompt="q3")
    result = runner.invoke(app, [*spec_args(tmp_path, server), "-q"])
    text = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert "a gate failed" in text and "exit 3" not in text
    assert text.count("(exit 1)") == 1
    assert f"{server.base_url}/chat/completions: HTTP 401" in text  # the failure names the URL


def test_a_failed_gate_alone_says_exit_3(tmp_path: Path, server: OpenAIServer) -> None:
    server.answers = {p: "wrong" for p in QUESTIONS}
    result = runner.invoke(app, [*spec_args(tmp_path, server), "-q"])
    assert result.exit_code == 3 and "a gate failed (exit 3)" in " ".join(result.output.split())


def test_exhausted_retries_name_the_url_and_count_attempts_right(tmp_path: Path, server: OpenAIServer) -> None:
    server.inject(status=503, prompt="q2", times=5)
    result = runner.invoke(app, [*spec_args(tmp_path, server, maxRetries=0), "-q"])
    text = " ".join(result.output.split())
    assert result.exit_code == 1
    assert f"{server.base_url}/chat/completions: gave up after 1 attempt; last: HTTP 503" in text
    assert "1 attempts" not in text


def test_retries_show_in_the_progress_line(tmp_path: Path, server: OpenAIServer) -> None:
    server.inject(status=503, prompt="q1", times=2)
    result = runner.invoke(app, spec_args(tmp_path, server))
    text = " ".join(result.output.split())
    assert result.exit_code == 0, result.output
    assert "2 retries (HTTP 503, 2/6)" in text  # the second of six attempts (maxRetries 5) failed
