"""Uploaded evaluators: stored per project, built in the sandbox in the background, looked up when used.

``CreateEvaluator`` checks the caller (``evaluators.write`` and ``resource.runs_code``), the id, the entry, the
archive (size, then :func:`check_archive`) and its ``requirements.txt`` (plain requirements only) in the request,
stores the archive with the server's copy of the checked requirements and answers ``BUILDING``; a build
worker then runs :func:`._sandbox.build` and records ``ACTIVE`` or ``BUILD_FAILED`` with
the log. Only ``ACTIVE`` evaluators score (jobs, ``ref: evaluator/ID`` components). ``DeleteEvaluator`` removes
the row, then the files; a replica that remembered the evaluator as ACTIVE notices at its next use (the archive it
remembered is gone), so a deleted evaluator stops scoring at once everywhere. A build belongs to the server
process that took the upload and keeps its heartbeat fresh; it is failed only when that heartbeat is older than
``jobs.orphan_after`` (see :mod:`.._work_owners`), never by another replica merely starting.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import shutil
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalsi.sandbox import Isolation
from evalsi.sandbox._host import running_as_root
from evalsi.server._config import ServerConfig
from evalsi.server._errors import ServiceError
from evalsi.server._fair import FairPool, share_of
from evalsi.server._tokens import Principal
from evalsi.server.evaluation._answers import answer
from evalsi.server.evaluation._ids import check_id, not_found, project_dir, resource_id
from evalsi.server.evaluation._metrics import EvaluationMetrics
from evalsi.server.evaluation._pages import Page
from evalsi.server.evaluation._work_owners import new_instance
from evalsi.server.evaluation.evaluators._archive import REQUIREMENTS, check_archive, normalised
from evalsi.server.evaluation.evaluators._index import RequirementsError, plain_requirements
from evalsi.server.evaluation.evaluators._runtime import runtime_dir
from evalsi.server.evaluation.evaluators._sandbox import ARCHIVE_NAME, REQUIREMENTS_COPY, build
from evalsi.server.evaluation.evaluators._store import ACTIVE, BUILD_FAILED, BUILDING, EvaluatorStore, EvaluatorTaken

if TYPE_CHECKING:
    from sqlalchemy import Engine

log = logging.getLogger("evalsi.server")
_READY_MEMO = 4096


@dataclass(frozen=True)
class Evaluator:
    """An uploaded evaluator as the service answers it: plain data, written into each protocol's form by transport."""

    evaluator_id: str
    entry: str
    state: str
    """BUILDING, ACTIVE or BUILD_FAILED."""
    message: str
    """Why the build failed (the log has the details); empty otherwise."""
    mode: str
    """The scoring mode of the evaluation test (pointwise, groupwise, all), once built."""
    archive_bytes: int
    archive_sha256: str
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class BuildLog:
    """An evaluator's build log and its state."""

    evaluator_id: str
    state: str
    log: str


@dataclass(frozen=True)
class ReadyEvaluator:
    """An ACTIVE evaluator, as scoring needs it."""

    evaluator_id: str
    entry: str
    directory: Path
    revision: str
    """The archive's digest: scores cached for one upload never answer for another."""


