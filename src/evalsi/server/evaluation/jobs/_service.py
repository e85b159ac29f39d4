"""Evaluation jobs: score a dataset with an ACTIVE evaluator in the sandbox, in the background, into a new dataset.

States: ``VALIDATING`` (queued, then the evaluator and datasets are checked again) -> ``RUNNING`` (batches of
``jobs.batch_rows`` rows scored in one sandbox) -> ``WRITING_RESULTS`` (the output dataset) -> ``COMPLETED`` with
``metrics`` and ``outputStats``; or ``FAILED`` with a message, or ``CANCELLED``. Rows already ending with the
assistant's reply are scored as they are. A job naming a ``target`` (one of the config's ``targets:``) first gets
a reply generated for each other row of a batch, in the server process (see :mod:`._generation`); without
one, those rows are errored.
At most ``jobs.workers`` jobs run at once, a project's at most ``rewards.project_share`` of them (its further
jobs wait in its own queue, so one project's long jobs never hold every worker); a project may have
``jobs.max_active_per_project`` (or its quota's ``max_evaluation_jobs``) jobs queued or running, and a further
create is refused ``resource_exhausted``.
A job belongs to the server process (``instance``) that queued it, which keeps its heartbeat fresh (see
:mod:`.._work_owners`); another replica starting never touches it, and it is failed only once that heartbeat is
older than ``jobs.orphan_after``. A queued job of a vanished server is failed too, not re-queued: the create
was answered long ago, and a server that is only cut off (not dead) could still run it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from evalsi.errors import EvalsiError
from evalsi.sandbox import Isolation, Limits
from evalsi.sandbox import require as require_rung
from evalsi.server._config import ServerConfig
from evalsi.server._errors import ServiceError, redact
from evalsi.server._fair import FairPool, share_of
from evalsi.server._tokens import Principal
from evalsi.server.evaluation._answers import answer
from evalsi.server.evaluation._config import TargetBudget
from evalsi.server.evaluation._datasets import Datasets, has_reply
from evalsi.server.evaluation._ids import check_id, not_found, resource_id
from evalsi.server.evaluation._metrics import EvaluationMetrics
from evalsi.server.evaluation._pages import Page
from evalsi.server.evaluation._states import (
    ACTIVE_STATES,
    CANCELLED,
    COMPLETED,
    FAILED,
    RUNNING,
    TERMINAL_STATES,
    VALIDATING,
    WRITING_RESULTS,
)
from evalsi.server.evaluation._work_owners import new_instance
from evalsi.server.evaluation.evaluators._service import Evaluators
from evalsi.server.evaluation.evaluators._workers import BatchLimits, ScoringSession, WorkerKey, WorkerSettings, shared
from evalsi.server.evaluation.jobs._budget_store import Budgets, Grant
from evalsi.server.evaluation.jobs._generation import (
    PARAMS_PATH,
    Failed,
    Generators,
    Outcome,
    check_params,
    generation_record,
    with_reply,
)
from evalsi.server.evaluation.jobs._output import OutputSpool, output_row
from evalsi.server.evaluation.jobs._stats import Summary
from evalsi.server.evaluation.jobs._store import JobStore, JobTaken

if TYPE_CHECKING:
    from sqlalchemy import Engine

log = logging.getLogger("evalsi.server")
_LET_GO = 5.0
"""Seconds a delete waits for the worker of a job that just ended to let it go."""
NO_REPLY = "the row has no assistant reply to score (name a target in the job to generate one)"


@dataclass(frozen=True)
class JobSpec:
    """What a caller asks a job to do: plain data, read from each protocol's request by transport."""

    evaluator: str
    """The evaluator: ``<id>`` or ``evaluators/<id>``."""
    input_dataset: str
    """The dataset scored: ``<id>`` or ``datasets/<id>``."""
    output_dataset: str
    """The dataset the job creates (it must not exist yet): ``<id>`` or ``datasets/<id>``."""
    target: str = ""
    """A target of the server's config that generates the replies rows lack (empty: rows are scored as given)."""
    completion_params: dict[str, Any] | None = None
    """Sampling fields sent to the target (None when the caller gave none)."""


