"""`evalsi checkpoints eval | watch | curve` through Typer, against the vLLM stand-in."""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from evalsi.cli.checkpoints import EvaluatorOptions, eval_command, watch_command
from evalsi.cli.main import app
from tests.training.conftest import RunningVLLM, answers, lora_arguments, write_adapter, write_model, write_spec

runner = CliRunner()


def invoke(*args: str) -> Any:
    return runner.invoke(app, ["checkpoints", *args])


def common(spec: Path, logs: Path, vllm: RunningVLLM) -> list[str]:
    return [*lora_arguments(spec, logs, vllm.base_url), "-q"]


@pytest.fixture
def evaluated(tmp_path: Path, lora_vllm: RunningVLLM) -> tuple[Path, Path, RunningVLLM]:
    """Base, step 100 (1 wrong: no change), 200 (5 wrong: significant, within 0.2), 300 (12 wrong: regressed)."""
    spec, logs = write_spec(tmp_path / "specs"), tmp_path / "logs"
    assert invoke("eval", "base", "--step", "base", *common(spec, logs, lora_vllm)).exit_code == 0
    for step, wrong in ((100, 1), (200, 5), (300, 12)):
        adapter = write_adapter(tmp_path / "out" / f"checkpoint-{step}", answers(wrong))
        result = invoke(
            "eval", str(adapter), "--step", str(step), *common(spec, logs, lora_vllm), "--regression", "exact-match:0.2"
        )
        assert result.exit_code == (3 if step == 300 else 0), result.output
    return spec, logs, lora_vllm


def test_curve_table_marks_changes_and_exits_3_on_a_latest_regression(evaluated: tuple[Path, Path, Any]) -> None:
    spec, logs, _ = evaluated
    result = invoke(
        "curve", "-f", str(spec), "--training-run", "grpo-1", "--log-dir", str(logs), "--regression", "exact-match:0.2"
    )
    assert result.exit_code == 3, result.output
    rows = [line.split() for line in result.stdout.splitlines()]
    assert ["step", "exact-match", "status"] in rows
    assert ["base", "1.000", "ok"] in rows
    assert ["100", "0.967", "(-0.033)", "ok"] in rows  # one record lost: not significant
    assert ["200", "0.833", "(-0.167*)", "ok"] in rows  # significant, but within MAX_DROP
    assert ["300", "0.600", "(-0.400!)", "regressed"] in rows
    assert "* marks a significant change, ! a regression." in result.stdout
    lenient = invoke(
        "curve", "-f", str(spec), "--training-run", "grpo-1", "--log-dir", str(logs), "--regression", "exact-match:0.5"
    )
    assert lenient.exit_code == 0 and "regressed" not in lenient.stdout


def test_curve_json_and_plots(evaluated: tuple[Path, Path, Any], tmp_path: Path) -> None:
    spec, logs, _ = evaluated
    html, png = tmp_path / "curve.html", tmp_path / "curve.png"
    result = invoke(
        "curve",
        "-f",
        str(spec),
        "--training-run",
        "grpo-1",
        "--log-dir",
        str(logs),
        "--json",
        "--regression",
        "exact-match:0.2",
        "--plot",
        str(html),
        "--plot",
        str(png),
    )
    assert result.exit_code == 3, result.output
    data = orjson.loads(result.stdout)[0]
    assert [p["label"] for p in data["points"]] == ["base", "100", "200", "300"]
    assert data["latest"] == "300" and data["failed"] is True
    point = data["points"][3]["metrics"]["exact-match"]
    assert point["regressed"] and point["significant"] and point["change"]["mean"] == pytest.approx(-0.4)
    # Intervals name their method and stay in the range: Wilson's for a pass rate, Newcombe's for its change.
    assert point["ci"]["method"] == "wilson" and 0.0 <= point["ci"]["low"] <= point["ci"]["high"] <= 1.0
    assert point["change"]["ci"]["method"] == "newcombe" and -1.0 <= point["change"]["ci"]["low"] < 0.0
    page = html.read_text()
    assert page.count("<svg") == 1 and page.count("class='regression'") == 1 and "class='base'" in page
    assert "Wilson score interval" in page and "Newcombe&#x27;s paired score interval" in page
    assert "<script" not in page and "http" not in page.replace("http://www.w3.org/2000/svg", "")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_eval_json_reuses_complete_results(evaluated: tuple[Path, Path, RunningVLLM], tmp_path: Path) -> None:
    spec, logs, vllm = evaluated
    result = invoke(
        "eval", str(tmp_path / "out" / "checkpoint-100"), "--step", "100", *common(spec, logs, vllm), "--json"
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["specs"][0]["reused"] is True and data["status"] == "ok"


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "specs")
    bad_step = invoke("eval", "x", "--step", "last", "-f", str(spec), "--training-run", "r")
    assert bad_step.exit_code == 2 and "--step 'last'" in bad_step.output
    no_url = invoke("eval", "x", "--step", "1", "-f", str(spec), "--training-run", "r", "--serve", "lora")
    assert no_url.exit_code == 2 and "--serve lora needs --base-url" in no_url.output
    no_results = invoke("curve", "-f", str(spec), "--training-run", "r", "--log-dir", str(tmp_path / "none"))
    assert no_results.exit_code == 2 and "no results for spec 'forgetting'" in " ".join(no_results.output.split())
    unknown = invoke("watch", str(tmp_path), "-f", str(spec), "--training-run", "r", "--regression", "acc")
    assert unknown.exit_code == 2 and "'acc' is not a metric" in unknown.output
    serve = invoke("eval", "x", "--step", "1", "-f", str(spec), "--training-run", "r", "--serve", "tgi")
    assert serve.exit_code == 2 and "not one of transformers, vllm, lora, endpoint" in serve.output


