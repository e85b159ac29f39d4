"""Runs read for viewing: a results file (and the journal of a run in progress), its summary and a row index.

A results file is read once per change (its size and modification time, and its journal's, are the cache key).
The list page needs only the header, which comes before ``records`` in the file, so it is parsed on its own.
A run still in progress has no summary yet: it is worked out from the records finished so far.
"""

from __future__ import annotations

import math
import mmap
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import orjson
from pydantic import ValidationError

from evalsi.errors import DataError
from evalsi.runs import LoadedRun, MetricInfo, RecordResult, RunHeader
from evalsi.runs._document import header_of, validation_message
from evalsi.runs._result_file import migrate_result
from evalsi.runs._results import journal_path, read_results
from evalsi.runs._summary import summarize
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
    """A results file without its records, read from at most :data:`MAX_HEADER_BYTES` of its beginning.

    The header is everything before the top-level ``records`` key, in the indented layout ``evalsi run`` writes
    and in compact JSON (what the server and :meth:`evalsi.runs.RunsClient.document` give) alike, so listing a
    run costs the same whatever its size. Reading grows geometrically until the key is found, so the work is
    linear in the header.

    Raises:
        DataError: The file is not readable, not JSON, or its header is not within the first bytes.

    """
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            head = b""
            want = _FIRST_READ
            while True:
                head += handle.read(want - len(head))
                cut = _records_at(head)
                if cut >= 0 or len(head) >= size or len(head) >= MAX_HEADER_BYTES:
                    break
                want = min(2 * want, MAX_HEADER_BYTES)
    except OSError as exc:
        raise DataError(f"not readable: {exc}", file=str(path)) from None
    header = _loads_object(head[:cut].rstrip().rstrip(b",") + b"}", path) if cut >= 0 else None
    if header is None or "kind" not in header:  # no header before the records: only a small file is read whole
        if size > MAX_HEADER_BYTES:
            raise DataError(
                f"no header before the records in the first {MAX_HEADER_BYTES >> 20} MiB: it is too large to list "
                "(open the run to read it whole)",
                file=str(path),
            )
        if len(head) < size:
            head += path.read_bytes()[len(head) :]
        header = _loads_object(head, path)
    header.pop("records", None)
    return header


def _loads_object(text: bytes, path: Path) -> dict[str, Any]:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise DataError(f"not a readable results file: {exc}", file=str(path)) from None
    if not isinstance(value, dict):
        raise DataError("not an evalsi results file (not an object)", file=str(path))
    return value


@dataclass(frozen=True)
class JournalStart:
    """What a run's journal says of the run before its results file exists: its header and records to do."""

    header: dict[str, Any]
    total: int | None
    resumed: int


JOURNAL_FIRST_LINE_BYTES = 16 << 20
"""The most of a journal's first line read (it holds the run's spec)."""


def read_journal_start(journal: Path) -> JournalStart | None:
    """The run a journal's first line describes (as ``ResultsWriter.begin`` writes it), or None.

    None when there is no journal, or its first line is not such a description (a journal from an earlier evalsi,
    which holds the fingerprints alone).
    """
    try:
        with journal.open("rb") as handle:
            line = handle.readline(JOURNAL_FIRST_LINE_BYTES)
    except OSError:
        return None
    try:
        first = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    run = first.get("run") if isinstance(first, dict) else None
    if not isinstance(run, dict):
        return None
    header = {"version": 1, "kind": "RunResults", **run, "status": "running"}
    header.setdefault("fingerprints", first.get("fingerprints"))
    if isinstance(first.get("started"), str):
        header.setdefault("timings", {"started": first["started"]})
    total = first.get("total")
    resumed = first.get("resumed")
    return JournalStart(
        header,
        total if isinstance(total, int) and not isinstance(total, bool) else None,
        resumed if isinstance(resumed, int) and not isinstance(resumed, bool) else 0,
    )