@dataclass(frozen=True)
class EvaluationJob:
    """A job as the service answers it: plain data, written into each protocol's form by transport."""

    job_id: str
    evaluator_id: str
    input_dataset: str
    output_dataset: str
    state: str
    message: str
    """Why the job failed or was cancelled."""
    created_at: float
    updated_at: float
    target: str
    metrics: dict[str, float] = field(default_factory=dict)
    """On completion: metric name -> aggregate score."""
    output_stats: dict[str, Any] = field(default_factory=dict)
    """On completion: rows, scored, errored, mean/min/max score, generated, generation_failed."""
    completion_params: dict[str, Any] = field(default_factory=dict)


class _Stopped(Exception):
    """The job was cancelled while it ran."""


class Jobs:
    """The job store, the background workers, and cancellation."""

    def __init__(
        self,
        config: ServerConfig,
        engine: Engine,
        evaluators: Evaluators,
        datasets: Datasets,
        rung: Isolation,
        instance: str | None = None,
    ) -> None:
        self.settings = config.spec.jobs
        self.instance = instance or new_instance()
        """This server process: the owner of the jobs it queues."""
        self.quotas = {name: q.max_evaluation_jobs for name, q in config.spec.quotas.items()}
        self.store = JobStore(engine)
        self.evaluators = evaluators
        self.datasets = datasets
        self.rung = rung
        workers = self.settings.workers
        share = share_of(workers, config.spec.rewards.project_share)
        self._pool = FairPool(workers, share, "evalsi-job")  # one project's queue never holds every worker
        self._lock = threading.Lock()
        self._cancelled: dict[tuple[str, str], threading.Event] = {}
        self._sessions: dict[tuple[str, str], ScoringSession] = {}
        self._generating: dict[tuple[str, str], concurrent.futures.Future[list[Outcome]]] = {}
        self.generators = Generators(config)
        self.workers = shared
        """Warm evaluator workers, shared with the ``ref: evaluator/ID`` reward components of this process."""
        self.workers.configure(WorkerSettings.from_config(self.settings))
        self.budgets = Budgets(engine)
        self.metrics: EvaluationMetrics | None = None
        """Counts finished jobs by state (set by the server)."""

    def recover(self) -> int:
        """Fail the unfinished jobs whose server stopped beating for ``jobs.orphan_after``; returns how many."""
        window = self.settings.orphan_after
        message = f"the server running the job stopped (no heartbeat for {window:g}s): create it again"
        return self.store.fail_orphans(self.instance, time.time() - window, message)

    def beat(self) -> None:
        """Refresh the heartbeat of this process's unfinished jobs, queued or running."""
        self.store.beat(self.instance)

    def create(self, principal: Principal, spec: JobSpec, job_id: str = "") -> EvaluationJob:
        """Check a job, queue it (``VALIDATING``) and answer it.

        Args:
            principal: The caller (needs ``evaluations.run``).
            spec: What to score with what, and the target generating missing replies.
            job_id: The job's id (generated when empty).

        Returns:
            The queued job.

        Raises:
            ServiceError: Permission, ids, unknown evaluator or input dataset, an existing output dataset, or the
                project's job quota.

        """
        project = principal.project
        evaluator_id = resource_id(spec.evaluator, "evaluators", "evaluationJob.evaluator")
        input_id = resource_id(spec.input_dataset, "datasets", "evaluationJob.inputDataset")
        output_id = resource_id(spec.output_dataset, "datasets", "evaluationJob.outputDataset")
        job_id = check_id(job_id or f"job-{secrets.token_hex(6)}", "evaluationJobId")
        self.evaluators.ready(project, evaluator_id, "evaluationJob.evaluator")
        self.datasets.row(project, input_id, "evaluationJob.inputDataset")
        target, params = self._generation(spec)
        self._refuse_existing_output(project, output_id)
        self.datasets.check_room(project)  # its output is a dataset: refused now, not after the work
        now = time.time()
        values = {
            "project": project,
            "job_id": job_id,
            "evaluator_id": evaluator_id,
            "input_dataset": input_id,
            "output_dataset": output_id,
            "state": VALIDATING,
            "message": "",
            "metrics": "{}",
            "output_stats": "{}",
            "target": target,
            "completion_params": orjson.dumps(params).decode(),
            "created_at": now,
            "updated_at": now,
            "owner": self.instance,
            "heartbeat_at": now,
        }
        limit = self.quotas.get(project) or self.settings.max_active_per_project
        with self._lock:  # the count and the insert together: two creates cannot both take the last place
            active = self.store.active(project)
            if active >= limit:
                raise ServiceError(
                    "resource_exhausted",
                    f"project {project!r} has {active} evaluation jobs queued or running, its limit "
                    f"(max_evaluation_jobs={limit}); wait for one to finish or cancel one",
                    "job_quota",
                    limit=limit,
                )
            try:
                self.store.insert(values)
            except JobTaken:
                raise ServiceError(
                    "failed_precondition",
                    f"evaluationJobId: job {job_id!r} already exists in project {project!r}",
                    "already_exists",
                    path="evaluationJobId",
                ) from None
            self._cancelled[(project, job_id)] = threading.Event()
        self._pool.submit(project, self._run, project, job_id)
        return _job(values)

    def _generation(self, spec: JobSpec) -> tuple[str, dict[str, Any]]:
        """The job's target name and checked completion params (``("", {})`` when it generates nothing)."""
        raw = spec.completion_params or {}
        if not spec.target:
            if raw:
                raise ServiceError(
                    "invalid_argument",
                    f"{PARAMS_PATH}: completion params need evaluationJob.target (the target that generates replies)",
                    path=PARAMS_PATH,
                )
            return "", {}
        target = self.generators.target(spec.target)
        return spec.target, check_params(raw, target)

    def _refuse_existing_output(self, project: str, output_id: str) -> None:
        if self.datasets.exists(project, output_id):
            raise ServiceError(
                "failed_precondition",
                f"evaluationJob.outputDataset: dataset {output_id!r} already exists; name a new dataset for the "
                "job to create",
                "already_exists",
                path="evaluationJob.outputDataset",
            )

    def get(self, principal: Principal, job_id: str) -> EvaluationJob:
        """The caller's job.

        Raises:
            ServiceError: ``not_found`` (also for another project's job).

        """
        return _job(self._row(principal.project, resource_id(job_id, "evaluationJobs", "evaluationJobId")))

    def listing(
        self, principal: Principal, page_size: int, page_token: str, state: str = "", evaluator: str = ""
    ) -> Page[EvaluationJob]:
        """One page of the caller's project's jobs, newest first, of one state or evaluator when asked.

        Args:
            principal: The caller (needs ``evaluations.run``).
            page_size: At most this many jobs (0: the default).
            page_token: Where the page before ended (empty: the first page).
            state: Only jobs in this state (empty: any).
            evaluator: Only jobs of this evaluator, ``<id>`` or ``evaluators/<id>`` (empty: any).

        Returns:
            The page, and the next page's token (empty at the end).

        Raises:
            ServiceError: ``invalid_argument`` for an unknown state, a bad evaluator id, page size or token.

        """
        if state and state not in (*ACTIVE_STATES, *TERMINAL_STATES):
            raise ServiceError(
                "invalid_argument",
                f"state: {state[:40]!r} is not a job state (one of {', '.join((*ACTIVE_STATES, *TERMINAL_STATES))})",
                path="state",
            )
        evaluator_id = resource_id(evaluator, "evaluators", "evaluator") if evaluator else ""
        rows, token = self.store.page(principal.project, page_size, page_token, state, evaluator_id)
        return Page([_job(dict(r)) for r in rows], token)

    def delete(self, principal: Principal, job_id: str) -> str:
        """Delete the caller's finished job (COMPLETED, FAILED or CANCELLED); its output dataset stays.

        Returns:
            Its resource name, ``evaluationJobs/<id>``.

        Raises:
            ServiceError: ``not_found``; ``failed_precondition`` while it is queued or running, or while the worker
                of a job just cancelled has not let it go yet (its id could not be reused safely before).

        """
        job_id = resource_id(job_id, "evaluationJobs", "evaluationJobId")
        project = principal.project
        state = self._row(project, job_id)["state"]
        deadline = time.monotonic() + _LET_GO
        while state in TERMINAL_STATES:
            with self._lock:
                stopping = (project, job_id) in self._cancelled
                if not stopping:
                    if self.store.remove_finished(project, job_id):
                        return f"evaluationJobs/{job_id}"
                    state = self._row(project, job_id)["state"]
                    continue
            if time.monotonic() >= deadline:
                raise ServiceError(
                    "failed_precondition",
                    f"evaluation job {job_id!r} is {state} but its worker has not stopped yet; retry in a moment",
                    "job_not_finished",
                )
            time.sleep(0.05)
        raise ServiceError(
            "failed_precondition",
            f"evaluation job {job_id!r} is {state}: only a COMPLETED, FAILED or CANCELLED job can be deleted; "
            "cancel it first, or wait for it to end",
            "job_not_finished",
        )

    def cancel(self, principal: Principal, job_id: str) -> EvaluationJob:
        """Cancel the caller's job: a queued one never starts, a running one's sandbox is killed now.

        Raises:
            ServiceError: ``not_found`` (also for another project's job).

        """
        job_id = resource_id(job_id, "evaluationJobs", "evaluationJobId")
        project = principal.project
        self._row(project, job_id)
        self._set(project, job_id, CANCELLED, message="cancelled by the caller")
        key = (project, job_id)
        with self._lock:
            event = self._cancelled.get(key)
            session = self._sessions.get(key)
            generating = self._generating.get(key)
        if event is not None:
            event.set()
        if generating is not None:
            generating.cancel()
        if session is not None:
            session.cancel()
        return _job(self._row(project, job_id))

    def _run(self, project: str, job_id: str) -> None:
        key = (project, job_id)
        if self.metrics is not None:
            self.metrics.running.inc()
        try:
            self._execute(project, job_id)
        except _Stopped:
            pass
        except ServiceError as exc:
            self._set(project, job_id, FAILED, message=exc.message)
        except Exception as exc:
            log.exception("evaluation job %s failed", job_id)
            self._set(project, job_id, FAILED, message=f"the job failed inside the server: {type(exc).__name__}")
        finally:
            with self._lock:
                self._cancelled.pop(key, None)
                self._sessions.pop(key, None)
                self._generating.pop(key, None)
            if self.metrics is not None:
                self.metrics.running.dec()
                with contextlib.suppress(Exception):  # counting never fails a job
                    state = self._row(project, job_id)["state"]
                    if state not in ACTIVE_STATES:  # not the server stopping mid-job
                        self.metrics.jobs.labels(state).inc()

    def _execute(self, project: str, job_id: str) -> None:
        job = self._row(project, job_id)
        self._check_running(project, job_id)
        evaluator = self.evaluators.ready(project, job["evaluator_id"], "evaluationJob.evaluator")
        rows = self.datasets.rows(project, job["input_dataset"], "evaluationJob.inputDataset")
        self._refuse_existing_output(project, job["output_dataset"])
        self._advance(project, job_id, RUNNING)
        target, params = str(job["target"] or ""), orjson.loads(job["completion_params"] or "{}")
        summary = Summary()
        generated = failed = sent = 0  # rows whose reply was generated; whose generation failed; sent to the target
        settings = self.settings
        limits = Limits(
            wall_time=settings.batch_timeout,
            cpu_time=max(1, int(settings.batch_timeout)),
            memory_bytes=settings.memory_mb << 20,
            max_processes=settings.max_processes,
            max_output_bytes=settings.max_batch_output_bytes,
        )
        try:
            key = WorkerKey(
                project, evaluator.evaluator_id, evaluator.revision, str(evaluator.directory), evaluator.entry,
                str(self.evaluators.runtime), require_rung(self.rung), limits.memory_bytes, limits.max_processes,
            )  # fmt: skip
        except EvalsiError as exc:
            raise ServiceError(
                "failed_precondition", f"the sandbox is unavailable on this server: {redact(str(exc))}"
            ) from None
        bounds = BatchLimits(
            settings.batch_timeout, settings.max_batch_output_bytes, settings.max_reason_bytes,
            "jobs.max_batch_output_bytes", "jobs.batch_timeout",
        )  # fmt: skip
        session = ScoringSession(key, limits, bounds, self.workers)
        with self._lock:
            self._sessions[(project, job_id)] = session
        spool = OutputSpool(settings.max_output_bytes)
        try:
            size = settings.batch_rows
            for start in range(0, len(rows), size):
                self._check_running(project, job_id)
                indices = range(start, min(start + size, len(rows)))
                results: dict[int, dict[str, Any]] = {}
                records: dict[int, dict[str, Any]] = {}  # row index -> what its output row records of its generation
                if target:
                    missing = [i for i in indices if not has_reply(rows[i])]
                    outcomes = self._generate(project, job_id, target, params, [rows[i] for i in missing], sent)
                    sent += sum(1 for o in outcomes if not isinstance(o, Failed) or o.sent)
                    for index, outcome in zip(missing, outcomes, strict=True):
                        if isinstance(outcome, Failed):
                            results[index] = {"error": f"generation failed: {outcome.reason}"}
                            failed += 1
                        else:
                            rows[index] = with_reply(rows[index], outcome)
                            records[index] = generation_record(target, outcome)
                            generated += 1
                batch = [i for i in indices if has_reply(rows[i])]
                if batch:
                    self._check_running(project, job_id)
                    scored = session.score([_sandbox_row(rows[i], i) for i in batch])
                    results.update(zip(batch, scored, strict=True))
                for index in indices:  # counted and spooled as the batch returns; the output is never held here
                    result = results.get(index) or {"error": NO_REPLY}
                    summary.add(result)
                    spool.write(output_row(rows[index], result, records.get(index)))
                    rows[index] = {}
                self.store.set_progress(project, job_id, summary.rows)  # what every replica's pages show
            session.close()
            self._check_running(project, job_id)
            self._advance(project, job_id, WRITING_RESULTS)
            metrics, stats = summary.report()
            stats.update(generated=generated, generation_failed=failed)
            if rows and not stats["scored"]:
                raise ServiceError("failed_precondition", f"no row could be scored; row 1: {summary.first_error}")
            self.datasets.store_encoded(project, job["output_dataset"], spool.content(), spool.rows, source_job=job_id)
        finally:
            session.close()
            spool.close()
        self._advance(project, job_id, COMPLETED, metrics=orjson.dumps(metrics).decode(),
                      output_stats=orjson.dumps(stats).decode())  # fmt: skip

    def _generate(
        self, project: str, job_id: str, target: str, params: dict[str, Any], rows: list[dict[str, Any]], sent: int
    ) -> list[Outcome]:
        """A reply for each row from ``target``, within the job's and the project's budget on it.

        ``sent`` is how many rows the job sent the target so far. A cancel stops the requests in flight at once.
        """
        if not rows:
            return []
        config = self.generators.target(target)
        allowed, over = len(rows), ""
        per_job = config.max_requests_per_job
        if per_job is not None and per_job - sent < allowed:
            allowed = max(0, per_job - sent)
            over = (
                f"the job reached target {target!r}'s limit of {per_job} generated rows per job "
                f"(targets.{target}.max_requests_per_job)"
            )
        grant: Grant | None = None
        if config.budget is not None and allowed:
            tokens_each = int(params.get("max_tokens") or config.max_tokens)
            grant = self.budgets.reserve(project, target, config.budget, allowed, tokens_each)
            if grant.rows < allowed:
                allowed, over = grant.rows, _budget_spent(project, target, config.budget, grant)
        outcomes: list[Outcome] = []
        if allowed:
            outcomes = self._send(project, job_id, target, params, rows[:allowed])
        if grant is not None:
            unsent = sum(1 for o in outcomes if isinstance(o, Failed) and not o.sent)
            unused = sum(_unused_tokens(o, grant.tokens_each) for o in outcomes)
            self.budgets.settle(project, target, grant, unsent, unused)
        return outcomes + [Failed(over, sent=False) for _ in rows[allowed:]]

    def _send(
        self, project: str, job_id: str, target: str, params: dict[str, Any], rows: list[dict[str, Any]]
    ) -> list[Outcome]:
        key = (project, job_id)
        future = self.generators.start(project, target, params, [list(row.get("messages") or []) for row in rows])
        with self._lock:
            self._generating[key] = future
        try:
            self._check_running(project, job_id)  # a cancel that came before the future was registered
            return future.result()
        except concurrent.futures.CancelledError:
            raise _Stopped from None
        finally:
            future.cancel()
            with self._lock:
                self._generating.pop(key, None)

    def _check_running(self, project: str, job_id: str) -> None:
        event = self._cancelled.get((project, job_id))
        if event is not None and event.is_set():
            raise _Stopped

    def _advance(self, project: str, job_id: str, state: str, **values: Any) -> None:
        """Move an unfinished job to ``state``; a job cancelled meanwhile stops here."""
        if not self._set(project, job_id, state, **values):
            raise _Stopped

    def _set(self, project: str, job_id: str, state: str, **values: Any) -> bool:
        return self.store.set_state(project, job_id, state, **values)

    def _row(self, project: str, job_id: str) -> dict[str, Any]:
        found = self.store.fetch(project, job_id)
        if found is None:
            raise not_found("job", job_id, project, "evaluationJobId")
        return found

    def close(self) -> None:
        """Cancel queued jobs' threads and kill running jobs' sandboxes, then fail this process's unfinished jobs.

        Failing them now spares the caller the ``jobs.orphan_after`` wait before another server could tell.
        """
        self._pool.shutdown()
        with self._lock:
            events = list(self._cancelled.values())
            sessions = list(self._sessions.values())
            futures = list(self._generating.values())
        for event in events:
            event.set()
        for future in futures:
            future.cancel()
        for session in sessions:
            session.cancel()
        self.workers.close()
        self.generators.close()
        try:
            self.store.fail_owned(self.instance, "the server stopped while the job ran: create it again")
        except Exception:  # the database is gone too: the orphan sweep of another server fails them later
            log.exception("marking this server's unfinished jobs failed")


