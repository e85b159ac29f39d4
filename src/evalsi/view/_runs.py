"""Runs read for viewing: a results file (and the journal of a run in progress), its summary and a row index.

A results file is read once per change (its size and modification time, and its journal's, are the cache key).
The list page needs only the header, which comes before ``records`` in the file, so it is parsed on its own.
A run still in progress has no summary yet: it is worked out from the records finished so far.
"""

from __future__ import annotations

import math
import mmap
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

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
    """A results file without its records (fast for large files: only the bytes before the records are read).

    Raises:
        DataError: The file is not a readable results file.

    """
    head = b""
    try:
        with path.open("rb") as handle:
            while (cut := head.find(_RECORDS_KEY)) < 0:
                chunk = handle.read(1 << 16)
                if not chunk:
                    break
                head += chunk
    except OSError as exc:
        raise DataError(f"not readable: {exc}", file=str(path)) from None
    if cut > 0:
        header = _parse_header(head[:cut])
        if header is not None:
            return header
    full = read_results(path)
    full.pop("records", None)
    return full


def _parse_header(head: bytes) -> dict[str, Any] | None:
    try:
        header = orjson.loads(head.rstrip().rstrip(b",") + b"\n}")
    except orjson.JSONDecodeError:
        return None
    if isinstance(header, dict) and header.get("kind") == "RunResults" and header.get("version") == 1:
        return header
    return None


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
        "name": str(header.get("name") or path.stem),
        "target": describe_target(target),
        "date": timings.get("finished") or timings.get("started"),
        "status": status,
        "metrics": {k: v.get("mean") for k, v in metrics.items() if isinstance(v, dict)},
        "gates": [g.get("passed") for g in (header.get("summary") or {}).get("gates") or []],
    }


def describe_target(target: Any) -> str:
    """A target in a few words: its model and endpoint, or its callable."""
    if not isinstance(target, dict):
        return str(target or "")
    if "callable" in target:
        return str(target["callable"])
    if target.get("description"):
        return str(target["description"])
    parts = [str(target[k]) for k in ("model", "baseUrl", "base_url") if target.get(k)]
    return " @ ".join(parts) if parts else orjson.dumps(target).decode()


@dataclass
class RecordStats:
    """What the table shows of a record besides its text: mean per metric, statuses, tokens, latency."""

    values: list[float]
    statuses: frozenset[str]
    tokens: float
    latency: float


def record_stats(record: dict[str, Any], metrics: list[str], on_error: OnError) -> RecordStats:
    """A record's mean per metric over its samples (after the ``onError`` policy), statuses, tokens, latency."""
    samples = record.get("samples") or []
    seen: set[str] = set()
    sums = dict.fromkeys(metrics, 0.0)
    counts = dict.fromkeys(metrics, 0)
    tok, tok_n, lat = 0.0, 0, 0.0
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
    nan = math.nan
    return RecordStats(
        [sums[m] / counts[m] if counts[m] else nan for m in metrics],
        frozenset(seen),
        tok / tok_n if tok_n else nan,
        lat / len(samples) if samples else nan,
    )


class Records(Sequence[dict[str, Any]]):
    """A run's records, each parsed from its bytes when first asked for (a page needs only a few of them).

    Either already parsed, or a buffer (the mapped file) holding ``count`` records between ``body`` and ``end``:
    where each one starts is found when a record at or past it is first asked for, so opening a large run costs
    one count over the bytes, not a pass over the records.
    """

    def __init__(
        self,
        buffer: bytes | mmap.mmap | None = None,
        count: int = 0,
        body: int = 0,
        end: int = 0,
        parsed: list[dict[str, Any]] | None = None,
    ) -> None:
        self._buffer = buffer
        self._view = memoryview(buffer) if buffer is not None else None
        self._starts: list[int] = []
        self._next = body - 1
        self._end = end
        self._lock = threading.Lock()
        self._parsed: list[dict[str, Any] | None] = list(parsed) if parsed is not None else [None] * count

    def __len__(self) -> int:
        return len(self._parsed)

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        record = self._parsed[i]
        if record is None:
            record = self._parsed[i] = self._parse(i)
        return record

    def peek(self, i: int) -> dict[str, Any]:
        """Record ``i`` parsed without keeping it (the index pass touches every record once)."""
        record = self._parsed[i]
        return self._parse(i) if record is None else record

    def scan(self) -> Iterator[dict[str, Any]]:
        """Every record in order, parsed without being kept (one pass for the row index)."""
        if self._view is None or len(self) == 0:
            yield from (r for r in self._parsed if r is not None)
            return
        self._span(len(self) - 1)  # every start found, in one go
        view, starts, loads = self._view, self._starts, orjson.loads
        cut = len(_RECORD_SEPARATOR)
        for i in range(len(starts) - 1):
            record = self._parsed[i]
            yield record if record is not None else loads(view[starts[i] : starts[i + 1] - cut])
        last = self._parsed[-1]
        yield last if last is not None else loads(view[starts[-1] : self._end])

    def _span(self, i: int) -> tuple[int, int]:
        with self._lock:
            starts = self._starts
            if len(starts) <= i + 1 and self._next >= 0:
                assert self._buffer is not None
                find = self._buffer.find
                at = self._next
                while len(starts) <= i + 1 and at >= 0:
                    at = find(_RECORD_START, at, self._end)
                    if at >= 0:
                        starts.append(at + len(_RECORD_START) - 2)  # the brace
                        at += len(_RECORD_START)
                self._next = at
            stop = starts[i + 1] - len(_RECORD_SEPARATOR) if i + 1 < len(starts) else self._end
            return starts[i], stop

    def _parse(self, i: int) -> dict[str, Any]:
        assert self._view is not None
        start, stop = self._span(i)
        record = orjson.loads(self._view[start:stop])
        if not isinstance(record, dict):
            raise DataError(f"record {i} is not an object")
        return record


