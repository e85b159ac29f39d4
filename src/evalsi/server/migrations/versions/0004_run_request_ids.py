"""Client-chosen request ids on runs, so a retried CreateRun stores its run once.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``request_id`` and ``request_hash`` to ``runs``, unique per project where set."""
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("request_id", sa.String(200), nullable=True))
        batch.add_column(sa.Column("request_hash", sa.String(64), nullable=True))
    # NULLs never collide in a unique index (SQLite and PostgreSQL alike): runs stored without an id are free.
    op.create_index("ux_runs_project_request", "runs", ["project", "request_id"], unique=True)


def downgrade() -> None:
    """Drop the index and the two columns."""
    op.drop_index("ux_runs_project_request", "runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("request_hash")
        batch.drop_column("request_id")
