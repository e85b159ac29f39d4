"""Evaluation runs in the server's database: store a results document, read it back by id or by labels.

A run is kept as its header (name, status, spec, target, summary and the rest, as JSON) with one row per label
and one row per record (the pairing key, the record id, a status, and the record's samples as JSON). Every
query is scoped to a project: another project's run id is indistinguishable from an unknown one.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy import Engine, delete, insert, select
from sqlalchemy.exc import IntegrityError

from evalsi.evaluators import STATUSES, Score, Status
from evalsi.runs import LoadedRun, RecordResult, SampleResult
from evalsi.runs._compare import run_from_document
from evalsi.runs._document import RESULTS_VERSION
from evalsi.server._errors import ServiceError
from evalsi.server._quota_store import Kind, StorageQuotas
from evalsi.server._trust import INT64
from evalsi.server.runs._requests import request_fingerprint, reused
from evalsi.server.runs._tables import run_labels, run_records, runs

QUOTA = Kind("runs", runs, runs.c.size_bytes, "max_runs", "max_run_bytes", "ask the server's operator for more")
"""A project's stored runs under the storage quotas."""
HEADER_COLUMNS = ("spec", "target", "summary")
"""Header fields kept in their own columns; the rest (metrics, onError, timings, checkpoint...) go to ``details``."""
_NOT_DETAILS = {*HEADER_COLUMNS, "records", "name", "status", "kind", "version"}
_LABEL_KEY = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._/-]{0,198}[A-Za-z0-9])?$")
MAX_LABEL_VALUE = 500
MAX_LABELS = 64
MAX_NAME = 500


