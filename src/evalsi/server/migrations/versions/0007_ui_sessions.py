"""Browser sign-ins of the results viewer under ``/ui``, shared by replicas on one database.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``ui_sessions``."""
    op.create_table(
        "ui_sessions",
        sa.Column("id_hash", sa.String(64), primary_key=True),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )
    op.create_index("ix_ui_sessions_token_hash", "ui_sessions", ["token_hash"])
    op.create_index("ix_ui_sessions_expires_at", "ui_sessions", ["expires_at"])


def downgrade() -> None:
    """Drop ``ui_sessions``."""
    op.drop_index("ix_ui_sessions_expires_at", "ui_sessions")
    op.drop_index("ix_ui_sessions_token_hash", "ui_sessions")
    op.drop_table("ui_sessions")
