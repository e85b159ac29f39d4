"""The second cache tier: component scores in the database, shared by every replica on it.

:class:`TieredCache` is the engine's :class:`~evalsi.engine.ScoreCache` (same ``get_many``/``put_many``, same
sha256 content keys from :func:`evalsi.engine.record_key`) with the database behind its in-memory LRU: a memory
miss is looked up in the database, and a database hit is copied into memory. Errors are never stored in either
tier. A database failure never fails a batch: the look-up counts as a miss and the score is computed.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Sequence

import orjson
from sqlalchemy import Engine, delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError

from evalsi.engine import ScoreCache
from evalsi.evaluators import Score
from evalsi.server.rewards._tables import score_cache

log = logging.getLogger("evalsi.server")
_CHUNK = 500  # keys per IN (...) query: below SQLite's variable limit, small enough for PostgreSQL plans

TierHook = Callable[[str, int, int], None]
"""Called after each look-up with (tier, hits, misses)."""


def encode_score(score: Score) -> bytes:
    """The stored form of a score."""
    return orjson.dumps(score.to_dict(), default=str)


def decode_score(data: bytes) -> Score:
    """A score back from its stored form."""
    raw = orjson.loads(data)
    return Score(raw.get("value"), raw["status"], raw.get("reason"), raw.get("details"))


class SharedScores:
    """Scores in the ``score_cache`` table; entries older than ``ttl`` seconds are ignored and pruned."""

    def __init__(self, engine: Engine, ttl: float, clock: Callable[[], float] = time.time) -> None:
        self.engine = engine
        self.ttl = ttl
        self.clock = clock
        self.failures = 0

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, Score]:
        """The stored, unexpired scores of ``keys`` (a missing key is absent from the result)."""
        found: dict[bytes, Score] = {}
        oldest = self.clock() - self.ttl
        try:
            with self.engine.connect() as connection:
                for start in range(0, len(keys), _CHUNK):
                    chunk = list(keys[start : start + _CHUNK])
                    query = select(score_cache.c.key, score_cache.c.score).where(
                        score_cache.c.key.in_(chunk), score_cache.c.created_at >= oldest
                    )
                    for row in connection.execute(query):
                        found[bytes(row.key)] = decode_score(bytes(row.score))
        except SQLAlchemyError as exc:
            self._failed("read", exc)
        return found

    def put_many(self, items: Sequence[tuple[bytes, Score]], now: float | None = None) -> None:
        """Store decided and skipped scores (errors are dropped); a key stored again gets the new time."""
        stamp = self.clock() if now is None else now
        rows = {key: encode_score(s) for key, s in items if s.status != "error"}
        if not rows:
            return
        values = [{"key": k, "score": v, "created_at": stamp} for k, v in rows.items()]
        dialect = postgresql if self.engine.dialect.name == "postgresql" else sqlite
        try:
            with self.engine.begin() as connection:
                for start in range(0, len(values), _CHUNK):
                    statement = dialect.insert(score_cache).values(values[start : start + _CHUNK])
                    statement = statement.on_conflict_do_update(
                        index_elements=[score_cache.c.key],
                        set_={"score": statement.excluded.score, "created_at": statement.excluded.created_at},
                    )
                    connection.execute(statement)
        except SQLAlchemyError as exc:
            self._failed("write", exc)

    def prune(self, now: float | None = None) -> int:
        """Delete entries older than the TTL; returns how many were deleted."""
        oldest = (self.clock() if now is None else now) - self.ttl
        try:
            with self.engine.begin() as connection:
                result = connection.execute(delete(score_cache).where(score_cache.c.created_at < oldest))
        except SQLAlchemyError as exc:
            self._failed("prune", exc)
            return 0
        return int(result.rowcount or 0)

    def count(self) -> int:
        """How many entries are stored (expired ones included until pruned)."""
        with self.engine.connect() as connection:
            return len(connection.execute(select(score_cache.c.key)).all())

    def _failed(self, what: str, exc: Exception) -> None:
        self.failures += 1
        log.warning("shared score cache %s failed (scores are computed instead): %s", what, exc)


class TieredCache(ScoreCache):
    """The in-memory LRU with the shared database tier behind it (when ``shared`` is given)."""

    def __init__(self, max_entries: int, shared: SharedScores | None = None, on_lookup: TierHook | None = None):
        super().__init__(max_entries)
        self.shared = shared
        self._on_lookup = on_lookup

    def get_many(self, keys: list[bytes]) -> list[Score | None]:
        """Memory first; memory misses from the database, copied into memory."""
        out = super().get_many(keys)
        missing = [key for key, score in zip(keys, out, strict=True) if score is None]
        self._report("memory", len(keys) - len(missing), len(missing))
        if self.shared is None or not missing:
            return out
        found = self.shared.get_many(list(dict.fromkeys(missing)))
        self._report("shared", sum(1 for k in missing if k in found), sum(1 for k in missing if k not in found))
        if not found:
            return out
        super().put_many(list(found.items()))
        return [score if score is not None else found.get(key) for key, score in zip(keys, out, strict=True)]

    def put_many(self, items: list[tuple[bytes, Score]]) -> None:
        """Store in memory and, with the shared tier, in the database."""
        super().put_many(items)
        if self.shared is not None:
            self.shared.put_many(items)

    def _report(self, tier: str, hits: int, misses: int) -> None:
        if self._on_lookup is not None and (hits or misses):
            self._on_lookup(tier, hits, misses)


class ProjectCache(ScoreCache):
    """One project's view of a shared :class:`TieredCache`: every key is prefixed with a digest of the project.

    So a project never gets a score another project computed (a hit would tell it what the other one scored),
    in memory or in the database, while all projects share one bounded LRU. A prefix costs a concatenation per
    key, not a hash: keys stay content hashes, only their namespace differs.
    """

    def __init__(self, cache: TieredCache, project: str) -> None:
        super().__init__(0)
        self.inner = cache
        self._prefix = hashlib.sha256(b"evalsi-project\0" + project.encode()).digest()[:8]

    def get_many(self, keys: list[bytes]) -> list[Score | None]:
        """The inner cache's scores for this project's keys."""
        prefix = self._prefix
        return self.inner.get_many([prefix + k for k in keys])

    def put_many(self, items: list[tuple[bytes, Score]]) -> None:
        """Store under this project's keys."""
        prefix = self._prefix
        self.inner.put_many([(prefix + k, s) for k, s in items])
