"""What a project may store: how many datasets, runs and evaluators, and how many bytes of each, in all.

The quotas are the operator's (``default_quota``, overridden per project in ``quotas.<project>``). A store inserts
its row, then counts the project's rows of that kind in the same transaction and refuses (rolling back) when the
count or the bytes pass a quota: ``resource_exhausted`` (HTTP 429, as a job past ``max_evaluation_jobs``) naming
the quota, its value and what the project holds. Stores of one project and kind are serialised, so two at once
cannot both take the last place: SQLite lets one writer at a time hold the database from its insert to its commit,
and on PostgreSQL each such transaction first takes an advisory lock of its (project, kind).

Usage is counted from the rows themselves (datasets' and runs' ``size_bytes``, evaluators' ``archive_bytes``), so
it never drifts from what is stored and deleting frees room at once. Each service names its own :class:`Kind` (its
table and columns), so the quotas know no service's tables.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from sqlalchemy import Column, Connection, Table, func, select, text

from evalsi.server._config import ServerConfig
from evalsi.server._errors import ServiceError


@dataclass(frozen=True)
class Kind:
    """A kind of stored resource: its table, the column of each row's bytes, and the names of its two quotas."""

    name: str
    table: Table
    size: Column[int]
    count_quota: str
    bytes_quota: str
    remedy: str
    """What the project can do about it."""


def _lock_id(project: str, kind: str) -> int:
    """A PostgreSQL advisory lock id (a signed 64-bit integer) of one project's kind."""
    return int.from_bytes(hashlib.sha256(f"evalsi-quota:{kind}:{project}".encode()).digest()[:8], "big", signed=True)


class StorageQuotas:
    """The operator's storage quotas, checked inside the transaction that stores a resource."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config

    def lock(self, connection: Connection, project: str, kind: Kind) -> None:
        """Serialise the project's stores of ``kind`` until this transaction ends (call it before inserting)."""
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _lock_id(project, kind.name)})

    def check(self, connection: Connection, project: str, kind: Kind) -> None:
        """Refuse when the project's ``kind`` (the row just inserted included) passes a quota.

        Raises:
            ServiceError: ``resource_exhausted`` (code ``storage_quota``) naming the quota and its value.

        """
        count_limit, count_field = self.config.storage_quota(project, kind.count_quota)
        bytes_limit, bytes_field = self.config.storage_quota(project, kind.bytes_quota)
        if count_limit is None and bytes_limit is None:
            return
        count, size = connection.execute(
            select(func.count(), func.coalesce(func.sum(kind.size), 0)).where(kind.table.c.project == project)
        ).one()
        if count_limit is not None and count > count_limit:
            raise _refusal(project, kind, f"{count} {kind.name}", count_field, count_limit)
        if bytes_limit is not None and int(size) > bytes_limit:
            raise _refusal(project, kind, f"{int(size)} bytes of {kind.name}", bytes_field, bytes_limit)

    def room(self, connection: Connection, project: str, kind: Kind) -> None:
        """Refuse now when the project could not store one more ``kind`` (a job checks before it runs).

        Raises:
            ServiceError: ``resource_exhausted`` naming the quota the project is already at.

        """
        count_limit, count_field = self.config.storage_quota(project, kind.count_quota)
        bytes_limit, bytes_field = self.config.storage_quota(project, kind.bytes_quota)
        count, size = connection.execute(
            select(func.count(), func.coalesce(func.sum(kind.size), 0)).where(kind.table.c.project == project)
        ).one()
        if count_limit is not None and count >= count_limit:
            raise _refusal(project, kind, f"{count + 1} {kind.name}", count_field, count_limit)
        if bytes_limit is not None and int(size) >= bytes_limit:
            raise _refusal(project, kind, f"more than {int(size)} bytes of {kind.name}", bytes_field, bytes_limit)


def _refusal(project: str, kind: Kind, holding: str, field: str, limit: int) -> ServiceError:
    return ServiceError(
        "resource_exhausted",
        f"project {project!r} would hold {holding}, past its quota {field}={limit}; {kind.remedy}",
        "storage_quota",
        quota=field,
        limit=limit,
    )
