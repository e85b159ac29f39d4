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
           heartbeat_interval: 5s, orphan_after: 60s, memory_mb: 1024, max_processes: 8,
           max_output_bytes: 67108864, max_reason_bytes: 4096, max_batch_output_bytes: 16777216,
           worker_max_rows: 100000, worker_max_memory_mb: 768, worker_idle_timeout: 5m, max_idle_workers: 8}
    targets:                           # what a job's ``target: NAME`` generates replies with
      qwen-7b: {base_url: http://127.0.0.1:8000/v1, model: qwen2.5-7b-instruct, api_key_env: VLLM_KEY,
                max_tokens: 2048, max_concurrency: 16, timeout: 2m, retries: 2, max_stop: 4, max_stop_chars: 64,
                image_url_prefixes: [], max_requests_per_job: 10000,
                budget: {window: 1d, max_requests: 100000, max_tokens: 50000000}}
      qwen-dp: {base_urls: [http://10.0.0.5:8000/v1, http://10.0.0.6:8000/v1], model: qwen2.5-7b-instruct}
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from evalsi.server._durations import Duration
from evalsi.specs import TargetSpec
from evalsi.specs._model import SpecModel as _Model


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
    build_timeout: Duration = Field(default=600.0, gt=0)
    """Seconds each build step (unpack, environment, install, self-check) may take: seconds or ``10m``."""
    build_memory_mb: int = Field(default=2048, ge=128)
    """Memory of each build step."""
    find_links: Path | None = None
    """A local directory of wheels ``requirements.txt`` may install from (``pip --no-index``)."""
    index_url: str | None = None
    """A package index (PEP 503 ``simple`` URL) the server downloads ``requirements.txt``'s wheels from, for the
    build to install offline; the tenant's file may only list plain requirements. With neither this nor
    ``find_links``, an evaluator with requirements fails its build. The build sandbox has no network either way."""

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
    """Rows sent to the evaluator's warm worker at once; a batch has ``batch_timeout`` to answer, and a cancel
    kills the worker running it."""
    batch_timeout: Duration = Field(default=120.0, gt=0)
    """Seconds one batch may take in the sandbox; a slower batch fails its rows."""
    memory_mb: int = Field(default=1024, ge=64)
    """Memory of a job's scoring sandbox, all its processes together (see ``max_processes``)."""
    max_processes: int = Field(default=8, ge=1, le=1024)
    """Processes (and threads) a job's scoring sandbox may run at once. Where the server can use no cgroup for
    the sandbox, each process's address space is ``memory_mb / max_processes``: keep it small."""
    max_output_bytes: int = Field(default=64 << 20, ge=1024)
    """Most bytes of a job's output dataset (JSONL). Rows are counted and spooled to a file as each batch returns
    (the server never holds the output in memory while the job runs); a job passing it fails naming this limit
    and stores nothing."""
    max_reason_bytes: int = Field(default=4096, ge=64)
    """Most bytes (UTF-8) of one row's ``reason``; a longer one is cut there and marked as cut."""
    max_batch_output_bytes: int = Field(default=16 << 20, ge=64 << 10)
    """Most bytes one sandbox call (a batch) may print as its answer; past it the output is cut off unread and
    the batch's rows fail naming this limit."""
    worker_max_rows: int = Field(default=100_000, ge=1)
    """Rows one warm evaluator worker scores before it is stopped and a fresh one started (its interpreter, and
    whatever the evaluator's module keeps, begin anew). A worker serves one project's one evaluator version only:
    its jobs, and its reward components (``ref: evaluator/ID``) with the same memory and process limits."""
    worker_max_memory_mb: int | None = Field(default=None, ge=16)
    """A warm worker whose sandbox holds more than this after a batch (its cgroup's count: the worker, its
    children, its files in memory) is stopped, and the next batch gets a fresh one. Default: three quarters of
    its memory limit. Where no cgroup is usable, the worker's own peak resident memory is compared instead."""
    worker_idle_timeout: Duration = Field(default=300.0, gt=0)
    """An idle warm worker is stopped after this long (seconds, or ``5m``)."""
    max_idle_workers: int = Field(default=8, ge=0)
    """Idle warm workers kept at most, across projects and evaluators; past it the longest idle is stopped."""
    heartbeat_interval: Duration = Field(default=5.0, gt=0)
    """How often a server refreshes the heartbeat of the jobs and builds it owns (queued or running)."""
    orphan_after: Duration = Field(default=60.0, gt=0)
    """A job or build whose heartbeat is older than this has lost its server (killed, or its host gone): any
    server on the database then marks it failed (at start, and every ``orphan_after / 2``)."""

    @model_validator(mode="after")
    def _orphan_window(self) -> JobsConfig:
        if self.orphan_after < 2 * self.heartbeat_interval:
            raise ValueError(
                f"orphan_after ({self.orphan_after:g}s) must be at least twice heartbeat_interval "
                f"({self.heartbeat_interval:g}s): a live server's work would otherwise look abandoned"
            )
        return self


class TargetBudget(_Model):
    """What each project may use of one target in a window of time.

    Counted in the database: every replica and restart of the server shares the count.
    """

    window: Duration = Field(default=86400.0, gt=0)
    """The window's length: seconds, or ``1h``, ``1d``. Windows are aligned to the epoch (``1d`` starts at 00:00
    UTC), and a project's count starts from zero in each."""
    max_requests: int | None = Field(default=None, ge=1)
    """Rows a project's jobs may have generated in one window (a row's retries count once); none: no limit."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Completion tokens a project may use in one window. Each request reserves the job's ``max_tokens`` before
    it is sent and gives back what the endpoint's ``usage`` says it did not use; none: no limit."""


_MEDIA_PREFIX = re.compile(r"^(https?://[^/?#@\s]+/\S*|data:image/\S*)$")


class TargetConfig(_Model):
    """A named OpenAI-compatible endpoint evaluation jobs may generate replies with (``/chat/completions``).

    Only the operator names the URL and the credential; a job names the target and may set sampling fields
    within these ceilings.
    """

    base_url: str | None = None
    """The endpoint's base URL, such as ``http://127.0.0.1:8000/v1`` (vLLM, SGLang, OpenAI...)."""
    base_urls: list[str] | None = Field(default=None, min_length=1)
    """Several replicas of the model instead of ``base_url`` (vLLM data-parallel, one server per GPU): each
    request goes to the replica with the fewest requests in flight, and one that fails (refuses the connection,
    times out, answers 5xx) is set aside for a while and the request sent to another at once. Like ``base_url``,
    only the operator names them: a job names the target, never a URL."""
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
    timeout: Duration = Field(default=120.0, gt=0)
    """Seconds one request may take before it is retried: seconds, or ``2m``."""
    retries: int = Field(default=2, ge=0)
    """Retries of a request after 408, 409, 425, 429, 500, 502, 503, 504, a timeout or a dropped connection."""
    retry_backoff: float = Field(default=1.0, ge=0)
    """Seconds before the first retry, doubled each time (a ``Retry-After`` header wins)."""
    max_stop: int = Field(default=4, ge=0, le=64)
    """Most ``stop`` sequences a job may set."""
    max_stop_chars: int = Field(default=64, ge=1, le=4096)
    """Longest ``stop`` sequence a job may set, in characters."""
    image_url_prefixes: list[str] = Field(default_factory=list)
    """Images this target may be sent: a row's ``image_url`` content part is forwarded only when its URL starts
    with one of these prefixes (``https://images.example.com/``; ``data:image/`` for inline images). Empty (the
    default): a row with an image fails, and only text reaches the target. Every message is rebuilt from its
    ``role`` (system, user, assistant) and content (text, and images allowed here): no other field is sent."""
    max_requests_per_job: int | None = Field(default=None, ge=1)
    """Most rows one job may have this target generate; the rows past it fail naming this limit. None: as many
    as the job's dataset has rows."""
    budget: TargetBudget | None = None
    """Each project's budget of requests and tokens on this target per window; none: no budget."""

    @field_validator("base_url")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"must be an http:// or https:// URL, got {value!r}")
        return value

    @field_validator("base_urls")
    @classmethod
    def _replicas(cls, value: list[str] | None) -> list[str] | None:
        for index, url in enumerate(value or ()):
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"base_urls[{index}] must be an http:// or https:// URL, got {url!r}")
        if value is not None and len(set(value)) != len(value):
            raise ValueError("base_urls lists a replica twice")
        return value

    @model_validator(mode="after")
    def _one_endpoint(self) -> TargetConfig:
        if (self.base_url is None) == (self.base_urls is None):
            raise ValueError(
                "give baseUrl (one server) or baseUrls (its replicas)"
                + (", not both" if self.base_url is not None else "")
            )
        return self

    @field_validator("image_url_prefixes")
    @classmethod
    def _media_prefixes(cls, value: list[str]) -> list[str]:
        for prefix in value:
            if not _MEDIA_PREFIX.match(prefix):
                raise ValueError(
                    f"{prefix!r}: an image URL prefix is an http(s) URL up to at least the '/' after its host "
                    "(https://images.example.com/), or data:image/ for inline images"
                )
        return value

    def target_spec(self) -> TargetSpec:
        """The run engine's target for this endpoint (chat completions)."""
        return TargetSpec(
            base_url=self.base_url,
            base_urls=self.base_urls,
            model=self.model,
            api="chat",
            api_key_env=self.api_key_env,
            max_concurrency=self.max_concurrency,
            timeout=self.timeout,
            max_retries=self.retries,
            retry_backoff=self.retry_backoff,
        )