def _budget_spent(project: str, target: str, budget: TargetBudget, grant: Grant) -> str:
    limits = ", ".join(
        f"{name}={value}" for name, value in (("max_requests", budget.max_requests), ("max_tokens", budget.max_tokens))
        if value is not None
    )  # fmt: skip
    again = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(grant.window_start + budget.window))
    return (
        f"project {project!r} has used its budget on target {target!r} for this window "
        f"(targets.{target}.budget: {limits} per {budget.window:g}s); it starts again at {again}"
    )


def _unused_tokens(outcome: Outcome, reserved: int) -> int:
    """Tokens of a row's reservation its request did not use (all of them when it failed)."""
    if isinstance(outcome, Failed):
        return reserved
    used = reserved if outcome.tokens is None else min(reserved, max(0, int(outcome.tokens)))
    return reserved - used


def _sandbox_row(row: dict[str, Any], index: int) -> dict[str, Any]:
    metadata = {k: v for k, v in row.items() if k not in ("messages", "ground_truth")}
    return {
        "messages": row["messages"],
        "ground_truth": row.get("ground_truth"),
        "row_id": str(row.get("id", row.get("row_id", index))),
        "metadata": metadata,
    }


def _job(row: dict[str, Any]) -> EvaluationJob:
    return answer(
        EvaluationJob,
        row,
        target=row.get("target") or "",
        metrics=orjson.loads(row["metrics"] or "{}"),
        output_stats=orjson.loads(row["output_stats"] or "{}"),
        completion_params=orjson.loads(row.get("completion_params") or "{}"),
    )
