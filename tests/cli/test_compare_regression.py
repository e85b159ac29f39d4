"""`evalsi compare --regression METRIC[:MAX_DROP]`: exit 3 on a significant drop beyond MAX_DROP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import typer
import yaml
from typer.testing import CliRunner

from evalsi.cli.compare import compare_command
from evalsi.cli.run import run_command
from tests.cli._questions import questions, write_questions
from tests.helpers.openai_server import OpenAIServer

app = typer.Typer()
app.command("run")(run_command)
app.command("compare")(compare_command)
QUESTIONS = questions(30)


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(answers=dict(QUESTIONS), default="?") as srv:
        yield srv


@pytest.fixture
def spec_file(tmp_path: Path, server: OpenAIServer) -> Path:
    write_questions(tmp_path / "d.jsonl", QUESTIONS)
    spec = {
        "apiVersion": "evals.si/v1alpha1",
        "kind": "RunSpec",
        "metadata": {"name": "cli"},
        "spec": {
            "target": {"baseUrl": server.base_url, "model": "base", "retryBackoff": 0.01},
            "dataset": {"path": "d.jsonl"},
            "evaluators": [{"ref": "exact-match"}],
        },
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def two_runs(spec: Path, srv: OpenAIServer, tmp_path: Path, wrong: int) -> tuple[Path, Path]:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert invoke("run", "-f", str(spec), "-o", str(a), "-q").exit_code == 0
    srv.answers = {p: (ans if i >= wrong else "wrong") for i, (p, ans) in enumerate(QUESTIONS.items())}
    invoke("run", "-f", str(spec), "-o", str(b), "-q")
    return a, b


def test_regression_exits_3_and_marks_the_metric(spec_file: Path, server: OpenAIServer, tmp_path: Path) -> None:
    a, b = two_runs(spec_file, server, tmp_path, wrong=12)  # 12 of 30 lost: drop 0.4
    result = invoke("compare", str(a), str(b), "--regression", "exact-match:0.1")
    assert result.exit_code == 3, result.output
    text = " ".join(result.output.split())
    assert "-0.4000!" in text and "regression: exact-match dropped 0.4000" in text and "more than 0.1" in text
    assert invoke("compare", str(a), str(b), "--regression", "exact-match:0.5").exit_code == 0
    assert invoke("compare", str(b), str(a), "--regression", "exact-match").exit_code == 0  # an improvement
    data = orjson.loads(invoke("compare", str(a), str(b), "--json", "--regression", "exact-match:0.1").stdout)
    assert data[0]["regressed"] is True


def test_insignificant_drop_is_not_a_regression(spec_file: Path, server: OpenAIServer, tmp_path: Path) -> None:
    a, b = two_runs(spec_file, server, tmp_path, wrong=1)
    result = invoke("compare", str(a), str(b), "--regression", "exact-match")
    assert result.exit_code == 0, result.output
    assert "!" not in result.output


def test_regression_input_errors_exit_2(spec_file: Path, server: OpenAIServer, tmp_path: Path) -> None:
    a = tmp_path / "a.json"
    assert invoke("run", "-f", str(spec_file), "-o", str(a), "-q").exit_code == 0
    bad = invoke("compare", str(a), str(a), "--regression", "exact-match:-1")
    assert bad.exit_code == 2 and "MAX_DROP must be a number >= 0" in " ".join(bad.output.split())
    unknown = invoke("compare", str(a), str(a), "--regression", "accuracy")
    text = " ".join(unknown.output.split())
    assert unknown.exit_code == 2 and "share no metric 'accuracy' (they share: exact-match)" in text