class Evaluators:
    """The evaluator store and its build workers."""

    def __init__(self, config: ServerConfig, engine: Engine, rung: Isolation, instance: str | None = None) -> None:
        self.settings = config.spec.evaluators
        self.orphan_after = config.spec.jobs.orphan_after
        self.instance = instance or new_instance()
        """This server process: the owner of the builds it starts."""
        self.store = EvaluatorStore(config, engine)
        self.rung = rung
        self.root = config.evaluators_dir
        self._runtime: Path | None = None
        self._ready: dict[tuple[str, str], tuple[ReadyEvaluator, str, tuple[int, int]]] = {}
        """ACTIVE evaluators by (project, id), with their archive's path and its inode and mtime then."""
        self.metrics: EvaluationMetrics | None = None
        """Counts finished builds by state (set by the server)."""
        self._prepare_lock = threading.Lock()
        workers = config.spec.jobs.workers
        self._builds = FairPool(workers, share_of(workers, config.spec.rewards.project_share), "evalsi-build")

    @property
    def runtime(self) -> Path:
        """The runtime directory sandboxes mount (the storage is prepared on first use).

        Raises:
            ServiceError: ``failed_precondition`` when the storage directory cannot serve sandboxes.

        """
        with self._prepare_lock:
            if self._runtime is None:
                try:
                    self.root.mkdir(mode=0o755, parents=True, exist_ok=True)
                    self.root.chmod(0o755)  # sandboxes (unprivileged uids) must reach the directories mounted
                    check_reachable(self.root)
                    self._runtime = runtime_dir(self.root)
                except OSError as exc:
                    log.error("evaluators.storage_dir cannot be used: %s", exc)
                    raise ServiceError(
                        "failed_precondition",
                        "this server cannot store or build evaluators: its evaluators.storage_dir is unusable "
                        "(the operator's configuration; the server log says why)",
                    ) from None
            return self._runtime

    def directory(self, project: str, evaluator_id: str) -> Path:
        """Where an evaluator's archive and environment live."""
        return self.root / project_dir(project) / evaluator_id

    def recover(self) -> int:
        """Fail the builds whose server stopped beating for ``jobs.orphan_after``; returns how many."""
        window = self.orphan_after
        message = f"the server building it stopped (no heartbeat for {window:g}s): upload the evaluator again"
        return self.store.fail_orphans(self.instance, time.time() - window, message)

    def beat(self) -> None:
        """Refresh the heartbeat of this process's builds, queued or running."""
        self.store.beat(self.instance)

    def create(self, principal: Principal, evaluator_id: str, entry: str, archive: bytes) -> Evaluator:
        """Check and store an upload, start its build, and answer it ``BUILDING``.

        Args:
            principal: The caller (needs ``evaluators.write`` and ``resource.runs_code``).
            evaluator_id: The new evaluator's id.
            entry: The evaluation test to serve, ``path/to/test_file.py::function`` inside the archive.
            archive: The project directory as a gzip-compressed tar archive.

        Returns:
            The stored evaluator, ``BUILDING``.

        Raises:
            ServiceError: Permission, id, entry or archive refused; the id is taken (``already_exists``).

        """
        evaluator_id = check_id(evaluator_id, "evaluatorId")
        entry = _check_entry(entry)
        data = bytes(archive)
        limit = self.settings.max_upload_bytes
        if len(data) > limit:
            raise ServiceError(
                "invalid_argument",
                f"the archive is {len(data)} bytes; this server accepts at most evaluators.max_upload_bytes={limit}",
                "archive_too_large",
                limit=limit,
            )
        listing = check_archive(data, self.settings.max_files, self.settings.max_unpacked_bytes)
        requirements = _checked_requirements(listing.requirements)
        runtime = self.runtime
        entry_file = entry.partition("::")[0]
        if entry_file not in listing.files:
            raise ServiceError(
                "invalid_argument",
                f"entry: {entry_file!r} is not in the archive (its Python files: "
                f"{', '.join(sorted(f for f in listing.files if f.endswith('.py'))[:20]) or 'none'})",
                path="entry",
            )
        now = time.time()
        digest = hashlib.sha256(data).hexdigest()
        row = {
            "project": principal.project,
            "evaluator_id": evaluator_id,
            "entry": entry,
            "state": BUILDING,
            "message": "",
            "mode": "",
            "build_log": "",
            "archive_bytes": len(data),
            "archive_sha256": digest,
            "created_at": now,
            "updated_at": now,
            "owner": self.instance,
            "heartbeat_at": now,
        }
        try:
            self.store.insert(row)
        except EvaluatorTaken:
            raise ServiceError(
                "failed_precondition",
                f"evaluator {evaluator_id!r} already exists in project {principal.project!r}: choose another id",
                "already_exists",
            ) from None
        try:
            self._store_archive(self.directory(principal.project, evaluator_id), data, requirements)
        except OSError as exc:
            log.error("storing evaluator %s failed: %s", evaluator_id, exc)
            self._finish(principal.project, evaluator_id, BUILD_FAILED, "", "the server could not store it", "")
            raise ServiceError("unavailable", "the server could not store the archive; retry later") from None
        project = principal.project
        self._builds.submit(project, self._build, project, evaluator_id, entry, requirements, runtime)
        return _evaluator(row)

    def _build(self, project: str, evaluator_id: str, entry: str, requirements: list[str], runtime: Path) -> None:
        directory = self.directory(project, evaluator_id)
        try:
            outcome = build(directory, entry, requirements, self.settings, runtime, self.rung)
            state, mode, message, build_log = (
                ACTIVE if outcome.ok else BUILD_FAILED,
                outcome.mode,
                outcome.message,
                outcome.log,
            )
        except Exception as exc:  # never leave an evaluator BUILDING
            log.exception("build of evaluator %s failed", evaluator_id)
            message = f"the build could not run: {exc}"
            state, mode, build_log = BUILD_FAILED, "", message
        self._finish(project, evaluator_id, state, mode, message, build_log)
        if self.metrics is not None:
            self.metrics.builds.labels(state).inc()

    @staticmethod
    def _store_archive(directory: Path, data: bytes, requirements: list[str]) -> None:
        """The archive, and the server's copy of its checked requirements (the one pip is given)."""
        shutil.rmtree(directory, ignore_errors=True)
        upload = directory / "upload"
        upload.mkdir(mode=0o755, parents=True)
        for folder in (directory.parent, directory):
            folder.chmod(0o755)
        (upload / ARCHIVE_NAME).write_bytes(data)
        (upload / ARCHIVE_NAME).chmod(0o644)
        if requirements:
            (upload / REQUIREMENTS_COPY).write_text("".join(f"{line}\n" for line in requirements), encoding="utf-8")
            (upload / REQUIREMENTS_COPY).chmod(0o644)

    def _finish(self, project: str, evaluator_id: str, state: str, mode: str, message: str, build_log: str) -> None:
        """Record a build's outcome, unless another server already failed the build as abandoned."""
        self.store.finish(project, evaluator_id, state, mode, message, build_log)

    def get(self, principal: Principal, evaluator_id: str) -> Evaluator:
        """The caller's evaluator.

        Raises:
            ServiceError: ``not_found`` (also for another project's evaluator).

        """
        return _evaluator(self._row(principal.project, resource_id(evaluator_id, "evaluators", "evaluatorId")))

    def build_log(self, principal: Principal, evaluator_id: str) -> BuildLog:
        """The caller's evaluator's build log.

        Raises:
            ServiceError: ``not_found`` (also for another project's evaluator).

        """
        row = self._row(principal.project, resource_id(evaluator_id, "evaluators", "evaluatorId"))
        return BuildLog(evaluator_id=row["evaluator_id"], state=row["state"], log=row["build_log"])

    def ready(self, project: str, evaluator_id: str, where: str) -> ReadyEvaluator:
        """An ACTIVE evaluator of ``project`` for scoring.

        An ACTIVE evaluator never changes, so it is remembered with its archive's inode and mtime: reward calls
        naming it cost a ``stat`` and no query after the first, and one deleted (or deleted and uploaded again under
        its id), here or by another replica, is looked up afresh.

        Raises:
            ServiceError: ``not_found``, or ``invalid_argument`` when it is not ACTIVE (both naming ``where``).

        """
        known = self._ready.get((project, evaluator_id))
        if known is not None and _stamp(known[1]) == known[2]:
            return known[0]
        self._ready.pop((project, evaluator_id), None)
        row = self._row(project, evaluator_id, where)
        if row["state"] != ACTIVE:
            detail = f": {row['message']}" if row["message"] else ""
            raise ServiceError(
                "invalid_argument",
                f"{where}: evaluator {evaluator_id!r} is {row['state']}{detail}; only ACTIVE evaluators score",
                "evaluator_not_active",
                path=where,
            )
        ready = ReadyEvaluator(evaluator_id, row["entry"], self.directory(project, evaluator_id), row["archive_sha256"])
        archive = str(ready.directory / "upload" / ARCHIVE_NAME)
        stamp = _stamp(archive)
        if stamp is not None:
            if len(self._ready) >= _READY_MEMO:
                self._ready.clear()
            self._ready[(project, evaluator_id)] = (ready, archive, stamp)
        return ready

    def listing(self, principal: Principal, page_size: int, page_token: str) -> Page[Evaluator]:
        """One page of the caller's project's evaluators, newest first.

        Raises:
            ServiceError: ``invalid_argument`` for a bad page size or token.

        """
        rows, token = self.store.page(principal.project, page_size, page_token)
        return Page([_evaluator(dict(r)) for r in rows], token)

    def delete(self, principal: Principal, evaluator_id: str) -> str:
        """Delete the caller's evaluator, then its archive and environment; it stops scoring at once.

        Returns:
            Its resource name, ``evaluators/<id>``.

        Raises:
            ServiceError: ``not_found``; ``failed_precondition`` while it is BUILDING or a queued or running job
                uses it (naming the job).

        """
        evaluator_id = resource_id(evaluator_id, "evaluators", "evaluatorId")
        project = principal.project
        directory = self.directory(project, evaluator_id)
        # set aside before the id is free: an upload under it gets a new directory
        doomed = self.store.remove(project, evaluator_id, lambda: self._set_aside(directory))
        self._ready.pop((project, evaluator_id), None)
        if doomed is not None:
            _remove(doomed)
        return f"evaluators/{evaluator_id}"

    @staticmethod
    def _set_aside(directory: Path) -> Path | None:
        """Move an evaluator's directory to a name no evaluator has (``None`` when it has none).

        Raises:
            ServiceError: ``unavailable`` when it cannot be moved (the evaluator is then kept).

        """
        if not directory.exists():
            return None
        doomed = directory.with_name(f".deleted-{directory.name}-{secrets.token_hex(4)}")
        try:
            directory.rename(doomed)
        except OSError as exc:
            log.error("moving evaluator files %s aside failed: %s", directory, exc)
            raise ServiceError(
                "unavailable", "the server could not remove the evaluator's files; retry later"
            ) from None
        return doomed

    def _row(self, project: str, evaluator_id: str, where: str = "evaluatorId") -> dict[str, Any]:
        found = self.store.fetch(project, evaluator_id)
        if found is None:
            raise not_found("evaluator", evaluator_id, project, where)
        return found

    def close(self) -> None:
        """Stop taking builds (a build running finishes on its thread)."""
        self._builds.shutdown()