_JOURNAL_LINES: OrderedDict[Path, tuple[int, int, int]] = OrderedDict()
"""Per journal: the bytes counted, the newlines in them, and the file's inode (counted on from there as it grows)."""
_JOURNAL_LINES_LOCK = threading.Lock()


def journal_records(journal: Path) -> int:
    """The finished records a journal holds: its complete lines after the first, counted as the file grows.

    A journal only grows while its run works, so each call reads what was appended since the last one.
    """
    try:
        st = journal.stat()
    except OSError:
        return 0
    with _JOURNAL_LINES_LOCK:
        counted, lines, inode = _JOURNAL_LINES.get(journal, (0, 0, st.st_ino))
    if inode != st.st_ino or st.st_size < counted:  # started over
        counted, lines = 0, 0
    try:
        with journal.open("rb") as handle:
            handle.seek(counted)
            while chunk := handle.read(1 << 20):
                lines += chunk.count(b"\n")
                counted += len(chunk)
    except OSError:
        return 0
    with _JOURNAL_LINES_LOCK:
        _JOURNAL_LINES[journal] = (counted, lines, st.st_ino)
        _JOURNAL_LINES.move_to_end(journal)
        while len(_JOURNAL_LINES) > 4096:
            _JOURNAL_LINES.popitem(last=False)
    return max(0, lines - 1)


MAX_HEADER_BYTES = 16 << 20
"""The most of a results file :func:`read_header` reads to find its header."""
_FIRST_READ = 1 << 16
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
"""A JSON string, or a bracket: all that decides where a top-level key is (commas, numbers and literals do not)."""


def _records_at(head: bytes) -> int:
    """Where the top-level ``"records"`` key starts in the beginning of a JSON object, or -1 when not in ``head``.

    A string token cut off at the end of ``head`` does not match, and brackets inside it cannot open a top-level
    key, so a prefix never gives a wrong answer (only none yet).
    """
    depth = 0
    for match in _TOKEN.finditer(head):
        first = match.group()[0]
        if first == 0x22:  # a string: a key when a colon follows
            if depth == 1 and match.group() == b'"records"' and head[match.end() :].lstrip()[:1] == b":":
                return match.start()
        elif first in (0x7B, 0x5B):
            depth += 1
        else:
            depth -= 1
    return -1


def _parse_header(head: bytes) -> dict[str, Any] | None:
    try:
        header = orjson.loads(head.rstrip().rstrip(b",") + b"\n}")
    except orjson.JSONDecodeError:
        return None
    if isinstance(header, dict) and header.get("kind") == "RunResults" and header.get("version") == 1:
        return header
    return None


def headline(header: RunHeader, status: str, progress: Mapping[str, int] | None = None) -> dict[str, Any]:
    """What the run list shows of a run.

    Name, target, date, status, the metrics' means and gates, the training run and step of a checkpoint's
    evaluation, and for a run in progress ``progress``: ``{"done", "total"}`` records.

    Args:
        header: The run's header.
        status: The run's status: its header's (``complete``...), or ``running`` while its journal grows.
        progress: ``{"done", "total"}`` records for a run in progress, else None.

    """
    timings = header.timings
    summary = header.summary
    checkpoint = header.checkpoint
    return {
        "name": header.name,
        "target": describe_target(header.target or header.spec.get("target") or {}),
        "date": (timings.finished or timings.started) if timings is not None else None,
        "status": status,
        "metrics": {} if summary is None else {name: est.mean for name, est in summary.metrics.items()},
        "gates": [] if summary is None else [gate.passed for gate in summary.gates],
        "trainingRun": None if checkpoint is None else checkpoint.training_run,
        "step": None if checkpoint is None else checkpoint.step,
        "progress": dict(progress) if progress is not None else None,
    }


