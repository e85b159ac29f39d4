"""The target an evaluation job generates replies with, and its sampling fields.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``target`` (empty: the job generates nothing) and ``completion_params`` (JSON) to ``evaluation_jobs``."""
    with op.batch_alter_table("evaluation_jobs") as batch:
        batch.add_column(sa.Column("target", sa.String(200), nullable=False, server_default=""))
        batch.add_column(sa.Column("completion_params", sa.Text, nullable=False, server_default="{}"))


def downgrade() -> None:
    """Drop the two columns."""
    with op.batch_alter_table("evaluation_jobs") as batch:
        batch.drop_column("completion_params")
        batch.drop_column("target")
