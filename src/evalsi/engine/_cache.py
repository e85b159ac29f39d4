"""A bounded, thread-safe LRU of component scores, keyed by content. Errors are never stored.

It is bounded twice: by entries, and by the estimated bytes of what it holds, because a score's reason and
details (a judge's reply, an evaluator's diagnostics) can be far larger than its value.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import orjson

from evalsi.evaluators import Score

ENTRY_OVERHEAD = 256
"""Bytes counted for every entry besides its reason and details: the key, the Score, the LRU links."""

DEFAULT_MAX_BYTES = 512 << 20
"""What one cache may hold by default, whatever ``max_entries`` allows."""


def score_size(score: Score) -> int:
    """Estimated bytes one cached score holds (its details measured as their JSON)."""
    size = ENTRY_OVERHEAD + len(score.reason or "")
    if score.details:
        try:
            size += len(orjson.dumps(score.details, default=str, option=orjson.OPT_NON_STR_KEYS))
        except (TypeError, orjson.JSONEncodeError):
            size += 64 * len(score.details)
    return size


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

    def __init__(self, max_entries: int = 1_048_576, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        """Create an empty cache, bounded both ways: the least recently used score goes first.

        Args:
            max_entries: The most scores kept.
            max_bytes: The most bytes (estimated) the kept scores may take.

        """
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        """Estimated bytes held now (see :func:`score_size`)."""
        self.stats = CacheStats()
        self._data: OrderedDict[bytes, Score] = OrderedDict()
        self._sizes: dict[bytes, int] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._data)

    def get_many(self, keys: list[bytes]) -> list[Score | None]:
        """Look keys up in one locked pass (a hit moves to the recent end).

        Args:
            keys: Content keys (:func:`record_key`).

        """
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
        """Store scores; errors are skipped, because an outage must not be remembered as a verdict.

        Args:
            items: ``(key, score)`` pairs.

        """
        if self.max_entries <= 0:
            return
        sized = [(key, score, score_size(score)) for key, score in items if score.status != "error"]
        with self._lock:
            data, sizes = self._data, self._sizes
            for key, score, size in sized:
                if size > self.max_bytes:
                    continue  # larger than the whole cache: computed again when asked for
                self.bytes += size - sizes.get(key, 0)
                data[key] = score
                sizes[key] = size
                data.move_to_end(key)
            while data and (len(data) > self.max_entries or self.bytes > self.max_bytes):
                key, _ = data.popitem(last=False)
                self.bytes -= sizes.pop(key)
                self.stats.evictions += 1

    def clear(self) -> None:
        """Forget every entry and reset the counters."""
        with self._lock:
            self._data.clear()
            self._sizes.clear()
            self.bytes = 0
            self.stats = CacheStats()
