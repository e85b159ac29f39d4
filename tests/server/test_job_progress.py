"""A running evaluation job's progress on the pages of a replica that is not running it: the count the running
replica stores after each batch, read from the shared database (real SQLite, migrated to the current schema)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, insert

from evalsi.server._db import open_database
from evalsi.server.evaluation._overview_store import EvaluationOverview
from evalsi.server.evaluation._tables import datasets, evaluation_jobs
from evalsi.server.evaluation.jobs._store import JobStore


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    opened = open_database(f"sqlite:///{tmp_path / 'server.db'}")
    now = time.time()
    with opened.begin() as connection:
        for project in ("team-a", "team-b"):
            connection.execute(
                insert(datasets).values(
                    project=project, dataset_id="rows", row_count=5, size_bytes=10, content=b"", created_at=now
                )
            )
            connection.execute(
                insert(evaluation_jobs).values(
                    project=project,
                    job_id="job",
                    evaluator_id="e",
                    input_dataset="rows",
                    output_dataset="out",
                    state="RUNNING",
                    created_at=now,
                    updated_at=now,
                )
            )
    yield opened
    opened.dispose()


def test_another_replicas_page_shows_the_count_the_running_one_stored(engine: Engine) -> None:
    JobStore(engine).set_progress("team-a", "job", 3)
    elsewhere = EvaluationOverview(engine)  # a replica that is not running the job
    job = elsewhere.job("team-a", "job")
    assert job is not None and (job["rows_done"], job["rows_total"]) == (3, 5)
    other = elsewhere.job("team-b", "job")  # the same id in another project is untouched
    assert other is not None and other["rows_done"] == 0
    assert [row["rows_done"] for row in elsewhere.jobs("team-a")] == [3]


def test_a_finished_job_keeps_its_count(engine: Engine) -> None:
    store = JobStore(engine)
    store.set_progress("team-a", "job", 5)
    assert store.set_state("team-a", "job", "FAILED", message="stopped")
    store.set_progress("team-a", "job", 1)  # a late batch of a job that already ended changes nothing
    job = EvaluationOverview(engine).job("team-a", "job")
    assert job is not None and (job["state"], job["rows_done"]) == ("FAILED", 5)
