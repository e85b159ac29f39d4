"""An evaluation test run's verdict: aggregate score, standard error, the results document, the failure table."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from evalsi.evaluators import Score
from evalsi.runs import MetricInfo, RecordResult, SampleResult
from evalsi.runs._summary import summarize
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


def summary_line(name: str, result: Verdict) -> str:
    """``name: score 0.8000 ± 0.0400 (standard error) over 5 rollouts`` (no ``± nan`` when it is undefined)."""
    if math.isnan(result.standard_error):
        spread = " (no standard error: it needs two or more rows)"
    else:
        spread = f" ± {result.standard_error:.4f} (standard error)"
    return f"{name}: score {result.score:.4f}{spread} over {result.rollouts} rollouts"


def case_id(test_id: str, case: str) -> str:
    """How a case is named in reports and stored results: ``module::test[case]`` (``module::test`` alone)."""
    return f"{test_id}[{case}]" if case else test_id


def results_document(
    test_id: str,
    case: str,
    rows: Sequence[EvaluationRow],
    result: Verdict,
    threshold: Threshold | None,
    settings: dict[str, Any],
    order: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The run in the results form of ``evalsi run``: one record per input row, one sample per rollout.

    The run is named by its case (``module::test[case]``, see :func:`case_id`); ``order`` gives each row's input
    position (``row_id`` -> index), so records keep the dataset's order whatever order the rollouts finished in.
    """
    positions = dict(order or {})
    records: dict[str, RecordResult] = {}
    for row in sorted(rows, key=lambda r: positions.get(r.row_id, len(positions))):
        record = records.get(row.row_id)
        prompt, transcript = _split_episode(row)
        if record is None:
            record = records[row.row_id] = RecordResult(
                row.row_id, len(records), prompt, row.ground_truth, row.dataset_id, []
            )
        score = Score(row.score, "ok", row.reason) if row.rollout_error is None else Score.error(row.reason or "")
        sample = SampleResult(row.last_text, None, row.tokens, row.latency, {METRIC: score}, transcript)
        if "reward" in row.metadata:  # an agent episode (AgentLoop): its reward and the checker's verdict
            sample.episode = {k: row.metadata.get(k) for k in ("reward", "steps", "truncated", "checker")}
        record.samples.append(sample)
    summary = summarize(list(records.values()), [MetricInfo(METRIC)], PassKSpec(), [], "zero")
    params = settings.get("completionParams") or []
    name = case_id(test_id, case)
    return {
        "version": 1,
        "kind": "RunResults",
        "name": name,
        "status": "complete",
        "spec": settings,
        "target": {"kind": "evaluation-test", "description": _describe(params), "completionParams": params},
        "fingerprints": {},
        "metrics": [{"name": METRIC, "threshold": 1.0}],
        "onError": "zero",
        "timings": {},
        "summary": summary.to_dict(),
        "evaluationTest": {
            "id": name,
            "test": test_id,
            "case": case,
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


def _split_episode(row: EvaluationRow) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """A row's prompt and, for an agent episode, its turns after the prompt (None for a single answer).

    An episode (tool calls or tool output among the messages, or a reward in the metadata) keeps every turn from
    the model's first on; otherwise the prompt is the messages but the model's, as it always was.
    """
    messages = [dict(m) for m in row.messages]  # plain dicts: the results file's JSON, whatever the row's types
    episode = "reward" in row.metadata or any(m.get("role") == "tool" or m.get("tool_calls") for m in messages)
    if not episode:
        return [m for m in messages if m.get("role") != "assistant"] or messages, None
    first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))
    return messages[:first], messages[first:]


def _describe(params: Sequence[Mapping[str, Any]]) -> str:
    """What the rollouts came from, in a few words: ``model @ base_url``, entries joined by `` vs ``."""
    if not params:
        return "pre-generated rows"
    named = [" @ ".join(str(p[k]) for k in ("model", "base_url") if p.get(k)) for p in params]
    return " vs ".join(n or orjson.dumps(p, default=repr).decode() for n, p in zip(named, params, strict=True))


def worst_rows_table(rows: Sequence[EvaluationRow], limit: int = 10, order: Mapping[str, int] | None = None) -> str:
    """The lowest-scored rollouts as a plain-text table (what a failing test prints).

    Each row is named by its id (else where it came from: ``capitals.jsonl:5``) and its prompt; the params
    column appears when the rollouts used several completion params, the run column when there were repeats.
    """
    positions = dict(order or {})
    worst = sorted(rows, key=lambda r: (float(r.score or 0.0), positions.get(r.row_id, len(positions)), r.run))
    worst = worst[:limit]
    several_params = len({r.variant for r in rows}) > 1
    several_runs = len({r.run for r in rows}) > 1
    name_width = min(max([len(r.label) for r in worst] + [3]), 28)
    params_width = min(max([len(r.variant) for r in worst] + [6]), 28)
    header = [f"{'row':<{name_width}}", f"{'prompt':<40}"]
    header += [f"{'params':<{params_width}}"] if several_params else []
    header += [f"{'run':>3}"] if several_runs else []
    lines = [" ".join([*header, f"{'score':>6}", " reason / reply"])]
    for row in worst:
        cells = [f"{_cut(row.label, name_width):<{name_width}}", f"{_cut(row.prompt_text, 40):<40}"]
        cells += [f"{_cut(row.variant, params_width):<{params_width}}"] if several_params else []
        cells += [f"{row.run:>3}"] if several_runs else []
        said = " ".join((row.reason or row.last_text).split())
        lines.append(" ".join([*cells, f"{float(row.score or 0):>6.3f}", f" {_cut(said, 70)}"]))
    return "\n".join(lines)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."
