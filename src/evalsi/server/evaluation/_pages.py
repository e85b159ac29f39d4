"""Pages of a project's evaluators, datasets or jobs: newest first, resumed after the last one a page showed.

A page token is the creation time and id of the last resource of the page before it (opaque to callers), so
a page never repeats or skips a resource when others are created or deleted between calls.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import orjson
from sqlalchemy import Column, Connection, Select, and_, or_

from evalsi.server._errors import ServiceError
from evalsi.server.runs._store import page_size

PAGE = (100, 1000)
"""The default and the largest page size."""
T = TypeVar("T")


def _encode(created_at: float, resource_id: str) -> str:
    return base64.urlsafe_b64encode(orjson.dumps([created_at, resource_id])).decode().rstrip("=")


def _decode(token: str) -> tuple[float, str]:
    try:
        created_at, resource_id = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        if isinstance(created_at, int | float) and isinstance(resource_id, str):
            return float(created_at), resource_id
    except (binascii.Error, orjson.JSONDecodeError, ValueError, TypeError):
        pass
    raise ServiceError("invalid_argument", "pageToken: not a page token this server gave", path="pageToken")


def page(
    connection: Connection,
    query: Select[Any],
    created: Column[Any],
    key: Column[Any],
    size: int,
    token: str,
) -> tuple[Sequence[Any], str]:
    """One page of ``query``'s rows, newest first (ties by id), and the next page's token (empty at the end).

    Raises:
        ServiceError: ``invalid_argument`` for a bad ``pageSize`` or ``pageToken``.

    """
    count = page_size(size, *PAGE)
    if token:
        created_at, last = _decode(token)
        query = query.where(or_(created < created_at, and_(created == created_at, key < last)))
    rows = connection.execute(query.order_by(created.desc(), key.desc()).limit(count + 1)).mappings().all()
    more = len(rows) > count
    rows = rows[:count]
    next_token = _encode(float(rows[-1][created.name]), str(rows[-1][key.name])) if more and rows else ""
    return rows, next_token


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list: its items, newest first, and the token of the page after it (empty at the end)."""

    items: list[T]
    next_page_token: str
