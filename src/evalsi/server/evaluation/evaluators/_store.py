"""The evaluators table: every SQL statement the evaluator service runs, and nothing else.

One row per uploaded evaluator: its entry, build state and log, its archive's size and digest, and the server
process building it (``owner``, with its heartbeat) while it is ``BUILDING``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Engine, delete, select, update

from evalsi.server._config import ServerConfig
from evalsi.server._errors import ServiceError
from evalsi.server._quota_store import Kind, StorageQuotas
from evalsi.server.evaluation._ids import not_found
from evalsi.server.evaluation._owner_store import fail_orphaned, refresh_heartbeat
from evalsi.server.evaluation._page_store import page
from evalsi.server.evaluation._row_store import changed, first_row, insert_row
from evalsi.server.evaluation._states import ACTIVE_STATES
from evalsi.server.evaluation._tables import evaluation_jobs, evaluators

BUILDING, ACTIVE, BUILD_FAILED = "BUILDING", "ACTIVE", "BUILD_FAILED"
QUOTA = Kind(
    "evaluators",
    evaluators,
    evaluators.c.archive_bytes,
    "max_evaluators",
    "max_evaluator_bytes",
    "delete evaluators first",
)
"""A project's evaluators under the storage quotas (their archives' bytes)."""
T = TypeVar("T")


class EvaluatorTaken(Exception):
    """The project already has an evaluator of that id."""


class EvaluatorStore:
    """Evaluators in the server's database, per project, within the project's storage quotas."""

    def __init__(self, config: ServerConfig, engine: Engine) -> None:
        self.engine = engine
        self.quotas = StorageQuotas(config)

    def fail_orphans(self, instance: str, before: float, message: str) -> int:
        """Fail the builds of other processes whose heartbeat is older than ``before``; returns how many."""
        building = evaluators.c.state == BUILDING
        return fail_orphaned(self.engine, evaluators, building, instance, before, state=BUILD_FAILED, message=message)

    def beat(self, instance: str) -> None:
        """Refresh the heartbeat of ``instance``'s builds, queued or running."""
        refresh_heartbeat(self.engine, evaluators, evaluators.c.state == BUILDING, instance)

    def insert(self, row: dict[str, Any]) -> None:
        """Insert one evaluator row (all of the table's columns), within the project's evaluator quotas.

        Raises:
            EvaluatorTaken: The project has an evaluator of that id.
            ServiceError: ``resource_exhausted`` when it would pass ``max_evaluators`` or ``max_evaluator_bytes``.

        """
        insert_row(self.engine, evaluators, row, EvaluatorTaken, (self.quotas, QUOTA))

    def finish(self, project: str, evaluator_id: str, state: str, mode: str, message: str, build_log: str) -> None:
        """Record a build's outcome, unless another server already failed the build as abandoned."""
        building = (*_key(project, evaluator_id), evaluators.c.state == BUILDING)
        values = {"state": state, "mode": mode, "message": message, "build_log": build_log, "updated_at": time.time()}
        changed(self.engine, update(evaluators).where(*building).values(**values))

    def fetch(self, project: str, evaluator_id: str) -> dict[str, Any] | None:
        """The stored evaluator row, or None."""
        return first_row(self.engine, select(evaluators).where(*_key(project, evaluator_id)))

    def page(self, project: str, size: int, token: str) -> tuple[Sequence[Any], str]:
        """One page of the project's evaluator rows, newest first, and the next page's token.

        Raises:
            ServiceError: ``invalid_argument`` for a bad page size or token.

        """
        query = select(evaluators).where(evaluators.c.project == project)
        with self.engine.connect() as connection:
            return page(connection, query, evaluators.c.created_at, evaluators.c.evaluator_id, size, token)

    def remove(self, project: str, evaluator_id: str, before_commit: Callable[[], T]) -> T:
        """Delete an evaluator no queued or running job uses, calling ``before_commit`` before its id is free.

        Returns:
            What ``before_commit`` returned.

        Raises:
            ServiceError: ``not_found``; ``failed_precondition`` while it is BUILDING or a queued or running job
                uses it (naming the job). ``before_commit``'s error leaves the evaluator as it was.

        """
        using = (
            select(evaluation_jobs.c.job_id, evaluation_jobs.c.state)
            .where(
                evaluation_jobs.c.project == project,
                evaluation_jobs.c.evaluator_id == evaluator_id,
                evaluation_jobs.c.state.in_(ACTIVE_STATES),
            )
            .order_by(evaluation_jobs.c.created_at)
        )
        with self.engine.begin() as connection:
            row = connection.execute(select(evaluators.c.state).where(*_key(project, evaluator_id))).first()
            if row is None:
                raise not_found("evaluator", evaluator_id, project, "evaluatorId")
            if row.state == BUILDING:
                raise ServiceError(
                    "failed_precondition",
                    f"evaluator {evaluator_id!r} is BUILDING: delete it once its build ends",
                    "evaluator_building",
                )
            jobs = connection.execute(using).all()
            if jobs:
                named = ", ".join(f"{job.job_id} ({job.state})" for job in jobs[:5])
                raise ServiceError(
                    "failed_precondition",
                    f"evaluator {evaluator_id!r} is used by {len(jobs)} queued or running evaluation job(s): {named}; "
                    "cancel them or wait for them to end",
                    "evaluator_in_use",
                )
            connection.execute(delete(evaluators).where(*_key(project, evaluator_id)))
            return before_commit()


def _key(project: str, evaluator_id: str) -> tuple[ColumnElement[bool], ...]:
    """The conditions selecting one evaluator of the project."""
    return evaluators.c.project == project, evaluators.c.evaluator_id == evaluator_id
