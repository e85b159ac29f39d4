"""The tokens' table, as the queries see it; each service keeps its own tables in its package.

The migrations in ``migrations/versions`` create every table.
"""

from __future__ import annotations

from sqlalchemy import Column, Float, Integer, MetaData, String, Table, Text

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
