"""The stores' query of work whose owner went silent (see :mod:`evalsi.server.evaluation._work_owners`)."""

from __future__ import annotations

from sqlalchemy import ColumnElement, Table, func, or_


def orphaned(table: Table, instance: str, cutoff: float) -> ColumnElement[bool]:
    """Rows of ``table`` owned by another instance (or none) whose last heartbeat is older than ``cutoff``."""
    silent = func.coalesce(table.c.heartbeat_at, table.c.updated_at) < cutoff
    return silent & or_(table.c.owner.is_(None), table.c.owner != instance)