_RECORD_START = b"\n    {\n"
_RECORD_SEPARATOR = b",\n    "
"""``evalsi run`` writes with two-space indentation: a record opens with a brace alone on its line at four spaces,
and a newline never occurs inside a JSON string, so records are found without parsing them."""


def _count(data: bytes | mmap.mmap, pattern: bytes, start: int, end: int, window: int = 1 << 20) -> int:
    """Occurrences of ``pattern`` starting in ``[start, end)`` (an mmap has no ``count``: it is read in windows)."""
    total = 0
    for a in range(start, end, window):
        b = min(a + window, end)
        total += data[a : min(b + len(pattern) - 1, end)].count(pattern)
    return total


def split_records(data: bytes | mmap.mmap) -> tuple[dict[str, Any], Records] | None:
    """The header and lazily parsed records of an indented results file, or None when it is laid out otherwise."""
    cut = data.find(_RECORDS_KEY)
    if cut < 0:
        return None
    header = _parse_header(bytes(memoryview(data)[:cut]))
    body = cut + len(_RECORDS_KEY)
    end = data.rfind(b"\n  ]")  # the records close the file, but for sections after them (parsed below)
    if header is None or end < body - 1:
        return None
    tail = bytes(memoryview(data)[end + 4 :]).strip()
    if tail.startswith(b","):  # sections written after the records (a checkpoint's metadata)
        try:
            header.update(orjson.loads(b"{" + tail[1:]))
        except orjson.JSONDecodeError:
            return None
    count = _count(data, _RECORD_START, body - 1, end)
    if count == 0 and bytes(memoryview(data)[body:end]).strip():
        return None
    return header, Records(data, count, body, end)


@dataclass
class RowIndex:
    """Per-record columns for sorting and filtering a run's records without touching the records again."""

    metrics: list[str]
    values: dict[str, list[float]]
    statuses: list[frozenset[str]]
    tokens: list[float]
    latency: list[float]
    keys: list[str]
    _search: list[str] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def search_text(self, records: Records) -> list[str]:
        """Lower-cased text of every record (id, prompt, reference, completions), built on the first search."""
        with self._lock:
            if self._search is None:
                self._search = [_record_text(r).lower() for r in records.scan()]
            return self._search


def _record_text(record: dict[str, Any]) -> str:
    parts = [
        str(record.get("id") or ""),
        str(record.get("key") or ""),
        prompt_text(record.get("prompt")),
        _text(record.get("reference")),
    ]
    parts += [_text(s.get("completion")) for s in record.get("samples") or []]
    return "\n".join(parts)


