"""The bookkeeping of one upstream's limit, without Ray: slots leased to holders, a token bucket, and reclaiming.

A holder is one process's gate. It renews all its leases at once with a heartbeat every
``holder_timeout / 3`` seconds while it holds any; a holder not heard from within ``holder_timeout`` (its process
was killed mid-request, or its node was lost) has every lease it holds reclaimed. ``lease_timeout`` reclaims any
lease still held after that long, whoever holds it, as a last resort. :class:`evalsi.ray._limiter.LimiterActor`
serves a :class:`LeaseBook` to the processes of a cluster.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

HEARTBEATS_PER_TIMEOUT = 3
"""A holder sends this many heartbeats within ``holder_timeout``, so one late heartbeat never loses its leases."""


@dataclass(frozen=True)
class Limit:
    """A limit on one upstream: requests open at once, and requests started per second (None: unlimited)."""

    max_concurrency: int = 32
    rate: float | None = None
    burst: int = 1
    """Requests that may start at once after an idle spell, on top of the rate."""
    lease_timeout: float = 600.0
    """Seconds after which a lease is reclaimed whoever holds it (a request hung that long)."""
    holder_timeout: float = 15.0
    """Seconds without a heartbeat after which a holder's leases are reclaimed (its process is gone)."""

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise ValueError("Limit: max_concurrency must be at least 1")
        if self.rate is not None and self.rate <= 0:
            raise ValueError("Limit: rate must be positive (or None)")
        if self.burst < 1:
            raise ValueError("Limit: burst must be at least 1")
        if self.lease_timeout <= 0:
            raise ValueError("Limit: lease_timeout must be positive")
        if self.holder_timeout <= 0:
            raise ValueError("Limit: holder_timeout must be positive")

    @property
    def heartbeat(self) -> float:
        """Seconds between a holder's heartbeats."""
        return self.holder_timeout / HEARTBEATS_PER_TIMEOUT


@dataclass
class _Lease:
    holder: str | None
    since: float


@dataclass
class _Holder:
    seen: float
    """When the holder was last heard from (a grant, a release or a heartbeat)."""
    held: int = 0


class LeaseBook:
    """One upstream's leases and token bucket (the limiter actor's state; not thread-safe).

    Args:
        limit: The limit to keep.
        clock: Monotonic seconds (a test's own clock).

    """

    def __init__(self, limit: Limit, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self._clock = clock
        self.leases: dict[int, _Lease] = {}
        self.holders: dict[str, _Holder] = {}
        """The holders of the leases held now."""
        self._ids = itertools.count(1)
        self._tokens = float(limit.burst)
        self._filled = clock()
        self.granted = 0
        self.most = 0
        self.reclaimed = 0

    def configure(self, limit: Limit) -> Limit:
        """Keep ``limit`` from now on; the limit it replaces.

        Leases held past a lowered ``max_concurrency`` stay until given back (no request is revoked); the bucket
        keeps the tokens it earned at the old rate (at most the new ``burst``) and earns at the new rate from now.
        Every holder's last heartbeat counts from now, so a shorter ``holder_timeout`` reclaims nobody before
        they heard of it.

        Args:
            limit: The new limit.

        Returns:
            The limit kept until now.

        """
        old = self.limit
        self._refill()
        self.limit = limit
        self._tokens = min(self._tokens, float(limit.burst))
        now = self._clock()
        for holder in self.holders.values():
            holder.seen = now
        return old

    def grant(self, holder: str | None = None) -> int | None:
        """A lease for ``holder`` if a slot and a rate token are free now, else None.

        Args:
            holder: The gate asking (its leases are reclaimed once it stops its heartbeats); None for a lease
                reclaimed only by ``lease_timeout``.

        Returns:
            The lease id, or None.

        """
        self.reclaim()
        if len(self.leases) >= self.limit.max_concurrency or not self._take_token():
            return None
        lease = next(self._ids)
        now = self._clock()
        self.leases[lease] = _Lease(holder, now)
        if holder is not None:
            held = self.holders.setdefault(holder, _Holder(now))
            held.seen = now
            held.held += 1
        self.granted += 1
        self.most = max(self.most, len(self.leases))
        return lease

    def release(self, lease: int) -> bool:
        """Give a lease back; False when it was not held (already given back, or reclaimed)."""
        held = self.leases.pop(lease, None)
        if held is None:
            return False
        self._forget(held.holder, seen=True)
        return True

    def heartbeat(self, holder: str) -> float:
        """Renew every lease of ``holder``; seconds until its next heartbeat is due."""
        held = self.holders.get(holder)
        if held is not None:
            held.seen = self._clock()
        return self.limit.heartbeat

    def reclaim(self) -> int:
        """Reclaim the leases of holders gone silent and of leases past ``lease_timeout``; how many."""
        now = self._clock()
        gone = {name for name, holder in self.holders.items() if holder.seen <= now - self.limit.holder_timeout}
        oldest = now - self.limit.lease_timeout
        stale = [i for i, lease in self.leases.items() if lease.holder in gone or lease.since <= oldest]
        for i in stale:
            self._forget(self.leases.pop(i).holder)
        self.reclaimed += len(stale)
        return len(stale)

    def wait(self) -> float:
        """Seconds until a grant refused now could succeed without a release (a reclaim or a token); may be inf."""
        now = self._clock()
        moments = [holder.seen + self.limit.holder_timeout for holder in self.holders.values()]
        moments += [lease.since + self.limit.lease_timeout for lease in self.leases.values()]
        if len(self.leases) < self.limit.max_concurrency and self.limit.rate is not None:
            self._refill()
            moments.append(now + max(0.0, 1 - self._tokens) / self.limit.rate)
        return max(0.0, min(moments) - now) if moments else math.inf

    def stats(self) -> dict[str, Any]:
        """Leases held now, the most held at once, granted and reclaimed, holders, and the limit kept."""
        self.reclaim()
        return {
            "held": len(self.leases),
            "most": self.most,
            "granted": self.granted,
            "reclaimed": self.reclaimed,
            "holders": sorted(self.holders),
            "max_concurrency": self.limit.max_concurrency,
            "rate": self.limit.rate,
        }

    def _forget(self, name: str | None, seen: bool = False) -> None:
        """One lease fewer for holder ``name``: untracked once it holds none (it stops its heartbeats then)."""
        if name is None or (holder := self.holders.get(name)) is None:
            return
        holder.held -= 1
        if holder.held <= 0:
            del self.holders[name]
        elif seen:
            holder.seen = self._clock()

    def _refill(self) -> None:
        now = self._clock()
        if self.limit.rate is not None:
            self._tokens = min(float(self.limit.burst), self._tokens + (now - self._filled) * self.limit.rate)
        self._filled = now

    def _take_token(self) -> bool:
        if self.limit.rate is None:
            return True
        self._refill()
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False
