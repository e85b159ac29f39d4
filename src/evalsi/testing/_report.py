"""An evaluation test run's verdict: aggregate score, standard error, the results document, the failure table."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evalsi.evaluators import Score
from evalsi.runs import MetricInfo, RecordResult, SampleResult, summarize
from evalsi.specs import PassKSpec
from evalsi.stats import clustered_estimate
from evalsi.testing._config import Aggregation, Threshold
from evalsi.testing._row import EvaluationRow

METRIC = "score"


@dataclass(frozen=True)
class Verdict:
    """The aggregate of a test run and whether it passed."""

    score: float
    standard_error: float
    passed: bool
    rollouts: int
    failed_rollouts: int
    per_variant: dict[str, float]


def verdict(rows: Sequence[EvaluationRow], aggregation: Aggregation, threshold: Threshold | None) -> Verdict:
    """The aggregate of scored rollouts and whether it passes ``threshold``.

    The score is the mean (or max, min) over runs of each run's mean score; its standard error is that of the mean
    over input rows, with a row's repeated rollouts (runs, completion params) as one cluster. With fewer than two
    rows the standard error is undefined (nan), and a standard-error condition is not met.
    """
    by_run: dict[int, list[float]] = defaultdict(list)
    by_row: dict[str, list[float]] = defaultdict(list)
    by_variant: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        value = float(row.score or 0.0)
        by_run[row.run].append(value)
        by_row[row.row_id].append(value)
        by_variant[row.variant].append(value)
    run_means = [sum(v) / len(v) for v in by_run.values()] or [0.0]
    if aggregation == "max":
        score = max(run_means)
    elif aggregation == "min":
        score = min(run_means)
    else:
        score = sum(run_means) / len(run_means)
    error = clustered_estimate(list(by_row.values())).se if rows else math.nan
    passed = threshold.passes(score, error) if threshold is not None else True
    return Verdict(
        score,
        error,
        passed,
        len(rows),
        sum(1 for r in rows if r.rollout_error is not None),
        {name: sum(v) / len(v) for name, v in by_variant.items()},
    )


def results_document(
    test_id: str, rows: Sequence[EvaluationRow], result: Verdict, threshold: Threshold | None, settings: dict[str, Any]
) -> dict[str, Any]:
    """The run in the results form of ``evalsi run``: one record per input row, one sample per rollout."""
    records: dict[str, RecordResult] = {}
    for row in rows:
        record = records.get(row.row_id)
        if record is None:
            prompt = [m for m in row.messages if m.get("role") != "assistant"] or row.messages
            record = records[row.row_id] = RecordResult(
                row.row_id, len(records), prompt, row.ground_truth, row.row_id, []
            )
        score = Score(row.score, "ok", row.reason) if row.rollout_error is None else Score.error(row.reason or "")
        record.samples.append(SampleResult(row.last_text, None, row.tokens, row.latency, {METRIC: score}))
    summary = summarize(list(records.values()), [MetricInfo(METRIC)], PassKSpec(), [], "zero")
    return {
        "version": 1,
        "kind": "RunResults",
        "name": test_id,
        "status": "complete",
        "spec": settings,
        "target": {"kind": "evaluation-test", "completionParams": settings.get("completionParams")},
        "fingerprints": {},
        "metrics": [{"name": METRIC, "threshold": 1.0}],
        "onError": "zero",
        "timings": {},
        "summary": summary.to_dict(),
        "evaluationTest": {
            "id": test_id,
            "passed": result.passed,
            "score": result.score,
            "standardError": result.standard_error,
            "threshold": None
            if threshold is None
            else {"success": threshold.success, "standardError": threshold.standard_error},
            "rollouts": result.rollouts,
            "failedRollouts": result.failed_rollouts,
            "perVariant": result.per_variant,
        },
        "records": [r.to_json() for r in records.values()],
    }


def worst_rows_table(rows: Sequence[EvaluationRow], limit: int = 10) -> str:
    """The lowest-scored rollouts as a plain-text table (what a failing test prints)."""
    worst = sorted(rows, key=lambda r: (float(r.score or 0.0), r.row_id))[:limit]
    lines = [f"{'row':<18} {'params':<24} {'run':>3} {'score':>6}  reason / reply"]
    for row in worst:
        said = row.reason or row.last_text
        said = " ".join(said.split())
        said = said if len(said) <= 70 else said[:67] + "..."
        lines.append(f"{row.row_id[:18]:<18} {row.variant[:24]:<24} {row.run:>3} {float(row.score or 0):>6.3f}  {said}")
    return "\n".join(lines)