def check_reachable(root: Path) -> None:
    """Refuse a storage directory the sandbox's unprivileged users cannot reach (as root, they are other users).

    Raises:
        PermissionError: A parent directory is not searchable by others; the message names it.

    """
    if not running_as_root():
        return
    for parent in root.parents:
        if not parent.stat().st_mode & stat.S_IXOTH:
            raise PermissionError(
                f"evaluators.storage_dir {root} is not reachable by the sandbox's unprivileged users: its parent "
                f"{parent} is not searchable by others (mode {stat.S_IMODE(parent.stat().st_mode):o}); choose a "
                "directory whose parents are (e.g. /var/lib/evalsi)"
            )


def _remove(doomed: Path) -> None:
    """Remove a deleted evaluator's files (logged, never raised: the evaluator is already gone)."""
    try:
        shutil.rmtree(doomed)
    except OSError:
        for folder, _, _ in os.walk(doomed):  # a directory the build left without the owner's write bit
            with contextlib.suppress(OSError):
                os.chmod(folder, 0o755)
        try:
            shutil.rmtree(doomed)
        except OSError as exc:
            log.error("removing evaluator files %s failed: %s", doomed, exc)


def _stamp(archive: str) -> tuple[int, int] | None:
    """A stored archive's inode and mtime (``None`` once it is gone); one ``stat``, no database query."""
    try:
        found = os.stat(archive)
    except OSError:
        return None
    return found.st_ino, found.st_mtime_ns


def _checked_requirements(text: str | None) -> list[str]:
    """The archive's requirements as plain requirement strings, whatever the server's package source.

    Raises:
        ServiceError: ``invalid_argument`` naming the line that is not a plain requirement.

    """
    if text is None:
        return []
    try:
        return plain_requirements(text)
    except RequirementsError as exc:
        raise ServiceError("invalid_argument", str(exc), "invalid_requirements", path=REQUIREMENTS) from None


def _check_entry(entry: str) -> str:
    location, sep, name = entry.partition("::")
    if not sep or not name.isidentifier() or not location.endswith(".py"):
        raise ServiceError(
            "invalid_argument",
            f"entry: {entry[:200]!r} must name an evaluation test as path/to/test_file.py::function",
            path="entry",
        )
    try:
        location = normalised(location)
    except ServiceError:
        raise ServiceError(
            "invalid_argument", f"entry: {location[:200]!r} must be a path inside the archive", path="entry"
        ) from None
    return f"{location}::{name}"


def _evaluator(row: dict[str, Any]) -> Evaluator:
    return answer(Evaluator, row)
