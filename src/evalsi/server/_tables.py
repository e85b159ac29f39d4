"""The server's tables, as the queries see them (the migrations in ``migrations/versions`` create them)."""

from __future__ import annotations

from sqlalchemy import Column, Float, Integer, LargeBinary, MetaData, String, Table, Text

metadata = MetaData()

api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(200), nullable=False),
    Column("project", String(200), nullable=False),
    Column("permissions", Text, nullable=False),  # space-separated permission names
    Column("token_hash", String(64), nullable=False, unique=True),  # sha256 hex of the secret
    Column("created_at", Float, nullable=False),
    Column("revoked_at", Float, nullable=True),
)
"""API tokens: only the sha256 of each secret is stored, so the table leaks no usable credential."""

score_cache = Table(
    "score_cache",
    metadata,
    Column("key", LargeBinary(32), primary_key=True),  # the content key (behind a project prefix unless shared)
    Column("score", LargeBinary, nullable=False),  # orjson of {value, status, reason, details}
    Column("created_at", Float, nullable=False, index=True),
)
"""The shared cache of component scores, keyed like the in-memory cache; pruned by ``created_at``."""
