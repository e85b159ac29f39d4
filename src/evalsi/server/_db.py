"""The server's database: an engine for the configured URL, and the Alembic migrations applied on start.

SQLite (the embedded default) runs in WAL mode with a busy timeout, so several server processes on one file can
read while one writes. A new SQLite file (and its WAL, which SQLite creates with the same mode) is readable by
its owner only: it holds token hashes and every project's scores. Replicas starting together on one database
migrate one at a time: a lock file next to a SQLite database, a PostgreSQL advisory lock otherwise.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url

MIGRATIONS = Path(__file__).with_name("migrations")
_ADVISORY_LOCK_ID = 0x65_76_61_6C_73_69  # "evalsi": one lock id for every evalsi server on a PostgreSQL


def open_engine(url: str) -> Engine:
    """A SQLAlchemy engine for ``url``; SQLite gets WAL, a 30 s busy timeout and a parent directory."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            _create_private(Path(parsed.database))
        engine = create_engine(url, connect_args={"timeout": 30.0, "check_same_thread": False})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


def _create_private(path: Path) -> None:
    """Create ``path`` empty with mode 0600 unless it exists (SQLite then uses it as a new database)."""
    with suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest migration; safe when several servers start at once."""
    with _migration_lock(engine), engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _ADVISORY_LOCK_ID})
        _upgrade(connection)


def _upgrade(connection: Connection) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


@contextmanager
def _migration_lock(engine: Engine) -> Iterator[None]:
    database = engine.url.database if engine.dialect.name == "sqlite" else None
    if not database or database == ":memory:":
        yield
        return
    lock_path = Path(database + ".migrate-lock")
    with os.fdopen(os.open(lock_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def head_revision() -> str:
    """The newest migration's revision id (what :func:`migrate` brings a database to)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None, "no migrations"
    return head


def current_revision(engine: Engine) -> str | None:
    """The applied migration's revision id (None before the first migration)."""
    with engine.connect() as connection:
        try:
            row = connection.execute(text("SELECT version_num FROM alembic_version")).first()
        except Exception:  # no alembic_version table yet
            return None
    return None if row is None else str(row[0])


def open_database(url: str) -> Engine:
    """The server's database at ``url``, opened and migrated to the current schema (tokens, shared cache).

    Args:
        url: A SQLAlchemy database URL (SQLite or PostgreSQL).

    """
    engine = open_engine(url)
    migrate(engine)
    return engine
