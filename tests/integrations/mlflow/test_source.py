"""The `mlflow:<model>` source against a real tracking server: steps, READY settling, downloads through the
server, and its errors."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from evalsi.errors import DataError
from evalsi.training import CheckpointEvaluator, Endpoint, SourceError, Watcher, open_source
from evalsi.training._mlflow_source import MlflowModel
from evalsi.training._vllm import free_port
from tests.helpers.openai_server import OpenAIServer
from tests.integrations.mlflow.conftest import TrackingServer, register
from tests.training.conftest import answers, write_adapter, write_model, write_spec


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_versions_are_checkpoints_by_step_and_settle_when_ready(
    tracking_server: TrackingServer, tracking_uri: str, tmp_path: Path
) -> None:
    model = unique("grpo")
    v1 = register(tracking_uri, model, write_adapter(tmp_path / "v1", answers(wrong=1)))  # no tag: step 1
    v2 = register(tracking_uri, model, write_adapter(tmp_path / "v2", answers(wrong=2)), {"step": "300"})
    v3 = register(tracking_uri, model, write_adapter(tmp_path / "v3", answers(wrong=3)), {"step": "200"})
    v4 = register(tracking_uri, model, write_adapter(tmp_path / "v4", answers(wrong=4)), {"step": "300"})
    assert (v1, v2, v3, v4) == ("1", "2", "3", "4")
    tracking_server.set_status(model, v3, "PENDING_REGISTRATION")

    source = open_source(f"mlflow:{model}", tmp_path / "cache")
    assert isinstance(source, MlflowModel)
    found = source.discover()
    assert [(c.step, c.name) for c in found] == [(1, "version-1"), (200, "version-3"), (300, "version-4")]
    assert [(m.kind if (m := source.find_model(c)) else None) for c in found] == ["lora", None, "lora"]

    tracking_server.set_status(model, v3, "READY")
    found = source.discover()
    held = source.find_model(found[1])
    assert held is not None and held.kind == "lora"

    before = len(tracking_server.requests("/mlflow-artifacts/artifacts/"))
    local = source.fetch(found[2])
    assert json.loads((local / "answers.json").read_text()) == answers(wrong=4)  # version 4, not version 2
    files = sorted(p.name for p in local.iterdir())
    assert files == ["adapter_config.json", "adapter_model.safetensors", "answers.json"]
    assert local.is_relative_to(tmp_path / "cache")
    downloads = tracking_server.requests("/mlflow-artifacts/artifacts/")[before:]
    assert any(line.endswith('/checkpoint/answers.json HTTP/1.1" 200 OK') for line in downloads), downloads
    assert source.fetch(found[2]) == local  # downloaded once
    assert len(tracking_server.requests("/mlflow-artifacts/artifacts/")) == before + len(downloads)
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".")]  # no partial download left


def test_a_model_in_mlflows_model_folder_is_served_from_it(tracking_uri: str, tmp_path: Path) -> None:
    model = unique("flavour")
    folder = tmp_path / "logged"
    write_model(folder / "model", answers())
    (folder / "MLmodel").write_text("flavors:\n  transformers: {}\n")
    register(tracking_uri, model, folder)
    source = MlflowModel(model, tmp_path / "cache")
    [checkpoint] = source.discover()
    held = source.find_model(checkpoint)
    assert held is not None and held.kind == "weights" and held.path.name == "model"
    local = source.fetch(checkpoint)
    assert local.name == "model" and (local / "config.json").exists() and (local.parent / "MLmodel").exists()


def test_a_version_without_a_model_waits(tracking_uri: str, tmp_path: Path) -> None:
    model = unique("empty")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README.txt").write_text("no weights here")
    register(tracking_uri, model, tmp_path / "notes", {"step": "10"})
    source = MlflowModel(model, tmp_path / "cache")
    [checkpoint] = source.discover()
    assert checkpoint.step == 10 and source.find_model(checkpoint) is None


def test_watch_evaluates_ready_versions_once_without_a_settle_wait(
    tracking_server: TrackingServer, tracking_uri: str, tmp_path: Path
) -> None:
    model = unique("watch")
    register(tracking_uri, model, write_adapter(tmp_path / "a", answers()), {"step": "100"})
    pending = register(tracking_uri, model, write_adapter(tmp_path / "b", answers()), {"step": "200"})
    tracking_server.set_status(model, pending, "PENDING_REGISTRATION")
    spec = write_spec(tmp_path / "specs")
    with OpenAIServer(answers=answers(), default="?") as server:
        evaluator = CheckpointEvaluator(spec, "mlflow", Endpoint(server.base_url, "m"), log_dir=tmp_path / "logs")
        watcher = Watcher(evaluator, MlflowModel(model, tmp_path / "cache"), settle=3600, poll=0.05, once=True)
        report = watcher.run()  # the settle time does not apply: READY is complete
        assert [c.step for c, _ in report.evaluated] == [100]
        assert report.failed == {200: "no model yet"}  # not READY
        tracking_server.set_status(model, pending, "READY")
        again = Watcher(evaluator, MlflowModel(model, tmp_path / "cache"), settle=3600, poll=0.05, once=True).run()
    assert [c.step for c, _ in again.evaluated] == [200] and [c.step for c in again.skipped] == [100]
    meta = json.loads((tmp_path / "logs" / "mlflow" / "forgetting" / "step-200.json").read_text())["checkpoint"]
    assert meta["location"].startswith(str((tmp_path / "cache").resolve())) and meta["kind"] == "lora"


def test_errors_name_what_is_wrong(tracking_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    known = unique("known")
    register(tracking_uri, known, write_adapter(tmp_path / "a", answers()))
    unknown = r"no registered model named 'nope-\w+' at http://127\.0\.0\.1:\d+ \(registered models: .*known-"
    with pytest.raises(DataError, match=unknown):
        MlflowModel(unique("nope"), tmp_path)

    bad = unique("badtag")
    register(tracking_uri, bad, write_adapter(tmp_path / "b", answers()), {"step": "100"})
    register(tracking_uri, bad, write_adapter(tmp_path / "c", answers()), {"step": "latest"})
    with pytest.raises(DataError, match=r"version 2 has step tag 'latest'.*integer"):
        MlflowModel(bad, tmp_path).discover()

    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    with pytest.raises(SourceError, match="set MLFLOW_TRACKING_URI"):
        open_source(f"mlflow:{known}", tmp_path)

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    with pytest.raises(SourceError, match=r"looking up the model at http://127\.0\.0\.1:\d+ failed"):
        open_source(f"mlflow:{known}", tmp_path)
