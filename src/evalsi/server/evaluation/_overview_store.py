"""What the results viewer's pages read of a project's evaluators, datasets and evaluation jobs.

Every query names the project: another project's evaluator, dataset or job is not found, exactly as one that does
not exist. Listings leave out what is large (a dataset's content, an evaluator's build log); one resource is read
whole only when its own page is opened.
"""

from __future__ import annotations

from typing import Any

import orjson
from sqlalchemy import ColumnElement, Engine, Select, exists, select

from evalsi.server.evaluation._row_store import all_rows, first_row
from evalsi.server.evaluation._states import COMPLETED
from evalsi.server.evaluation._tables import datasets, evaluation_jobs, evaluators

LISTED = 1000
"""Rows a listing page shows (newest first)."""

_EVALUATOR = (
    evaluators.c.evaluator_id, evaluators.c.entry, evaluators.c.state, evaluators.c.message, evaluators.c.mode,
    evaluators.c.archive_bytes, evaluators.c.archive_sha256, evaluators.c.created_at, evaluators.c.updated_at,
)  # fmt: skip
_DATASET = (
    datasets.c.dataset_id, datasets.c.row_count, datasets.c.size_bytes, datasets.c.source_job, datasets.c.created_at,
)  # fmt: skip
_JOB = tuple(c for c in evaluation_jobs.c if c.name not in ("project", "completion_params", "owner", "heartbeat_at"))
_INPUT = datasets.alias("input_dataset_row")


class EvaluationOverview:
    """Reads a project's evaluators, datasets and jobs for the viewer's pages (every query scoped to the project).

    Args:
        engine: The server's database.

    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def evaluators(self, project: str) -> list[dict[str, Any]]:
        """The project's evaluators, newest first, without their build logs."""
        query = select(*_EVALUATOR).where(evaluators.c.project == project)
        return all_rows(self.engine, _newest_first(query, evaluators.c.created_at, evaluators.c.evaluator_id))

    def evaluator(self, project: str, evaluator_id: str) -> dict[str, Any] | None:
        """One evaluator of the project with its build log, or None (also for another project's)."""
        query = select(*_EVALUATOR, evaluators.c.build_log).where(
            evaluators.c.project == project, evaluators.c.evaluator_id == evaluator_id
        )
        return first_row(self.engine, query)

    def datasets(self, project: str) -> list[dict[str, Any]]:
        """The project's datasets, newest first, without their rows."""
        query = select(*_DATASET).where(datasets.c.project == project)
        return all_rows(self.engine, _newest_first(query, datasets.c.created_at, datasets.c.dataset_id))

    def jobs(self, project: str) -> list[dict[str, Any]]:
        """The project's evaluation jobs, newest first, each with its progress (see :meth:`job`)."""
        query = _newest_first(self._jobs_query(project), evaluation_jobs.c.created_at, evaluation_jobs.c.job_id)
        return [self._with_progress(row) for row in all_rows(self.engine, query)]

    def job(self, project: str, job_id: str) -> dict[str, Any] | None:
        """One job of the project, or None (also for another project's).

        Its ``rows_total`` is its input dataset's row count (None once that dataset is deleted); ``rows_done`` the
        rows scored or errored so far: all of them once the job completed, the running count while this process
        runs it, else None. ``has_results`` says its output dataset is stored, so its results open as a run.
        """
        query = self._jobs_query(project).where(evaluation_jobs.c.job_id == job_id)
        found = first_row(self.engine, query)
        return None if found is None else self._with_progress(found)

    def completed_jobs(self, project: str) -> list[dict[str, Any]]:
        """Every completed job of the project whose output dataset still exists, newest first (whole rows)."""
        query = (
            select(evaluation_jobs)
            .where(
                evaluation_jobs.c.project == project,
                evaluation_jobs.c.state == COMPLETED,
                exists().where(
                    datasets.c.project == project, datasets.c.dataset_id == evaluation_jobs.c.output_dataset
                ),
            )
            .order_by(evaluation_jobs.c.updated_at.desc())
        )
        return all_rows(self.engine, query)

    def completed_job(self, project: str, job_id: str) -> dict[str, Any] | None:
        """One completed job of the project (its whole row), or None."""
        query = select(evaluation_jobs).where(
            evaluation_jobs.c.project == project,
            evaluation_jobs.c.job_id == job_id,
            evaluation_jobs.c.state == COMPLETED,
        )
        return first_row(self.engine, query)

    @staticmethod
    def _jobs_query(project: str) -> Any:
        output = exists().where(
            datasets.c.project == project, datasets.c.dataset_id == evaluation_jobs.c.output_dataset
        )
        return (
            select(*_JOB, _INPUT.c.row_count.label("rows_total"), output.label("has_results"))
            .select_from(
                evaluation_jobs.outerjoin(
                    _INPUT, (_INPUT.c.project == project) & (_INPUT.c.dataset_id == evaluation_jobs.c.input_dataset)
                )
            )
            .where(evaluation_jobs.c.project == project)
        )

    @staticmethod
    def _with_progress(row: dict[str, Any]) -> dict[str, Any]:
        stats = _json_object(row.get("output_stats"))
        row["metrics"] = _json_object(row.get("metrics"))
        row["output_stats"] = stats
        row["has_results"] = bool(row["has_results"]) and row["state"] == COMPLETED
        # an unfinished job: the count the replica running it stores after each batch
        done = stats.get("rows") if row["state"] == COMPLETED else row.get("rows_done")
        row["rows_done"] = done if isinstance(done, int) and not isinstance(done, bool) else None
        if row["rows_total"] is None and row["state"] == COMPLETED:
            row["rows_total"] = row["rows_done"]
        return row


def _json_object(text: Any) -> dict[str, Any]:
    try:
        value = orjson.loads(text or "{}")
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _newest_first(query: Select[Any], created: ColumnElement[Any], key: ColumnElement[Any]) -> Select[Any]:
    """``query`` ordered newest first (ties by id, so the order is stable) and cut at :data:`LISTED` rows."""
    return query.order_by(created.desc(), key).limit(LISTED)
