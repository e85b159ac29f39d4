"""The operator's settings for uploaded evaluators, datasets and evaluation jobs (``ServerConfig`` sections).

Example::

    evaluators:
      storage_dir: evalsi-evaluators   # archives and built environments (relative to the config file)
      max_upload_bytes: 16777216       # a larger archive is refused
      max_unpacked_bytes: 67108864     # an archive unpacking to more is refused
      max_files: 5000
      build_timeout: 10m
      find_links: /srv/wheelhouse      # requirements.txt may install wheels from this directory
      index_url: https://pypi.internal/simple   # and wheels the server downloads from this index (no other)
    datasets: {max_bytes: 16777216, max_rows: 100000}
    jobs: {workers: 2, max_active_per_project: 4, batch_rows: 256, batch_timeout: 2m}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from evalsi.specs import SpecModel as _Model


def _seconds(value: Any) -> float:
    from evalsi.server._config import parse_duration  # the one duration syntax of the server config

    return parse_duration(value)


class EvaluatorsConfig(_Model):
    """Where uploaded evaluators live, how large they may be, and what their build may install."""

    storage_dir: Path = Path("evalsi-evaluators")
    """Archives and built environments, one directory per project and evaluator (relative: to the config file)."""
    max_upload_bytes: int = Field(default=16 << 20, ge=1024)
    """Largest archive accepted (compressed)."""
    max_unpacked_bytes: int = Field(default=64 << 20, ge=1024)
    """Largest total size of the archive's files once unpacked."""
    max_files: int = Field(default=5000, ge=1)
    """Most entries (files and directories) in one archive."""
    build_timeout: float = Field(default=600.0, gt=0)
    """Seconds each build step (unpack, environment, install, self-check) may take: seconds or ``10m``."""
    build_memory_mb: int = Field(default=2048, ge=128)
    """Memory of each build step."""
    find_links: Path | None = None
    """A local directory of wheels ``requirements.txt`` may install from (``pip --no-index``)."""
    index_url: str | None = None
    """A package index (PEP 503 ``simple`` URL) the server downloads ``requirements.txt``'s wheels from, for the
    build to install offline; the tenant's file may only list plain requirements. With neither this nor
    ``find_links``, an evaluator with requirements fails its build. The build sandbox has no network either way."""

    @field_validator("build_timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return _seconds(value)


class DatasetsConfig(_Model):
    """Limits of datasets stored on the server."""

    max_bytes: int = Field(default=16 << 20, ge=1024)
    """Largest dataset (JSONL bytes)."""
    max_rows: int = Field(default=100_000, ge=1)
    """Most rows in one dataset."""


class JobsConfig(_Model):
    """How evaluation jobs run: background workers, per-project limits, sandbox batches."""

    workers: int = Field(default=2, ge=1)
    """Jobs running at once on this server (each in its own sandbox); further jobs wait, first in, first out."""
    max_active_per_project: int = Field(default=4, ge=1)
    """Queued plus running jobs a project may have; ``quotas.<project>.max_evaluation_jobs`` overrides it."""
    batch_rows: int = Field(default=256, ge=1)
    """Rows scored per sandbox call: each call starts the evaluator's interpreter and imports its module again
    (tens of ms), so larger batches are faster; a cancel kills the call running."""
    batch_timeout: float = Field(default=120.0, gt=0)
    """Seconds one batch may take in the sandbox; a slower batch fails its rows."""
    memory_mb: int = Field(default=1024, ge=64)
    """Memory of a scoring sandbox call."""

    @field_validator("batch_timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return _seconds(value)
