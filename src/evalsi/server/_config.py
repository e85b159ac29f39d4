"""The server's configuration: a ``kind: ServerConfig`` resource in ``server.yaml``.

Example::

    apiVersion: evals.si/v1alpha1
    kind: ServerConfig
    metadata: {name: default}
    spec:
      listen: {host: 127.0.0.1, port: 8080, grpc_port: 50051}
      database: {url: sqlite:///evalsi-server.db}     # a postgresql:// URL serves replicas
      rewards:
        max_rollouts: 16384       # per call
        max_inflight: 65536       # across calls; further calls wait
        cache_size: 1048576       # component scores in memory
        shared_cache: true        # also in the database, shared by replicas
        shared_cache_ttl: 7d      # pruned after
        project_share: 0.5        # of the workers and request bytes one project may hold
        max_request_bytes: 67108864  # largest body (64 MiB); larger: 413 / resource_exhausted, unread
        upstream_timeout: 60s     # reward-model and judge requests: a spec may only ask for less
        upstream_concurrency: 32  # requests one reward-model or judge component keeps open
        record_timeout: 10s       # one record's check (math-equiv) in a worker
        shared_cache_scope: project   # each project sees only its own cached scores
      quotas:
        team-a: {max_reward_rollouts: 4096}   # rollouts in flight at once, not per call
      judges:
        strict: {model: gpt-4o-mini, base_url: http://127.0.0.1:8000/v1, api_key_env: JUDGE_KEY}
      reward_models:
        rm-7b: {url: http://127.0.0.1:5000/get_reward}
      targets:                   # what evaluation jobs may generate replies with (``target: NAME``)
        qwen-7b: {base_url: http://127.0.0.1:8000/v1, model: qwen2.5-7b-instruct, max_tokens: 2048}
      sandbox: {min_isolation: namespaced}     # the floor; a request may raise it, never lower it
      metrics: {port: 9090}                    # /metrics without a token, on its own port

Field names are snake_case; camelCase spellings (``maxRollouts``) are accepted too, as in RewardSpecs.

The spec is a composition of sections, each owned by the package it configures and validated by its own model:
``listen`` and ``metrics`` (``transport/_config.py``), ``rewards`` with its named ``judges`` and ``reward_models``
(``rewards/_config.py``), ``runs`` (``runs/_config.py``), ``evaluators``, ``datasets``, ``jobs`` and ``targets``
(``evaluation/_config.py``), ``ui`` (``ui/_config.py``); ``database``, ``quotas`` and ``sandbox`` are the whole
server's and live here. An invalid field is reported with the file, the line and the field's path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from evalsi.server._durations import Duration
from evalsi.server.evaluation._config import DatasetsConfig, EvaluatorsConfig, JobsConfig, TargetConfig
from evalsi.server.rewards._config import RewardsConfig, check_judges, check_reward_models
from evalsi.server.runs._config import RunsConfig
from evalsi.server.transport._config import ListenConfig as ListenConfig
from evalsi.server.transport._config import MetricsConfig
from evalsi.server.ui._config import UiConfig
from evalsi.specs import API_VERSION, load_resources
from evalsi.specs._model import SpecModel as _Model
from evalsi.specs._resource import document_from_mapping, parse_resources, select_resource


class DatabaseConfig(_Model):
    """The server's database: tokens and the shared score cache."""

    url: str = "sqlite:///evalsi-server.db"
    """A SQLAlchemy URL. A relative SQLite path is resolved against the config file's directory."""


class StorageQuota(_Model):
    """What one project may store on the server, by kind: how many, and how many bytes in all.

    A store past a quota is refused ``resource_exhausted`` (HTTP 429) naming the quota and its value; null is no
    limit. Datasets count those a job writes; evaluators count their uploaded archives.
    """

    max_datasets: int | None = Field(default=1000, ge=1)
    """Datasets (uploaded, and evaluation jobs' outputs)."""
    max_dataset_bytes: int | None = Field(default=2 << 30, ge=1)
    """Bytes of JSONL over all of the project's datasets."""
    max_runs: int | None = Field(default=100_000, ge=1)
    """Stored evaluation runs."""
    max_run_bytes: int | None = Field(default=8 << 30, ge=1)
    """Bytes of stored runs (headers and per-record results)."""
    max_evaluators: int | None = Field(default=100, ge=1)
    """Uploaded evaluators."""
    max_evaluator_bytes: int | None = Field(default=1 << 30, ge=1)
    """Bytes of uploaded evaluator archives."""


