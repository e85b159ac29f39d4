"""Replicas on one database: a server starting (or restarting) leaves the jobs and builds another server is running
alone, and fails them once that server is killed and its heartbeat ages past ``jobs.orphan_after``; on a SQLite
file and on PostgreSQL, with real server processes and sandboxes.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from alembic import command
from alembic.config import Config

from evalsi.errors import SpecError
from evalsi.server._config import config_from_mapping
from evalsi.server._db import MIGRATIONS, open_engine
from tests.server.evaluation import SLOW, chat, create_job, get, jsonl, post, upload, wait_built, wait_state
from tests.server.harness import ServerProcess, make_token, write_config
from tests.server.postgres import fresh_database, running_postgres

pytestmark = [pytest.mark.timeout(300), pytest.mark.sandbox]

ORPHAN_AFTER = 4.0
SLOW_IMPORT = "import time\n\ntime.sleep(90)  # the build's import check takes this long\n" + SLOW


@pytest.fixture
def storage() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="evalsi-owners-test-"))  # under /tmp: sandbox users must reach it
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def _state(server: ServerProcess, token: str) -> tuple[Any, Any]:
    job = get(server, token, "evaluationJobs/long").json()
    build = get(server, token, "evaluators/stuck").json()
    return job, build


def _wait_failed(server: ServerProcess, token: str, timeout: float) -> tuple[Any, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job, build = _state(server, token)
        if (job["state"] == "FAILED" and build["state"] == "BUILD_FAILED") or time.monotonic() > deadline:
            return job, build
        time.sleep(0.2)


def _replicas(directory: Path, storage: Path, database: str) -> None:
    spec = {
        "database": {"url": database},
        "evaluators": {"storage_dir": str(storage)},
        "jobs": {"batch_rows": 1, "heartbeat_interval": "0.5s", "orphan_after": f"{ORPHAN_AFTER:g}s"},
        "drain_timeout": 10,
    }
    config = write_config(directory, spec)
    token = make_token(database, "p", ["evaluations.run", "resource.runs_code", "evaluators.write"])
    with ServerProcess(config) as a:
        assert upload(a, token, "slow", {"test_owned.py": SLOW}, "test_owned.py::test_slow").is_success
        assert wait_built(a, token, "slow")["state"] == "ACTIVE"
        rows = jsonl([chat(f"q{i}", "a", "t") for i in range(3)])  # 30 s of scoring per row, one row a batch
        assert post(a, token, "datasets", {"datasetId": "rows", "jsonl": rows}).is_success
        assert create_job(a, token, "long", "slow", "rows", "out").is_success
        assert wait_state(a, token, "long", ("RUNNING",))["state"] == "RUNNING"
        stuck = upload(a, token, "stuck", {"test_stuck.py": SLOW_IMPORT}, "test_stuck.py::test_slow")
        assert stuck.is_success and stuck.json()["state"] == "BUILDING"
        with ServerProcess(config) as b:
            time.sleep(ORPHAN_AFTER + 1)  # B's start-up sweep and at least one periodic sweep have run
            job, build = _state(b, token)
            assert (job["state"], build["state"]) == ("RUNNING", "BUILDING"), (job, build)
            assert b.terminate(30) == 0  # a replica restarting stops only its own work
        with ServerProcess(config) as b:
            time.sleep(1)
            job, build = _state(b, token)
            assert (job["state"], build["state"]) == ("RUNNING", "BUILDING"), (job, build)
            started = time.monotonic()
            a.kill()  # SIGKILL: A cannot say anything about its work
            job, build = _wait_failed(b, token, timeout=ORPHAN_AFTER * 4 + 10)
            waited = time.monotonic() - started
            assert get(b, token, "evaluators/slow").json()["state"] == "ACTIVE"
        assert job["state"] == "FAILED" and "server running the job stopped (no heartbeat" in job["message"], job
        assert build["state"] == "BUILD_FAILED" and "server building it stopped" in build["message"], build
        assert waited >= ORPHAN_AFTER - 1.0, waited  # not before A's last heartbeat aged past the window


def test_replicas_on_a_sqlite_file_fail_only_the_work_of_a_killed_server(tmp_path: Path, storage: Path) -> None:
    _replicas(tmp_path, storage, f"sqlite:///{tmp_path / 'server.db'}")


def test_replicas_on_postgresql_fail_only_the_work_of_a_killed_server(tmp_path: Path, storage: Path) -> None:
    with running_postgres() as cluster:
        _replicas(tmp_path, storage, fresh_database(cluster, "owners"))


@pytest.mark.timeout(900)
def test_jobs_left_running_before_the_migration_are_failed_once_their_last_update_is_older_than_the_window(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = open_engine(url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    insert = sqlalchemy.text(
        "INSERT INTO evaluation_jobs (project, job_id, evaluator_id, input_dataset, output_dataset, state, "
        "message, metrics, output_stats, created_at, updated_at) "
        "VALUES (:p, :j, 'e', 'in', :j, 'RUNNING', '', '{}', '{}', :t, :t)"
    )
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0005")
        connection.execute(insert, {"p": "p", "j": "stale", "t": time.time() - 3600})
        connection.execute(insert, {"p": "p", "j": "recent", "t": time.time()})
        command.upgrade(config, "head")
        command.downgrade(config, "0005")  # the columns go and come back without touching the rows
        command.upgrade(config, "head")
        owners = connection.execute(sqlalchemy.text("SELECT owner, heartbeat_at FROM evaluation_jobs")).all()
        assert [tuple(row) for row in owners] == [(None, None), (None, None)]
        # the recent job's last update is now, after migrating (which a loaded machine can make slow)
        touch = sqlalchemy.text("UPDATE evaluation_jobs SET updated_at = :t WHERE job_id = 'recent'")
        connection.execute(touch, {"t": time.time()})
    engine.dispose()
    # A window long enough that starting the server on a loaded machine stays well inside it.
    window = 60.0
    spec = {"database": {"url": url}, "jobs": {"heartbeat_interval": "0.5s", "orphan_after": f"{window:g}s"}}
    token = make_token(url, "p", ["evaluations.run"])
    with ServerProcess(write_config(tmp_path, spec)) as server:
        answer = get(server, token, "evaluationJobs/stale")
        assert answer.is_success, (answer.text, "".join(server.stderr_lines)[-3000:])
        stale = answer.json()
        assert stale["state"] == "FAILED" and "no heartbeat for 60s" in stale["message"], stale
        assert get(server, token, "evaluationJobs/recent").json()["state"] == "RUNNING"
        recent = wait_state(server, token, "recent", ("FAILED",), timeout=window * 4)
        assert recent["state"] == "FAILED", recent


def test_an_orphan_window_shorter_than_two_heartbeats_is_refused_naming_both_settings() -> None:
    with pytest.raises(SpecError) as refused:
        config_from_mapping({"jobs": {"heartbeat_interval": "10s", "orphan_after": "15s"}})
    assert "orphan_after (15s) must be at least twice heartbeat_interval (10s)" in str(refused.value)
    jobs = config_from_mapping({"jobs": {"heartbeat_interval": "2s", "orphan_after": "1m"}}).spec.jobs
    assert (jobs.heartbeat_interval, jobs.orphan_after) == (2.0, 60.0)
    defaults = config_from_mapping({}).spec.jobs
    assert (defaults.heartbeat_interval, defaults.orphan_after) == (5.0, 60.0)
