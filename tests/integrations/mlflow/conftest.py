"""A real ``mlflow server`` on loopback (sqlite backend store, artifacts proxied by the server), and a helper
that logs a checkpoint directory as run artifacts and registers it as a model version.

These tests run in their own nox session (``nox -s mlflow``), which installs mlflow and sets
``EVALSI_INTEGRATION``; the core suite (no mlflow) does not collect them.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from evalsi.training._vllm import free_port, stop_process

if not os.environ.get("EVALSI_INTEGRATION"):
    collect_ignore_glob = ["*"]


@dataclass
class TrackingServer:
    """A running tracking server: its URI, its sqlite store and its log (one access-log line per request)."""

    process: subprocess.Popen[bytes]
    uri: str
    database: Path
    artifacts: Path
    log: Path

    def requests(self, path_part: str) -> list[str]:
        """The access-log lines of requests whose path contains ``path_part``."""
        return [line for line in self.log.read_text(errors="replace").splitlines() if path_part in line]

    def set_status(self, model: str, version: str, status: str) -> None:
        """Change a version's registration status in the backend store (an asynchronous registration in
        progress: MLflow's own registry creates versions READY at once)."""
        with sqlite3.connect(self.database) as db:
            updated = db.execute(
                "UPDATE model_versions SET status = ? WHERE name = ? AND version = ?", (status, model, int(version))
            ).rowcount
        assert updated == 1


@pytest.fixture(scope="session")
def tracking_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TrackingServer]:
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    database = root / "mlflow.db"
    log = root / "server.log"
    mlflow_bin = Path(sys.executable).with_name("mlflow")
    args = [
        str(mlflow_bin),
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--backend-store-uri",
        f"sqlite:///{database}",
        "--serve-artifacts",
        "--artifacts-destination",
        str(root / "artifacts"),
        "--workers",
        "1",
    ]
    # The server's background job runner (a pool of consumer processes) is not needed by the registry.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with log.open("ab") as out:
        process = subprocess.Popen(args, cwd=root, env=env, stdout=out, stderr=out, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    server = TrackingServer(process, uri, database, root / "artifacts", log)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{uri}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not start (exit {process.poll()}):\n{log.read_text()[-4000:]}")
            time.sleep(0.25)
        yield server
    finally:
        stop_process(process, 10)
        with pytest.raises(ProcessLookupError):  # nothing of the server's process group is left
            os.killpg(process.pid, 0)


@pytest.fixture
def tracking_uri(tracking_server: TrackingServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """The server, named by ``MLFLOW_TRACKING_URI`` as a user of ``mlflow:`` locations would."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_server.uri)
    return tracking_server.uri


def register(uri: str, model: str, folder: Path, tags: dict[str, str] | None = None) -> str:
    """Log ``folder`` as a run's ``checkpoint`` artifacts (uploaded through the server) and register it as a new
    version of ``model``; returns the version number."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient(uri)
    run = client.create_run(experiment_id="0")
    client.log_artifacts(run.info.run_id, str(folder), "checkpoint")
    client.set_terminated(run.info.run_id)
    artifact_uri = client.get_run(run.info.run_id).info.artifact_uri
    assert artifact_uri.startswith("mlflow-artifacts:"), artifact_uri  # the client only reaches them via the server
    try:
        client.create_registered_model(model)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    version = client.create_model_version(
        model, f"{artifact_uri}/checkpoint", run_id=run.info.run_id, tags=tags or {}, await_creation_for=0
    )
    return str(version.version)
