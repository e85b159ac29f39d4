"""Choosing loggers (``--log-to``, a RunSpec's ``loggers:`` section) and what every logger is given: the metric
names with their intervals at a step, the per-record table. The loggers themselves, with their real libraries,
are tested in the ``loggers`` and ``mlflow`` nox sessions (tests/integrations/loggers)."""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from evalsi.cli.main import app
from evalsi.errors import SpecError
from evalsi.runs import Runner, load_run, run_from_mapping
from evalsi.runs._log_mlflow import mlflow_key
from evalsi.runs._loggers import LoggedRun, make_loggers, metric_values, parse_log_to, record_table, table_csv
from evalsi.specs import LoggersSpec, TensorBoardLoggerSpec
from evalsi.stats import Estimate
from tests.helpers.openai_server import OpenAIServer
from tests.runs.conftest import run_spec


def write_spec(path: Path, body: dict[str, Any], name: str = "qa") -> Path:
    document = {"apiVersion": "evals.si/v1alpha1", "kind": "RunSpec", "metadata": {"name": name}, "spec": body}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), terminal_width=200)


def test_every_metric_is_logged_with_its_interval_and_the_table_has_a_row_per_record(
    server: OpenAIServer, qa_file: Path, tmp_path: Path
) -> None:
    run = run_from_mapping(run_spec(server, qa_file, tmp_path / "r.json", samples=2))
    outcome = Runner(run).run()
    logged = LoggedRun("qa", outcome.summary.metrics, outcome.path, outcome.records)
    values = metric_values([logged], 300)
    est = outcome.summary.metrics["exact-match"]
    assert values["eval/qa/exact-match"] == pytest.approx(5 / 8)
    assert values["eval/qa/exact-match/ci_low"] == pytest.approx(est.ci_low)
    assert values["eval/qa/exact-match/ci_high"] == pytest.approx(est.ci_high)
    assert est.ci_low < 5 / 8 < est.ci_high
    assert values["eval/step"] == 300.0
    columns, rows = record_table(logged)
    assert columns == ["key", "id", "prompt", "reference", "completion", "exact-match"]
    by_id = {row[1]: row for row in rows}
    assert by_id["b"][2:] == ["3+3?", "6", "6", 0.5]  # right, then wrong: the mean of its two samples
    assert by_id["d"][4:] == ["no idea", 0.0]
    parsed = list(csv.reader(io.StringIO(table_csv(columns, rows))))
    assert parsed[0] == columns and len(parsed) == 5


def test_a_value_that_cannot_be_estimated_is_left_out(tmp_path: Path) -> None:
    nan = float("nan")
    metrics = {"loss": Estimate(2.5, nan, nan, nan, 1, 1), "empty": Estimate(nan, nan, nan, nan, 0, 0)}
    values = metric_values([LoggedRun("qa", metrics, tmp_path / "r.json", [])], 0)
    assert values == {"eval/qa/loss": 2.5, "eval/step": 0.0}  # one record: a mean, no interval; none scored: nothing


def test_a_pass_rate_of_one_record_keeps_its_interval(server: OpenAIServer, qa_file: Path, tmp_path: Path) -> None:
    run = run_from_mapping(run_spec(server, qa_file, tmp_path / "r.json", numSamples=1))
    outcome = Runner(run).run()
    values = metric_values([LoggedRun("qa", outcome.summary.metrics, outcome.path, outcome.records)], 0)
    assert values["eval/qa/exact-match"] == 1.0 and values["eval/step"] == 0.0
    assert 0.0 < values["eval/qa/exact-match/ci_low"] < 1.0 == values["eval/qa/exact-match/ci_high"]  # Wilson's


def test_log_to_names_are_checked() -> None:
    assert parse_log_to(["wandb,TensorBoard", "mlflow", "wandb"]) == ["wandb", "tensorboard", "mlflow"]
    with pytest.raises(SpecError, match="'tensorbord' is not a logger: give tensorboard, mlflow, wandb"):
        parse_log_to(["tensorbord"])


def test_an_unknown_logger_fails_before_anything_is_generated(
    server: OpenAIServer, qa_file: Path, tmp_path: Path
) -> None:
    spec = write_spec(tmp_path / "qa.yaml", run_spec(server, qa_file, tmp_path / "r.json"))
    result = invoke("run", "-f", str(spec), "--log-to", "tensorboard,comet", "-q")
    assert result.exit_code == 2, result.output
    assert "'comet' is not a logger: give tensorboard, mlflow, wandb" in result.output
    assert not (tmp_path / "r.json").exists() and not server.requests


def test_a_missing_logger_library_names_the_extra_before_the_run(
    server: OpenAIServer, qa_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # not installed: importing it raises ImportError
    body = run_spec(server, qa_file, tmp_path / "r.json", loggers={"tensorboard": {"dir": "tb"}})
    spec = write_spec(tmp_path / "qa.yaml", body)
    result = invoke("run", "-f", str(spec), "-q")
    assert result.exit_code == 2, result.output
    assert "logging to tensorboard needs its library: pip install 'evalsi[tensorboard]'" in result.output
    assert "qa.yaml" in result.output
    assert not (tmp_path / "r.json").exists() and not server.requests


def test_a_misspelt_logger_in_the_spec_names_its_line(server: OpenAIServer, qa_file: Path, tmp_path: Path) -> None:
    body = run_spec(server, qa_file, tmp_path / "r.json", loggers={"tensorbord": {}})
    spec = write_spec(tmp_path / "qa.yaml", body)
    with pytest.raises(SpecError) as caught:
        load_run(spec)
    assert caught.value.path == "spec.loggers.tensorbord" and caught.value.line is not None
    assert "unknown field" in str(caught.value)


def test_two_specs_giving_one_logger_different_settings_are_refused(tmp_path: Path) -> None:
    first = LoggersSpec(tensorboard=TensorBoardLoggerSpec(dir="tb"))
    second = LoggersSpec(tensorboard=TensorBoardLoggerSpec(dir="other"))
    with pytest.raises(SpecError, match=r"loggers.tensorboard differs from its settings in a.yaml"):
        make_loggers([], [(first, tmp_path, "a.yaml"), (second, tmp_path, "b.yaml")])


def test_metric_names_are_spelt_as_mlflow_accepts_them() -> None:
    assert mlflow_key("eval/math/pass@4/math-equiv") == "eval/math/pass_at_4/math-equiv"
    assert mlflow_key("eval/math/pass^4/math-equiv/ci_low") == "eval/math/pass_pow_4/math-equiv/ci_low"
    assert mlflow_key("eval/q&a/exact-match") == "eval/q_a/exact-match"
