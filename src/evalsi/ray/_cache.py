"""One verdict cache for every scorer actor of a pool: the coordinator's LRU, and a replica of it in each actor.

Keys are the engine's content keys (sha256 over evaluator, canonical params and the record fields read), so an
actor that scores a rollout leaves its verdicts for every other actor of the pool, and a restarted actor finds
them again. The shared tier lives in the coordinator. A chunk that passes through the coordinator goes out with
the verdicts the tier holds for its keys, and the tier keeps the chunk's new scores once they come back. A chunk a
caller sends straight to an actor is looked up in that actor's own cache alone (no message before scoring): the
actor then publishes its new verdicts to the coordinator, just after its reply, and the coordinator stores them
and forwards them to every other actor (:class:`ReplicaCache`), so each actor's cache holds what any of them
computed within milliseconds. Errors and group-level scores are never stored. Scores travel as tuples
(:mod:`evalsi.ray._wire`).
"""

from __future__ import annotations

import threading

from evalsi.engine import ScoreCache
from evalsi.evaluators import Score
from evalsi.ray._options import PoolOptions
from evalsi.ray._wire import PackedScore, pack_score, unpack_score


class SeededCache(ScoreCache):
    """An actor's own LRU, seeded per chunk with the shared verdicts the coordinator sent (the engine's interface)."""

    def __init__(self, max_entries: int) -> None:
        super().__init__(max_entries)
        self.shared_hits = 0
        self.shared_misses = 0

    def seed(self, found: dict[bytes, PackedScore], asked: int) -> None:
        """Take the shared verdicts the coordinator found for a chunk (of the ``asked`` keys it looked up).

        Args:
            found: The held scores of the chunk's keys, packed (a key not held is absent).
            asked: Keys the coordinator looked up.

        """
        if found:
            super().put_many([(key, unpack_score(packed)) for key, packed in found.items()])
        self.shared_hits += len(found)
        self.shared_misses += asked - len(found)


class ReplicaCache(SeededCache):
    """An actor's cache of ``cache="ray"``: seeded per chunk by the coordinator, fed by the other actors' verdicts.

    The verdicts this actor computes wait in an outbox until :meth:`drain` hands them to the coordinator; those
    that arrive from other actors (:meth:`replicate`) are stored without going back out.
    """

    def __init__(self, max_entries: int) -> None:
        super().__init__(max_entries)
        self.replicated = 0
        """Verdicts received from the other actors."""
        self._outbox: list[tuple[bytes, PackedScore]] = []
        self._outbox_lock = threading.Lock()

    def put_many(self, items: list[tuple[bytes, Score]]) -> None:
        """Store verdicts this actor computed, and queue them for the other actors (errors are neither)."""
        super().put_many(items)
        if self.max_entries > 0:
            packed = [(key, pack_score(score)) for key, score in items if score.status != "error"]
            with self._outbox_lock:
                self._outbox.extend(packed)

    def seed(self, found: dict[bytes, PackedScore], asked: int) -> None:
        """Take the shared verdicts the coordinator sent with a chunk (they are not queued to go back out)."""
        if found:
            ScoreCache.put_many(self, [(key, unpack_score(packed)) for key, packed in found.items()])
        self.shared_hits += len(found)
        self.shared_misses += asked - len(found)

    def replicate(self, entries: list[tuple[bytes, PackedScore]]) -> None:
        """Store verdicts the other actors computed (forwarded by the coordinator)."""
        ScoreCache.put_many(self, [(key, unpack_score(packed)) for key, packed in entries])
        self.replicated += len(entries)

    def drain(self) -> list[tuple[bytes, PackedScore]]:
        """The verdicts computed here since the last drain (the coordinator's path keeps them itself)."""
        with self._outbox_lock:
            out, self._outbox = self._outbox, []
        return out


def shared_tier(options: PoolOptions) -> ScoreCache | None:
    """The coordinator's shared tier for the pool's ``cache`` setting: an LRU for ``"ray"``, else None."""
    return ScoreCache(options.cache_size) if options.cache == "ray" else None


def look_up(shared: ScoreCache, keys: list[bytes]) -> dict[bytes, PackedScore]:
    """The held scores of ``keys`` in the shared tier, packed to send with a chunk (a key not held is absent).

    Args:
        shared: The shared tier.
        keys: Distinct keys.

    """
    return {key: pack_score(score) for key, score in zip(keys, shared.get_many(keys), strict=True) if score is not None}


def keep(shared: ScoreCache, new: list[tuple[bytes, PackedScore]]) -> None:
    """Store verdicts (packed) in the shared tier; errors are not stored.

    Args:
        shared: The shared tier.
        new: Keys and packed scores.

    """
    if new:
        shared.put_many([(key, unpack_score(packed)) for key, packed in new])


def tier_stats(shared: ScoreCache) -> dict[str, int]:
    """Entries the shared tier holds, and the look-ups it answered and missed.

    Args:
        shared: The shared tier.

    """
    s = shared.stats
    return {"entries": len(shared), "hits": s.hits, "misses": s.misses, "evictions": s.evictions}


def open_cache(options: PoolOptions) -> ScoreCache:
    """A scorer actor's cache for the pool's ``cache`` setting.

    ``"ray"``: its own LRU, seeded per chunk from the coordinator's shared tier and fed the other actors'
    verdicts. ``None``: its own LRU alone. A
    database URL: the evalsi server's shared cache (the ``score_cache`` table of the server's database, which the
    server creates), so the pool and the server's replicas share verdicts; ``cache_project`` names the project
    whose keys to use when the server keeps cached scores per project (``shared_cache_scope: project``).
    """
    if options.cache == "ray":
        return ReplicaCache(options.cache_size)
    if options.cache is None:
        return ScoreCache(options.cache_size)
    from evalsi.server._db import open_engine
    from evalsi.server.rewards._shared_cache import ProjectCache, SharedScores, TieredCache

    tiered = TieredCache(options.cache_size, SharedScores(open_engine(options.cache), options.cache_ttl))
    return tiered if options.cache_project is None else ProjectCache(tiered, options.cache_project)


def cache_counts(cache: ScoreCache) -> dict[str, int]:
    """Hits and misses of an actor's cache so far, by tier (``memory``, ``shared``)."""
    inner = getattr(cache, "inner", cache)
    counts = {"memory_hits": inner.stats.hits, "memory_misses": inner.stats.misses}
    if isinstance(inner, SeededCache):
        counts.update(shared_hits=inner.shared_hits, shared_misses=inner.shared_misses)
    if isinstance(inner, ReplicaCache):
        counts.update(replicated=inner.replicated)
    return counts
