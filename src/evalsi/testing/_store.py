"""Where evaluation test results are kept: a local SQLite file, one row per test run, in the run results form.

Each stored document has the layout of an ``evalsi run`` results file (``kind: RunResults``, ``summary``,
``records`` with their samples and scores), plus ``evaluationTest`` (the case's id, pass rule and verdict), so
the tools that read run results read these too. Each is also written as a results file beside the database
(``evaluation-tests/<case>/<run>.results.json``), which ``evalsi view`` and ``evalsi compare`` open as they are.
A test with several completion-params entries stores each case on its own (``module::test[case]``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
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
    """Where stored run ``row`` of ``test`` is also written: ``<db dir>/evaluation-tests/<test>/<row>.results.json``.

    The folder is the test's id with other characters than letters, digits, ``.``, ``_`` and ``-`` replaced; a
    case's id (``module::test[case]``) also gets a digest of the whole id, so two cases never share a folder.
    """
    folder = "".join(c if c.isalnum() or c in "._-" else "_" for c in test)
    if not re.fullmatch(r"[\w.:-]*", test):
        folder += "-" + hashlib.sha256(test.encode()).hexdigest()[:8]
    return db.parent / "evaluation-tests" / folder / f"{row:06d}.results.json"


def stored_results(test: str | None = None, path: Path | None = None) -> list[dict[str, Any]]:
    """Stored results documents, oldest first (of one test, or one case, when ``test`` is given).

    ``module::test`` gives every case of the test (``module::test[case]``); a case's id gives that case alone.

    Args:
        test: ``module::test`` for every case of a test, or one case's id; None for every test.
        path: The results database; None for :func:`results_db`.

    """
    db = path or results_db()
    if not db.exists():
        return []
    with _connect(db) as connection:
        query = "select document from evaluation_runs"
        rows = (
            connection.execute(
                query + " where test = ? or substr(test, 1, ?) = ? order by id", (test, len(test) + 1, test + "[")
            )
            if test
            else connection.execute(query + " order by id")
        )
        return [orjson.loads(row[0]) for row in rows]
