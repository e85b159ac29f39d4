"""Completed evaluation jobs as runs the results viewer reads: one results file per job, one record per row.

A job's output dataset holds each input row with its ``evaluation_result`` (score, reason, metrics) or its
``evaluation_error``. Here each row becomes a record of an ``evalsi run`` results file: the prompt is the row's
messages before the reply, the sample is the reply, ``score`` its value (an error where the row errored) and
every number the row's metrics hold a further metric, so the viewer lists, opens and compares jobs as it does
runs. A completed job never changes; a job whose output dataset was deleted is skipped.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import Engine, select

from evalsi._util.atomic import atomic_writer
from evalsi.evaluators import Score
from evalsi.runs import MetricInfo, RecordResult, SampleResult, summarize
from evalsi.server._datasets import Datasets
from evalsi.server._errors import ServiceError
from evalsi.server._evaluators_tables import evaluation_jobs
from evalsi.server._ui_runs import safe_name
from evalsi.specs import PassKSpec

CLOCK_MARGIN = 300.0
"""Seconds before the newest completion already read that the next read starts at: replicas' clocks differ."""

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


class JobExporter:
    """Writes a project's completed evaluation jobs into its viewer directory, each once."""

    def __init__(self, engine: Engine, datasets: Datasets) -> None:
        self.engine = engine
        self.datasets = datasets
        self._done: dict[str, set[str]] = {}
        self._since: dict[str, float] = {}
        self._lock = threading.Lock()

    def export(self, project: str, directory: Path) -> None:
        """Write the jobs completed since the last call."""
        with self._lock:
            done = self._done.setdefault(project, set())
            since = self._since.get(project, float("-inf")) - CLOCK_MARGIN
            query = select(evaluation_jobs).where(
                evaluation_jobs.c.project == project,
                evaluation_jobs.c.state == "COMPLETED",
                evaluation_jobs.c.updated_at >= since,  # completed jobs never change: only the newer ones are read
            )
            with self.engine.connect() as connection:
                jobs = [dict(row) for row in connection.execute(query).mappings()]
            for job in jobs:
                self._since[project] = max(self._since.get(project, float("-inf")), job["updated_at"])
                if job["job_id"] in done:
                    continue
                done.add(job["job_id"])
                try:
                    rows = self.datasets.rows(project, job["output_dataset"], "outputDataset")
                except ServiceError:
                    continue  # the output dataset was deleted: nothing to show
                path = directory / "evaluation-jobs" / f"{safe_name(job['job_id'])}.results.json"
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                with atomic_writer(path) as handle:
                    handle.write(orjson.dumps(job_document(job, rows)))
