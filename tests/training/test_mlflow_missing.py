"""`mlflow:` checkpoint locations without the MLflow client installed: a clear error naming the extra."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalsi.cli.main import app
from evalsi.errors import DataError
from evalsi.training import SourceError, open_source
from evalsi.training._mlflow_source import parse_version_location
from tests.training.conftest import lora_arguments, write_spec


@pytest.fixture
def no_mlflow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mlflow", None)  # import mlflow raises ImportError
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")


def test_open_source_names_the_extra(no_mlflow: None, tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"mlflow:grpo-1: .*pip install 'evalsi\[mlflow\]'"):
        open_source("mlflow:grpo-1", tmp_path)


def test_watch_and_eval_say_what_to_install(no_mlflow: None, tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "specs")
    args = lora_arguments(spec, tmp_path / "logs", "http://127.0.0.1:9/v1")
    watch = CliRunner().invoke(app, ["checkpoints", "watch", "mlflow:grpo-1", *args, "--once", "-q"])
    assert watch.exit_code == 2
    assert "evalsi[mlflow]" in watch.stderr and "Traceback" not in watch.output
    one = CliRunner().invoke(app, ["checkpoints", "eval", "mlflow:grpo-1/3", "--step", "300", *args, "-q"])
    assert one.exit_code == 2  # a missing extra is bad usage, from eval as from watch
    assert "evalsi[mlflow]" in one.stderr and "Traceback" not in one.output
    assert not (tmp_path / "logs" / "grpo-1" / "forgetting").exists()


def test_a_version_location_names_model_and_version(tmp_path: Path) -> None:
    assert parse_version_location("mlflow:grpo-1/3") == ("grpo-1", "3")
    assert parse_version_location("mlflow:team/grpo/12") == ("team/grpo", "12")
    for bad in ("mlflow:grpo-1", "mlflow:grpo-1/latest", "mlflow:/3"):
        with pytest.raises(DataError, match="mlflow:<model>/<version>"):
            parse_version_location(bad)
    spec = write_spec(tmp_path / "specs")
    args = lora_arguments(spec, tmp_path / "logs", "http://127.0.0.1:9/v1")
    result = CliRunner().invoke(app, ["checkpoints", "eval", "mlflow:grpo-1", "--step", "3", *args, "-q"])
    assert result.exit_code == 2 and "mlflow:<model>/<version>" in result.stderr
