"""A finished job's ``metrics`` and ``outputStats`` from its per-row results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def summarise(results: Sequence[dict[str, Any]]) -> tuple[dict[str, float], dict[str, Any]]:
    """A job's ``metrics`` and ``outputStats``.

    ``metrics``: ``score`` (the mean over scored rows) and the mean of each named row metric; ``outputStats``:
    rows, scored, errored, and the mean, min and max score (absent when nothing scored).
    """
    scores = [float(r["score"]) for r in results if "error" not in r and r.get("score") is not None]
    stats: dict[str, Any] = {"rows": len(results), "scored": len(scores), "errored": len(results) - len(scores)}
    metrics: dict[str, float] = {}
    if scores:
        mean = sum(scores) / len(scores)
        stats.update(mean_score=mean, min_score=min(scores), max_score=max(scores))
        metrics["score"] = mean
    named: dict[str, list[float]] = {}
    for result in results:
        if "error" in result:
            continue
        for name, value in (result.get("metrics") or {}).items():
            named.setdefault(str(name), []).append(float(value))
    for name, values in sorted(named.items()):
        metrics.setdefault(name, sum(values) / len(values))
    return metrics, stats
