"""The row statements the evaluation stores share: insert one row (within a quota), change rows, read rows.

Each store keeps its own queries (what it selects, for which project); these run them the same way everywhere:
a row comes back as a plain ``dict`` (the store's callers never see SQLAlchemy rows), an insert that hits the
table's unique id raises the store's own "taken" error, and a quota-bound insert locks, inserts and checks in one
transaction so two concurrent inserts cannot both pass the quota.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Delete, Engine, Select, Table, Update, insert
from sqlalchemy.exc import IntegrityError

from evalsi.server._quota_store import Kind, StorageQuotas


def insert_row(
    engine: Engine,
    table: Table,
    values: dict[str, Any],
    taken: type[Exception],
    quota: tuple[StorageQuotas, Kind] | None = None,
) -> None:
    """Insert one row of ``table`` (all of its columns), within the project's quotas of a kind when given.

    Args:
        engine: The server's database.
        table: The table to insert into.
        values: The row (its ``project`` names whose quotas apply).
        taken: Raised (without arguments) when the row's id is already used in the project.
        quota: The storage quotas and the kind of resource the row counts against, if any.

    Raises:
        Exception: ``taken``, when the unique id is already used.
        ServiceError: ``resource_exhausted`` when the row would pass a quota.

    """
    try:
        with engine.begin() as connection:
            if quota is not None:
                quota[0].lock(connection, values["project"], quota[1])
            connection.execute(insert(table).values(**values))
            if quota is not None:
                quota[0].check(connection, values["project"], quota[1])
    except IntegrityError:
        raise taken from None


def first_row(engine: Engine, query: Select[Any]) -> dict[str, Any] | None:
    """The first row ``query`` selects, as a dict, or None when it selects none."""
    with engine.connect() as connection:
        found = connection.execute(query).mappings().first()
    return None if found is None else dict(found)


def all_rows(engine: Engine, query: Select[Any]) -> list[dict[str, Any]]:
    """Every row ``query`` selects, as dicts."""
    with engine.connect() as connection:
        return [dict(row) for row in connection.execute(query).mappings()]


def changed(engine: Engine, statement: Update | Delete) -> int:
    """Run one UPDATE or DELETE in its own transaction; how many rows it changed."""
    with engine.begin() as connection:
        return int(connection.execute(statement).rowcount or 0)
