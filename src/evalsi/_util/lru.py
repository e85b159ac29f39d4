"""A thread-safe LRU bounded by the bytes its values hold, not only by how many there are.

Caches keyed by client-supplied text (compiled patterns, validators built from schemas) must stay bounded
however large each key is: one entry per megabyte-long pattern would otherwise grow without limit.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ByteLRU(Generic[K, V]):
    """At most ``max_entries`` values whose estimated sizes add up to at most ``max_bytes``.

    A value larger than ``max_bytes`` on its own is handed back but never stored.

    Example:
        >>> cache: ByteLRU[str, str] = ByteLRU(max_bytes=10)
        >>> cache.get_or_make("a", lambda: "x" * 6, len), cache.get_or_make("b", lambda: "y" * 6, len)
        ('xxxxxx', 'yyyyyy')
        >>> len(cache), cache.bytes
        (1, 6)

    """

    def __init__(self, max_bytes: int, max_entries: int = 4096) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.bytes = 0
        """The estimated size of what is held now."""
        self._data: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._data)

    def get_or_make(self, key: K, make: Callable[[], V], size: Callable[[V], int]) -> V:
        """The value for ``key``, made (outside the lock) and stored when missing; ``size`` estimates its bytes."""
        with self._lock:
            held = self._data.get(key)
            if held is not None:
                self._data.move_to_end(key)
                return held[0]
        value = make()  # may raise: nothing is stored then
        cost = max(size(value), 1)
        if cost > self.max_bytes:
            return value
        with self._lock:
            if key in self._data:
                return self._data[key][0]
            self._data[key] = (value, cost)
            self.bytes += cost
            while self.bytes > self.max_bytes or len(self._data) > self.max_entries:
                _, (_, dropped) = self._data.popitem(last=False)
                self.bytes -= dropped
        return value

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._data.clear()
            self.bytes = 0
