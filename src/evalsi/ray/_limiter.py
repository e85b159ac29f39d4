"""One concurrency and rate limit per upstream, shared by every process of a cluster: a named Ray actor each.

``limit_upstreams({"http://rm.internal:5000": Limit(max_concurrency=16, rate=50)})`` installs a gate (see
:mod:`evalsi._util.upstream`) in this process: each HTTP attempt of a judge, reward model or run target to a
listed upstream first takes a lease from that upstream's limiter actor (``evalsi-limit-<upstream>``), and gives
it back when the answer's headers arrive. Every scorer actor of a pool installs the pool's ``limits``, so a whole
cluster never has more than ``max_concurrency`` requests open to the operator's model server, nor starts more
than ``rate`` a second. Upstreams not listed pass freely.

Each process's gate is a holder of its own: while it holds leases it renews them all with one heartbeat to each
limiter every ``holder_timeout / 3`` seconds, and a limiter reclaims every lease of a holder not heard from within
``holder_timeout`` (15 s by default), so a process killed mid-request (its node lost) gives its slots back within
seconds. A lease still held after ``lease_timeout`` (600 s) is reclaimed whoever holds it, as a last resort; a
lease given back after it was reclaimed is ignored.

A limiter keeps the limit it was last configured with: every process that installs a limit configures the
upstream's limiter with it, and one that differs from the limiter's own replaces it, with a warning naming the
upstream and both limits. Lowering ``max_concurrency`` lets the leases held past it drain (no request is revoked);
the rate bucket earns at the new rate from then on. Two live pools that disagree share the limit configured last
(each configure warns); a scorer actor restarted by Ray configures its pool's limit again. A limiter that Ray
restarts (its node was lost) starts again from the limit it was created with, and with no leases; the first
heartbeat of each holder configures it with that holder's limit again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import os
import socket
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from evalsi._util.upstream import set_gate
from evalsi.ray._heartbeat import Heartbeat
from evalsi.ray._leases import LeaseBook, Limit
from evalsi.ray._options import NAMESPACE

__all__ = ["Limit", "LimiterActor", "RayGate", "configure_limits", "limit_upstreams", "limiter", "limiter_name"]

log = logging.getLogger("evalsi.ray")


class LimiterActor:
    """The limit of one upstream (run as an async Ray actor): a :class:`~evalsi.ray._leases.LeaseBook` served.

    Args:
        limit: The limit it starts with.

    """

    def __init__(self, limit: Limit) -> None:
        self.book = LeaseBook(limit)
        self._changed: asyncio.Event | None = None
        self.started = uuid.uuid4().hex
        """This run of the limiter: a limiter restarted by Ray has a new one (and its creation limit again)."""

    async def acquire(self, holder: str | None = None) -> int:
        """Wait for a free slot and a rate token; a lease id.

        Args:
            holder: The gate asking, whose heartbeats keep the lease (None: kept until ``lease_timeout``).

        Returns:
            The lease id.

        """
        while True:
            reclaimed = self.book.reclaimed
            lease = self.book.grant(holder)
            if self.book.reclaimed != reclaimed:
                self._notify()  # slots came back: the other waiters look again
            if lease is not None:
                return lease
            if self._changed is None:
                self._changed = asyncio.Event()
            wait = self.book.wait()  # until a token is earned, or a lease or holder times out
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=None if math.isinf(wait) else wait)

    def release(self, lease: int) -> None:
        """Give a lease back (one reclaimed meanwhile is ignored)."""
        if self.book.release(lease):
            self._notify()

    def heartbeat(self, holder: str) -> tuple[float, str]:
        """Renew every lease ``holder`` holds; the seconds until its next heartbeat is due, and :attr:`started`."""
        return self.book.heartbeat(holder), self.started

    def configure(self, limit: Limit) -> tuple[Limit, str]:
        """Keep ``limit`` from now on (see :meth:`LeaseBook.configure`); the limit it replaces, and :attr:`started`."""
        old = self.book.configure(limit)
        self._notify()
        return old, self.started

    def stats(self) -> dict[str, Any]:
        """Leases held now, the most held at once, granted and reclaimed, holders, the limit kept, this run."""
        return {**self.book.stats(), "started": self.started, "pid": os.getpid()}

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None


def limiter_name(upstream: str) -> str:
    """The limiter actor's name for an upstream (``scheme://host:port``)."""
    return "evalsi-limit-" + hashlib.sha256(upstream.encode()).hexdigest()[:16]


def limiter(upstream: str, limit: Limit) -> Any:
    """The upstream's limiter actor (started if none runs), configured with ``limit``.

    Args:
        upstream: ``scheme://host:port``.
        limit: The limit to keep; one that differs from the running limiter's replaces it, with a warning.

    Returns:
        The limiter's actor handle.

    """
    return _configure(upstream, limit)[0]


