"""The second cache tier: component scores in the database, shared by every replica on it.

:class:`TieredCache` is the engine's :class:`~evalsi.engine.ScoreCache` (same ``get_many``/``put_many``, same
sha256 content keys from :func:`evalsi.engine.record_key`) with the database behind its in-memory LRU: a memory
miss is looked up in the database, and a database hit is copied into memory. Errors are never stored in either
tier. A database failure never fails a batch: the look-up counts as a miss and the score is computed. The
database tier's queries are :class:`~evalsi.server.rewards._score_store.SharedScores`'.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from evalsi.engine import ScoreCache
from evalsi.evaluators import Score
from evalsi.server.rewards._score_store import SharedScores as SharedScores

TierHook = Callable[[str, int, int], None]
"""Called after each look-up with (tier, hits, misses)."""


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
