"""Evaluation runs: the run, its labels, and its per-record results (so two runs can be paired).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``runs``, ``run_labels`` and ``run_records``."""
    op.create_table(
        "runs",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(40), nullable=False, unique=True),
        sa.Column("project", sa.String(200), nullable=False),
        sa.Column("name", sa.String(500), nullable=False),
        sa.Column("status", sa.String(40), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("record_count", sa.Integer, nullable=False),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("target", sa.Text, nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("details", sa.Text, nullable=False),
    )
    op.create_index("ix_runs_project_seq", "runs", ["project", "seq"])
    op.create_table(
        "run_labels",
        sa.Column("run_seq", sa.Integer, sa.ForeignKey("runs.seq", ondelete="CASCADE"), primary_key=True),
        sa.Column("key", sa.String(200), primary_key=True),
        sa.Column("value", sa.String(500), nullable=False),
    )
    op.create_index("ix_run_labels_key_value", "run_labels", ["key", "value"])
    op.create_table(
        "run_records",
        sa.Column("run_seq", sa.Integer, sa.ForeignKey("runs.seq", ondelete="CASCADE"), primary_key=True),
        sa.Column("position", sa.Integer, primary_key=True),
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("record_id", sa.Text, nullable=True),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("data", sa.Text, nullable=False),
    )


def downgrade() -> None:
    """Drop the three tables."""
    op.drop_table("run_records")
    op.drop_index("ix_run_labels_key_value", "run_labels")
    op.drop_table("run_labels")
    op.drop_index("ix_runs_project_seq", "runs")
    op.drop_table("runs")
