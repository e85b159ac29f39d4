"""The stored size of each run, so a project's run bytes are summed without reading its records.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``size_bytes`` to ``runs``: its header's JSON plus its records', counted for the runs already stored."""
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("size_bytes", sa.BigInteger, nullable=False, server_default="0"))
    op.execute(
        "UPDATE runs SET size_bytes = LENGTH(spec) + LENGTH(target) + LENGTH(summary) + LENGTH(details)"
        " + COALESCE((SELECT SUM(LENGTH(data)) FROM run_records WHERE run_records.run_seq = runs.seq), 0)"
    )


def downgrade() -> None:
    """Drop the column."""
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("size_bytes")