def file_headline(path: Path) -> dict[str, Any]:
    """The run list's entry of a results file (``running`` while its journal exists), from its header alone.

    A file of an older schema version is migrated as :func:`evalsi.runs.load_run_result` migrates it.

    Raises:
        DataError: The file is not readable or its header has the wrong shape (the message names the field).

    """
    journal = journal_path(path)
    started = read_journal_start(journal) if not path.exists() else None
    data = migrate_result(read_header(path), str(path)) if started is None else started.header
    try:
        header = header_of(data)
    except ValidationError as exc:
        raise DataError(validation_message(exc), file=str(path)) from None
    status = header.status
    progress = None
    if status != "complete" and journal.exists():
        status = "running"
        start = started or read_journal_start(journal)
        if start is not None and start.total is not None:
            done = start.resumed + journal_records(journal)
            progress = {"done": min(done, start.total), "total": start.total}
    return headline(header, status, progress)


TARGET_CHARS = 120
"""The most of a target's description the run list shows (the run page shows it whole)."""


def describe_target(target: Any) -> str:
    """A target in a few words: its description, its callable, or its model and endpoint.

    A setting left unset (``callable: null`` in an endpoint's spec) is not a description; a target of no known
    shape is shown as compact JSON, cut to :data:`TARGET_CHARS`.
    """
    if not isinstance(target, dict):
        return str(target or "")
    if target.get("description"):
        return str(target["description"])
    if target.get("callable"):
        return str(target["callable"])
    parts = [str(target[k]) for k in ("model", "baseUrl", "base_url") if target.get(k)]
    if parts:
        return " @ ".join(parts)
    text = orjson.dumps({k: v for k, v in target.items() if v is not None}, default=str).decode()
    return text if len(text) <= TARGET_CHARS else text[: TARGET_CHARS - 1] + "…"


def target_of(header: Mapping[str, Any]) -> str:
    """A run's target in a few words: what the run recorded of it, else its spec's."""
    recorded = header.get("target")
    spec = header.get("spec")
    return describe_target(recorded or (spec.get("target") if isinstance(spec, Mapping) else None) or {})


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


KEEP_PARSED = 2048
"""Records kept parsed per run once read from their bytes (the pages being looked at); the rest are re-read."""


class Records(Sequence[dict[str, Any]]):
    """A run's records, each parsed from its bytes when asked for (a page needs only a few of them).

    Three forms: already parsed (``parsed``); one JSON text per record (``raw``, as the server's database holds
    them); or a buffer (the mapped file) holding ``count`` records between ``body`` and ``end``, where each one
    starts is found when a record at or past it is first asked for, so opening a large run costs one count over
    the bytes, not a pass over the records. Records parsed from bytes are kept for the last
    :data:`KEEP_PARSED` asked for, so paging through a large run does not end up holding all of it parsed.

    Args:
        buffer: The bytes holding the records (a results file, usually mapped).
        count: How many records ``buffer`` holds.
        body: Where in ``buffer`` the first record starts.
        end: Where the records end in ``buffer``.
        parsed: The records, already parsed (the other arguments then unused).
        raw: One JSON text per record.

    """

    def __init__(
        self,
        buffer: bytes | mmap.mmap | None = None,
        count: int = 0,
        body: int = 0,
        end: int = 0,
        parsed: list[dict[str, Any]] | None = None,
        raw: list[bytes] | None = None,
    ) -> None:
        self._buffer = buffer
        self._view = memoryview(buffer) if buffer is not None else None
        self._raw = raw
        self._starts: list[int] = []
        self._next = body - 1
        self._end = end
        self._lock = threading.Lock()
        self._parsed = list(parsed) if parsed is not None else None
        self._count = len(raw) if raw is not None else len(self._parsed) if self._parsed is not None else count
        self._kept: OrderedDict[int, dict[str, Any]] = OrderedDict()

    @property
    def nbytes(self) -> int:
        """The bytes the records are read from (0 when they came parsed)."""
        if self._raw is not None:
            return sum(len(r) for r in self._raw)
        return 0 if self._buffer is None else len(self._buffer)

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if self._parsed is not None:
            return self._parsed[i]
        if i < 0:
            i += self._count
        if not 0 <= i < self._count:
            raise IndexError(i)
        with self._lock:
            record = self._kept.get(i)
            if record is not None:
                self._kept.move_to_end(i)
                return record
        record = self._parse(i)
        with self._lock:
            self._kept[i] = record
            while len(self._kept) > KEEP_PARSED:
                self._kept.popitem(last=False)
        return record

    def peek(self, i: int) -> dict[str, Any]:
        """Record ``i`` parsed without keeping it (the index pass touches every record once).

        Args:
            i: The record's position.

        """
        if self._parsed is not None:
            return self._parsed[i]
        with self._lock:
            record = self._kept.get(i)
        return self._parse(i) if record is None else record

    def scan(self) -> Iterator[dict[str, Any]]:
        """Every record in order, parsed without being kept (one pass for the row index)."""
        if self._parsed is not None:
            yield from self._parsed
            return
        if self._raw is not None:
            loads = orjson.loads
            for i, text in enumerate(self._raw):
                yield _checked(loads(text), i)
            return
        if self._view is None or len(self) == 0:
            return
        self._span(len(self) - 1)  # every start found, in one go
        view, starts, loads = self._view, self._starts, orjson.loads
        cut = len(_RECORD_SEPARATOR)
        for i in range(len(starts) - 1):
            yield loads(view[starts[i] : starts[i + 1] - cut])
        yield loads(view[starts[-1] : self._end])

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
        if self._raw is not None:
            return _checked(orjson.loads(self._raw[i]), i)
        assert self._view is not None
        start, stop = self._span(i)
        return _checked(orjson.loads(self._view[start:stop]), i)


