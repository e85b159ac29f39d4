"""The evaluation jobs table: every SQL statement the job service runs, and nothing else.

One row per job: what it scores with what, its state and message, its metrics and output stats (JSON), the
target and completion params it generates with, and the server process running it (``owner``, with its heartbeat)
while it is unfinished.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, Engine, delete, func, select, update

from evalsi.server.evaluation._owner_store import fail_orphaned, refresh_heartbeat
from evalsi.server.evaluation._page_store import page
from evalsi.server.evaluation._row_store import changed, first_row, insert_row
from evalsi.server.evaluation._states import ACTIVE_STATES, FAILED, TERMINAL_STATES
from evalsi.server.evaluation._tables import evaluation_jobs


class JobTaken(Exception):
    """The project already has a job of that id."""


class JobStore:
    """Evaluation jobs in the server's database, per project."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def fail_orphans(self, instance: str, before: float, message: str) -> int:
        """Fail other processes' unfinished jobs whose heartbeat is older than ``before``; returns how many."""
        active = evaluation_jobs.c.state.in_(ACTIVE_STATES)
        return fail_orphaned(self.engine, evaluation_jobs, active, instance, before, state=FAILED, message=message)

    def beat(self, instance: str) -> None:
        """Refresh the heartbeat of ``instance``'s unfinished jobs, queued or running."""
        refresh_heartbeat(self.engine, evaluation_jobs, evaluation_jobs.c.state.in_(ACTIVE_STATES), instance)

    def fail_owned(self, instance: str, message: str) -> None:
        """Fail every unfinished job of ``instance`` (the server stopping)."""
        owned = (evaluation_jobs.c.owner == instance, evaluation_jobs.c.state.in_(ACTIVE_STATES))
        failed = {"state": FAILED, "message": message, "updated_at": time.time()}
        changed(self.engine, update(evaluation_jobs).where(*owned).values(failed))

    def active(self, project: str) -> int:
        """How many of the project's jobs are queued or running."""
        with self.engine.connect() as connection:
            return int(
                connection.execute(
                    select(func.count())
                    .select_from(evaluation_jobs)
                    .where(evaluation_jobs.c.project == project, evaluation_jobs.c.state.in_(ACTIVE_STATES))
                ).scalar_one()
            )

    def insert(self, values: dict[str, Any]) -> None:
        """Insert one job row (all of the table's columns).

        Raises:
            JobTaken: The project has a job of that id.

        """
        insert_row(self.engine, evaluation_jobs, values, JobTaken)

    def fetch(self, project: str, job_id: str) -> dict[str, Any] | None:
        """The stored job row, or None."""
        return first_row(self.engine, select(evaluation_jobs).where(*_key(project, job_id)))

    def page(self, project: str, size: int, token: str, state: str, evaluator_id: str) -> tuple[Sequence[Any], str]:
        """One page of the project's job rows, newest first, of one state or evaluator when given (not empty).

        Raises:
            ServiceError: ``invalid_argument`` for a bad page size or token.

        """
        query = select(evaluation_jobs).where(evaluation_jobs.c.project == project)
        if state:
            query = query.where(evaluation_jobs.c.state == state)
        if evaluator_id:
            query = query.where(evaluation_jobs.c.evaluator_id == evaluator_id)
        with self.engine.connect() as connection:
            return page(connection, query, evaluation_jobs.c.created_at, evaluation_jobs.c.job_id, size, token)

    def remove_finished(self, project: str, job_id: str) -> bool:
        """Delete a job if it is COMPLETED, FAILED or CANCELLED; whether it was."""
        finished = (*_key(project, job_id), evaluation_jobs.c.state.in_(TERMINAL_STATES))
        return bool(changed(self.engine, delete(evaluation_jobs).where(*finished)))

    def set_progress(self, project: str, job_id: str, rows_done: int) -> None:
        """Store how many rows an unfinished job has scored or errored, for the pages of every replica."""
        changed(self.engine, update(evaluation_jobs).where(*_unfinished(project, job_id)).values(rows_done=rows_done))

    def set_state(self, project: str, job_id: str, state: str, **values: Any) -> bool:
        """Move an unfinished job to ``state`` with ``values``; whether it was still unfinished."""
        statement = update(evaluation_jobs).where(*_unfinished(project, job_id))
        return bool(changed(self.engine, statement.values(state=state, updated_at=time.time(), **values)))


def _unfinished(project: str, job_id: str) -> tuple[ColumnElement[bool], ...]:
    """The conditions selecting a job of the project while it is queued or running."""
    return (*_key(project, job_id), evaluation_jobs.c.state.in_(ACTIVE_STATES))


def _key(project: str, job_id: str) -> tuple[ColumnElement[bool], ...]:
    """The conditions selecting one job of the project."""
    return evaluation_jobs.c.project == project, evaluation_jobs.c.job_id == job_id