def _configure(upstream: str, limit: Limit) -> tuple[Any, str]:
    """:func:`limiter`, and the limiter's :attr:`LimiterActor.started`."""
    import ray

    handle = (
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
    old, started = ray.get(handle.configure.remote(limit))
    _warn_if_changed(upstream, old, limit)
    return handle, started


def _warn_if_changed(upstream: str, old: Limit, new: Limit) -> None:
    if old != new:
        log.warning(
            "the limit of %s changes from %s to %s (the limit configured last holds for the whole cluster)",
            upstream,
            old,
            new,
        )


class RayGate:
    """The upstream gate of a process: leases from the limiter actors of the listed upstreams.

    The gate is one holder for the limiters (``holder``): a :class:`~evalsi.ray._heartbeat.Heartbeat` renews its
    leases while it holds any, and a limiter reclaims them once the heartbeats stop (this process is gone).

    Args:
        limits: ``{upstream URL: Limit}``; each upstream's limiter is configured with its limit.

    """

    def __init__(self, limits: Mapping[str, Limit]) -> None:
        import ray

        self._ray = ray
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        """This gate's name at the limiters: the host and process holding the leases (``stats()["holders"]``)."""
        chosen = {_normal(upstream): limit for upstream, limit in limits.items()}
        self.limits = chosen
        configured = {upstream: _configure(upstream, limit) for upstream, limit in chosen.items()}
        self.handles = {upstream: handle for upstream, (handle, _) in configured.items()}
        self._started = {upstream: started for upstream, (_, started) in configured.items()}
        self.heartbeat = Heartbeat(self._beat, {upstream: limit.heartbeat for upstream, limit in chosen.items()})
        self._returning: set[asyncio.Future[None]] = set()

    def acquire(self, upstream: str) -> Any:
        """A lease of the upstream's limiter (waits in this thread), or None when it is not listed."""
        handle = self.handles.get(upstream)
        if handle is None:
            return None
        lease = self._ray.get(handle.acquire.remote(self.holder))
        self.heartbeat.took(upstream)
        return lease

    async def acquire_async(self, upstream: str) -> Any:
        """A lease, awaited without holding the event loop; cancelled, the lease is no longer waited for."""
        handle = self.handles.get(upstream)
        if handle is None:
            return None
        ref = handle.acquire.remote(self.holder)
        try:
            lease = await ref
        except asyncio.CancelledError:  # else the limiter grants it later to nobody, until this process stops
            self._ray.cancel(ref)
            # granted before the cancel arrived (the answer was on its way): given back once it is here
            returning = asyncio.ensure_future(_give_back(handle, ref))
            self._returning.add(returning)
            returning.add_done_callback(self._returning.discard)
            raise
        self.heartbeat.took(upstream)
        return lease

    def release(self, upstream: str, token: Any) -> None:
        """Give the lease back without waiting for the limiter."""
        handle = self.handles.get(upstream)
        if handle is not None and token is not None:
            handle.release.remote(token)
            self.heartbeat.gave(upstream)

    def _beat(self, upstreams: Sequence[str]) -> dict[str, float]:
        """One heartbeat to each upstream's limiter; the intervals they ask for (waited at most a few seconds).

        A limiter restarted since this gate last heard from it is configured with this gate's limit again.
        """
        refs = {upstream: self.handles[upstream].heartbeat.remote(self.holder) for upstream in upstreams}
        answers: dict[str, float] = {}
        for upstream, ref in refs.items():
            with contextlib.suppress(Exception):  # a limiter restarting: the next round reaches it
                interval, started = self._ray.get(ref, timeout=BEAT_WAIT)
                answers[upstream] = float(interval)
                if started != self._started[upstream]:
                    handle = self.handles[upstream]
                    old, started = self._ray.get(handle.configure.remote(self.limits[upstream]), timeout=BEAT_WAIT)
                    _warn_if_changed(upstream, old, self.limits[upstream])
                    self._started[upstream] = started
        return answers


async def _give_back(handle: Any, ref: Any) -> None:
    """Release the lease a cancelled wait was granted anyway (nothing when the cancel came first)."""
    with contextlib.suppress(Exception):  # the wait was cancelled at the limiter: no lease
        handle.release.remote(await ref)


BEAT_WAIT = 5.0
"""Seconds a heartbeat waits for a limiter's answer before the next round (a restarting limiter)."""


def configure_limits(limits: Mapping[str, Limit | Mapping[str, Any]]) -> dict[str, Limit]:
    """Configure each listed upstream's limiter with its limit (warning for each one that changes).

    A pool or a sharded run calls this from the process that starts it, so an operator sees a changed limit
    where they changed it; its actors configure the same limit again without a warning.

    Args:
        limits: ``{upstream URL: Limit}`` (or the Limit's fields as a mapping).

    Returns:
        The limits as :class:`Limit` objects, by the given URL.

    """
    chosen = _limits(limits)
    for upstream, limit in chosen.items():
        limiter(_normal(upstream), limit)
    return chosen


def limit_upstreams(limits: Mapping[str, Limit | Mapping[str, Any]]) -> RayGate:
    """Limit this process's requests to each listed upstream through its cluster-wide limiter actor.

    Each upstream's limiter takes the limit given here (see the module's docstring for what a change does), and
    reclaims this process's leases if it dies holding them.

    Args:
        limits: ``{upstream URL: Limit}`` (or the Limit's fields as a mapping); only the URL's scheme, host and
            port count: ``http://rm.internal:5000/get_reward`` limits every request to ``rm.internal:5000``.

    Returns:
        The installed gate (``evalsi._util.upstream.set_gate(None)`` removes it).

    """
    gate = RayGate(_limits(limits))
    set_gate(gate)
    return gate


def _limits(limits: Mapping[str, Limit | Mapping[str, Any]]) -> dict[str, Limit]:
    return {url: limit if isinstance(limit, Limit) else Limit(**limit) for url, limit in limits.items()}


def _normal(url: str) -> str:
    import httpx

    from evalsi._util.upstream import upstream_of

    return upstream_of(httpx.URL(url))
