"""The ``/ui`` pages of a project's evaluators, datasets and evaluation jobs, beside the results viewer's.

Server-rendered like the viewer's pages (the same base template, stylesheet and security headers; Jinja escapes
everything shown, so a build log or an id holding markup is text). The project comes from the request's scope,
where :class:`~evalsi.server.ui._app.ServerUi` puts the signed-in caller's project; every read names it, so
another project's evaluator, build log, dataset or job answers 404 exactly as an unknown id does. A completed
job's results open as a run of the viewer (its link is the run page the run list shows for it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from jinja2 import ChoiceLoader, Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from evalsi.server.evaluation._overview_store import EvaluationOverview
from evalsi.server.evaluation._states import ACTIVE_STATES
from evalsi.view._app import SecurityHeaders

PROJECT = "evalsi.ui.project"
"""Set in a request's scope by the ``/ui`` app: the signed-in caller's project, the only one its pages read."""

PREFIXES = ("/evaluators", "/datasets", "/jobs")
"""The paths these pages serve under ``/ui``; every other path is the results viewer's."""


def _when(seconds: Any) -> str:
    if not isinstance(seconds, int | float):
        return "–"
    return datetime.fromtimestamp(float(seconds), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _size(count: Any) -> str:
    if not isinstance(count, int):
        return "–"
    if count < 1024:
        return f"{count} B"
    size = float(count)
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024 or unit == "GiB":
            break
    return f"{size:.1f} {unit}"


def _score(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return "–"
    return f"{float(value):.4f}"


class Pages:
    """The evaluators, datasets and jobs pages over one database (the project is the request's).

    Args:
        overview: The evaluation service's reads, each scoped to a project.
        job_run: The id of the run page showing a completed job's results, given the project and the job's id.

    """

    def __init__(self, overview: EvaluationOverview, job_run: Callable[[str, str], str]) -> None:
        self.overview = overview
        self.job_run = job_run
        self.env = Environment(
            loader=ChoiceLoader(
                [PackageLoader("evalsi.server.ui", "templates"), PackageLoader("evalsi.view", "templates")]
            ),
            autoescape=select_autoescape(default=True, default_for_string=True),
        )
        self.env.filters.update(when=_when, size=_size, score=_score)
        self.env.globals.update(ACTIVE_STATES=ACTIVE_STATES)

    def render(self, request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        """A page; links are built on ``base``, the path ``/ui`` is mounted at."""
        base = request.scope.get("root_path", "").rstrip("/")
        text = self.env.get_template(template).render(base=base, request=request, **context)
        return HTMLResponse(text, status_code=status, headers={"cache-control": "no-store"})

    async def evaluators(self, request: Request) -> Response:
        rows = await run_in_threadpool(self.overview.evaluators, _project(request))
        return self.render(request, "evaluators.html", evaluators=rows)

    async def evaluator(self, request: Request) -> Response:
        found = await run_in_threadpool(self.overview.evaluator, _project(request), request.path_params["id"])
        if found is None:
            raise HTTPException(404, "no evaluator with that id")
        return self.render(request, "evaluator.html", evaluator=found)

    async def datasets(self, request: Request) -> Response:
        rows = await run_in_threadpool(self.overview.datasets, _project(request))
        return self.render(request, "datasets.html", datasets=rows)

    async def jobs(self, request: Request) -> Response:
        project = _project(request)
        rows = await run_in_threadpool(self.overview.jobs, project)
        for row in rows:
            row["run_id"] = self.job_run(project, row["job_id"]) if row["has_results"] else None
        return self.render(request, "jobs.html", jobs=rows)

    async def job(self, request: Request) -> Response:
        project = _project(request)
        found = await run_in_threadpool(self.overview.job, project, request.path_params["id"])
        if found is None:
            raise HTTPException(404, "no evaluation job with that id")
        found["run_id"] = self.job_run(project, found["job_id"]) if found["has_results"] else None
        return self.render(request, "job.html", job=found)


def _project(request: Request) -> str:
    project = request.scope.get(PROJECT)
    if not isinstance(project, str):  # only reachable through ServerUi, which always sets it
        raise HTTPException(404, "not found")
    return project


def create_pages(overview: EvaluationOverview, job_run: Callable[[str, str], str]) -> Starlette:
    """The pages' app (mounted by ``/ui`` for the paths in :data:`PREFIXES`), read-only: anything but GET is 405."""
    pages = Pages(overview, job_run)

    async def not_found(request: Request, exc: Exception) -> Response:
        code = exc.status_code if isinstance(exc, HTTPException) else 404
        message = exc.detail if isinstance(exc, HTTPException) else "not found"
        return pages.render(request, "error.html", status=code, code=code, message=message)

    routes = [
        Route("/evaluators", pages.evaluators),
        Route("/evaluators/{id}", pages.evaluator),
        Route("/datasets", pages.datasets),
        Route("/jobs", pages.jobs),
        Route("/jobs/{id}", pages.job),
    ]
    return Starlette(
        routes=routes, middleware=[Middleware(SecurityHeaders)], exception_handlers={HTTPException: not_found}
    )
