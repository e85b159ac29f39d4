"""The stores' statements on owned work: whose owner went silent, failing it, refreshing a heartbeat.

See :mod:`evalsi.server.evaluation._work_owners` for who owns work and when it counts as abandoned.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import ColumnElement, Engine, Table, func, or_, update

from evalsi.server.evaluation._row_store import changed


def orphaned(table: Table, instance: str, cutoff: float) -> ColumnElement[bool]:
    """Rows of ``table`` owned by another instance (or none) whose last heartbeat is older than ``cutoff``."""
    silent = func.coalesce(table.c.heartbeat_at, table.c.updated_at) < cutoff
    return silent & or_(table.c.owner.is_(None), table.c.owner != instance)


def fail_orphaned(
    engine: Engine, table: Table, unfinished: ColumnElement[bool], instance: str, before: float, **values: Any
) -> int:
    """Set ``values`` (and ``updated_at``) on other instances' ``unfinished`` rows silent since ``before``.

    Args:
        engine: The server's database.
        table: The table of owned work (``owner``, ``heartbeat_at``, ``updated_at`` columns).
        unfinished: Which rows are still being worked on (e.g. their state is BUILDING).
        instance: This server process, whose own rows are left alone.
        before: The heartbeat cutoff.
        values: The columns that mark a row failed (its state and message).

    Returns:
        How many rows were failed.

    """
    statement = update(table).where(unfinished, orphaned(table, instance, before))
    return changed(engine, statement.values(**values, updated_at=time.time()))


def refresh_heartbeat(engine: Engine, table: Table, unfinished: ColumnElement[bool], instance: str) -> None:
    """Refresh the heartbeat of ``instance``'s ``unfinished`` rows of ``table``."""
    changed(engine, update(table).where(table.c.owner == instance, unfinished).values(heartbeat_at=time.time()))
