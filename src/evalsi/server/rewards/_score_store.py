"""The score store: component scores in the ``score_cache`` table, shared by every replica on the database.

A database failure never fails a batch: a failed look-up finds nothing and a failed write is dropped (counted in
``failures`` and logged), so the score is computed instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import orjson
from sqlalchemy import Engine, delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError

from evalsi.evaluators import Score
from evalsi.server.rewards._tables import score_cache

log = logging.getLogger("evalsi.server")
_CHUNK = 500  # keys per IN (...) query: below SQLite's variable limit, small enough for PostgreSQL plans


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
