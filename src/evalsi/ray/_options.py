"""The settings of a reward pool, shared by its client, its coordinator actor and its scorer actors."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

NAMESPACE = "evalsi"
"""The Ray namespace of every named evalsi actor, so any job on the cluster finds a pool by its name."""


@dataclass(frozen=True)
class PoolOptions:
    """How a pool runs; see :class:`evalsi.ray.RewardPool` for what each field means."""

    name: str
    num_workers: int = 2
    num_cpus: float = 1.0
    resources: Mapping[str, float] = field(default_factory=dict)
    max_batch: int = 256
    window_ms: float = 5.0
    max_queued: int = 65_536
    max_retries: int = 3
    chunk_timeout: float | None = 600.0
    cache: str | None = "ray"
    cache_size: int = 1_048_576
    cache_ttl: float = 7 * 86_400.0
    cache_project: str | None = None
    imports: tuple[str, ...] = ()
    runtime_env: Mapping[str, Any] | None = None
    detached: bool = False
    limits: Mapping[str, Any] = field(default_factory=dict)
    """``{upstream URL: Limit}`` every actor's requests obey (see :func:`evalsi.ray.limit_upstreams`)."""

    def __post_init__(self) -> None:
        checks = (
            (self.num_workers >= 1, "num_workers must be at least 1"),
            (self.num_cpus >= 0, "num_cpus must not be negative"),
            (self.max_batch >= 1, "max_batch must be at least 1"),
            (self.window_ms >= 0, "window_ms must not be negative"),
            (self.max_queued >= 1, "max_queued must be at least 1"),
            (self.max_retries >= 0, "max_retries must not be negative"),
            (self.chunk_timeout is None or self.chunk_timeout > 0, "chunk_timeout must be positive (or None)"),
            (self.cache_size >= 0, "cache_size must not be negative"),
        )
        for ok, message in checks:
            if not ok:
                raise ValueError(f"RewardPool: {message}")
        if not (self.cache in (None, "ray") or "://" in str(self.cache)):
            raise ValueError(
                f"RewardPool: cache={self.cache!r}; use 'ray' (the coordinator's), None (each actor's own), or the "
                "evalsi server's database URL (postgresql+psycopg://...)"
            )

    @property
    def coordinator_name(self) -> str:
        """The coordinator actor's name: what another process attaches to."""
        return f"evalsi-pool-{self.name}"
