"""Rows each evaluation job has done so far, stored as it runs, so every replica's pages show its progress.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``rows_done`` to ``evaluation_jobs``, 0 for the jobs already stored.

    A finished job also has its count in its output stats.
    """
    with op.batch_alter_table("evaluation_jobs") as batch:
        batch.add_column(sa.Column("rows_done", sa.BigInteger, nullable=False, server_default="0"))


def downgrade() -> None:
    """Drop the column."""
    with op.batch_alter_table("evaluation_jobs") as batch:
        batch.drop_column("rows_done")
