"""Runs read for viewing: a results file (and the journal of a run in progress), its summary and a row index.

A results file is read once per change (its size and modification time, and its journal's, are the cache key).
The list page needs only the header, which comes before ``records`` in the file, so it is parsed on its own.
A run still in progress has no summary yet: it is worked out from the records finished so far.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from evalsi.errors import DataError
from evalsi.runs import MetricInfo, RecordResult, journal_path, read_results, summarize
from evalsi.specs import GateSpec, OnError, PassKSpec

STATUSES = ("ok", "error", "skipped")

_RECORDS_KEY = b'\n  "records": ['
"""Where the records start in a results file (written indented: a key at this depth is top level)."""


def stamp(path: Path) -> tuple[int, int, int, int]:
    """What identifies one version of a run on disk: its file's and its journal's size and mtime."""
    out: list[int] = []
    for p in (path, journal_path(path)):
        try:
            st = p.stat()
            out += [st.st_size, st.st_mtime_ns]
        except OSError:
            out += [-1, -1]
    return out[0], out[1], out[2], out[3]


def prompt_text(prompt: Any) -> str:
    """A prompt as plain text: a string as is, chat messages as ``role: content`` lines."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        lines = []
        for message in prompt:
            if isinstance(message, dict):
                lines.append(f"{message.get('role', '?')}: {_text(message.get('content'))}")
            else:
                lines.append(str(message))
        return "\n".join(lines)
    return "" if prompt is None else str(prompt)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts
        return " ".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in value)
    return "" if value is None else str(value)


def read_header(path: Path) -> dict[str, Any]:
    """A results file without its records (fast for large files: the records are never parsed).

    Raises:
        DataError: The file is not a readable results file.

    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(f"not readable: {exc}", file=str(path)) from None
    cut = data.find(_RECORDS_KEY)
    if cut > 0:
        try:
            header = orjson.loads(data[:cut].rstrip().rstrip(b",") + b"\n}")
        except orjson.JSONDecodeError:
            header = None
        if isinstance(header, dict) and header.get("kind") == "RunResults":
            return header
    full = read_results(path)
    full.pop("records", None)
    return full


def headline(header: dict[str, Any], path: Path) -> dict[str, Any]:
    """What the run list shows of a run: name, target, date, status and the metrics' means."""
    spec = header.get("spec") or {}
    target = spec.get("target") or header.get("target") or {}
    timings = header.get("timings") or {}
    metrics = ((header.get("summary") or {}).get("metrics")) or {}
    status = str(header.get("status", "?"))
    if status != "complete" and journal_path(path).exists():
        status = "running"
    return {
        "name": str(header.get("name") or path.stem), "target": describe_target(target),
        "date": timings.get("finished") or timings.get("started"), "status": status,
        "metrics": {k: v.get("mean") for k, v in metrics.items() if isinstance(v, dict)},
        "gates": [g.get("passed") for g in (header.get("summary") or {}).get("gates") or []],
    }


def describe_target(target: Any) -> str:
    """A target in a few words: its model and endpoint, or its callable."""
    if not isinstance(target, dict):
        return str(target or "")
    if "callable" in target:
        return str(target["callable"])
    parts = [str(target[k]) for k in ("model", "baseUrl", "base_url") if target.get(k)]
    return " @ ".join(parts) if parts else orjson.dumps(target).decode()


@dataclass
class RowIndex:
    """Per-record columns for sorting and filtering a run's records without touching the records again."""

    metrics: list[str]
    values: dict[str, list[float]]
    statuses: list[frozenset[str]]
    tokens: list[float]
    latency: list[float]
    _search: list[str] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def search_text(self, records: list[dict[str, Any]]) -> list[str]:
        """Lower-cased text of every record (id, prompt, reference, completions), built on the first search."""
        with self._lock:
            if self._search is None:
                self._search = [_record_text(r).lower() for r in records]
            return self._search


def _record_text(record: dict[str, Any]) -> str:
    parts = [str(record.get("id") or ""), str(record.get("key") or ""), prompt_text(record.get("prompt")),
             _text(record.get("reference"))]
    parts += [_text(s.get("completion")) for s in record.get("samples") or []]
    return "\n".join(parts)


