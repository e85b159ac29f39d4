"""Keyset pagination of the evaluation stores' lists: newest first, ties by id, the next page's token opaque."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Any

import orjson
from sqlalchemy import Column, Connection, Select, and_, or_

from evalsi.server._errors import ServiceError
from evalsi.server.runs._store import page_size

PAGE = (100, 1000)
"""The default and the largest page size."""


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
