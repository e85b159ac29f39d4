"""The operator's settings for uploaded evaluators, datasets and evaluation jobs (``ServerConfig`` sections).

Example::

    evaluators:
      storage_dir: evalsi-evaluators   # archives and built environments (relative to the config file)
      max_upload_bytes: 16777216       # a larger archive is refused
      max_unpacked_bytes: 67108864     # an archive unpacking to more is refused
      max_files: 5000
      max_build_bytes: 1073741824      # what one build may write (in memory while it runs), downloads included
      max_evaluator_bytes: 1073741824  # what one evaluator keeps in storage_dir (archive, source, environment)
      build_timeout: 10m
      find_links: /srv/wheelhouse      # requirements.txt may install wheels from this directory
      index_url: https://pypi.internal/simple   # and wheels the server downloads from this index (no other)
    datasets: {max_bytes: 16777216, max_rows: 100000}
    jobs: {workers: 2, max_active_per_project: 4, batch_rows: 256, batch_timeout: 2m,
           heartbeat_interval: 5s, orphan_after: 60s}
    targets:                           # what a job's ``target: NAME`` generates replies with
      qwen-7b: {base_url: http://127.0.0.1:8000/v1, model: qwen2.5-7b-instruct, api_key_env: VLLM_KEY,
                max_tokens: 2048, max_concurrency: 16, timeout: 2m, retries: 2}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from evalsi.specs import SpecModel as _Model
from evalsi.specs import TargetSpec


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
    max_build_bytes: int = Field(default=1 << 30, ge=8 << 20)
    """Most bytes one build may write: the wheels downloaded from ``index_url`` (on disk, checked as they arrive)
    and the evaluator's unpacked source and environment, built in a memory filesystem (tmpfs) of what is left,
    where the kernel refuses a write past it. Held in memory while the build runs: ``jobs.workers`` builds at
    once may hold this much each."""
    max_evaluator_bytes: int = Field(default=1 << 30, ge=8 << 20)
    """Most bytes one evaluator keeps in ``storage_dir`` (its archive, source and environment), checked file by
    file as the build stores them: a larger build fails and keeps nothing but its archive."""
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

    @model_validator(mode="after")
    def _room_for_the_archive(self) -> EvaluatorsConfig:
        if self.max_evaluator_bytes <= self.max_upload_bytes:
            raise ValueError(
                f"max_evaluator_bytes ({self.max_evaluator_bytes}) must be larger than max_upload_bytes "
                f"({self.max_upload_bytes}): an evaluator keeps its archive besides its source and environment"
            )
        return self


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
    heartbeat_interval: float = Field(default=5.0, gt=0)
    """How often a server refreshes the heartbeat of the jobs and builds it owns (queued or running)."""
    orphan_after: float = Field(default=60.0, gt=0)
    """A job or build whose heartbeat is older than this has lost its server (killed, or its host gone): any
    server on the database then marks it failed (at start, and every ``orphan_after / 2``)."""

    @field_validator("batch_timeout", "heartbeat_interval", "orphan_after", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return _seconds(value)

    @model_validator(mode="after")
    def _orphan_window(self) -> JobsConfig:
        if self.orphan_after < 2 * self.heartbeat_interval:
            raise ValueError(
                f"orphan_after ({self.orphan_after:g}s) must be at least twice heartbeat_interval "
                f"({self.heartbeat_interval:g}s): a live server's work would otherwise look abandoned"
            )
        return self


class TargetConfig(_Model):
    """A named OpenAI-compatible endpoint evaluation jobs may generate replies with (``/chat/completions``).

    Only the operator names the URL and the credential; a job names the target and may set sampling fields
    within these ceilings.
    """

    base_url: str
    """The endpoint's base URL, such as ``http://127.0.0.1:8000/v1`` (vLLM, SGLang, OpenAI...)."""
    model: str
    """The ``model`` sent with each request."""
    api_key_env: str | None = None
    """The environment variable of the server process holding the API key (never the key); none sends no key."""
    max_tokens: int = Field(default=4096, ge=1)
    """The most tokens a reply may have: a job's larger ``max_tokens`` is clamped to it, and a job that sets
    none is sent this."""
    max_concurrency: int = Field(default=16, ge=1)
    """Requests open at once to this target, across all jobs; one project holds at most ``rewards.project_share``
    of them."""
    timeout: float = Field(default=120.0, gt=0)
    """Seconds one request may take before it is retried: seconds, or ``2m``."""
    retries: int = Field(default=2, ge=0)
    """Retries of a request after 408, 409, 425, 429, 500, 502, 503, 504, a timeout or a dropped connection."""
    retry_backoff: float = Field(default=1.0, ge=0)
    """Seconds before the first retry, doubled each time (a ``Retry-After`` header wins)."""

    @field_validator("timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return _seconds(value)

    def target_spec(self) -> TargetSpec:
        """The run engine's target for this endpoint (chat completions)."""
        return TargetSpec(
            base_url=self.base_url,
            model=self.model,
            api="chat",
            api_key_env=self.api_key_env,
            max_concurrency=self.max_concurrency,
            timeout=self.timeout,
            max_retries=self.retries,
            retry_backoff=self.retry_backoff,
        )
