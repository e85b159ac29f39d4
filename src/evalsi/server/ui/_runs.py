"""The server's stored runs as the results viewer's sources, read from the database when they are listed or opened.

A run labelled ``training-run`` and ``training-step`` (what ``evalsi checkpoints --server`` stores) is shown where a
checkpoint log directory would hold it, ``training/<training-run>/<spec>/{base,step-N}.json``, so the viewer draws
its learning curve; when a step was stored twice the newest run is the one shown. Any other run is
``runs/<name>-<id>.results.json``. These are names, not files: nothing is written to disk.

Listing reads each run's id, name and labels, and a run's header (spec, target, summary, details) only the first
time it is listed (runs never change), never its records, so a page of the run list costs the same whatever the
runs' sizes. Opening a run reads its records' JSON texts, each parsed when a page shows it.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import PurePosixPath
from typing import Any

import orjson
from pydantic import ValidationError

from evalsi.runs._document import RESULTS_VERSION, header_of, validation_message
from evalsi.server.runs._listing_store import RunListing, RunRow
from evalsi.view import Records, headline

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_CHUNK = 500
"""Runs whose headers are read in one query."""
HEADLINES = 65_536
"""Run list entries kept across projects (runs never change); the least recently listed beyond this are read
again."""


def safe_name(text: str, limit: int = 60) -> str:
    """A file name for free text: safe characters kept, the rest replaced, a hash added when anything changed."""
    cleaned = _UNSAFE.sub("_", text).strip("._")[:limit] or "run"
    if cleaned == text:
        return cleaned
    return f"{cleaned}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def run_path(run: RunRow) -> PurePosixPath:
    """Where a run is shown, relative to its project's root (its ``spec`` label names the curve, else its name)."""
    training_run = run.labels.get("training-run")
    step = run.labels.get("training-step")
    if training_run and step and (step == "base" or step.isdigit()):
        spec = run.labels.get("spec") or run.name
        stem = "base" if step == "base" else f"step-{int(step)}"
        return PurePosixPath("training") / safe_name(training_run) / safe_name(spec) / f"{stem}.json"
    return PurePosixPath("runs") / f"{safe_name(run.name)}-{run.id}.results.json"


class StoredRuns:
    """Reads a project's runs for the viewer (every query is scoped to the project)."""

    def __init__(self, listing: RunListing) -> None:
        self.listing = listing
        self._headlines: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def rows(self, project: str) -> list[RunRow]:
        """Every run of the project, newest first, with its labels."""
        return self.listing.rows(project)

    def exists(self, project: str, run_id: str) -> bool:
        """Whether the project still holds the run (it may have been deleted since it was listed)."""
        return self.listing.exists(project, run_id)

    def headlines(self, project: str, rows: Sequence[RunRow]) -> dict[str, dict[str, Any]]:
        """The run list entry of each run (read once per run), or its name and why it cannot be read."""
        out: dict[str, dict[str, Any]] = {}
        missing: list[RunRow] = []
        with self._lock:
            for row in rows:
                hit = self._headlines.get((project, row.id))
                if hit is None:
                    missing.append(row)
                else:
                    self._headlines.move_to_end((project, row.id))
                    out[row.id] = hit
        for chunk in _chunks(missing, _CHUNK):
            for run_id, item in self._read_headlines(project, [row.id for row in chunk]).items():
                out[run_id] = item
                with self._lock:
                    self._headlines[(project, run_id)] = item
                    while len(self._headlines) > HEADLINES:
                        self._headlines.popitem(last=False)
        return out

    def _read_headlines(self, project: str, ids: list[str]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for row in self.listing.headers(project, ids):
            try:
                header = header_of(_header(row))
                out[row.id] = headline(header, header.status)
            except (ValidationError, orjson.JSONDecodeError, TypeError) as exc:
                reason = validation_message(exc) if isinstance(exc, ValidationError) else "not JSON"
                out[row.id] = {"name": row.name, "status": "unreadable", "error": f"unreadable: {reason}"}
        return out

    def open(self, project: str, run_id: str) -> tuple[dict[str, Any], Records] | None:
        """A run's header and its records (as JSON texts, parsed on demand), or None when it is gone."""
        opened = self.listing.open(project, run_id)
        if opened is None:
            return None
        row, raw = opened
        return _header(row), Records(raw=raw)


def _header(row: Any) -> dict[str, Any]:
    """A stored run's header as the results document has it (what :meth:`StoredRun.document` gives)."""
    details = orjson.loads(row.details)
    return {
        "version": RESULTS_VERSION,
        "kind": "RunResults",
        "name": row.name,
        "status": row.status,
        "spec": orjson.loads(row.spec),
        "target": orjson.loads(row.target),
        **(details if isinstance(details, dict) else {}),
        "summary": orjson.loads(row.summary),
    }


def _chunks(items: Sequence[RunRow], size: int) -> Iterable[Sequence[RunRow]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