def build_index(records: list[dict[str, Any]], metrics: list[str], on_error: OnError) -> RowIndex:
    """Each record's mean per metric (after the ``onError`` policy), statuses, mean tokens and latency."""
    nan = math.nan
    values: dict[str, list[float]] = {m: [] for m in metrics}
    statuses: list[frozenset[str]] = []
    tokens: list[float] = []
    latency: list[float] = []
    for record in records:
        samples = record.get("samples") or []
        seen: set[str] = set()
        sums = dict.fromkeys(metrics, 0.0)
        counts = dict.fromkeys(metrics, 0)
        tok = 0.0
        tok_n = 0
        lat = 0.0
        for sample in samples:
            for name, score in (sample.get("scores") or {}).items():
                status = score.get("status", "ok")
                seen.add(status)
                if name not in sums or status == "skipped":
                    continue
                value = score.get("value")
                if status == "error":
                    if on_error != "zero":
                        continue
                    value = 0.0
                if value is None:
                    continue
                sums[name] += float(value)
                counts[name] += 1
            if sample.get("tokens") is not None:
                tok += sample["tokens"]
                tok_n += 1
            lat += sample.get("latency") or 0.0
        for name in metrics:
            values[name].append(sums[name] / counts[name] if counts[name] else nan)
        statuses.append(frozenset(seen))
        tokens.append(tok / tok_n if tok_n else nan)
        latency.append(lat / len(samples) if samples else nan)
    return RowIndex(metrics, values, statuses, tokens, latency)


@dataclass
class RunData:
    """One run as the viewer shows it."""

    path: Path
    header: dict[str, Any]
    records: list[dict[str, Any]]
    summary: dict[str, Any]
    metrics: list[MetricInfo]
    status: str
    index: RowIndex
    by_key: dict[str, int]

    @property
    def name(self) -> str:
        """The run's name (the spec's ``metadata.name``), else the file's."""
        return str(self.header.get("name") or self.path.stem)


def load_run(path: Path) -> RunData:
    """A results file, merged with its journal when the run is in progress, with its summary and row index.

    Raises:
        DataError: The file is not a readable results file.

    """
    data = read_results(path)
    records: list[dict[str, Any]] = list(data.pop("records", None) or [])
    journal = journal_path(path)
    live = journal.exists()
    if live:
        records = _merge_journal(records, journal)
    try:
        metrics = [MetricInfo(str(m["name"]), float(m.get("threshold", 1.0))) for m in data.get("metrics") or []]
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"malformed metrics: {exc}", file=str(path)) from None
    on_error: OnError = "zero"
    if data.get("onError") in ("none", "raise"):
        on_error = data["onError"]
    summary = data.get("summary")
    if live or not isinstance(summary, dict):
        summary = _summarize(data, records, metrics, on_error, path)
    status = str(data.get("status", "?"))
    if status != "complete" and live:
        status = "running"
    index = build_index(records, [m.name for m in metrics], on_error)
    by_key = {str(r.get("key")): i for i, r in enumerate(records)}
    return RunData(path, data, records, summary, metrics, status, index, by_key)


def _merge_journal(records: list[dict[str, Any]], journal: Path) -> list[dict[str, Any]]:
    by_key = {str(r.get("key")): r for r in records}
    try:
        lines = journal.read_bytes().splitlines()
    except OSError:
        return records
    for line in lines:
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # the line being written
        if isinstance(entry, dict) and "key" in entry:
            by_key[str(entry["key"])] = entry
    return sorted(by_key.values(), key=lambda r: int(r.get("index", 0)))


def _summarize(
    data: dict[str, Any], records: list[dict[str, Any]], metrics: list[MetricInfo], on_error: OnError, path: Path
) -> dict[str, Any]:
    spec = data.get("spec") or {}
    try:
        pass_k = PassKSpec.model_validate(spec.get("passK") or {})
        gates = [GateSpec.model_validate(g) for g in spec.get("gates") or []]
        parsed = [RecordResult.from_json(r) for r in records]
    except (ValidationError, KeyError, TypeError, ValueError) as exc:
        raise DataError(f"malformed run: {exc}", file=str(path)) from None
    result: dict[str, Any] = summarize(parsed, metrics, pass_k, gates, on_error).to_dict()
    return result


class RunCache:
    """Runs read once per version on disk (thread-safe: the server answers from a thread pool)."""

    def __init__(self, capacity: int = 8) -> None:
        self.capacity = capacity
        self._items: dict[Path, tuple[tuple[int, int, int, int], RunData]] = {}
        self._lock = threading.Lock()

    def get(self, path: Path) -> RunData:
        """The run at ``path``, read again only when it changed."""
        key = stamp(path)
        with self._lock:
            hit = self._items.get(path)
            if hit is not None and hit[0] == key:
                return hit[1]
        run = load_run(path)
        with self._lock:
            self._items[path] = (key, run)
            while len(self._items) > self.capacity:
                self._items.pop(next(iter(self._items)))
        return run
