"""The server process owning an unfinished evaluation job or evaluator build, and its last heartbeat.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_TABLES = ("evaluation_jobs", "evaluators")


def upgrade() -> None:
    """Add nullable ``owner`` and ``heartbeat_at`` to jobs and evaluators.

    Rows written before (or by a server that does not know these columns) keep NULL: their ``updated_at`` then
    stands for the heartbeat, so unfinished work of a server long gone is still found and failed.
    """
    for table in _TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("owner", sa.String(36), nullable=True))
            batch.add_column(sa.Column("heartbeat_at", sa.Float, nullable=True))


def downgrade() -> None:
    """Drop the two columns."""
    for table in _TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("heartbeat_at")
            batch.drop_column("owner")
