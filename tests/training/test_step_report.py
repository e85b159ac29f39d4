"""What `checkpoints eval` and `watch` say of each step: every metric's mean with its change from the base, and
why a step is partial or failed its gates; `--json` carries the means."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from evalsi.cli.main import app
from tests.helpers.openai_server import OpenAIServer
from tests.training.conftest import answers, write_model, write_spec


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(answers=answers(), default="?") as srv:
        yield srv


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, ["checkpoints", *args], terminal_width=200)


def options(spec: Path, logs: Path, server: OpenAIServer) -> list[str]:
    return ["-f", str(spec), "--training-run", "r", "--serve", "endpoint", "--base-url", server.base_url,
            "--model", "m", "--log-dir", str(logs)]  # fmt: skip


def said(result: Any) -> str:
    return " ".join(result.output.split())


def test_eval_prints_each_mean_with_its_change_and_json_carries_them(tmp_path: Path, server: OpenAIServer) -> None:
    spec, logs = write_spec(tmp_path / "specs"), tmp_path / "logs"
    assert cli("eval", "base-model", "--step", "base", *options(spec, logs, server)).exit_code == 0
    server.answers = answers(wrong=5)  # type: ignore[assignment]
    checkpoint = write_model(tmp_path / "checkpoint-100")
    result = cli("eval", str(checkpoint), "--step", "100", *options(spec, logs, server))
    assert result.exit_code == 0, result.output
    assert "step 100: ok" in said(result) and "forgetting: exact-match 0.833 (-0.167*)" in said(result)
    again = cli("eval", str(checkpoint), "--step", "100", *options(spec, logs, server), "--json", "-q")
    data = orjson.loads(again.stdout)["specs"][0]
    assert data["metrics"]["exact-match"]["mean"] == pytest.approx(25 / 30) and data["reason"] == ""
    change = data["differences"]["exact-match"]
    assert change["mean"] == pytest.approx(-5 / 30) and change["significant"] is True


def test_a_partial_step_says_which_records_failed_and_why(tmp_path: Path, server: OpenAIServer) -> None:
    spec, logs = write_spec(tmp_path / "specs"), tmp_path / "logs"
    server.inject(status=500, prompt="q3", times=100)
    result = cli("eval", str(write_model(tmp_path / "checkpoint-7")), "--step", "7", *options(spec, logs, server))
    assert result.exit_code == 1, result.output
    assert "step 7: partial" in said(result)
    assert "partial: 1 record(s) could not be generated (first: " in said(result) and "HTTP 500" in said(result)
    data = orjson.loads(
        cli("eval", str(tmp_path / "checkpoint-7"), "--step", "7", *options(spec, logs, server), "--json", "-q").stdout
    )
    assert data["status"] == "partial" and "could not be generated" in data["specs"][0]["reason"]


def test_a_failed_gate_says_which_gate_and_by_how_much(tmp_path: Path, server: OpenAIServer) -> None:
    spec, logs = write_spec(tmp_path / "specs", gate_min=0.9), tmp_path / "logs"
    server.answers = answers(wrong=6)  # type: ignore[assignment]
    result = cli("eval", str(write_model(tmp_path / "checkpoint-7")), "--step", "7", *options(spec, logs, server))
    assert result.exit_code == 3, result.output
    assert "step 7: gate failed" in said(result) and "forgetting: exact-match 0.800" in said(result)
    assert "gate failed: gate exact-match failed: 0.8000 < min 0.9" in said(result)


def test_watch_prints_the_same_per_checkpoint(tmp_path: Path, server: OpenAIServer) -> None:
    spec, logs = write_spec(tmp_path / "specs"), tmp_path / "logs"
    for step in (1, 2):
        write_model(tmp_path / "out" / f"checkpoint-{step}")
        for path in (tmp_path / "out" / f"checkpoint-{step}", *(tmp_path / "out" / f"checkpoint-{step}").iterdir()):
            os.utime(path, (1, 1))
    server.inject(status=500, prompt="q0", times=2)  # q0 of the first checkpoint fails, and its one retry
    result = cli("watch", str(tmp_path / "out"), *options(spec, logs, server), "--once", "--settle", "1")
    assert result.exit_code == 1, result.output
    text = said(result)
    assert "checkpoint-1: partial" in text and "1 record(s) could not be generated (first: r0: " in text
    assert "checkpoint-2: ok" in text and "forgetting: exact-match 1.000" in text
