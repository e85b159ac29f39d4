"""Bound specs kept for reuse, bounded by their estimated memory overall and per project.

Binding a RewardSpec (validating it, resolving its evaluators, building their params) costs far more than looking
one up, and a trainer sends the same spec with every batch, so bound specs are kept. A spec's memory is estimated
from its canonical JSON and its number of components (a bound component weighs a few KiB whatever its params, and
parsed params a few times their JSON); the cache holds at most ``rewards.spec_cache_bytes`` of them, one project at
most ``project_share`` of that, dropping the least recently used first: the project's own when it is past its
share, anyone's when the whole cache is full. A spec estimated larger than a project's share is not kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

from evalsi.rewards import Reward

_PER_COMPONENT = 4096
"""Estimated bytes of one bound component beyond its params."""
_PER_JSON_BYTE = 4
"""Estimated bytes of bound spec per byte of its canonical JSON (the key kept, and its params parsed)."""

Key = tuple[str, bytes]
SizeHook = Callable[[str, int], None]
"""Called with (project, delta bytes) as a project's share of the cache grows or shrinks."""


def spec_cost(key: bytes, reward: Reward) -> int:
    """The estimated memory of a bound spec kept under ``key`` (its canonical JSON)."""
    return _PER_JSON_BYTE * len(key) + _PER_COMPONENT * len(reward.components)


class BoundSpecs:
    """An LRU of bound specs by (project, canonical JSON), within a byte budget and a per-project share of it."""

    def __init__(self, capacity: int, share: int, on_change: SizeHook | None = None) -> None:
        self.capacity = capacity
        self.share = min(share, capacity)
        self._entries: OrderedDict[Key, tuple[Reward, int]] = OrderedDict()
        self._by_project: dict[str, OrderedDict[bytes, None]] = {}
        self._bytes: dict[str, int] = {}
        self.total = 0
        self._lock = threading.Lock()
        self._on_change = on_change

    def get(self, project: str, key: bytes) -> Reward | None:
        """The project's bound spec for ``key``, made the most recently used; None when not kept."""
        with self._lock:
            found = self._entries.get((project, key))
            if found is None:
                return None
            self._entries.move_to_end((project, key))
            self._by_project[project].move_to_end(key)
            return found[0]

    def put(self, project: str, key: bytes, reward: Reward) -> None:
        """Keep ``reward`` for the project, dropping older specs past the project's share or the capacity."""
        cost = spec_cost(key, reward)
        if cost > self.share:
            return
        dropped: list[Reward] = []
        with self._lock:
            if (project, key) in self._entries:
                return
            self._entries[(project, key)] = (reward, cost)
            self._by_project.setdefault(project, OrderedDict())[key] = None
            self._grow(project, cost)
            while self._bytes.get(project, 0) > self.share:
                dropped.append(self._drop(project, next(iter(self._by_project[project]))))
            while self.total > self.capacity:
                oldest_project, oldest_key = next(iter(self._entries))
                dropped.append(self._drop(oldest_project, oldest_key))
        for old in dropped:
            old.close()

    def held(self, project: str) -> int:
        """Estimated bytes of the project's kept specs."""
        with self._lock:
            return self._bytes.get(project, 0)

    def clear(self) -> None:
        """Drop every spec (closing them)."""
        with self._lock:
            rewards = [reward for reward, _ in self._entries.values()]
            for project, size in list(self._bytes.items()):
                self._grow(project, -size)
            self._entries.clear()
            self._by_project.clear()
        for reward in rewards:
            reward.close()

    def _drop(self, project: str, key: bytes) -> Reward:
        reward, cost = self._entries.pop((project, key))
        keys = self._by_project[project]
        del keys[key]
        if not keys:
            del self._by_project[project]
        self._grow(project, -cost)
        return reward

    def _grow(self, project: str, delta: int) -> None:
        self.total += delta
        left = self._bytes.get(project, 0) + delta
        if left:
            self._bytes[project] = left
        else:
            self._bytes.pop(project, None)
        if self._on_change is not None:
            self._on_change(project, delta)
