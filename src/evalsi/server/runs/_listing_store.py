"""What the results viewer reads of a project's stored runs: the list (ids, names, labels), headers, records.

Every query names the project: another project's run is not found, exactly as one that does not exist. Listing
reads no header and no record, so it costs the same whatever the runs' sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, select

from evalsi.server.runs._tables import run_labels, run_records, runs

_HEADER = (runs.c.name, runs.c.status, runs.c.spec, runs.c.target, runs.c.summary, runs.c.details)


@dataclass(frozen=True)
class RunRow:
    """What listing reads of a stored run: no header, no records."""

    seq: int
    id: str
    name: str
    status: str
    labels: dict[str, str]


class RunListing:
    """Reads a project's stored runs for the viewer (every query is scoped to the project)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def rows(self, project: str) -> list[RunRow]:
        """Every run of the project, newest first, with its labels."""
        query = (
            select(runs.c.seq, runs.c.id, runs.c.name, runs.c.status)
            .where(runs.c.project == project)
            .order_by(runs.c.seq.desc())
        )
        labelled = (
            select(run_labels.c.run_seq, run_labels.c.key, run_labels.c.value)
            .join(runs, runs.c.seq == run_labels.c.run_seq)
            .where(runs.c.project == project)
        )
        with self.engine.connect() as connection:
            found = connection.execute(query).all()
            labels: dict[int, dict[str, str]] = {}
            for row in connection.execute(labelled):
                labels.setdefault(row.run_seq, {})[row.key] = row.value
        return [RunRow(r.seq, r.id, r.name, r.status, labels.get(r.seq, {})) for r in found]

    def exists(self, project: str, run_id: str) -> bool:
        """Whether the project still holds the run (it may have been deleted since it was listed)."""
        with self.engine.connect() as connection:
            row = connection.execute(select(runs.c.seq).where(runs.c.id == run_id, runs.c.project == project)).first()
        return row is not None

    def headers(self, project: str, ids: Sequence[str]) -> list[Any]:
        """The stored header columns (id, name, status, spec, target, summary, details) of these runs of the project."""
        query = select(runs.c.id, *_HEADER).where(runs.c.project == project, runs.c.id.in_(list(ids)))
        with self.engine.connect() as connection:
            return list(connection.execute(query).all())

    def open(self, project: str, run_id: str) -> tuple[Any, list[bytes]] | None:
        """A run's header columns and its records' JSON texts in order, or None when the project does not hold it."""
        with self.engine.connect() as connection:
            row = connection.execute(
                select(runs.c.seq, *_HEADER).where(runs.c.id == run_id, runs.c.project == project)
            ).first()
            if row is None:
                return None
            texts = connection.execute(
                select(run_records.c.data).where(run_records.c.run_seq == row.seq).order_by(run_records.c.position)
            )
            return row, [text.encode() for (text,) in texts]
