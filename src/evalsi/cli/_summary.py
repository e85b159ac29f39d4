"""Readable summaries of scored batches: the distribution of totals and each component's mean and failures."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from evalsi.cli._tables import number_table
from evalsi.rewards import Reward, RewardResult

_BARS = " ▁▂▃▄▅▆▇█"


def reward_summary(reward: Reward, results: Sequence[RewardResult]) -> Group:
    """Totals (count, mean, spread, histogram, statuses), per-component table, and cache hits."""
    totals = [r.total for r in results if r.total is not None]
    statuses = Counter(r.status for r in results)
    status_text = ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))
    if totals:
        std = statistics.pstdev(totals) if len(totals) > 1 else 0.0
        spread = [statistics.fmean(totals), std, min(totals), statistics.median(totals), max(totals)]
        head_row = [*(f"{v:.4f}" for v in spread), histogram(totals), status_text]
    else:
        head_row = ["-", "-", "-", "-", "-", "", status_text]
    head_columns = ("mean", "std", "min", "median", "max", "distribution", "statuses")
    head = number_table(
        f"reward {escape(repr(reward.name))}: {len(results)} rollouts", head_columns, head_columns[:5], [head_row]
    )

    rows = []
    for component in reward.components:
        scores = [r.components[component.name] for r in results]
        values = [s.numeric for s in scores if s.status == "ok" and s.numeric is not None]
        errors = [s for s in scores if s.status == "error"]
        counts = Counter(s.status for s in scores)
        rule = component.rule
        rows.append(
            [
                escape(component.name),
                f"{rule.weight:g}",
                f">= {rule.threshold:g}" if rule.gate else "",
                f"{statistics.fmean(values):.4f}" if values else "-",
                str(counts["ok"]),
                str(counts["skipped"]),
                str(counts["error"]),
                escape((errors[0].reason or "")[:80]) if errors else "",
            ]
        )
    columns = ("component", "weight", "gate", "mean", "ok", "skipped", "errored", "first error")
    table = number_table("components", columns, columns[1:7], rows)
    parts: list[Table | Text] = [head, table]
    if reward.cache is not None:
        stats = reward.cache.stats
        looked_up = stats.hits + stats.misses + stats.deduplicated
        rate = f"; {(looked_up - stats.misses) / looked_up:.0%} not computed" if looked_up else ""
        parts.append(
            Text(
                f"cache: {stats.hits} hits, {stats.deduplicated} repeats in a batch (computed once), "
                f"{stats.misses} misses{rate}"
            )
        )
    return Group(*parts)


def histogram(values: Sequence[float], bins: int = 10) -> str:
    """A one-line histogram of values over [min, max], with the range."""
    low, high = min(values), max(values)
    if high == low:
        return f"all {low:g}"
    counts = [0] * bins
    for value in values:
        counts[min(bins - 1, int((value - low) / (high - low) * bins))] += 1
    peak = max(counts)
    bars = "".join(_BARS[round(c / peak * (len(_BARS) - 1))] for c in counts)
    return f"{low:g} {bars} {high:g}"
