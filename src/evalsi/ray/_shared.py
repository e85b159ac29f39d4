"""The process's pools for the trainer adapters: one client per (spec, pool name), created or attached once.

verl's reward workers and OpenRLHF's reward calls load the adapter file in many processes; every process gets
a client of the same named pool (the first to ask creates it on the cluster, the others attach).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from evalsi.ray._pool import RewardPool
from evalsi.rewards._scorer import require_totals

_pools: dict[tuple[str, str], RewardPool] = {}
_lock = threading.Lock()

OPTIONS = ("num_workers", "num_cpus", "resources", "max_batch", "window_ms", "max_queued", "chunk_timeout", "imports")
"""Pool settings an adapter passes through from its configuration."""


def shared_pool(spec: str, name: str, trainer: str, options: Mapping[str, Any]) -> RewardPool:
    """The process's client of the pool ``name`` scoring ``spec``; the pool is created on first use.

    Raises:
        SpecError: The spec is invalid or can leave a rollout without a total (``trainer`` cannot skip one).

    """
    key = (spec, name)
    pool = _pools.get(key)
    if pool is None:
        with _lock:
            pool = _pools.get(key)
            if pool is None:
                chosen = {k: _plain(v) for k, v in options.items() if k in OPTIONS and v is not None}
                pool = RewardPool(spec, name=name, **chosen)
                require_totals(pool, trainer)
                _pools[key] = pool
    return pool


def _plain(value: Any) -> Any:
    """OmegaConf containers (verl's config) as plain dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or type(value).__name__ == "ListConfig":
        return [_plain(v) for v in value]
    return value