def test_eval_serving_failure_exits_1(tmp_path: Path, vllm_bin: Path) -> None:
    spec = write_spec(tmp_path / "specs")
    checkpoint = write_model(tmp_path / "checkpoint-1")  # a model vllm serve is started on, and fails
    result = invoke(
        "eval",
        str(checkpoint),
        "--step",
        "1",
        "-f",
        str(spec),
        "--training-run",
        "r",
        "--serve",
        "vllm",
        "--vllm-bin",
        str(vllm_bin),
        "--vllm-arg=--no-such-flag",
        "--log-dir",
        str(tmp_path / "logs"),
        "-q",
    )
    assert result.exit_code == 1 and "exited with code 2 before it was healthy" in result.output


def test_watch_once_exits_3_when_a_checkpoint_fails_its_spec_gate(tmp_path: Path) -> None:
    import os

    from tests.helpers.openai_server import OpenAIServer
    from tests.training.conftest import write_model

    spec = write_spec(tmp_path / "specs", gate_min=0.9)
    write_model(tmp_path / "out" / "checkpoint-1")
    os.utime(tmp_path / "out" / "checkpoint-1", (1, 1))
    for path in (tmp_path / "out" / "checkpoint-1").iterdir():
        os.utime(path, (1, 1))
    with OpenAIServer(answers=answers(wrong=10), default="?") as server:
        result = invoke(
            "watch",
            str(tmp_path / "out"),
            "-f",
            str(spec),
            "--training-run",
            "g",
            "--serve",
            "endpoint",
            "--base-url",
            server.base_url,
            "--model",
            "m",
            "--log-dir",
            str(tmp_path / "logs"),
            "--once",
            "--settle",
            "1",
        )
    assert result.exit_code == 3, result.output
    assert "checkpoint-1: gate failed" in result.output


def test_eval_and_watch_build_their_evaluator_from_one_set_of_options(tmp_path: Path) -> None:
    names = [f.name for f in dataclasses.fields(EvaluatorOptions)]
    for command in (eval_command, watch_command):
        assert set(names) <= set(inspect.signature(command).parameters), command.__name__
    # The same bad option fails the same way in both commands (one place builds the serving and the evaluator).
    spec = write_spec(tmp_path / "specs")
    shared = ["-f", str(spec), "--training-run", "r", "--log-dir", str(tmp_path / "logs"), "--regression", "nope"]
    for args in (["eval", "base", "--step", "base"], ["watch", str(tmp_path), "--once"]):
        result = invoke(*args, *shared, "--serve", "endpoint", "--base-url", "http://127.0.0.1:9/v1", "-q")
        assert result.exit_code == 2 and "'nope' is not a metric of the run specs" in result.output, result.output