class QuotaConfig(_Model):
    """One project's limits; a storage quota left unset here is ``default_quota``'s."""

    max_datasets: int | None = Field(default=None, ge=1)
    """Datasets the project may store (default ``default_quota.max_datasets``)."""
    max_dataset_bytes: int | None = Field(default=None, ge=1)
    """Bytes of the project's datasets (default ``default_quota.max_dataset_bytes``)."""
    max_runs: int | None = Field(default=None, ge=1)
    """Runs the project may store (default ``default_quota.max_runs``)."""
    max_run_bytes: int | None = Field(default=None, ge=1)
    """Bytes of the project's runs (default ``default_quota.max_run_bytes``)."""
    max_evaluators: int | None = Field(default=None, ge=1)
    """Evaluators the project may upload (default ``default_quota.max_evaluators``)."""
    max_evaluator_bytes: int | None = Field(default=None, ge=1)
    """Bytes of the project's evaluator archives (default ``default_quota.max_evaluator_bytes``)."""
    max_reward_rollouts: int | None = Field(default=None, ge=1)
    """Rollouts the project may have in flight at once, summed over its concurrent calls (not a per-call or
    per-period limit): a call that would pass it waits until earlier calls finish, without delaying other
    projects. A single call larger than the quota runs alone once nothing else of the project is in flight.
    Unset: no limit but ``rewards.max_inflight``."""
    max_evaluation_jobs: int | None = Field(default=None, ge=1)
    """Queued plus running evaluation jobs the project may have (default ``jobs.max_active_per_project``)."""


class SandboxConfig(_Model):
    """The isolation floor of code components on this server, and the ceilings of their resource limits."""

    min_isolation: Literal["namespaced", "gvisor"] = "namespaced"
    """The lowest rung code from a request runs at; a request may raise it (``sandbox.minIsolation``), never lower
    it. ``process`` is refused: it is no boundary between a tenant's code and the server."""

    max_timeout: float = Field(default=60.0, gt=0)
    """Most seconds of wall time one test case of a request may ask for (``timeout``); more is clamped."""
    max_memory_mb: int = Field(default=1024, ge=32)
    """Most memory one test case may ask for (``memory_mb``); more is clamped."""
    max_processes: int = Field(default=64, ge=1)
    """Most processes one test case may start (``max_processes``); more is clamped."""
    max_output_kb: int = Field(default=4096, ge=1)
    """Most output one test case may write (``max_output_kb``); more is clamped."""

    def caps(self) -> dict[str, float]:
        """The ceiling of each sandbox limit param a request may set."""
        return {
            "timeout": self.max_timeout,
            "memory_mb": self.max_memory_mb,
            "max_processes": self.max_processes,
            "max_output_kb": self.max_output_kb,
        }

    @field_validator("min_isolation", mode="before")
    @classmethod
    def _not_process(cls, value: Any) -> Any:
        if value == "process":
            raise ValueError(
                "'process' is not allowed on a server: it lets code see the server's files and network; "
                "use 'namespaced' (bubblewrap) or 'gvisor'"
            )
        return value


