"""Warm evaluator workers: an uploaded evaluator's interpreter, started once and fed batch after batch.

A worker is the runner's ``serve`` mode (:mod:`._runtime`) as a resident process
(:class:`evalsi.sandbox.Resident`) in its own sandbox at the operator's floor rung, with the evaluator's
environment and the runtime mounted read-only, and its own memory cgroup: the module is imported once, not once
per batch. Its answers reach the server only through the sandbox's fork server, with each batch's nonce, and an
answer past its byte cap is cut off unread.

Workers are kept by :class:`WorkerKey`: the project, the evaluator and its version (the archive's digest), and
the sandbox's memory and process limits. So a worker never serves two projects, nor two evaluators, nor an
older version. It is stopped, and the next batch starts a fresh one, when a batch fails (a timeout, its answer
past the cap, the program ending), after ``jobs.worker_max_rows`` rows, when its sandbox holds more than
``jobs.worker_max_memory_mb``, after ``jobs.worker_idle_timeout`` idle, and at once on a cancel.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from evalsi.errors import EvalsiError
from evalsi.sandbox import Answer, Isolation, Limits, Mount, Resident, resident
from evalsi.server.evaluation._config import JobsConfig
from evalsi.server.evaluation.evaluators._sandbox import EVALUATOR, MAX_REASON_BYTES, RUNTIME, clean_result, cut_text

CANCELLED = "cancelled"


@dataclass(frozen=True)
class WorkerSettings:
    """The operator's budgets of a warm worker (``jobs.worker_*``)."""

    max_rows: int = 100_000
    max_memory_bytes: int | None = None
    """None: three quarters of the worker's memory limit."""
    idle_timeout: float = 300.0
    max_idle: int = 8

    @classmethod
    def from_config(cls, jobs: JobsConfig) -> WorkerSettings:
        """The settings of the server config's ``jobs`` section."""
        memory = None if jobs.worker_max_memory_mb is None else jobs.worker_max_memory_mb << 20
        return cls(jobs.worker_max_rows, memory, jobs.worker_idle_timeout, jobs.max_idle_workers)


@dataclass(frozen=True)
class WorkerKey:
    """What a worker is for: one project's one evaluator version, in a sandbox of one rung and size."""

    project: str
    evaluator_id: str
    revision: str
    directory: str
    entry: str
    runtime: str
    rung: Isolation
    memory_bytes: int
    max_processes: int


@dataclass(frozen=True)
class BatchLimits:
    """One batch's bounds: its wall time and answer size, and the setting names a failed row's reason quotes."""

    wall: float
    max_answer_bytes: int
    max_reason_bytes: int = MAX_REASON_BYTES
    answer_setting: str = "the evaluator's output limit"
    time_setting: str = "the evaluator's time limit"


class Worker:
    """One warm worker; used by one caller at a time (see :class:`Workers`)."""

    def __init__(self, key: WorkerKey, limits: Limits, settings: WorkerSettings) -> None:
        self.key = key
        self.settings = settings
        argv = [f"{EVALUATOR}/venv/bin/python", "-I", f"{RUNTIME}/evalsi_runner.py", "serve", key.entry]
        mounts = [Mount(str(Path(key.directory) / "env"), EVALUATOR), Mount(key.runtime, RUNTIME)]
        self._resident: Resident = resident(key.rung, argv, limits, mounts=mounts)
        self._started = False
        self.rows = 0
        """Rows this worker has scored."""
        self.spent = False
        """It must not score again (a failed batch, a budget reached, or stopped): it is stopped when given back."""
        self.idle_since = time.monotonic()
        self.memory_limit = limits.memory_bytes

    def score(self, rows: Sequence[dict[str, Any]], bounds: BatchLimits) -> list[dict[str, Any]]:
        """One result per row (``{score, reason, metrics}`` or ``{error}``), in order; never raises."""
        if self.spent:
            return _failed(rows, "the evaluator's worker was stopped", bounds)
        if not self._started:
            self._started = True
            hello = self._resident.start(bounds.max_answer_bytes)
            why = _hello_failure(hello, bounds)
            if why is not None:
                self.stop()
                return _failed(rows, why, bounds)
        request = orjson.dumps({"rows": list(rows), "max_reason_bytes": bounds.max_reason_bytes})
        answer = self._resident.call(request, bounds.max_answer_bytes, bounds.wall)
        if not answer.ok:
            self.spent = True
            return _failed(rows, _stopped(answer, bounds, len(rows)), bounds)
        try:
            parsed = orjson.loads(answer.body)
        except orjson.JSONDecodeError:
            parsed = None
        results = parsed.get("results") if isinstance(parsed, dict) and parsed.get("ok") else None
        if not isinstance(results, list) or len(results) != len(rows):
            self.spent = True
            return _failed(rows, "the evaluator's answer is not one result per row", bounds)
        self.rows += len(rows)
        self._check_budgets(parsed.get("memory"))
        return [clean_result(r, bounds.max_reason_bytes) for r in results]

    def _check_budgets(self, reported: Any) -> None:
        settings = self.settings
        if self.rows >= settings.max_rows:
            self.spent = True
            return
        limit = settings.max_memory_bytes or self.memory_limit * 3 // 4
        held = self._resident.memory_bytes()
        if held is None:  # no cgroup: the worker's own word on its peak is all there is
            held = reported if isinstance(reported, int) else 0
        if held > limit:
            self.spent = True

    @property
    def usable(self) -> bool:
        """It can score another batch: not spent, and (once started) still running."""
        return not self.spent and (not self._started or self._resident.alive)

    def stop(self) -> None:
        """Kill the worker and its sandbox now (from any thread); a batch running ends with its rows failed."""
        self.spent = True
        self._resident.kill()


