"""Initial schema: API tokens and the shared score cache.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``api_tokens`` and ``score_cache``."""
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("project", sa.String(200), nullable=False),
        sa.Column("permissions", sa.Text, nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("revoked_at", sa.Float, nullable=True),
    )
    op.create_table(
        "score_cache",
        sa.Column("key", sa.LargeBinary(32), primary_key=True),
        sa.Column("score", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_score_cache_created_at", "score_cache", ["created_at"])


def downgrade() -> None:
    """Drop both tables."""
    op.drop_index("ix_score_cache_created_at", "score_cache")
    op.drop_table("score_cache")
    op.drop_table("api_tokens")
