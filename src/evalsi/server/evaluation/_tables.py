"""The tables of uploaded evaluators, datasets and evaluation jobs.

``0003_evaluation_jobs`` creates them; ``0005_job_targets`` adds a job's target and completion params;
``0006_work_owners`` adds the server process owning an unfinished job or build and its last heartbeat;
``0008_target_usage`` counts each project's use of each generation target per budget window.

Every row belongs to a project; every query names the caller's project, so one project never sees another's.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Column, Float, Integer, LargeBinary, MetaData, String, Table, Text

metadata = MetaData()


def _project_table(name: str, id_column: str, *columns: Column[Any]) -> Table:
    """A table of one kind of a project's resources, keyed by the project and the resource's id."""
    project = Column("project", String(200), primary_key=True)
    resource_id = Column(id_column, String(63), primary_key=True)
    return Table(name, metadata, project, resource_id, *columns)


def _owner_columns() -> tuple[Column[Any], ...]:
    """The server process owning unfinished work and its last heartbeat (see :mod:`._work_owners`)."""
    return (
        Column("owner", String(36), nullable=True),  # the instance id of the server process working on it
        Column("heartbeat_at", Float, nullable=True),  # its owner's last sign of life (NULL: use updated_at)
    )


evaluators = _project_table(
    "evaluators",
    "evaluator_id",
    Column("entry", Text, nullable=False),
    Column("state", String(20), nullable=False),  # BUILDING, ACTIVE, BUILD_FAILED
    Column("message", Text, nullable=False, default=""),
    Column("mode", String(20), nullable=False, default=""),
    Column("build_log", Text, nullable=False, default=""),
    Column("archive_bytes", Integer, nullable=False),
    Column("archive_sha256", String(64), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    *_owner_columns(),  # while BUILDING: the server building it
)
"""Uploaded evaluators; the archive and the built environment are files under ``evaluators.storage_dir``."""

datasets = _project_table(
    "datasets",
    "dataset_id",
    Column("row_count", Integer, nullable=False),
    Column("size_bytes", Integer, nullable=False),
    Column("source_job", String(63), nullable=False, default=""),
    Column("content", LargeBinary, nullable=False),  # the JSONL, as checked
    Column("created_at", Float, nullable=False),
)
"""Datasets: JSONL rows (uploaded, or written by an evaluation job)."""

evaluation_jobs = _project_table(
    "evaluation_jobs",
    "job_id",
    Column("evaluator_id", String(63), nullable=False),
    Column("input_dataset", String(63), nullable=False),
    Column("output_dataset", String(63), nullable=False),
    Column("state", String(20), nullable=False),
    Column("message", Text, nullable=False, default=""),
    Column("metrics", Text, nullable=False, default="{}"),  # JSON: name -> score
    Column("output_stats", Text, nullable=False, default="{}"),  # JSON
    Column("target", String(200), nullable=False, default=""),  # a name of the config's targets; "": none
    Column("completion_params", Text, nullable=False, default="{}"),  # JSON: the checked sampling fields
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    *_owner_columns(),  # while queued or running: the server queueing and running it
    Column("rows_done", BigInteger, nullable=False, server_default="0"),  # scored or errored so far
)
"""Evaluation jobs and their outcome."""

target_usage = Table(
    "target_usage",
    metadata,
    Column("project", String(200), primary_key=True),
    Column("target", String(200), primary_key=True),
    Column("window_start", Float, primary_key=True),  # seconds since the epoch, a multiple of the window
    Column("requests", BigInteger, nullable=False, server_default="0"),
    Column("tokens", BigInteger, nullable=False, server_default="0"),
)
"""Requests and completion tokens each project used of each target in each budget window."""