def _failed(rows: Sequence[Any], why: str, bounds: BatchLimits) -> list[dict[str, Any]]:
    error = {"error": cut_text(why, bounds.max_reason_bytes, "jobs.max_reason_bytes")}
    return [dict(error) for _ in rows]


def _hello_failure(hello: Answer, bounds: BatchLimits) -> str | None:
    """Why the worker could not start (its entry failed to load, or it stopped), or None when it is ready."""
    if not hello.ok:
        return _stopped(hello, bounds, 0)
    try:
        parsed = orjson.loads(hello.body)
    except orjson.JSONDecodeError:
        return "the evaluator's worker did not start (its first answer was not its hello)"
    if isinstance(parsed, dict) and parsed.get("ok") is True:
        return None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    return f"the evaluator could not be loaded: {error or 'no reason given'}"


def _stopped(answer: Answer, bounds: BatchLimits, rows: int) -> str:
    """The reason a batch's rows fail when the worker gave no usable answer."""
    if answer.status == "output":
        return (
            f"the evaluator answered more than {bounds.answer_setting}={bounds.max_answer_bytes} bytes for its batch "
            f"of {rows} rows; the answer was cut off unread"
        )
    if answer.status == "timeout":
        return f"the evaluator stopped (timeout: no answer within {bounds.time_setting}={bounds.wall:g}s)"
    if answer.status == "memory":
        return "the evaluator stopped (memory: its sandbox passed its memory limit)"
    if answer.status == "sandbox":
        return f"the evaluator's sandbox failed: {answer.detail}"
    if answer.detail == "the worker was stopped":
        return CANCELLED
    lines = [line for line in answer.stderr.strip().splitlines() if line.strip()]
    tail = f", {lines[-1][:300]}" if lines else ""
    how = "" if answer.exit_code is None else f" {answer.exit_code}"
    return f"the evaluator stopped (exit{how}{tail})"


