"""Completed evaluation jobs as runs the results viewer reads: one results file per job, one record per row.

A job's output dataset holds each input row with its ``evaluation_result`` (score, reason, metrics) or its
``evaluation_error``. Here each row becomes a record of an ``evalsi run`` results file: the prompt is the row's
messages before the reply, the sample is the reply, ``score`` its value (an error where the row errored) and
every number the row's metrics hold a further metric, so the viewer lists, opens and compares jobs as it does
runs. A completed job never changes; a job whose output dataset was deleted is not listed.

Listing reads the jobs' rows alone (their metrics are the run list's means); a job's output dataset is read when
the job is opened, and nothing is written to disk.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from evalsi.evaluators import Score
from evalsi.runs import MetricInfo, RecordResult, SampleResult
from evalsi.runs._summary import summarize
from evalsi.server._errors import ServiceError
from evalsi.server.evaluation._datasets import Datasets
from evalsi.server.evaluation._overview_store import EvaluationOverview
from evalsi.specs import PassKSpec
from evalsi.view import Records

SCORE = "score"
"""The metric every job reports: the evaluator's score of the row."""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: keep the text ones
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return "" if content is None else str(content)


def job_record(row: Mapping[str, Any], index: int) -> RecordResult:
    """One output row as a record: prompt, the reply as its sample, and the row's scores."""
    messages = [m for m in row.get("messages") or [] if isinstance(m, Mapping)]
    reply = messages[-1] if messages and messages[-1].get("role") == "assistant" else None
    prompt = [dict(m) for m in (messages[:-1] if reply is not None else messages)]
    scores: dict[str, Score] = {}
    result = row.get("evaluation_result")
    if isinstance(result, Mapping):
        value, reason = result.get("score"), result.get("reason")
        text = None if reason is None else str(reason)
        if isinstance(value, int | float) and not isinstance(value, bool):
            scores[SCORE] = Score(float(value), "ok", text)
        else:
            scores[SCORE] = Score.error(text or "the row has no score")
        for name, metric in (result.get("metrics") or {}).items():
            number = metric.get("score") if isinstance(metric, Mapping) else metric
            if isinstance(number, int | float) and not isinstance(number, bool) and name != SCORE:
                scores[str(name)] = Score(float(number), "ok", None)
    else:
        scores[SCORE] = Score.error(str(row.get("evaluation_error") or "the row was not scored"))
    row_id = row.get("id", row.get("row_id"))
    key = str(row_id) if row_id is not None else str(index)
    sample = SampleResult(_text(reply.get("content")) if reply is not None else "", scores=scores)
    return RecordResult(key, index, prompt, row.get("ground_truth"), key, [sample])


def job_document(job: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A completed job in the results form of ``evalsi run``."""
    records = [job_record(row, index) for index, row in enumerate(rows)]
    names = [SCORE, *sorted({m for r in records for s in r.samples for m in s.scores} - {SCORE})]
    metrics = [MetricInfo(name) for name in names]
    summary = summarize(records, metrics, PassKSpec(), [], "none")  # as the job's own means: errored rows left out
    return {
        "version": 1,
        "kind": "RunResults",
        "name": f"job {job['job_id']}",
        "status": "complete",
        "spec": {"evaluator": job["evaluator_id"], "inputDataset": job["input_dataset"]},
        "target": {
            "kind": "evaluation-job",
            "description": f"evaluator {job['evaluator_id']} on {job['input_dataset']}",
            "outputDataset": job["output_dataset"],
        },
        "fingerprints": {},
        "metrics": [{"name": m.name, "threshold": m.threshold} for m in metrics],
        "onError": "none",
        "timings": {"started": _iso(job["created_at"]), "finished": _iso(job["updated_at"])},
        "summary": summary.to_dict(),
        "evaluationJob": {
            "id": job["job_id"],
            "metrics": orjson.loads(job["metrics"] or "{}"),
            "outputStats": orjson.loads(job["output_stats"] or "{}"),
        },
        "records": [r.to_json() for r in records],
    }


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()


@dataclass(frozen=True)
class JobRow:
    """A completed job as listing reads it (its output dataset unread)."""

    job_id: str
    row: dict[str, Any]


class CompletedJobs:
    """Reads a project's completed evaluation jobs for the viewer (the overview's queries are scoped to the project)."""

    def __init__(self, overview: EvaluationOverview, datasets: Datasets) -> None:
        self.overview = overview
        self.datasets = datasets

    def rows(self, project: str) -> list[JobRow]:
        """Every completed job of the project whose output dataset still exists, newest first."""
        return [JobRow(str(row["job_id"]), row) for row in self.overview.completed_jobs(project)]

    def open(self, project: str, job_id: str) -> tuple[dict[str, Any], Records] | None:
        """A completed job as a run's header and records, or None when it (or its output dataset) is gone."""
        job = self.overview.completed_job(project, job_id)
        if job is None:
            return None
        try:
            rows = self.datasets.rows(project, job["output_dataset"], "outputDataset")
        except ServiceError:
            return None
        document = job_document(job, rows)
        records = document.pop("records")
        return document, Records(raw=[orjson.dumps(record) for record in records])


def job_headline(job: Mapping[str, Any]) -> dict[str, Any]:
    """The run list's entry of a completed job, from its row: the job's own metrics are the means listed."""
    try:
        metrics = orjson.loads(job["metrics"] or "{}")
    except orjson.JSONDecodeError:
        metrics = {}
    means = {
        str(name): float(value)
        for name, value in (metrics.items() if isinstance(metrics, dict) else ())
        if isinstance(value, int | float) and not isinstance(value, bool)
    }
    return {
        "name": f"job {job['job_id']}",
        "target": f"evaluator {job['evaluator_id']} on {job['input_dataset']}",
        "date": _iso(job["updated_at"]),
        "status": "complete",
        "metrics": means,
        "gates": [],
    }
