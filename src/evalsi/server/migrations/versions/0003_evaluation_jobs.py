"""Uploaded evaluators, datasets and evaluation jobs.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``evaluators``, ``datasets`` and ``evaluation_jobs``, each keyed by project and id."""
    op.create_table(
        "evaluators",
        sa.Column("project", sa.String(200), primary_key=True),
        sa.Column("evaluator_id", sa.String(63), primary_key=True),
        sa.Column("entry", sa.Text, nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("mode", sa.String(20), nullable=False),
        sa.Column("build_log", sa.Text, nullable=False),
        sa.Column("archive_bytes", sa.Integer, nullable=False),
        sa.Column("archive_sha256", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_table(
        "datasets",
        sa.Column("project", sa.String(200), primary_key=True),
        sa.Column("dataset_id", sa.String(63), primary_key=True),
        sa.Column("row_count", sa.Integer, nullable=False),
        sa.Column("size_bytes", sa.Integer, nullable=False),
        sa.Column("source_job", sa.String(63), nullable=False),
        sa.Column("content", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "evaluation_jobs",
        sa.Column("project", sa.String(200), primary_key=True),
        sa.Column("job_id", sa.String(63), primary_key=True),
        sa.Column("evaluator_id", sa.String(63), nullable=False),
        sa.Column("input_dataset", sa.String(63), nullable=False),
        sa.Column("output_dataset", sa.String(63), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("metrics", sa.Text, nullable=False),
        sa.Column("output_stats", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_index("ix_evaluation_jobs_state", "evaluation_jobs", ["state"])


def downgrade() -> None:
    """Drop the three tables."""
    op.drop_index("ix_evaluation_jobs_state", "evaluation_jobs")
    op.drop_table("evaluation_jobs")
    op.drop_table("datasets")
    op.drop_table("evaluators")