class Workers:
    """The server's warm workers: idle ones by key, leased to one caller at a time, stopped past their budgets."""

    def __init__(self, settings: WorkerSettings | None = None) -> None:
        self.settings = settings or WorkerSettings()
        self._lock = threading.Lock()
        self._idle: dict[WorkerKey, list[Worker]] = {}
        self._leased: set[Worker] = set()
        self._closed = False
        self._wake = threading.Event()
        self._sweeper: threading.Thread | None = None

    def configure(self, settings: WorkerSettings) -> None:
        """Use the operator's budgets from now on (idle workers started under others are stopped)."""
        with self._lock:
            self.settings = settings
            self._closed = False
            idle = [w for ws in self._idle.values() for w in ws]
            self._idle.clear()
        for worker in idle:
            worker.stop()

    def lease(self, key: WorkerKey, limits: Limits) -> Worker:
        """An idle worker for ``key`` (the most recently used), or a new one (started by its first batch)."""
        with self._lock:
            found = self._idle.get(key, [])
            while found:
                worker = found.pop()
                if worker.usable:
                    self._leased.add(worker)
                    return worker
                worker.stop()
            self._idle.pop(key, None)
            worker = Worker(key, limits, self.settings)
            self._leased.add(worker)
            return worker

    def give_back(self, worker: Worker) -> None:
        """A leased worker is idle again; one that is spent, or past the idle bound, is stopped."""
        doomed: list[Worker] = []
        with self._lock:
            self._leased.discard(worker)
            if worker.usable and not self._closed and self.settings.max_idle > 0:
                worker.idle_since = time.monotonic()
                self._idle.setdefault(worker.key, []).append(worker)
                doomed = self._over_bound()
                self._start_sweeper()
            else:
                doomed = [worker]
        for stale in doomed:
            stale.stop()

    def _over_bound(self) -> list[Worker]:
        idle = sorted((w for ws in self._idle.values() for w in ws), key=lambda w: w.idle_since)
        doomed = idle[: max(0, len(idle) - self.settings.max_idle)]
        for worker in doomed:
            self._idle[worker.key].remove(worker)
        return doomed

    def sweep(self) -> int:
        """Stop the workers idle for longer than ``worker_idle_timeout``; returns how many."""
        now = time.monotonic()
        with self._lock:
            doomed = [w for ws in self._idle.values() for w in ws if now - w.idle_since > self.settings.idle_timeout]
            for worker in doomed:
                self._idle[worker.key].remove(worker)
            self._idle = {k: v for k, v in self._idle.items() if v}
        for worker in doomed:
            worker.stop()
        return len(doomed)

    def _start_sweeper(self) -> None:
        if self._sweeper is None or not self._sweeper.is_alive():
            self._sweeper = threading.Thread(target=self._sweep_loop, name="evalsi-worker-sweeper", daemon=True)
            self._sweeper.start()

    def _sweep_loop(self) -> None:
        while not self._closed:
            self._wake.wait(max(0.5, min(30.0, self.settings.idle_timeout / 2)))
            self._wake.clear()
            self.sweep()
            with self._lock:
                if not self._idle:
                    self._sweeper = None
                    return

    def close(self) -> None:
        """Stop every worker, idle or leased (a leased one's batch ends with its rows failed)."""
        with self._lock:
            self._closed = True
            workers = [w for ws in self._idle.values() for w in ws] + list(self._leased)
            self._idle.clear()
        self._wake.set()
        for worker in workers:
            worker.stop()


shared = Workers()
"""The server process's workers: its jobs and its ``ref: evaluator/ID`` reward components share them."""


class ScoringSession:
    """A job's (or a reward call's) use of a warm worker: leased at the first batch, given back at :meth:`close`.

    :meth:`cancel` may be called from another thread: it stops the worker at once (its sandbox and everything in
    it), and the batch running then ends with its rows failed.

    Raises:
        SandboxUnavailableError: No rung at or above ``key.rung`` works here (when the worker starts).

    """

    def __init__(self, key: WorkerKey, limits: Limits, bounds: BatchLimits, workers: Workers | None = None) -> None:
        self.key = key
        self.limits = limits
        self.bounds = bounds
        self.workers = workers or shared
        self._worker: Worker | None = None
        self._cancelled = threading.Event()
        self._lock = threading.Lock()

    def score(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """One result per row (``{score, reason, metrics}`` or ``{error}``), in order."""
        with self._lock:
            if self._cancelled.is_set():
                return [{"error": CANCELLED} for _ in rows]
            if self._worker is not None and not self._worker.usable:
                self.workers.give_back(self._worker)  # stopped: the next batch gets a fresh worker
                self._worker = None
            if self._worker is None:
                try:
                    self._worker = self.workers.lease(self.key, self.limits)
                except EvalsiError as exc:  # the rung stopped working since the batch's rung was chosen
                    return _failed(rows, f"the evaluator's sandbox is unavailable: {exc}", self.bounds)
            worker = self._worker
        results = worker.score(rows, self.bounds)
        if self._cancelled.is_set():
            return [{"error": CANCELLED} for _ in rows]
        return results

    def close(self) -> None:
        """Give the worker back, warm for the next batch of this evaluator (or stopped, when spent)."""
        with self._lock:
            worker, self._worker = self._worker, None
        if worker is not None:
            self.workers.give_back(worker)

    def cancel(self) -> None:
        """Stop the worker now (a cancelled job, a stopping server); its batch running ends with its rows failed."""
        self._cancelled.set()
        with self._lock:
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.stop()
            self.workers.give_back(worker)

    def __enter__(self) -> ScoringSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
