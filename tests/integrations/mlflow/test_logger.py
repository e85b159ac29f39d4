"""``--log-to mlflow`` and ``loggers: {mlflow: ...}`` against a real tracking server: the metrics with their
intervals at the checkpoint's step in one tracking run per training run, the per-record table as an artifact, the
results file as a tag."""

from __future__ import annotations

import csv
import io
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.helpers.openai_server import OpenAIServer
from tests.integrations.loggers.conftest import add_loggers, endpoint, invoke, settled
from tests.integrations.mlflow.conftest import TrackingServer
from tests.training.conftest import answers, write_spec


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(answers=answers(), default="?") as srv:
        yield srv


def group_run(uri: str, experiment: str, group: str) -> Any:
    """The one tracking run of a group."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    found = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    runs = [r for r in found if r.data.tags.get("evalsi.group") == group]
    assert len(runs) == 1, [r.data.tags for r in found]
    return runs[0]


def history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    from mlflow import MlflowClient

    return sorted((m.step, m.value) for m in MlflowClient(uri).get_metric_history(run_id, key))


def artifact_text(uri: str, run_id: str, path: str, tmp_path: Path) -> str:
    from mlflow import MlflowClient

    local = MlflowClient(uri).download_artifacts(run_id, path, str(tmp_path / uuid.uuid4().hex))
    return Path(local).read_text()


def test_evalsi_run_logs_to_the_spec_s_tracking_server(
    tracking_server: TrackingServer, server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.answers = answers(wrong=6)  # type: ignore[assignment]
    experiment = f"e-{uuid.uuid4().hex[:8]}"
    spec = add_loggers(
        write_spec(tmp_path / "specs"), {"mlflow": {"trackingUri": tracking_server.uri, "experiment": experiment}}
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    result = invoke("run", "-f", str(spec), "--set", f"target.baseUrl={server.base_url}", "--set",
                    "target.model=m", "-o", "out.json", "-q")  # fmt: skip
    assert result.exit_code == 0, result.output
    run = group_run(tracking_server.uri, experiment, "forgetting")
    expected = orjson.loads((tmp_path / "out.json").read_bytes())["summary"]["metrics"]["exact-match"]
    run_id = run.info.run_id
    assert history(tracking_server.uri, run_id, "eval/forgetting/exact-match") == [(0, 0.8)]
    assert history(tracking_server.uri, run_id, "eval/forgetting/exact-match/ci_low") == [(0, expected["ci_low"])]
    assert history(tracking_server.uri, run_id, "eval/forgetting/exact-match/ci_high") == [(0, expected["ci_high"])]
    assert run.data.tags["evalsi.results.forgetting"] == (tmp_path / "out.json").as_uri()
    table = artifact_text(tracking_server.uri, run_id, "evalsi/forgetting/step-0/records.csv", tmp_path)
    rows = list(csv.DictReader(io.StringIO(table)))
    assert len(rows) == 30 and sum(float(r["exact-match"]) for r in rows) == 24


def test_checkpoints_log_every_step_into_one_tracking_run(
    tracking_uri: str, server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    experiment = f"e-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", experiment)
    spec, logs = write_spec(tmp_path / "specs"), tmp_path / "logs"
    mlflow = ("--log-to", "mlflow")
    base = invoke("checkpoints", "eval", "base-model", "--step", "base", *endpoint(spec, logs, server, *mlflow))
    assert base.exit_code == 0, base.output
    server.answers = answers(wrong=3)  # type: ignore[assignment]
    settled(tmp_path / "out" / "checkpoint-10")
    settled(tmp_path / "out" / "checkpoint-20")
    watched = invoke("checkpoints", "watch", str(tmp_path / "out"), *endpoint(spec, logs, server, *mlflow), "--once")
    assert watched.exit_code == 0, watched.output
    run = group_run(tracking_uri, experiment, "r")
    run_id = run.info.run_id
    assert history(tracking_uri, run_id, "eval/forgetting/exact-match") == [(0, 1.0), (10, 0.9), (20, 0.9)]
    assert history(tracking_uri, run_id, "eval/step") == [(0, 0.0), (10, 10.0), (20, 20.0)]
    assert run.data.tags["evalsi.results.forgetting"] == (logs / "r" / "forgetting" / "step-20.json").as_uri()
    table = artifact_text(tracking_uri, run_id, "evalsi/forgetting/step-10/records.csv", tmp_path)
    assert sum(float(r["exact-match"]) for r in csv.DictReader(io.StringIO(table))) == 27


def test_an_unreachable_tracking_server_fails_the_step_after_saving_its_results(
    server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    spec, logs = write_spec(tmp_path / "specs"), tmp_path / "logs"
    result = invoke("checkpoints", "eval", "base-model", "--step", "base", *endpoint(spec, logs, server),
                    "--log-to", "mlflow")  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "the results are saved, but logging them failed: mlflow" in result.output
    assert orjson.loads((logs / "r" / "forgetting" / "base.json").read_bytes())["status"] == "complete"
