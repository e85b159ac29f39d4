"""Results files: one JSON document per run, written atomically, plus a journal that makes runs resumable.

While a run works, every finished record is appended to ``<results>.journal`` (one JSON line, flushed), and
the results file is rewritten atomically from time to time and at the end. A run that is killed loses at most
the record being written; the next run with the same spec reads the results file and the journal, and only
does what is missing. The journal is removed once the final results file is in place.

Layout of the results file (``version`` 1)::

    {"version": 1, "kind": "RunResults", "name", "status": "complete" | "partial",
     "spec": {...}, "target": {...}, "fingerprints": {"generation", "scoring"},
     "metrics": [{"name", "threshold"}], "onError", "timings": {...}, "summary": {...},
     "records": [{"key", "index", "id", "prompt", "reference",
                  "samples": [{"completion", "finishReason", "tokens", "latency",
                               "scores": {metric: {"value", "status", "reason"}}}]}]}
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

from evalsi._util.atomic import atomic_writer
from evalsi.errors import DataError
from evalsi.evaluators import Score
from evalsi.records import Content, canonical_json

RESULTS_VERSION = 1


class ResumeError(DataError):
    """An existing results file belongs to a different run (its generation settings differ)."""


@dataclass
class SampleResult:
    """One completion of a record and its scores, by metric (component) name."""

    completion: str
    finish_reason: str | None = None
    tokens: int | None = None
    latency: float = 0.0
    scores: dict[str, Score] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """JSON form (scores without their details, which can be large)."""
        return {
            "completion": self.completion,
            "finishReason": self.finish_reason,
            "tokens": self.tokens,
            "latency": round(self.latency, 6),
            "scores": {m: {"value": s.value, "status": s.status, "reason": s.reason} for m, s in self.scores.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SampleResult:
        """Read the JSON form back."""
        scores = {
            m: Score(s.get("value"), s.get("status", "ok"), s.get("reason"))
            for m, s in (data.get("scores") or {}).items()
        }
        return cls(
            str(data.get("completion", "")),
            data.get("finishReason"),
            data.get("tokens"),
            float(data.get("latency") or 0.0),
            scores,
        )


@dataclass
class RecordResult:
    """Every sample of one dataset record."""

    key: str
    index: int
    prompt: Content
    reference: Any
    id: str | None
    samples: list[SampleResult]

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "key": self.key,
            "index": self.index,
            "id": self.id,
            "prompt": self.prompt,
            "reference": self.reference,
            "samples": [s.to_json() for s in self.samples],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RecordResult:
        """Read the JSON form back."""
        return cls(
            str(data["key"]),
            int(data.get("index", 0)),
            data.get("prompt") or "",
            data.get("reference"),
            data.get("id"),
            [SampleResult.from_json(s) for s in data.get("samples") or []],
        )


def fingerprint(value: Any) -> str:
    """A short stable hash of a JSON-able value (which settings produced a result)."""
    return hashlib.sha256(canonical_json(value)).hexdigest()[:16]


@dataclass
class Resumed:
    """What an earlier, interrupted run left: its records, and whether their scores are still valid."""

    records: dict[str, RecordResult]
    scores_valid: bool


def journal_path(path: Path) -> Path:
    """The journal beside a results file."""
    return path.with_name(path.name + ".journal")


def read_results(path: str | Path) -> dict[str, Any]:
    """A results file as a mapping.

    Raises:
        DataError: The file is missing, not JSON, or not a results file of a known version.

    """
    file = str(path)
    try:
        data = orjson.loads(Path(path).read_bytes())
    except FileNotFoundError:
        raise DataError("no such results file", file=file) from None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise DataError(f"not a readable results file: {exc}", file=file) from None
    if not isinstance(data, dict) or data.get("kind") != "RunResults":
        raise DataError("not an evalsi results file (no kind: RunResults)", file=file)
    if data.get("version") != RESULTS_VERSION:
        raise DataError(f"results version {data.get('version')!r} is not supported (expected 1)", file=file)
    result: dict[str, Any] = data
    return result


def load_resumable(path: Path, fingerprints: Mapping[str, str]) -> Resumed:
    """Records an earlier run with the same generation settings finished (results file plus journal).

    Raises:
        ResumeError: The results file or journal was produced with other generation settings.

    """
    records: dict[str, RecordResult] = {}
    valid = True
    if path.exists():
        data = read_results(path)
        valid = _check(data.get("fingerprints") or {}, fingerprints, path)
        for raw in data.get("records") or []:
            record = RecordResult.from_json(raw)
            records[record.key] = record
    journal = journal_path(path)
    if journal.exists():
        lines = journal.read_bytes().splitlines()
        for number, line in enumerate(lines, start=1):
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # the line being written when the run was killed: that record is redone
            if number == 1 and "fingerprints" in entry:
                valid = _check(entry["fingerprints"], fingerprints, journal) and valid
            elif "key" in entry:
                record = RecordResult.from_json(entry)
                records[record.key] = record
    return Resumed(records, valid)


def _check(found: Mapping[str, str], expected: Mapping[str, str], where: Path) -> bool:
    if found.get("generation") != expected["generation"]:
        raise ResumeError(
            "holds a run with different generation settings (target model, sampling, dataset or samples); "
            "use --restart to start over, or set a different output",
            file=str(where),
        )
    return found.get("scoring") == expected["scoring"]


class ResultsWriter:
    """Appends finished records to the journal and writes the results file atomically."""

    def __init__(self, path: Path, header: Mapping[str, Any]) -> None:
        self.path = path
        self.header = dict(header)
        self.journal = journal_path(path)
        self._handle: IO[bytes] | None = None

    def restart(self) -> None:
        """Forget an earlier run: remove its results file and journal."""
        for stale in (self.path, self.journal):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()

    def append(self, records: Iterable[RecordResult]) -> None:
        """Journal finished records (flushed to the OS, so a killed run keeps them)."""
        if self._handle is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fresh = not self.journal.exists() or self.journal.stat().st_size == 0
            self._handle = self.journal.open("ab")
            if fresh:
                self._handle.write(orjson.dumps({"fingerprints": self.header["fingerprints"]}) + b"\n")
        payload = b"".join(orjson.dumps(r.to_json(), default=str) + b"\n" for r in records)
        self._handle.write(payload)
        self._handle.flush()

    def write(self, records: Iterable[RecordResult], *, status: str, extra: Mapping[str, Any]) -> None:
        """Write the whole results file atomically (records in dataset order)."""
        ordered = sorted(records, key=lambda r: r.index)
        document = {
            "version": RESULTS_VERSION,
            "kind": "RunResults",
            **self.header,
            "status": status,
            **extra,
            "records": [r.to_json() for r in ordered],
        }
        with atomic_writer(self.path) as handle:
            handle.write(orjson.dumps(document, option=orjson.OPT_INDENT_2, default=str))

    def close(self, *, remove_journal: bool) -> None:
        """Close the journal; remove it once the final results file holds everything."""
        if self._handle is not None:
            with contextlib.suppress(OSError):
                os.fsync(self._handle.fileno())
            self._handle.close()
            self._handle = None
        if remove_journal:
            with contextlib.suppress(FileNotFoundError):
                self.journal.unlink()
