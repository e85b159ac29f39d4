"""Reward score files (``evalsi rewards score`` output, one JSON object per rollout) read for viewing.

The total and every component become a distribution; a histogram bar leads back to the rollouts in it.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from evalsi.errors import DataError

TOTAL = "total"
"""The series name of the reward's total (a component cannot be called that in the viewer's URLs)."""

BINS = 20


@dataclass
class Histogram:
    """Equal-width bins over a series' range; each bin knows its rollouts' positions."""

    low: float
    high: float
    counts: list[int]
    members: list[list[int]]

    def edges(self, b: int) -> tuple[float, float]:
        """The interval of bin ``b``."""
        width = (self.high - self.low) / len(self.counts)
        return self.low + b * width, self.low + (b + 1) * width


def histogram(values: list[float | None], bins: int = BINS) -> Histogram | None:
    """A histogram of the values that are numbers (None when there is none)."""
    present = [(i, v) for i, v in enumerate(values) if v is not None and not math.isnan(v)]
    if not present:
        return None
    low = min(v for _, v in present)
    high = max(v for _, v in present)
    if high == low:
        low, high = low - 0.5, high + 0.5
    members: list[list[int]] = [[] for _ in range(bins)]
    width = (high - low) / bins
    for i, v in present:
        members[min(int((v - low) / width), bins - 1)].append(i)
    return Histogram(low, high, [len(m) for m in members], members)


@dataclass
class RewardData:
    """A score file: its rows, the total and each component as numbers, and the status counts."""

    path: Path
    rows: list[dict[str, Any]]
    components: list[str]
    series: dict[str, list[float | None]]
    result_counts: Counter[str]
    component_counts: dict[str, Counter[str]]
    histograms: dict[str, Histogram | None]


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, str):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def load_rewards(path: Path) -> RewardData:
    """Read a score file.

    Raises:
        DataError: A line is not JSON or not a reward result (the message names the line).

    """
    rows: list[dict[str, Any]] = []
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise DataError(f"not readable: {exc}", file=str(path)) from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise DataError(f"not JSON: {exc}", file=str(path), line=number) from None
        if not isinstance(row, dict) or not isinstance(row.get("components"), dict):
            raise DataError(
                "not a reward result (expected {index, total, status, components})", file=str(path), line=number
            )
        rows.append(row)
    components: list[str] = []
    for row in rows:
        components.extend(c for c in row["components"] if c not in components)
    series: dict[str, list[float | None]] = {TOTAL: [_number(r.get("total")) for r in rows]}
    counts: dict[str, Counter[str]] = {}
    for name in components:
        scores = [r["components"].get(name) or {} for r in rows]
        series[name] = [_number(s.get("value")) if s.get("status", "ok") == "ok" else None for s in scores]
        counts[name] = Counter(str(s.get("status", "absent")) for s in scores)
    result_counts = Counter(str(r.get("status", "?")) for r in rows)
    return RewardData(
        path,
        rows,
        components,
        series,
        result_counts,
        counts,
        {name: histogram(values) for name, values in series.items()},
    )


class RewardCache:
    """Score files read once per version on disk."""

    def __init__(self) -> None:
        self._items: dict[Path, tuple[tuple[int, int], RewardData]] = {}
        self._lock = threading.Lock()

    def get(self, path: Path) -> RewardData:
        """The score file at ``path``, read again only when it changed."""
        st = path.stat()
        key = (st.st_size, st.st_mtime_ns)
        with self._lock:
            hit = self._items.get(path)
            if hit is not None and hit[0] == key:
                return hit[1]
        data = load_rewards(path)
        with self._lock:
            self._items[path] = (key, data)
        return data
