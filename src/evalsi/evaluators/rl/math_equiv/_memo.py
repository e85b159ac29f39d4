"""Bounded memo tables: verdicts keyed on (reference, answer) and parsed references keyed on their text.

GRPO scores n rollouts per prompt and many repeat the same final answer in different words: the engine's cache
misses (the completions differ) but the normalised answers repeat, so the verdict is served from here.
"""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Memo(Generic[K, V]):
    """A dict that forgets everything when it reaches ``max_entries`` (cheaper per hit than an LRU)."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._data: dict[K, V] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: K) -> V | None:
        """The stored value, or None."""
        value = self._data.get(key)
        if value is None:
            self.misses += 1
        else:
            self.hits += 1
        return value

    def put(self, key: K, value: V) -> None:
        """Store a value, first clearing the table when it is full."""
        with self._lock:
            if len(self._data) >= self.max_entries:
                self._data.clear()
            self._data[key] = value

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._data.clear()
