"""Comparing two results files record by record: every metric both runs report, paired by record key."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalsi.errors import DataError
from evalsi.runs._document import RunResult
from evalsi.runs._result_file import load_run_result
from evalsi.runs._results import RecordResult
from evalsi.runs._summary import MetricInfo, per_record_pass_k, record_values
from evalsi.specs import OnError
from evalsi.stats import Estimate, Flip, McNemar, PairedComparison, paired_comparison


@dataclass(frozen=True)
class MetricComparison:
    """One metric of run B against run A."""

    metric: str
    comparison: PairedComparison


@dataclass
class LoadedRun:
    """A results file read back: its name, metrics, ``onError`` policy and records."""

    path: str
    name: str
    metrics: list[MetricInfo]
    pass_k: list[str]
    on_error: OnError
    records: list[RecordResult]
    status: str = "complete"
    """``partial`` when the run was interrupted or some records failed to generate."""


def load_results(path: str | Path) -> LoadedRun:
    """Read a results file for comparison.

    Args:
        path: The results file.

    Raises:
        DataError: The file is not a readable results file.

    """
    return run_from_result(load_run_result(path), str(path))


def run_from_result(result: RunResult, source: str) -> LoadedRun:
    """A run's results (as :func:`evalsi.runs.load_run_result` reads them) ready for comparison.

    Raises:
        DataError: A record is malformed.

    """
    try:
        records = [RecordResult.from_json(r) for r in result.records]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DataError(f"malformed results file: {exc}", file=source) from None
    metrics = [MetricInfo(m.name, float(m.threshold)) for m in result.metrics]
    summary_metrics = result.summary.metrics if result.summary is not None else {}
    pass_k = [name for name in summary_metrics if name.startswith(("pass@", "pass^"))]
    on_error: OnError = result.on_error if result.on_error in ("none", "raise") else "zero"
    return LoadedRun(source, result.name, metrics, pass_k, on_error, records, result.status)


def run_from_document(data: Mapping[str, Any], source: str) -> LoadedRun:
    """A results document (as a results file holds it) ready for comparison; ``source`` names it in errors.

    Args:
        data: The results document.
        source: What names it in errors.

    Raises:
        DataError: A metric or record is malformed.

    """
    try:
        metrics = [MetricInfo(str(m["name"]), float(m.get("threshold", 1.0))) for m in data.get("metrics") or []]
        records = [RecordResult.from_json(r) for r in data.get("records") or []]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DataError(f"malformed results file: {exc}", file=source) from None
    summary_metrics = (data.get("summary") or {}).get("metrics") or {}
    pass_k = [name for name in summary_metrics if name.startswith(("pass@", "pass^"))]
    on_error = data.get("onError", "zero")
    return LoadedRun(
        source,
        str(data.get("name", source)),
        metrics,
        pass_k,
        on_error if on_error in ("zero", "none", "raise") else "zero",
        records,
        str(data.get("status") or "complete"),
    )


@dataclass(frozen=True)
class Overlap:
    """How many records two runs share (by pairing key), and how many only one of them has."""

    shared: int
    only_a: int
    only_b: int

    @property
    def fraction(self) -> float:
        """Shared records over the larger run's records (1 when both are empty)."""
        larger = max(self.shared + self.only_a, self.shared + self.only_b)
        return self.shared / larger if larger else 1.0


def record_overlap(a: LoadedRun, b: LoadedRun) -> Overlap:
    """The records A and B share, by pairing key.

    Args:
        a: Run A.
        b: Run B.

    """
    keys_a, keys_b = {r.key for r in a.records}, {r.key for r in b.records}
    return Overlap(len(keys_a & keys_b), len(keys_a - keys_b), len(keys_b - keys_a))


def per_record(run: LoadedRun, metric: str) -> dict[str, list[float]]:
    """Sample values (or one pass@k estimate) per record key, for pairing."""
    if metric.startswith(("pass@", "pass^")):
        head, _, base = metric.partition("/")
        info = next(m for m in run.metrics if m.name == base)
        k = int(head[5:])
        out: dict[str, list[float]] = {}
        for record in run.records:
            value = per_record_pass_k(record, metric, info, k, run.on_error)
            if value is not None:
                out[record.key] = [value]
        return out
    return {r.key: record_values(r, metric, run.on_error) for r in run.records}


def compare_runs(a: LoadedRun, b: LoadedRun, metrics: list[str] | None = None) -> list[MetricComparison]:
    """Paired comparisons of B against A for ``metrics`` (default: every metric both runs report).

    Args:
        a: Run A, the base.
        b: Run B, the candidate.
        metrics: The metrics to compare; None for every metric both report.

    Raises:
        DataError: A requested metric is missing from one run, or the runs share no metric.

    """
    names_a = [m.name for m in a.metrics] + a.pass_k
    names_b = set(m.name for m in b.metrics) | set(b.pass_k)
    wanted = metrics or [n for n in names_a if n in names_b]
    for name in wanted:
        for run, names in ((a, set(names_a)), (b, names_b)):
            if name not in names:
                raise DataError(f"has no metric {name!r} (it has: {', '.join(sorted(names))})", file=run.path)
    if not wanted:
        raise DataError(f"{a.path} and {b.path} share no metric to compare")
    return [MetricComparison(n, paired_comparison(per_record(a, n), per_record(b, n))) for n in wanted]


def comparison_to_dict(item: MetricComparison) -> dict[str, Any]:
    """JSON form of one metric's comparison.

    Args:
        item: The comparison.

    """
    c = item.comparison
    test: Mapping[str, Any] | None = None
    if c.mcnemar is not None:
        test = {"aOnly": c.mcnemar.a_only, "bOnly": c.mcnemar.b_only, "pValue": c.mcnemar.p_value}
    return {
        "metric": item.metric,
        "meanA": c.mean_a,
        "meanB": c.mean_b,
        "difference": c.difference.to_dict(),
        "significant": c.significant,
        "mcnemar": test,
        "pairs": c.pairs,
        "onlyA": c.only_a,
        "onlyB": c.only_b,
        "flips": [{"key": f.key, "a": f.a, "b": f.b, "direction": f.direction} for f in c.flips],
    }


def comparison_from_dict(data: Mapping[str, Any]) -> MetricComparison:
    """One metric's comparison read back from its JSON form (:func:`comparison_to_dict`, or a server's answer).

    Raises:
        DataError: A field is missing or of the wrong type.

    """

    def number(source: Mapping[str, Any] | None, key: str) -> float:
        value = (source or {}).get(key)
        return math.nan if value is None else float(value)

    try:
        raw = data.get("difference") or {}
        difference = Estimate.from_dict(raw)
        test = data.get("mcnemar")
        mcnemar = (
            None
            if not test
            else McNemar(int(test.get("aOnly") or 0), int(test.get("bOnly") or 0), number(test, "pValue"))
        )
        flips = [Flip(str(f["key"]), float(f["a"]), float(f["b"])) for f in data.get("flips") or []]
        comparison = PairedComparison(
            number(data, "meanA"),
            number(data, "meanB"),
            difference,
            mcnemar,
            flips,
            int(data.get("onlyA") or 0),
            int(data.get("onlyB") or 0),
        )
        return MetricComparison(str(data["metric"]), comparison)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DataError(f"malformed comparison: {exc!r}") from None
