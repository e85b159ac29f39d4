"""Viewer sessions and run deletion on real databases (SQLite and PostgreSQL): what replicas share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from evalsi.server._db import open_database
from evalsi.server._errors import ServiceError
from evalsi.server._tables import api_tokens
from evalsi.server._token_store import TokenStore
from evalsi.server._tokens import digest
from evalsi.server.runs._store import RunStore
from evalsi.server.runs._tables import run_labels, run_records
from evalsi.server.ui._session_store import MAX_PER_TOKEN, Sessions
from evalsi.server.ui._tables import ui_sessions
from tests.server.postgres import fresh_database, running_postgres
from tests.server.runs_data import results_document


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return results_document(tmp_path_factory.mktemp("runs"), "base")


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[Engine]:
    engine = open_database(f"sqlite:///{tmp_path / 'server.db'}")
    yield engine
    engine.dispose()


def _count(engine: Engine, table: Any, *where: Any) -> int:
    with engine.connect() as connection:
        return int(connection.execute(select(func.count()).select_from(table).where(*where)).scalar_one())


def sessions_end_as_they_should(engine: Engine) -> None:
    tokens = TokenStore(engine)
    token = tokens.create("team-a", ["evaluations.run"])
    other = tokens.create("team-b", ["evaluations.run"])
    replica_a, replica_b = Sessions(engine, ttl=3600), Sessions(engine, ttl=3600)
    secret = replica_a.open(token)
    assert token not in secret and _count(engine, ui_sessions, ui_sessions.c.id_hash == secret) == 0  # a digest
    found = replica_b.principal(secret)
    assert found is not None and found.project == "team-a" and found.allows("evaluations.run")
    assert replica_b.principal(secret + "x") is None and replica_b.principal("") is None

    replica_b.close(secret)  # signed out on one replica: ended on every one
    assert replica_a.principal(secret) is None

    kept = [replica_a.open(other) for _ in range(MAX_PER_TOKEN + 3)]
    assert _count(engine, ui_sessions, ui_sessions.c.token_hash == digest(other)) == MAX_PER_TOKEN
    assert replica_a.principal(kept[-1]) is not None

    live = replica_a.open(token)
    (token_id,) = [t.id for t in tokens.list() if t.project == "team-a"]
    assert tokens.revoke(token_id)
    assert replica_b.principal(live) is None  # at once, whatever the token memo says
    expired = Sessions(engine, ttl=-1).open(other)
    assert replica_a.principal(expired) is None
    replica_a.open(other)  # opening a session clears ended ones: the revoked token's and the expired one
    assert _count(engine, ui_sessions, ui_sessions.c.token_hash == digest(token)) == 0
    assert _count(engine, ui_sessions, ui_sessions.c.id_hash == digest(expired)) == 0
    assert _count(engine, api_tokens) == 2


def runs_are_deleted_whole(engine: Engine, document: dict[str, Any]) -> None:
    store = RunStore(engine)
    run = store.create("team-a", document, {"training-run": "grpo", "training-step": "100"})
    theirs = store.create("team-b", document, {"training-run": "grpo"})
    with pytest.raises(ServiceError) as refused:
        store.delete("team-b", run.id)
    assert refused.value.status == "not_found"
    store.delete("team-a", run.id)
    with pytest.raises(ServiceError):
        store.get("team-a", run.id)
    with pytest.raises(ServiceError) as again:
        store.delete("team-a", run.id)
    assert again.value.status == "not_found"
    assert _count(engine, run_records) == len(document["records"])  # the other project's records alone
    assert _count(engine, run_labels) == 1
    assert store.get("team-b", theirs.id).record_count == len(document["records"])


def test_sessions_on_sqlite(sqlite: Engine) -> None:
    sessions_end_as_they_should(sqlite)


def test_deleting_runs_on_sqlite(sqlite: Engine, document: dict[str, Any]) -> None:
    runs_are_deleted_whole(sqlite, document)


def test_sessions_and_deleting_runs_on_postgresql(document: dict[str, Any]) -> None:
    with running_postgres() as cluster:
        engine = open_database(fresh_database(cluster, "ui"))
        try:
            sessions_end_as_they_should(engine)
            runs_are_deleted_whole(engine, document)
        finally:
            engine.dispose()
