"""The ``rewards:`` section of the server config: the Reward Service's limits, caches and probes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

from evalsi.evaluators.judge import JudgeConfig
from evalsi.evaluators.rl.reward_model import RewardModelParams
from evalsi.server._durations import Duration
from evalsi.specs._model import SpecModel as _Model

ONE_WEEK = 7 * 24 * 3600.0


class RewardsConfig(_Model):
    """The Reward Service's limits and caches."""

    max_rollouts: int = Field(default=16384, ge=1)
    """Most rollouts in one call; a larger call is refused with an error naming this limit."""
    max_inflight: int = Field(default=65536, ge=1)
    """Most rollouts being scored across calls; further calls wait (back-pressure, not rejection)."""
    max_inflight_bytes: int = Field(default=1 << 30, ge=1024)
    """Most bytes of JSON request bodies held at once; a call past it waits before its body is read, so the
    server's memory stays bounded however many trainers queue up (TCP pushes back on them meanwhile)."""
    cache_size: int = Field(default=1_048_576, ge=0)
    """Component scores kept in memory (LRU)."""
    shared_cache: bool = False
    """Also keep component scores in the database, so replicas on one database share them."""
    shared_cache_ttl: Duration = ONE_WEEK
    """Age after which shared scores are ignored and pruned: seconds, or ``7d``, ``12h``, ``30m``."""
    shared_cache_scope: Literal["project", "server"] = "project"
    """Who shares cached scores (both tiers): ``project`` keys them per project, so a tenant cannot learn what
    another one scored; ``server`` shares them across projects (only when every tenant trusts the others)."""
    cpu_workers: int = Field(default=8, ge=1)
    """Threads scoring calls on the cpu pool (evaluators with their own process pools fan out further)."""
    sandbox_workers: int = Field(default=4, ge=1)
    """Threads running code components (they wait on sandboxed processes); code never runs on the cpu pool."""
    project_share: float = Field(default=0.5, gt=0, le=1)
    """The fraction of each worker pool (cpu, component, sandbox) and of ``max_inflight_bytes`` one project may
    hold at once (at least one worker). Its further work waits in its own queue, so a project whose calls hang
    cannot occupy every worker. 1 lets a single project use everything (one tenant)."""
    max_request_bytes: int = Field(default=64 << 20, ge=1024)
    """Largest request body (HTTP JSON, Connect) or gRPC message; a larger one is refused before it is read
    (413 on HTTP JSON, ``resource_exhausted`` on Connect and gRPC)."""
    max_spec_bytes: int = Field(default=1 << 20, ge=1024)
    """Largest RewardSpec in a call (its canonical JSON, rollouts apart); a larger one is refused
    ``invalid_argument`` naming this limit. A real spec is a few KiB."""
    spec_cache_bytes: int = Field(default=64 << 20, ge=0)
    """Memory kept for bound specs (so a trainer's repeated spec is not bound again), estimated from each spec's
    size and components; one project holds at most ``project_share`` of it, least recently used dropped first."""
    body_timeout: Duration = Field(default=30.0, gt=0)
    """Seconds a client has to send a whole request body once its token is checked; a slower one gets 408 and
    gives back the room it held in ``max_inflight_bytes``: seconds, or ``30s``, ``2m``."""
    upstream_timeout: Duration = Field(default=60.0, gt=0)
    """Most seconds a reward-model or judge request may wait for its upstream. A spec's larger ``timeout`` is
    clamped to it (a spec may only ask for less)."""
    upstream_retries: int = Field(default=2, ge=0)
    """Most retries of a reward-model or judge request. A spec's larger ``retries`` is clamped to it."""
    upstream_concurrency: int = Field(default=32, ge=1)
    """Most requests one reward-model or judge component may have open at once; a larger ``max_concurrency``
    is clamped to it."""
    record_timeout: Duration = Field(default=10.0, gt=0)
    """Most seconds one record's check may take in a worker for components that call no upstream and run no
    code (math-equiv's ``timeout``); a spec's larger ``timeout`` is clamped to it."""
    probe_on_first_use: Literal["off", "warn", "refuse"] = "off"
    """Probe a spec the first time a project uses it, with adversarial rollouts built from that call's data
    (``evalsi rewards probe``): ``warn`` logs and counts what the probes find while the call is scored as usual,
    ``refuse`` refuses the spec's calls when a probe earns reward or the data's right answers do not, ``off``
    (the default) probes nothing. Off by default because probing is extra work the operator pays for: probe
    rollouts reach the judges and reward models behind the operator's credentials and run in its sandboxes."""
    probe_max_rollouts: int = Field(default=64, ge=1, le=4096)
    """Most probe rollouts scored for one spec (once per project); they count against the project's limits."""
    probe_timeout: Duration = Field(default=120.0, gt=0)
    """Under ``refuse``: how long the first calls wait for the probes' verdict before they are answered
    ``unavailable`` (retry while the probes finish): seconds, or ``2m``."""

    @field_validator("probe_on_first_use", mode="before")
    @classmethod
    def _unquoted_off(cls, value: Any) -> Any:
        return "off" if value is False else value  # YAML reads an unquoted ``off`` as false


def check_judges(entries: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The ``judges`` section: each named judge's JudgeConfig fields, validated when the server starts.

    Raises:
        ValueError: Naming the judge and its field, e.g. ``strict.model: Field required``.

    """
    return _check_entries(entries, JudgeConfig)


def check_reward_models(entries: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The ``reward_models`` section: each named reward model's params, validated when the server starts.

    Raises:
        ValueError: Naming the reward model and its field.

    """
    return _check_entries(entries, RewardModelParams)


def _check_entries(entries: dict[str, dict[str, Any]], model: type[BaseModel]) -> dict[str, dict[str, Any]]:
    """Validate each named entry now, so a typo is reported when the server starts, not on a tenant's call."""
    for name, entry in entries.items():
        if not isinstance(entry, Mapping):
            raise ValueError(f"{name}: must be a mapping of {model.__name__} fields")
        try:
            model.model_validate(entry)
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            where = ".".join(str(part) for part in error["loc"])
            raise ValueError(f"{name}{'.' + where if where else ''}: {error['msg']}") from None
    return entries
