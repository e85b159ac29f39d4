"""One project's sources for the results viewer under ``/ui``: its stored runs, curves and completed jobs.

A :class:`evalsi.view.Catalog` whose sources are rows of the server's database rather than files: the paths it
gives are names under a root no file lives in (``/evalsi-ui/<project hash>/runs/...``), each standing for a run or
a job of this project alone, and the viewer reads them through this catalog (:meth:`ProjectCatalog.load`). A
source another project holds is not in it, so its id answers 404, and a run deleted since it was listed answers
404 too (:meth:`ProjectCatalog.get` checks that it is still stored).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from evalsi._util.trainer_logs import RewardStream
from evalsi.errors import DataError
from evalsi.server._ui_jobs import CompletedJobs, job_headline
from evalsi.server._ui_runs import StoredRuns, run_path, safe_name
from evalsi.view import Catalog, RunData, Source, make_run, source_id
from evalsi.view._catalog import Kind

ROOT = Path("/evalsi-ui")
"""Where the sources' names live: no file is read or written there."""
SCAN_TTL = 2.0
"""Seconds a listing is reused to find a source by id before the database is read again."""


@dataclass(frozen=True)
class _Ref:
    kind: Literal["run", "job"]
    id: str


class ProjectCatalog(Catalog):
    """The runs, learning curves and completed evaluation jobs of one project, read from the database."""

    def __init__(self, project: str, runs: StoredRuns, jobs: CompletedJobs) -> None:
        self.project = project
        self.base = ROOT / hashlib.sha256(project.encode()).hexdigest()[:24]
        super().__init__([self.base])
        self.stored = runs
        self.jobs = jobs
        self._refs: dict[Path, _Ref] = {}
        self._items: dict[Path, dict[str, Any]] = {}
        self._curves: dict[Path, list[Path]] = {}
        self._scanned = -SCAN_TTL
        self._scan_lock = threading.Lock()

    def scan(self) -> list[Source]:
        """Every run (the newest of each checkpoint step), then the curves, then the completed jobs."""
        rows = self.stored.rows(self.project)
        refs: dict[Path, _Ref] = {}
        runs: list[Source] = []
        shown = []
        curves: dict[Path, list[Path]] = {}
        for row in rows:  # newest first: an older run of a step is not shown
            relative = run_path(row)
            path = self.base / relative
            if path in refs:
                continue
            refs[path] = _Ref("run", row.id)
            shown.append(row)
            runs.append(Source(source_id(path, "run"), "run", path, str(relative)))
            if relative.parts[0] == "training":
                curves.setdefault(path.parent, []).append(path)
        headlines = self.stored.headlines(self.project, shown)
        items = {path: headlines[ref.id] for path, ref in refs.items() if ref.id in headlines}
        for job in self.jobs.rows(self.project):
            relative = PurePosixPath("evaluation-jobs") / f"{safe_name(job.job_id)}.results.json"
            path = self.base / relative
            refs[path] = _Ref("job", job.job_id)
            items[path] = job_headline(job.row)
            runs.append(Source(source_id(path, "run"), "run", path, str(relative)))
        curve_sources = [
            Source(source_id(directory, "curve"), "curve", directory, str(directory.relative_to(self.base)))
            for directory in curves
        ]
        found = sorted(runs, key=lambda s: s.label) + sorted(curve_sources, key=lambda s: s.label)
        with self._scan_lock:
            self._sources = {s.id: s for s in found}
            self._refs, self._items = refs, items
            self._curves = {directory: sorted(steps) for directory, steps in curves.items()}
            self._scanned = time.monotonic()
        return found

    def get(self, source_id: str, kind: Kind) -> Source | None:
        """The source with this id and kind, when the project still holds it."""
        with self._scan_lock:
            fresh = time.monotonic() - self._scanned < SCAN_TTL
            source = self._sources.get(source_id) if fresh else None
        if source is None:
            self.scan()
            with self._scan_lock:
                source = self._sources.get(source_id)
        if source is None or source.kind != kind:
            return None
        ref = self._ref(source.path)
        if ref is not None and ref.kind == "run" and not self.stored.exists(self.project, ref.id):
            return None
        return source

    def headline(self, source: Source) -> dict[str, Any]:
        """The run list's entry, from the listing (never from the run's records)."""
        with self._scan_lock:
            item = self._items.get(source.path)
        return item if item is not None else {"name": source.label, "status": "unreadable", "error": "not stored"}

    def version(self, path: Path) -> str:
        """The stored run or job a name stands for (runs never change; a step stored again is another run)."""
        ref = self._ref(path)
        return "gone" if ref is None else f"{ref.kind}:{ref.id}"

    def load(self, path: Path) -> RunData:
        """The run or job a name stands for, its records' JSON read from the database and parsed when shown.

        Raises:
            DataError: It was deleted, or its header has the wrong shape (a run stored before it was checked).

        """
        ref = self._ref(path)
        opened = None
        if ref is not None:
            opened = (self.stored if ref.kind == "run" else self.jobs).open(self.project, ref.id)
        if opened is None:
            raise DataError("this run is no longer stored")
        header, records = opened
        return make_run(path, header, records, size=records.nbytes)

    def curve_paths(self, source: Source) -> list[Path]:
        """The curve's steps: the newest run of each."""
        with self._scan_lock:
            return list(self._curves.get(source.path, []))

    def curve_stamp(self, source: Source) -> str:
        """What changes when a step is stored (again)."""
        parts = [f"{path.name}:{self.version(path)}" for path in self.curve_paths(source)]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]

    def trainer_logs(self, locations: Iterable[str]) -> RewardStream:
        """Nothing: a stored run's checkpoint location is the caller's data, never a path the server reads."""
        return RewardStream(notes=["the training reward is not shown for runs stored on the server"])

    def _ref(self, path: Path) -> _Ref | None:
        with self._scan_lock:
            ref = self._refs.get(path)
        if ref is None:
            self.scan()
            with self._scan_lock:
                ref = self._refs.get(path)
        return ref
