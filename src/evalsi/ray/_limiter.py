"""One concurrency and rate limit per upstream, shared by every process of a cluster: a named Ray actor each.

``limit_upstreams({"http://rm.internal:5000": Limit(max_concurrency=16, rate=50)})`` installs a gate (see
:mod:`evalsi._util.upstream`) in this process: each HTTP attempt of a judge, reward model or run target to a
listed upstream first takes a lease from that upstream's limiter actor (``evalsi-limit-<upstream>``), and gives
it back when the answer's headers arrive. Every scorer actor of a pool installs the pool's ``limits``, so a whole
cluster never has more than ``max_concurrency`` requests open to the operator's model server, nor starts more
than ``rate`` a second. Upstreams not listed pass freely.

A lease not given back within ``lease_timeout`` (its process was killed mid-request) is reclaimed, so a dead
actor never leaves the limit short for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evalsi._util.upstream import set_gate
from evalsi.ray._options import NAMESPACE


@dataclass(frozen=True)
class Limit:
    """A limit on one upstream: requests open at once, and requests started per second (None: unlimited)."""

    max_concurrency: int = 32
    rate: float | None = None
    burst: int = 1
    """Requests that may start at once after an idle spell, on top of the rate."""
    lease_timeout: float = 600.0

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise ValueError("Limit: max_concurrency must be at least 1")
        if self.rate is not None and self.rate <= 0:
            raise ValueError("Limit: rate must be positive (or None)")
        if self.burst < 1:
            raise ValueError("Limit: burst must be at least 1")


class LimiterActor:
    """The limit of one upstream (run as an async Ray actor): leases, a token bucket, and figures."""

    def __init__(self, limit: Limit) -> None:
        self.limit = limit
        self.leases: dict[int, float] = {}
        self._ids = itertools.count(1)
        self._tokens = float(limit.burst)
        self._filled = time.monotonic()
        self._freed: asyncio.Event | None = None
        self.granted = 0
        self.most = 0
        self.reclaimed = 0

    async def acquire(self) -> int:
        """Wait for a free slot and a rate token; a lease id."""
        if self._freed is None:
            self._freed = asyncio.Event()
        while True:
            self._reclaim()
            if len(self.leases) < self.limit.max_concurrency:
                wait = self._take_token()
                if wait <= 0:
                    break
                await asyncio.sleep(wait)
                continue
            self._freed.clear()
            with contextlib.suppress(TimeoutError):  # look again after a while: a lease may have expired
                await asyncio.wait_for(self._freed.wait(), timeout=1.0)
        lease = next(self._ids)
        self.leases[lease] = time.monotonic()
        self.granted += 1
        self.most = max(self.most, len(self.leases))
        return lease

    def release(self, lease: int) -> None:
        """Give a lease back."""
        if self.leases.pop(lease, None) is not None and self._freed is not None:
            self._freed.set()

    def stats(self) -> dict[str, Any]:
        """Leases held now, the most held at once, granted and reclaimed."""
        return {"held": len(self.leases), "most": self.most, "granted": self.granted, "reclaimed": self.reclaimed}

    def _take_token(self) -> float:
        rate = self.limit.rate
        if rate is None:
            return 0.0
        now = time.monotonic()
        self._tokens = min(float(self.limit.burst), self._tokens + (now - self._filled) * rate)
        self._filled = now
        if self._tokens >= 1:
            self._tokens -= 1
            return 0.0
        return (1 - self._tokens) / rate

    def _reclaim(self) -> None:
        oldest = time.monotonic() - self.limit.lease_timeout
        for lease in [lease for lease, since in self.leases.items() if since < oldest]:
            del self.leases[lease]
            self.reclaimed += 1


def limiter_name(upstream: str) -> str:
    """The limiter actor's name for an upstream (``scheme://host:port``)."""
    return "evalsi-limit-" + hashlib.sha256(upstream.encode()).hexdigest()[:16]


def limiter(upstream: str, limit: Limit) -> Any:
    """The upstream's limiter actor, created with ``limit`` unless it already runs (then its own limit holds)."""
    import ray

    return (
        ray.remote(LimiterActor)
        .options(
            name=limiter_name(upstream),
            namespace=NAMESPACE,
            get_if_exists=True,
            lifetime="detached",
            max_restarts=-1,
            num_cpus=0,
            max_concurrency=10_000,
        )
        .remote(limit)
    )


class RayGate:
    """The upstream gate of a process: leases from the limiter actors of the listed upstreams."""

    def __init__(self, limits: Mapping[str, Limit]) -> None:
        import ray

        self._ray = ray
        self.handles = {_normal(upstream): limiter(_normal(upstream), limit) for upstream, limit in limits.items()}

    def acquire(self, upstream: str) -> Any:
        """A lease of the upstream's limiter (waits in this thread), or None when it is not listed."""
        handle = self.handles.get(upstream)
        return None if handle is None else self._ray.get(handle.acquire.remote())

    async def acquire_async(self, upstream: str) -> Any:
        """A lease, awaited without holding the event loop; cancelled, the lease is no longer waited for."""
        handle = self.handles.get(upstream)
        if handle is None:
            return None
        ref = handle.acquire.remote()
        try:
            return await ref
        except asyncio.CancelledError:  # else the limiter grants it later to nobody, until its lease_timeout
            self._ray.cancel(ref)
            raise

    def release(self, upstream: str, token: Any) -> None:
        """Give the lease back without waiting for the limiter."""
        handle = self.handles.get(upstream)
        if handle is not None and token is not None:
            handle.release.remote(token)


def limit_upstreams(limits: Mapping[str, Limit | Mapping[str, Any]]) -> RayGate:
    """Limit this process's requests to each listed upstream through its cluster-wide limiter actor.

    Args:
        limits: ``{upstream URL: Limit}`` (or the Limit's fields as a mapping); only the URL's scheme, host and
            port count: ``http://rm.internal:5000/get_reward`` limits every request to ``rm.internal:5000``.

    Returns:
        The installed gate (``evalsi._util.upstream.set_gate(None)`` removes it).

    """
    chosen = {url: limit if isinstance(limit, Limit) else Limit(**limit) for url, limit in limits.items()}
    gate = RayGate(chosen)
    set_gate(gate)
    return gate


def _normal(url: str) -> str:
    import httpx

    from evalsi._util.upstream import upstream_of

    return upstream_of(httpx.URL(url))