def build_index(records: Records, metrics: list[str], on_error: OnError) -> RowIndex:
    """The table's columns for every record (one tight pass: a large run has 100,000 records or more)."""
    nan = math.nan
    slot = {m: j for j, m in enumerate(metrics)}
    width = len(metrics)
    zero_errors = on_error == "zero"
    columns: list[list[float]] = [[] for _ in metrics]
    statuses: list[frozenset[str]] = []
    tokens: list[float] = []
    latency: list[float] = []
    keys: list[str] = []
    shared: dict[frozenset[str], frozenset[str]] = {}  # a few distinct status sets, one object each
    for record in records.scan():
        samples = record.get("samples") or []
        sums = [0.0] * width
        counts = [0] * width
        seen: set[str] = set()
        tok, tok_n, lat = 0.0, 0, 0.0
        for sample in samples:
            for name, score in (sample.get("scores") or {}).items():
                status = score.get("status", "ok")
                seen.add(status)
                j = slot.get(name)
                if j is None or status == "skipped":
                    continue
                if status == "error":
                    if zero_errors:
                        counts[j] += 1
                    continue
                value = score.get("value")
                if value is not None:
                    sums[j] += value
                    counts[j] += 1
            t = sample.get("tokens")
            if t is not None:
                tok += t
                tok_n += 1
            lat += sample.get("latency") or 0.0
        for j in range(width):
            columns[j].append(sums[j] / counts[j] if counts[j] else nan)
        frozen = frozenset(seen)
        statuses.append(shared.setdefault(frozen, frozen))
        tokens.append(tok / tok_n if tok_n else nan)
        latency.append(lat / len(samples) if samples else nan)
        keys.append(str(record.get("key")))
    return RowIndex(metrics, dict(zip(metrics, columns, strict=True)), statuses, tokens, latency, keys)


@dataclass
class RunData:
    """One run as the viewer shows it; the row index is built in the background when the run is opened."""

    path: Path
    header: dict[str, Any]
    records: Records
    summary: dict[str, Any]
    metrics: list[MetricInfo]
    on_error: OnError
    status: str
    _index: Future[RowIndex] = field(default_factory=Future)
    _started: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def name(self) -> str:
        """The run's name (the spec's ``metadata.name``), else the file's."""
        return str(self.header.get("name") or self.path.stem)

    @property
    def metric_names(self) -> list[str]:
        """The scored metrics (components), in the file's order."""
        return [m.name for m in self.metrics]

    def ensure_index(self) -> None:
        """Start building the row index (then the search text) on a background thread, unless already started."""
        with self._lock:
            if self._started:
                return
            self._started = True
        names, records, on_error, future = self.metric_names, self.records, self.on_error, self._index

        def build() -> None:
            try:
                index = build_index(records, names, on_error)
            except Exception as exc:  # a malformed record: surfaces when the index is asked for
                future.set_exception(DataError(f"malformed record: {exc}", file=str(self.path)))
                return
            future.set_result(index)
            index.search_text(records)  # then the text to search, so a first search rarely waits

        threading.Thread(target=build, name="evalsi-view-index", daemon=True).start()

    @property
    def index(self) -> RowIndex:
        """The row index (starts it, or waits for the background build, the first time)."""
        self.ensure_index()
        return self._index.result()

    @property
    def by_key(self) -> dict[str, int]:
        """Record positions by key."""
        return {k: i for i, k in enumerate(self.index.keys)}

    def stats(self, position: int) -> RecordStats:
        """One record's table columns, from the index when it is built, else from the record itself."""
        if self._index.done():
            index = self._index.result()
            return RecordStats(
                [index.values[m][position] for m in index.metrics],
                index.statuses[position],
                index.tokens[position],
                index.latency[position],
            )
        return record_stats(self.records[position], self.metric_names, self.on_error)


def load_run(path: Path) -> RunData:
    """A results file, merged with its journal when the run is in progress, with its summary and row index.

    Records are found without being parsed when the file is laid out as ``evalsi run`` writes it; the row index
    (needed to sort, filter and search) is built later (``ensure_index``), so the first page shows at once.

    Raises:
        DataError: The file is not a readable results file.

    """
    journal = journal_path(path)
    live = journal.exists()
    split = None if live else split_records(_map(path))
    if split is not None:
        data, records = split
    else:
        data = read_results(path)
        raw: list[dict[str, Any]] = list(data.pop("records", None) or [])
        records = Records(parsed=_merge_journal(raw, journal) if live else raw)
    try:
        metrics = [MetricInfo(str(m["name"]), float(m.get("threshold", 1.0))) for m in data.get("metrics") or []]
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"malformed metrics: {exc}", file=str(path)) from None
    on_error: OnError = "zero"
    if data.get("onError") in ("none", "raise"):
        on_error = data["onError"]
    summary = data.get("summary")
    if live or not isinstance(summary, dict):
        summary = _summarize(data, records[:], metrics, on_error, path)
    status = str(data.get("status", "?"))
    if status != "complete" and live:
        status = "running"
    return RunData(path, data, records, summary, metrics, on_error, status)


def _map(path: Path) -> bytes | mmap.mmap:
    """The file's bytes, memory-mapped (read-only) when it can be; the records are parsed from there on demand."""
    try:
        with path.open("rb") as handle:
            try:
                return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError:  # an empty file cannot be mapped
                return handle.read()
    except OSError as exc:
        raise DataError(f"not readable: {exc}", file=str(path)) from None


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
