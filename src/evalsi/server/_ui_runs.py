"""The server's stored runs as files the results viewer reads: one results file per run, curves by label.

A run labelled ``training-run`` and ``training-step`` (what ``evalsi checkpoints --server`` stores) is written
where a checkpoint log directory would hold it, ``training/<training-run>/<spec>/{base,step-N}.json``, so the
viewer draws its learning curve; when a step was stored twice the newest run is the one shown. Any other run is
``runs/<name>-<id>.results.json``. Stored runs never change, so each is written once; the newest runs are read
first and the export stops at the first run already written.
"""

from __future__ import annotations

import hashlib
import re
import threading
from pathlib import Path

import orjson

from evalsi._util.atomic import atomic_writer
from evalsi.server._runs_store import RunStore, StoredRun

PAGE = 200
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str, limit: int = 60) -> str:
    """A file name for free text: safe characters kept, the rest replaced, a hash added when anything changed."""
    cleaned = _UNSAFE.sub("_", text).strip("._")[:limit] or "run"
    if cleaned == text:
        return cleaned
    return f"{cleaned}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def run_path(run: StoredRun) -> Path:
    """Where a run's results file goes, relative to its project's directory."""
    training_run = run.labels.get("training-run")
    step = run.labels.get("training-step")
    if training_run and step and (step == "base" or step.isdigit()):
        spec = run.labels.get("spec") or str(run.spec.get("name") or run.name)
        stem = "base" if step == "base" else f"step-{int(step)}"
        return Path("training") / safe_name(training_run) / safe_name(spec) / f"{stem}.json"
    return Path("runs") / f"{safe_name(run.name)}-{run.id}.results.json"


class RunExporter:
    """Writes a project's stored runs into its viewer directory, the new ones on each call."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self._written: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def export(self, project: str, directory: Path) -> None:
        """Write the runs stored since the last call (all of them on the first)."""
        with self._lock:  # one export at a time: two requests of one project would write the same files
            written = self._written.setdefault(project, set())
            fresh: list[StoredRun] = []
            token = ""
            while True:
                page, token = self.store.find(project, {}, PAGE, token)
                new = [run for run in page if run.id not in written]
                fresh.extend(new)
                if len(new) < len(page) or not token:
                    break
            for run in reversed(fresh):  # oldest first: a step stored twice ends with its newest run
                path = directory / run_path(run)
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                with atomic_writer(path) as handle:
                    handle.write(orjson.dumps(self.store.document(project, run.id)))
                written.add(run.id)
