"""A job's ``metrics`` and ``outputStats``, counted row by row as batches return (no result is kept)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class Summary:
    """Running sums of a job's per-row results: what the finished job reports, in constant memory per metric."""

    def __init__(self) -> None:
        self.rows = 0
        self.scored = 0
        self.first_error = ""
        """The first errored row's message (what a job that scored nothing fails with)."""
        self._total = 0.0
        self._min: float | None = None
        self._max: float | None = None
        self._named: dict[str, list[float]] = {}  # name -> [sum, count]

    def add(self, result: dict[str, Any]) -> None:
        """Count one row's result (``{score, reason, metrics}`` or ``{error}``)."""
        self.rows += 1
        if "error" in result:
            self.first_error = self.first_error or str(result["error"])
            return
        if result.get("score") is not None:
            score = float(result["score"])
            self.scored += 1
            self._total += score
            self._min = score if self._min is None else min(self._min, score)
            self._max = score if self._max is None else max(self._max, score)
        elif not self.first_error:
            self.first_error = "the row has no score"
        for name, value in (result.get("metrics") or {}).items():
            kept = self._named.setdefault(str(name), [0.0, 0])
            kept[0] += float(value)
            kept[1] += 1

    def report(self) -> tuple[dict[str, float], dict[str, Any]]:
        """The job's ``metrics`` and ``outputStats``.

        ``metrics``: ``score`` (the mean over scored rows) and the mean of each named row metric; ``outputStats``:
        rows, scored, errored, and the mean, min and max score (absent when nothing scored).
        """
        stats: dict[str, Any] = {"rows": self.rows, "scored": self.scored, "errored": self.rows - self.scored}
        metrics: dict[str, float] = {}
        if self.scored:
            mean = self._total / self.scored
            stats.update(mean_score=mean, min_score=self._min, max_score=self._max)
            metrics["score"] = mean
        for name, (total, count) in sorted(self._named.items()):
            metrics.setdefault(name, total / count)
        return metrics, stats


def summarise(results: Sequence[dict[str, Any]]) -> tuple[dict[str, float], dict[str, Any]]:
    """A job's ``metrics`` and ``outputStats`` from all of its per-row results at once."""
    summary = Summary()
    for result in results:
        summary.add(result)
    return summary.report()
