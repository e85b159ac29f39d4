"""The results viewer's sign-in sessions table, as the queries see it (``0007_ui_sessions`` creates it)."""

from __future__ import annotations

from sqlalchemy import Column, Float, MetaData, String, Table

metadata = MetaData()

ui_sessions = Table(
    "ui_sessions",
    metadata,
    Column("id_hash", String(64), primary_key=True),  # sha256 hex of the session's secret (the browser's cookie)
    Column("token_hash", String(64), nullable=False, index=True),  # the API token signed in with (its sha256)
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False, index=True),
)
"""Browser sign-ins of the results viewer: a session lasts until it expires, is signed out, or its token is revoked
(a session's token is looked up on every request). Only digests are stored, so the table holds no usable secret."""
