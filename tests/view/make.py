"""Results files for the viewer's tests, written by evalsi's own results writer and summary (the real format)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from evalsi.evaluators import Score, Status
from evalsi.runs import MetricInfo, RecordResult, SampleResult
from evalsi.runs._results import ResultsWriter, fingerprint
from evalsi.runs._summary import summarize
from evalsi.specs import GateSpec, PassKSpec

HOSTILE = '<script>document.title="pwned"</script><img src=x onerror="document.title=\'pwned\'">'


def record(
    index: int,
    values: Sequence[float | bool | None],
    *,
    completion: str | None = None,
    status: Status = "ok",
    prompt: Any = None,
    record_id: str | None = None,
) -> RecordResult:
    """One record of the metric ``acc`` with one sample per value (a None value is an error)."""
    samples = []
    for s, value in enumerate(values):
        score = Score(
            value,
            "error" if value is None else status,
            "the grader timed out" if value is None else f"answer {s} of record {index}",
        )
        samples.append(
            SampleResult(
                completion if completion is not None else f"answer {s} for problem {index}",
                "stop",
                10 + index + s,
                0.01 * (index + 1),
                {"acc": score},
            )
        )
    key = record_id or f"r{index}"
    return RecordResult(
        key,
        index,
        prompt if prompt is not None else f"problem number {index}: what is {index}+1?",
        str(index + 1),
        record_id or key,
        samples,
    )


def write_run(
    path: Path,
    name: str,
    records: Sequence[RecordResult],
    *,
    status: str = "complete",
    gates: Sequence[dict[str, Any]] = ({"metric": "acc", "min": 0.5},),
    pass_k: Sequence[int] = (1,),
    checkpoint: dict[str, Any] | None = None,
    summary: bool = True,
) -> Path:
    """Write a results file the way ``evalsi run`` does (with a checkpoint evaluation's section when given)."""
    metrics = [MetricInfo("acc", 1.0)]
    pk = PassKSpec.model_validate({"atK": {"metrics": ["acc"], "k": list(pass_k)}})
    gate_specs = [GateSpec.model_validate(g) for g in gates]
    spec = {
        "target": {"model": f"model-{name}", "baseUrl": "http://127.0.0.1:8000/v1"},
        "samples": 2,
        "passK": pk.model_dump(mode="json", by_alias=True, exclude_none=True),
        "gates": list(gates),
    }
    header: dict[str, Any] = {
        "name": name,
        "spec": spec,
        "target": spec["target"],
        "fingerprints": {"generation": fingerprint(name), "scoring": fingerprint("acc")},
        "metrics": [{"name": "acc", "threshold": 1.0}],
        "onError": "zero",
    }
    if checkpoint is not None:  # as checkpoint evaluation writes it: the section with the results, in one write
        header["checkpoint"] = checkpoint
    writer = ResultsWriter(path, header)
    extra: dict[str, Any] = {}
    if summary:
        extra = {
            "timings": {"started": "2026-11-30T10:00:00+00:00", "finished": "2026-11-30T10:05:00+00:00"},
            "summary": summarize(records, metrics, pk, gate_specs, "zero").to_dict(),
        }
    writer.write(records, status=status, extra=extra)
    return path


def simple_run(path: Path, name: str, correct: Sequence[bool], **kw: Any) -> Path:
    """A run with two samples per record, both correct or both wrong as given."""
    return write_run(path, name, [record(i, [c, c]) for i, c in enumerate(correct)], **kw)


def build_results(root: Path) -> Path:
    """Two comparable runs, a run with a hostile completion, a learning curve and a reward score file."""
    root.mkdir(parents=True)
    simple_run(root / "a.results.json", "run-a", [True] * 6 + [False] * 6)
    simple_run(root / "b.results.json", "run-b", [True] * 10 + [False] * 2)
    write_run(
        root / "hostile.results.json",
        "hostile",
        [record(0, [True], completion=HOSTILE), record(1, [None], completion="plain")],
    )
    curve = root / "logs" / "grpo-1" / "forgetting"
    curve.mkdir(parents=True)
    for step, correct in ((None, 30), (100, 31), (200, 12)):
        label = "base" if step is None else str(step)
        section = {"trainingRun": "grpo-1", "step": step, "label": label, "location": f"out/checkpoint-{label}"}
        simple_run(
            curve / ("base.json" if step is None else f"step-{step}.json"),
            f"grpo-1 {label}",
            [True] * correct + [False] * (40 - correct),
            checkpoint=section,
        )
    rows = [
        {
            "index": i,
            "id": f"q{i}",
            "total": i / 10,
            "status": "ok" if i < 8 else "gated",
            "components": {
                "correct": {"value": i % 2 == 0, "status": "ok", "reason": f"reason {i}"},
                "length": {"value": None, "status": "skipped" if i == 3 else "error", "reason": None}
                if i in (3, 4)
                else {"value": 0.5, "status": "ok", "reason": None},
            },
        }
        for i in range(10)
    ]
    (root / "scores.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return root
