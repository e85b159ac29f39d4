"""Each project's use of each generation target, per budget window.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``target_usage``: requests and tokens of a project on a target in the window starting then."""
    op.create_table(
        "target_usage",
        sa.Column("project", sa.String(200), primary_key=True),
        sa.Column("target", sa.String(200), primary_key=True),
        sa.Column("window_start", sa.Float, primary_key=True),
        sa.Column("requests", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("tokens", sa.BigInteger, nullable=False, server_default="0"),
    )


def downgrade() -> None:
    """Drop the table."""
    op.drop_table("target_usage")
