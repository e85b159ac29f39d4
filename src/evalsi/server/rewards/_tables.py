"""The shared score cache's table, as the queries see it (``0001`` creates it)."""

from __future__ import annotations

from sqlalchemy import Column, Float, LargeBinary, MetaData, Table

metadata = MetaData()

score_cache = Table(
    "score_cache",
    metadata,
    Column("key", LargeBinary(32), primary_key=True),  # the content key (behind a project prefix unless shared)
    Column("score", LargeBinary, nullable=False),  # orjson of {value, status, reason, details}
    Column("created_at", Float, nullable=False, index=True),
)
"""The shared cache of component scores, keyed like the in-memory cache; pruned by ``created_at``."""