class ServerSpec(_Model):
    """The ``spec`` of a ServerConfig."""

    listen: ListenConfig = Field(default_factory=ListenConfig)
    database: DatabaseConfig = Field(default_factory=DatabaseConfig)
    rewards: RewardsConfig = Field(default_factory=RewardsConfig)
    quotas: dict[str, QuotaConfig] = Field(default_factory=dict)
    """Per-project limits, by project name."""
    default_quota: StorageQuota = Field(default_factory=StorageQuota)
    """What every project may store, unless ``quotas.<project>`` sets its own value."""
    runs: RunsConfig = Field(default_factory=RunsConfig)
    judges: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Named judges: a RewardSpec component's ``judge: NAME`` is replaced by these JudgeConfig fields. On a server a
    judge is always named: a request never gives a judge's URL, credential or extra request fields."""
    reward_models: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Named reward models: a ``reward-model`` component's ``params: {model: NAME}`` takes ``url``, ``api_key_env``,
    ``protocol`` and the other params given here (the request may add only params that stay inside the server,
    such as ``normalise``)."""
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    ui: UiConfig = Field(default_factory=UiConfig)
    evaluators: EvaluatorsConfig = Field(default_factory=EvaluatorsConfig)
    """Uploaded evaluators: storage, size limits, what a build may install."""
    datasets: DatasetsConfig = Field(default_factory=DatasetsConfig)
    jobs: JobsConfig = Field(default_factory=JobsConfig)
    targets: dict[str, TargetConfig] = Field(default_factory=dict)
    """Named OpenAI-compatible endpoints an evaluation job's ``target: NAME`` generates missing replies with. On a
    server a target is always named: a job never gives a URL or a credential."""
    imports: list[str] = Field(default_factory=list)
    """Modules imported at start, so evaluators they register can be used as ``ref`` (besides entry points)."""
    drain_timeout: Duration = 60.0
    """Seconds SIGTERM waits for in-flight calls before exiting anyway: the process exits within this bound
    (status 1 when work had to be abandoned, 0 when everything drained)."""

    @field_validator("judges")
    @classmethod
    def _valid_judges(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return check_judges(value)

    @field_validator("reward_models")
    @classmethod
    def _valid_reward_models(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return check_reward_models(value)


class ServerConfig(BaseModel):
    """A loaded server configuration: the spec, and the directory relative paths are resolved against."""

    model_config = ConfigDict(frozen=True)

    name: str = "default"
    spec: ServerSpec = Field(default_factory=ServerSpec)
    base_dir: Path = Field(default_factory=Path.cwd)

    @property
    def database_url(self) -> str:
        """The database URL with a relative SQLite path made absolute against ``base_dir``."""
        return resolve_database_url(self.spec.database.url, self.base_dir)

    @property
    def evaluators_dir(self) -> Path:
        """Where uploaded evaluators are stored: ``evaluators.storage_dir`` made absolute against ``base_dir``."""
        return (self.base_dir / self.spec.evaluators.storage_dir).resolve()

    def storage_quota(self, project: str, name: str) -> tuple[int | None, str]:
        """A project's storage quota ``name`` (see :class:`StorageQuota`) and the config field that sets it.

        Args:
            project: The project.
            name: The quota's field in :class:`StorageQuota`.

        Returns:
            The limit (None: unlimited) and the config field it comes from, for error messages.

        """
        own = self.spec.quotas.get(project)
        value = getattr(own, name) if own is not None else None
        if value is not None:
            return value, f"quotas.{project}.{name}"
        return getattr(self.spec.default_quota, name), f"default_quota.{name}"


def resolve_database_url(url: str, base_dir: Path) -> str:
    """``sqlite:///relative.db`` -> ``sqlite:////abs/dir/relative.db``; other URLs unchanged."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/") and url != prefix + ":memory:":
        return prefix + str((base_dir / url[len(prefix) :]).resolve())
    return url


def load_config(path: str | Path | None) -> ServerConfig:
    """The ServerConfig in ``path``, or the defaults when ``path`` is None.

    Args:
        path: A YAML file holding a ``ServerConfig`` resource; None for the defaults.

    Raises:
        SpecError: The file or a field is invalid; the message names the file, line and field path.

    """
    if path is None:
        return ServerConfig()
    resource = select_resource(load_resources(path), "ServerConfig", None, str(path))
    try:
        spec = ServerSpec.model_validate(resource.spec)
    except ValidationError as exc:
        raise resource.validation_error(exc) from None
    return ServerConfig(name=resource.name, spec=spec, base_dir=Path(path).resolve().parent)


def config_from_mapping(spec: dict[str, Any], base_dir: Path | None = None) -> ServerConfig:
    """A ServerConfig from a ``spec`` mapping (tests, embedding), validated like a file.

    Args:
        spec: The ``spec`` part of a ServerConfig resource.
        base_dir: What relative paths in it are resolved against; None for the current directory.

    Raises:
        SpecError: A field is invalid (the message names its path).

    """
    raw = {"apiVersion": API_VERSION, "kind": "ServerConfig", "metadata": {"name": "inline"}, "spec": spec}
    resource = parse_resources([document_from_mapping(raw)])[0]
    try:
        body = ServerSpec.model_validate(resource.spec)
    except ValidationError as exc:
        raise resource.validation_error(exc) from None
    return ServerConfig(name="inline", spec=body, base_dir=base_dir or Path.cwd())
