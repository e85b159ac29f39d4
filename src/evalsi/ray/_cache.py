"""One verdict cache for every scorer actor of a pool: a cache actor behind each actor's own in-memory LRU.

Keys are the engine's content keys (sha256 over evaluator, canonical params and the record fields read), so an
actor that scores a rollout leaves its verdicts for every other actor of the pool, and a restarted actor finds
them again. Errors are never stored. The cache actor is an optimisation, never a dependency: when it cannot be
reached (it is restarting, or the call times out) a look-up counts as a miss and the score is computed.
Scores travel to and from it as tuples (:mod:`evalsi.ray._wire`).
"""

from __future__ import annotations

import logging
from typing import Any

from evalsi.engine import ScoreCache
from evalsi.evaluators import Score
from evalsi.ray._options import PoolOptions
from evalsi.ray._wire import PackedScore, pack_score, unpack_score

log = logging.getLogger("evalsi.ray")

LOOKUP_TIMEOUT = 30.0
"""Seconds an actor waits for the cache actor's answer before computing instead."""


class CacheActor:
    """The pool's shared tier: a bounded LRU of component scores (run as a Ray actor)."""

    def __init__(self, max_entries: int) -> None:
        self.cache = ScoreCache(max_entries)

    def get_many(self, keys: list[bytes]) -> dict[bytes, PackedScore]:
        """The held scores of ``keys``, packed (a key not held is absent)."""
        found = self.cache.get_many(keys)
        return {key: pack_score(score) for key, score in zip(keys, found, strict=True) if score is not None}

    def put_many(self, items: list[tuple[bytes, PackedScore]]) -> None:
        """Store decided and skipped scores (packed)."""
        self.cache.put_many([(key, unpack_score(packed)) for key, packed in items])

    def stats(self) -> dict[str, int]:
        """Entries held, and the look-ups answered and missed."""
        s = self.cache.stats
        return {"entries": len(self.cache), "hits": s.hits, "misses": s.misses, "evictions": s.evictions}


class ActorCache(ScoreCache):
    """An actor's own LRU with the pool's cache actor behind it (the engine's ``ScoreCache`` interface)."""

    def __init__(self, handle: Any, max_entries: int, ray: Any) -> None:
        super().__init__(max_entries)
        self.handle = handle
        self._ray = ray
        self.shared_hits = 0
        self.shared_misses = 0
        self.failures = 0
        self._absent: set[bytes] = set()
        """Keys the cache actor was just asked for and did not hold (one round trip per chunk, not per component)."""

    def prefetch(self, keys: list[bytes]) -> None:
        """Ask the cache actor once for every key a chunk will look up; what it lacks is not asked again."""
        unique = list(dict.fromkeys(keys))
        with self._lock:
            local = [key for key in unique if key not in self._data]
        found = self._remote(local) if local else {}
        if found:
            super().put_many(list(found.items()))
        self._absent = {key for key in local if key not in found}

    def end_prefetch(self) -> None:
        """Forget the keys :meth:`prefetch` found absent (the next chunk asks again)."""
        self._absent = set()

    def get_many(self, keys: list[bytes]) -> list[Score | None]:
        """Memory first; the misses from the cache actor, copied into memory."""
        out = super().get_many(keys)
        absent = self._absent
        missing = list(
            dict.fromkeys(key for key, score in zip(keys, out, strict=True) if score is None and key not in absent)
        )
        if not missing:
            return out
        found = self._remote(missing)
        if not found:
            return out
        super().put_many(list(found.items()))
        return [score if score is not None else found.get(key) for key, score in zip(keys, out, strict=True)]

    def _remote(self, keys: list[bytes]) -> dict[bytes, Score]:
        try:
            packed: dict[bytes, PackedScore] = self._ray.get(self.handle.get_many.remote(keys), timeout=LOOKUP_TIMEOUT)
        except Exception as exc:  # the shared tier is an optimisation: compute instead
            self.failures += 1
            log.warning("the pool's cache actor did not answer (scores are computed instead): %s", exc)
            packed = {}
        found = {key: unpack_score(fields) for key, fields in packed.items()}
        self.shared_hits += len(found)
        self.shared_misses += len(keys) - len(found)
        return found

    def put_many(self, items: list[tuple[bytes, Score]]) -> None:
        """Store in memory, and send to the cache actor without waiting for it."""
        super().put_many(items)
        kept = [(key, pack_score(score)) for key, score in items if score.status != "error"]
        if kept:
            try:
                self.handle.put_many.remote(kept)
            except Exception as exc:
                self.failures += 1
                log.warning("the pool's cache actor could not be sent scores: %s", exc)


def open_cache(options: PoolOptions, handle: Any, ray: Any) -> ScoreCache:
    """A scorer actor's cache for the pool's ``cache`` setting.

    ``"ray"``: its own LRU with the cache actor ``handle`` behind it. ``None``: its own LRU alone. A database
    URL: the evalsi server's shared cache (the ``score_cache`` table of the server's database, which the
    server creates), so the pool and the server's replicas share verdicts; ``cache_project`` names the project
    whose keys to use when the server keeps cached scores per project (``shared_cache_scope: project``).
    """
    if options.cache == "ray":
        return ActorCache(handle, options.cache_size, ray)
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
    if isinstance(inner, ActorCache):
        counts.update(shared_hits=inner.shared_hits, shared_misses=inner.shared_misses)
    return counts
