"""A bounded, thread-safe LRU of component scores, keyed by content. Errors are never stored."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from evalsi.evaluators import Score


@dataclass
class CacheStats:
    """Counters of one cache: look-ups answered, look-ups missed, entries evicted."""

    hits: int = 0
    misses: int = 0
    """Distinct keys of a look-up that the cache did not hold: each is computed once."""
    deduplicated: int = 0
    """Repeats of a missed key within the same look-up: computed with it, not again."""
    evictions: int = 0


class ScoreCache:
    """LRU map from a content key (32-byte sha256 digest) to a decided or skipped Score."""

    def __init__(self, max_entries: int = 1_048_576) -> None:
        self.max_entries = max_entries
        self.stats = CacheStats()
        self._data: OrderedDict[bytes, Score] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._data)

    def get_many(self, keys: list[bytes]) -> list[Score | None]:
        """Look keys up in one locked pass (a hit moves to the recent end)."""
        out: list[Score | None] = []
        with self._lock:
            data = self._data
            for key in keys:
                score = data.get(key)
                if score is not None:
                    data.move_to_end(key)
                out.append(score)
            hits = sum(1 for s in out if s is not None)
            missed = len({key for key, score in zip(keys, out, strict=True) if score is None})
            self.stats.hits += hits
            self.stats.misses += missed
            self.stats.deduplicated += len(keys) - hits - missed
        return out

    def put_many(self, items: list[tuple[bytes, Score]]) -> None:
        """Store scores; errors are skipped, because an outage must not be remembered as a verdict."""
        if self.max_entries <= 0:
            return
        with self._lock:
            data = self._data
            for key, score in items:
                if score.status == "error":
                    continue
                data[key] = score
                data.move_to_end(key)
            while len(data) > self.max_entries:
                data.popitem(last=False)
                self.stats.evictions += 1

    def clear(self) -> None:
        """Forget every entry and reset the counters."""
        with self._lock:
            self._data.clear()
            self.stats = CacheStats()
