"""Where evaluation test results are kept: a local SQLite file, one row per test run, in the run results form.

Each stored document has the layout of an ``evalsi run`` results file (``kind: RunResults``, ``summary``,
``records`` with their samples and scores), plus ``evaluationTest`` (the test's id, pass rule and verdict), so
the tools that read run results read these too. Each is also written as a results file beside the database
(``evaluation-tests/<test>/<run>.results.json``), which ``evalsi view`` and ``evalsi compare`` open as they are.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from evalsi._util.atomic import atomic_writer

DEFAULT_DB = Path(".evalsi") / "results.sqlite"

_SCHEMA = """
create table if not exists evaluation_runs (
    id integer primary key autoincrement,
    test text not null,
    created text not null,
    passed integer not null,
    score real,
    standard_error real,
    document blob not null
)
"""


def results_db() -> Path:
    """``EVALSI_RESULTS_DB`` when set, else ``.evalsi/results.sqlite`` under the current directory."""
    return Path(os.environ.get("EVALSI_RESULTS_DB") or DEFAULT_DB)


@contextlib.contextmanager
def _connect(path: Path) -> Iterator[sqlite3.Connection]:
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path, timeout=30)
    try:
        connection.execute(_SCHEMA)
        yield connection
        connection.commit()
    finally:
        connection.close()


def store_result(document: dict[str, Any], path: Path | None = None) -> int:
    """Keep one test run's results document (a database row and a results file); returns its row id."""
    verdict = document["evaluationTest"]
    db = path or results_db()
    with _connect(db) as connection:
        cursor = connection.execute(
            "insert into evaluation_runs (test, created, passed, score, standard_error, document) "
            "values (?, ?, ?, ?, ?, ?)",
            (
                verdict["id"],
                datetime.now(UTC).isoformat(timespec="seconds"),
                int(bool(verdict["passed"])),
                verdict["score"],
                verdict["standardError"],
                orjson.dumps(document),
            ),
        )
        row = int(cursor.lastrowid or 0)
    with atomic_writer(results_file(db, str(verdict["id"]), row)) as handle:
        handle.write(orjson.dumps(document, option=orjson.OPT_INDENT_2))
    return row


def results_file(db: Path, test: str, row: int) -> Path:
    """Where stored run ``row`` of ``test`` is also written: ``<db dir>/evaluation-tests/<test>/<row>.results.json``."""
    folder = "".join(c if c.isalnum() or c in "._-" else "_" for c in test)
    return db.parent / "evaluation-tests" / folder / f"{row:06d}.results.json"


def stored_results(test: str | None = None, path: Path | None = None) -> list[dict[str, Any]]:
    """Stored results documents, oldest first (of one test when ``test`` is given)."""
    db = path or results_db()
    if not db.exists():
        return []
    with _connect(db) as connection:
        query = "select document from evaluation_runs"
        rows = (
            connection.execute(query + " where test = ? order by id", (test,))
            if test
            else connection.execute(query + " order by id")
        )
        return [orjson.loads(row[0]) for row in rows]