def _checked(record: Any, i: int) -> dict[str, Any]:
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
    size: int = 0
    """The bytes the run was read from (its file, or its records' JSON)."""
    progress: dict[str, int] | None = None
    """A run in progress: ``{"done", "total"}`` records (None when it is finished or does not say)."""
    _index: Future[RowIndex] = field(default_factory=Future)
    _started: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def cost(self) -> int:
        """The memory this run is estimated to hold once its index and search text are built, in bytes.

        Records read from bytes on demand hold their bytes and about as much again in the index and search text;
        records parsed whole hold Python objects instead, two to three times their JSON.
        """
        per_byte = HELD_PER_BYTE if self.records.nbytes else PARSED_PER_BYTE
        return max(self.size, self.records.nbytes) * per_byte + 64 * len(self.records) + 4096

    def loaded(self) -> LoadedRun:
        """The run ready for :func:`evalsi.runs.compare_runs` (records parsed for the comparison only).

        Raises:
            DataError: A record is malformed.

        """
        try:
            records = [RecordResult.from_json(r) for r in self.records.scan()]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DataError(f"malformed record: {exc}", file=str(self.path)) from None
        pass_k = [name for name in self.summary.get("metrics") or {} if name.startswith(("pass@", "pass^"))]
        status = str(self.header.get("status") or "complete")
        return LoadedRun(str(self.path), self.name, self.metrics, pass_k, self.on_error, records, status)

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
        """One record's table columns, from the index when it is built, else from the record itself.

        Args:
            position: The record's position in the run.

        """
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
        DataError: The file is not a readable results file, or its header has the wrong shape.

    """
    journal = journal_path(path)
    live = journal.exists()
    started = read_journal_start(journal) if live and not path.exists() else None
    mapped = None if live else _map(path)
    split = None if mapped is None else split_records(mapped)
    if split is not None:
        data, records = split
    elif started is not None:  # nothing written but the journal yet: its first line is the header
        data = dict(started.header)
        records = Records(parsed=_merge_journal([], journal))
    else:
        data = read_results(path)
        raw: list[dict[str, Any]] = list(data.pop("records", None) or [])
        records = Records(parsed=_merge_journal(raw, journal) if live else raw)
    size = len(mapped) if mapped is not None else _size(path) + _size(journal)
    run = make_run(path, data, records, live=live, size=size)
    if live and started is None:
        started = read_journal_start(journal)
    if started is not None and started.total is not None:
        run.progress = {"done": min(len(records), started.total), "total": started.total}
    return run


def make_run(path: Path, data: dict[str, Any], records: Records, *, live: bool = False, size: int = 0) -> RunData:
    """A run from its header (checked as :class:`evalsi.runs.RunHeader`) and its records.

    Args:
        path: Where the run was read from.
        data: The run's header fields (the results file without its records).
        records: The run's records.
        live: The run is in progress (its summary is worked out from the records so far).
        size: The bytes the run was read from.

    Raises:
        DataError: The header has the wrong shape (the message names the field), or a record is malformed.

    """
    try:
        header = header_of(data)
    except ValidationError as exc:
        raise DataError(validation_message(exc), file=str(path)) from None
    metrics = [MetricInfo(m.name, m.threshold) for m in header.metrics]
    on_error: OnError = header.on_error if header.on_error in ("none", "raise") else "zero"
    summary = data.get("summary")
    if live or not isinstance(summary, dict):
        summary = _summarize(data, list(records.scan()), metrics, on_error, path)
    status = header.status
    if status != "complete" and live:
        status = "running"
    return RunData(path, data, records, summary, metrics, on_error, status, size)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


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


HELD_PER_BYTE = 2
"""Estimated memory per byte of a run read in place: its bytes, and its index and search text."""
PARSED_PER_BYTE = 3
"""Estimated memory per byte of a run parsed whole: its Python objects (two to three times the JSON), its index and
search text."""
CACHE_BYTES = 1 << 30
"""Default estimated memory of the runs a viewer keeps open (:attr:`RunData.cost`)."""

Loader = Callable[[Path], RunData]


class RunCache:
    """Runs read once per version, kept within an estimated memory budget (thread-safe, for a thread pool).

    Each run is charged :attr:`RunData.cost`; past ``max_bytes`` the least recently opened runs are dropped. The
    run just opened is kept even when it alone passes the budget (its pages are about to be read), so the memory
    held is at most the budget or the largest run. One run is read by one thread at a time: requests for a run
    being read wait for it rather than reading it again.

    Args:
        max_bytes: The memory budget, in estimated bytes.

    """

    def __init__(self, max_bytes: int = CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[Path, tuple[str, RunData]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._reading: dict[tuple[Path, str], threading.Lock] = {}
        self.evictions = 0

    @property
    def held_bytes(self) -> int:
        """The estimated memory of the runs kept."""
        with self._lock:
            return self._bytes

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def get(self, path: Path, version: str | None = None, load: Loader = load_run) -> RunData:
        """The run at ``path`` in this ``version`` (default: its file's :func:`stamp`), read only when not kept.

        Args:
            path: The run's results file.
            version: What identifies this state of the run; None for its file's :func:`stamp`.
            load: What reads the run when it is not kept.

        Raises:
            DataError: ``load`` could not read the run.

        """
        key = "-".join(map(str, stamp(path))) if version is None else version
        hit = self._hit(path, key)
        if hit is not None:
            return hit
        with self._lock:
            reading = self._reading.setdefault((path, key), threading.Lock())
        with reading:
            hit = self._hit(path, key)
            if hit is not None:
                return hit
            try:
                run = load(path)
            finally:
                with self._lock:
                    self._reading.pop((path, key), None)
            self._keep(path, key, run)
            return run

    def _hit(self, path: Path, key: str) -> RunData | None:
        with self._lock:
            hit = self._items.get(path)
            if hit is None or hit[0] != key:
                return None
            self._items.move_to_end(path)
            return hit[1]

    def _keep(self, path: Path, key: str, run: RunData) -> None:
        with self._lock:
            old = self._items.pop(path, None)
            if old is not None:
                self._bytes -= old[1].cost
            self._items[path] = (key, run)
            self._bytes += run.cost
            while self._bytes > self.max_bytes and len(self._items) > 1:
                _, (_, dropped) = self._items.popitem(last=False)
                self._bytes -= dropped.cost
                self.evictions += 1
