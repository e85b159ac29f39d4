"""The Run Service's tables, as the queries see them (``0002_runs`` creates them; ``0004`` and ``0009`` add columns)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Float, ForeignKey, Integer, MetaData, String, Table, Text

metadata = MetaData()

runs = Table(
    "runs",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),  # insertion order: newest first, page keys
    Column("id", String(40), nullable=False, unique=True),  # the public id
    Column("project", String(200), nullable=False),
    Column("name", String(500), nullable=False),
    Column("status", String(40), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("record_count", Integer, nullable=False),
    Column("spec", Text, nullable=False),  # JSON of the results document's ``spec``
    Column("target", Text, nullable=False),  # JSON of its ``target``
    Column("summary", Text, nullable=False),  # JSON of its ``summary``
    Column("details", Text, nullable=False),  # JSON of the rest of its header (metrics, onError, checkpoint...)
    Column("request_id", String(200), nullable=True),  # the client's id for the create; unique per project
    Column("request_hash", String(64), nullable=True),  # sha256 of that create's results and labels
    Column("size_bytes", BigInteger, nullable=False, default=0),  # its header's and records' stored JSON
)
"""Evaluation runs, each a results document without its records; a project sees only its own."""

run_labels = Table(
    "run_labels",
    metadata,
    Column("run_seq", Integer, ForeignKey("runs.seq", ondelete="CASCADE"), primary_key=True),
    Column("key", String(200), primary_key=True),
    Column("value", String(500), nullable=False),
)
"""A run's labels (``training-run``, ``training-step``...), one row each, so runs are found by label."""

run_records = Table(
    "run_records",
    metadata,
    Column("run_seq", Integer, ForeignKey("runs.seq", ondelete="CASCADE"), primary_key=True),
    Column("position", Integer, primary_key=True),  # dataset order
    Column("key", Text, nullable=False),  # the pairing key
    Column("record_id", Text, nullable=True),
    Column("status", String(20), nullable=False),  # ok | error | empty
    Column("data", Text, nullable=False),  # JSON of the record: its samples' values per metric
)
"""Per-record results of a run, for paired comparisons."""