@dataclass(frozen=True)
class StoredRun:
    """A run's header as stored (no records)."""

    id: str
    name: str
    labels: dict[str, str]
    created_at: float
    status: str
    record_count: int
    spec: dict[str, Any]
    target: dict[str, Any]
    summary: dict[str, Any]
    details: dict[str, Any]
    replayed: bool = False
    """Set when a request id's earlier call stored this run (this call stored nothing)."""

    def to_json(self) -> dict[str, Any]:
        """The ``Run`` message in its JSON form."""
        return {
            "id": self.id,
            "name": self.name,
            "labels": dict(self.labels),
            "createTime": datetime.fromtimestamp(self.created_at, UTC).isoformat().replace("+00:00", "Z"),
            "status": self.status,
            "recordCount": self.record_count,
            "spec": self.spec,
            "target": self.target,
            "summary": self.summary,
            "details": self.details,
        }

    def document(self, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The results document again, with ``records``."""
        return {
            "version": RESULTS_VERSION,
            "kind": "RunResults",
            "name": self.name,
            "status": self.status,
            "spec": self.spec,
            "target": self.target,
            **self.details,
            "summary": self.summary,
            "records": list(records),
        }


def not_found(run_id: str) -> ServiceError:
    """The answer for a run the caller's project does not hold (whether or not another project does)."""
    return ServiceError("not_found", f"no run {run_id!r} in this project", "run_not_found", run=run_id)


def check_labels(labels: Any, where: str = "labels") -> dict[str, str]:
    """Labels as a ``{key: value}`` mapping of strings.

    Raises:
        ServiceError: ``invalid_argument`` naming the label and what a valid one looks like.

    """
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise ServiceError("invalid_argument", f"`{where}` must be an object of key: value strings", path=where)
    if len(labels) > MAX_LABELS:
        raise ServiceError("invalid_argument", f"`{where}`: at most {MAX_LABELS} labels", path=where)
    out: dict[str, str] = {}
    for key, value in labels.items():
        if not isinstance(key, str) or not _LABEL_KEY.match(key):
            raise ServiceError(
                "invalid_argument",
                f"`{where}`: label key {key!r} must be 1-200 letters, digits, '.', '_', '-' or '/', "
                "starting and ending with a letter or digit",
                path=where,
            )
        if not isinstance(value, str) or len(value) > MAX_LABEL_VALUE:
            raise ServiceError(
                "invalid_argument",
                f"`{where}.{key}`: the value must be a string of at most {MAX_LABEL_VALUE} characters",
                path=f"{where}.{key}",
            )
        out[key] = value
    return out


def record_status(record: RecordResult) -> str:
    """``empty`` (no samples), ``error`` (a score errored) or ``ok``."""
    if not record.samples:
        return "empty"
    if any(score.status == "error" for sample in record.samples for score in sample.scores.values()):
        return "error"
    return "ok"


def _check_document(document: Any) -> tuple[dict[str, Any], list[RecordResult]]:
    """The document's header fields and its parsed records."""
    if not isinstance(document, Mapping):
        raise ServiceError("invalid_argument", "`results` must be a results document (an object)", path="results")
    if document.get("kind") != "RunResults":
        raise ServiceError(
            "invalid_argument",
            f"`results.kind` must be RunResults (the document `evalsi run` writes), got {document.get('kind')!r}",
            path="results.kind",
        )
    if document.get("version") != RESULTS_VERSION:
        raise ServiceError(
            "invalid_argument",
            f"`results.version` {document.get('version')!r} is not supported (expected {RESULTS_VERSION})",
            path="results.version",
        )
    name = document.get("name")
    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        raise ServiceError(
            "invalid_argument", f"`results.name` must be a string of 1-{MAX_NAME} characters", path="results.name"
        )
    for field in (*HEADER_COLUMNS, "fingerprints", "timings"):
        if document.get(field) is not None and not isinstance(document.get(field), Mapping):
            raise ServiceError("invalid_argument", f"`results.{field}` must be an object", path=f"results.{field}")
    metrics = document.get("metrics")
    if metrics is not None and not (
        isinstance(metrics, list) and all(isinstance(m, Mapping) and isinstance(m.get("name"), str) for m in metrics)
    ):
        raise ServiceError(
            "invalid_argument", "`results.metrics` must be a list of {name, threshold}", path="results.metrics"
        )
    raw = document.get("records") or []
    if not isinstance(raw, list):
        raise ServiceError("invalid_argument", "`results.records` must be a list", path="results.records")
    records: list[RecordResult] = []
    keys: set[str] = set()
    for position, item in enumerate(raw):
        where = f"results.records[{position}]"
        try:
            if not isinstance(item, Mapping):
                raise TypeError(f"must be an object, got {type(item).__name__}")
            _check_record(item)
            record = RecordResult.from_json(item)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            detail = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
            raise ServiceError("invalid_argument", f"`{where}`: {detail}", "invalid_record", path=where) from None
        if record.key in keys:
            raise ServiceError(
                "invalid_argument", f"`{where}`: key {record.key!r} appears twice", "invalid_record", path=where
            )
        keys.add(record.key)
        records.append(record)
    return dict(document), records


def _check_record(item: Mapping[str, Any]) -> None:
    """Refuse what no results file holds, before it is parsed: the fields a comparison or the database reads.

    Raises:
        TypeError: A field of the wrong type.
        ValueError: A number out of range.

    """
    index = item.get("index", 0)
    if isinstance(index, bool) or not isinstance(index, int | float):
        raise TypeError(f"`index` must be a whole number, got {type(index).__name__}")
    if not (isinstance(index, int) or index.is_integer()) or not 0 <= index < INT64:
        raise ValueError(f"`index` must be a whole number from 0 to 2**63 - 1, got {index!r}")
    if item.get("id") is not None and not isinstance(item["id"], str):
        raise TypeError(f"`id` must be a string or null, got {type(item['id']).__name__}")
    samples = item.get("samples") or []
    if not isinstance(samples, list) or not all(isinstance(s, Mapping) for s in samples):
        raise TypeError("`samples` must be a list of objects")
    for number, sample in enumerate(samples):
        scores = sample.get("scores") or {}
        if not isinstance(scores, Mapping):
            raise TypeError(f"`samples[{number}].scores` must be an object of metric: score")
        for metric, score in scores.items():
            here = f"`samples[{number}].scores.{metric}`"
            if not isinstance(score, Mapping):
                raise TypeError(f"{here} must be an object {{value, status, reason}}")
            value = score.get("value")
            if value is not None and not isinstance(value, bool | int | float):
                raise TypeError(f"{here}.value must be a number, true/false or null, got {type(value).__name__}")
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{here}.value must be finite, got {value}")
            if score.get("status", "ok") not in STATUSES:
                raise ValueError(f"{here}.status must be one of {', '.join(STATUSES)}")


def _encode_token(seq: int) -> str:
    return base64.urlsafe_b64encode(f"p{seq}".encode()).decode().rstrip("=")


def _decode_token(token: str, where: str) -> int | None:
    if not token:
        return None
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        if text.startswith("p") and text[1:].isdigit() and len(text) <= 20:
            return int(text[1:])
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise ServiceError("invalid_argument", f"`{where}` is not a page token this server gave", path=where)


def page_size(value: Any, default: int, largest: int, where: str = "pageSize") -> int:
    """A requested page size: ``default`` when unset or 0, else 1..``largest``.

    Raises:
        ServiceError: ``invalid_argument`` for a negative or non-integer size.

    """
    if value in (None, "", 0):
        return default
    try:
        size = int(value)
    except (TypeError, ValueError):
        raise ServiceError("invalid_argument", f"`{where}` must be a whole number", path=where) from None
    if size < 0 or (isinstance(value, float) and not value.is_integer()):
        raise ServiceError("invalid_argument", f"`{where}` must be a whole number >= 0", path=where)
    return min(size, largest)


def _encode(value: Any, where: str) -> bytes:
    """``value`` as the JSON stored.

    Raises:
        ServiceError: ``invalid_argument`` naming ``where`` when it holds what JSON cannot (an integer past 64 bits,
            nesting past the encoder's depth).

    """
    try:
        return orjson.dumps(value, default=str)
    except orjson.JSONEncodeError as exc:
        raise ServiceError("invalid_argument", f"`{where}`: {exc}", "invalid_record", path=where) from None


def _scores_only(record: dict[str, Any], names: dict[str, str]) -> RecordResult:
    """A stored record reduced to its key and its samples' score values and statuses."""
    samples = []
    for sample in record.get("samples") or []:
        scores = {}
        for metric, score in (sample.get("scores") or {}).items():
            value, status = score.get("value"), score.get("status", "ok")
            scores[names.setdefault(metric, metric)] = Score(
                value if isinstance(value, int | float) else None,
                _STATUSES.get(status, "error") if isinstance(status, str) else "error",
            )
        samples.append(SampleResult("", scores=scores))
    return RecordResult(str(record["key"]), 0, "", None, None, samples)


_STATUSES: dict[str, Status] = {"ok": "ok", "skipped": "skipped", "error": "error"}


def _loads(text: str) -> dict[str, Any]:
    value = orjson.loads(text)
    return value if isinstance(value, dict) else {}


class RunStore:
    """Runs in the server's database, each visible to its own project only (within its quotas, when given)."""

    def __init__(self, engine: Engine, quotas: StorageQuotas | None = None) -> None:
        self.engine = engine
        self.quotas = quotas

    def create(
        self, project: str, document: Any, labels: Mapping[str, str], request_id: str | None = None
    ) -> StoredRun:
        """Store a results document and its labels; returns the stored run.

        With ``request_id``, at most one run is stored per project and id: a repeat of the same request (however
        many at once) returns the run the first stored, marked ``replayed``. The unique index on (project,
        request id) decides a race: the loser's insert fails and it reads the winner's run.

        Raises:
            ServiceError: ``invalid_argument`` when the document or a record is malformed, or the request id
                already stored a run from a different request.

        """
        digest = request_fingerprint(document, labels) if request_id is not None else None
        if request_id is not None and digest is not None:
            earlier = self._by_request(project, request_id, digest)
            if earlier is not None:
                return earlier
        try:
            return self._insert(project, document, labels, request_id, digest)
        except IntegrityError:
            if request_id is None or digest is None:
                raise
            earlier = self._by_request(project, request_id, digest)
            if earlier is None:
                raise
            return earlier

    def _by_request(self, project: str, request_id: str, digest: str) -> StoredRun | None:
        """The run an earlier call with this request id stored, or None; refuses a different request."""
        with self.engine.connect() as connection:
            row = connection.execute(
                select(runs).where(runs.c.project == project, runs.c.request_id == request_id)
            ).first()
        if row is None:
            return None
        if row.request_hash != digest:
            raise reused(request_id)
        return replace(self._stored(row, self._labels([row.seq])[row.seq]), replayed=True)

    def _insert(
        self,
        project: str,
        document: Any,
        labels: Mapping[str, str],
        request_id: str | None,
        digest: str | None,
    ) -> StoredRun:
        data, records = _check_document(document)
        run_id = "run_" + secrets.token_hex(12)
        created = time.time()
        details = {k: v for k, v in data.items() if k not in _NOT_DETAILS}
        header = {field: dict(data.get(field) or {}) for field in HEADER_COLUMNS}
        status = str(data.get("status") or "complete")
        encoded = {field: _encode(value, f"results.{field}") for field, value in header.items()}
        encoded["details"] = _encode(details, "results")
        texts = [_encode(record.to_json(), f"results.records[{n}]") for n, record in enumerate(records)]
        size = sum(len(text) for text in encoded.values()) + sum(len(text) for text in texts)
        columns = {field: text.decode() for field, text in encoded.items()}
        rows = [
            {
                "position": position,
                "key": record.key,
                "record_id": record.id,
                "status": record_status(record),
                "data": text.decode(),
            }
            for position, (record, text) in enumerate(zip(records, texts, strict=True))
        ]
        del encoded, texts
        with self.engine.begin() as connection:
            if self.quotas is not None:
                self.quotas.lock(connection, project, QUOTA)
            result = connection.execute(
                insert(runs).values(
                    id=run_id,
                    project=project,
                    name=data["name"],
                    status=status,
                    created_at=created,
                    record_count=len(records),
                    request_id=request_id,
                    request_hash=digest,
                    size_bytes=size,
                    **columns,
                )
            )
            key = result.inserted_primary_key
            assert key is not None
            seq = int(key[0])
            if labels:
                connection.execute(
                    insert(run_labels), [{"run_seq": seq, "key": k, "value": v} for k, v in labels.items()]
                )
            if rows:
                connection.execute(insert(run_records), [{"run_seq": seq, **row} for row in rows])
            if self.quotas is not None:
                self.quotas.check(connection, project, QUOTA)
        return StoredRun(
            run_id,
            data["name"],
            dict(labels),
            created,
            status,
            len(records),
            header["spec"],
            header["target"],
            header["summary"],
            details,
        )

    def _row(self, project: str, run_id: str) -> Any:
        with self.engine.connect() as connection:
            row = connection.execute(select(runs).where(runs.c.id == run_id, runs.c.project == project)).first()
        if row is None:
            raise not_found(run_id)
        return row

    def _labels(self, seqs: Sequence[int]) -> dict[int, dict[str, str]]:
        out: dict[int, dict[str, str]] = {seq: {} for seq in seqs}
        if not seqs:
            return out
        with self.engine.connect() as connection:
            for row in connection.execute(select(run_labels).where(run_labels.c.run_seq.in_(list(seqs)))):
                out[row.run_seq][row.key] = row.value
        return out

    @staticmethod
    def _stored(row: Any, labels: dict[str, str]) -> StoredRun:
        return StoredRun(
            row.id,
            row.name,
            labels,
            row.created_at,
            row.status,
            row.record_count,
            _loads(row.spec),
            _loads(row.target),
            _loads(row.summary),
            _loads(row.details),
        )

    def get(self, project: str, run_id: str) -> StoredRun:
        """A run of ``project`` by id.

        Raises:
            ServiceError: ``not_found`` when the project holds no such run.

        """
        row = self._row(project, run_id)
        return self._stored(row, self._labels([row.seq])[row.seq])

    def records(self, project: str, run_id: str, size: int, token: str = "") -> tuple[list[dict[str, Any]], str]:
        """One page of a run's records in dataset order, and the token of the next page (empty at the end)."""
        row = self._row(project, run_id)
        after = _decode_token(token, "pageToken")
        query = select(run_records.c.position, run_records.c.data).where(run_records.c.run_seq == row.seq)
        if after is not None:
            query = query.where(run_records.c.position > after)
        with self.engine.connect() as connection:
            rows = connection.execute(query.order_by(run_records.c.position).limit(size + 1)).all()
        more = len(rows) > size
        rows = rows[:size]
        next_token = _encode_token(rows[-1].position) if more and rows else ""
        return [orjson.loads(r.data) for r in rows], next_token

    def find(self, project: str, labels: Mapping[str, str], size: int, token: str = "") -> tuple[list[StoredRun], str]:
        """One page of the project's runs carrying every label in ``labels``, newest first, and the next token."""
        before = _decode_token(token, "pageToken")
        query = select(runs).where(runs.c.project == project)
        for key, value in labels.items():
            query = query.where(
                runs.c.seq.in_(select(run_labels.c.run_seq).where(run_labels.c.key == key, run_labels.c.value == value))
            )
        if before is not None:
            query = query.where(runs.c.seq < before)
        with self.engine.connect() as connection:
            rows = connection.execute(query.order_by(runs.c.seq.desc()).limit(size + 1)).all()
        more = len(rows) > size
        rows = rows[:size]
        found = self._labels([r.seq for r in rows])
        next_token = _encode_token(rows[-1].seq) if more and rows else ""
        return [self._stored(r, found[r.seq]) for r in rows], next_token

    def document(self, project: str, run_id: str) -> dict[str, Any]:
        """A run's whole results document, every record included (what ``evalsi run`` would have written).

        Raises:
            ServiceError: ``not_found`` when the project holds no such run.

        """
        row = self._row(project, run_id)
        with self.engine.connect() as connection:
            data = connection.execute(
                select(run_records.c.data).where(run_records.c.run_seq == row.seq).order_by(run_records.c.position)
            ).all()
        labels = self._labels([row.seq])
        return self._stored(row, labels.get(row.seq, {})).document([orjson.loads(r.data) for r in data])

    def stored_bytes(self, project: str, run_id: str) -> int:
        """A run's stored size (its header's and records' JSON).

        Raises:
            ServiceError: ``not_found`` when the project holds no such run.

        """
        return int(self._row(project, run_id).size_bytes)

    def scores(self, project: str, run_id: str) -> LoadedRun:
        """A run for :func:`evalsi.runs.compare_runs` holding only what a comparison reads (``path`` is the id).

        Records are read from the database one at a time and kept as their key and each sample's score values and
        statuses: no prompt, reference, completion or reason. A comparison's memory is then a small part of the
        runs' stored size whatever their texts.

        Raises:
            ServiceError: ``not_found`` when the project holds no such run.

        """
        row = self._row(project, run_id)
        run = run_from_document(self._stored(row, {}).document([]), run_id)
        names: dict[str, str] = {}  # one string per metric name, not one per score
        query = select(run_records.c.data).where(run_records.c.run_seq == row.seq).order_by(run_records.c.position)
        with self.engine.connect() as connection:
            for (data,) in connection.execution_options(stream_results=True, yield_per=256).execute(query):
                run.records.append(_scores_only(orjson.loads(data), names))
        return run

    def loaded(self, project: str, run_id: str) -> LoadedRun:
        """A run with every record, ready for :func:`evalsi.runs.compare_runs` (``path`` is the run id).

        Raises:
            ServiceError: ``not_found`` when the project holds no such run.

        """
        return run_from_document(self.document(project, run_id), run_id)

    def delete(self, project: str, run_id: str) -> None:
        """Delete a run of ``project`` with its labels and records (all at once, or nothing).

        Raises:
            ServiceError: ``not_found`` when the project holds no such run (or another call deleted it first).

        """
        with self.engine.begin() as connection:
            row = connection.execute(select(runs.c.seq).where(runs.c.id == run_id, runs.c.project == project)).first()
            if row is None:
                raise not_found(run_id)
            connection.execute(delete(run_records).where(run_records.c.run_seq == row.seq))
            connection.execute(delete(run_labels).where(run_labels.c.run_seq == row.seq))
            gone = connection.execute(delete(runs).where(runs.c.seq == row.seq, runs.c.project == project))
            if not gone.rowcount:
                raise not_found(run_id)
