"""Reading rollouts from JSONL, JSON arrays and Parquet files, with errors that name the line."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from evalsi._util.atomic import atomic_writer
from evalsi.errors import DataError

SUFFIXES = (".jsonl", ".ndjson", ".json", ".parquet")


def read_rollouts(path: str | Path) -> list[dict[str, Any]]:
    """Every rollout in a file: JSONL (one object per line), a JSON array, or Parquet (``evalsi[parquet]``).

    Raises:
        DataError: The file is missing, unreadable, or a line/item is not a JSON object (names file and line).

    """
    source = Path(path)
    file = str(path)
    if not source.exists():
        raise DataError("no such file", file=file)
    suffix = source.suffix.lower()
    if suffix == ".parquet":
        return _read_parquet(source)
    try:
        raw = source.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read: {exc}", file=file) from None
    if suffix == ".json" or raw.lstrip()[:1] == b"[":
        return _read_json_array(raw, file)
    return _read_jsonl(raw, file)


def _read_jsonl(raw: bytes, file: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise DataError(f"not valid JSON: {exc}", file=file, line=number) from None
        if not isinstance(value, dict):
            raise DataError(
                f"each line must be a JSON object (a rollout), got {type(value).__name__}", file=file, line=number
            )
        rows.append(value)
    return rows


def _read_json_array(raw: bytes, file: str) -> list[dict[str, Any]]:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise DataError(f"not valid JSON: {exc}", file=file) from None
    if not isinstance(value, list):
        raise DataError("a .json rollouts file must hold an array of objects (or use JSONL)", file=file)
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise DataError(f"item {index} must be a JSON object (a rollout), got {type(item).__name__}", file=file)
    return value


def _read_parquet(source: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError("reading Parquet needs pyarrow: pip install 'evalsi[parquet]'", file=str(source)) from None
    try:
        table = pq.read_table(source)
    except Exception as exc:  # pyarrow raises several unrelated types for a bad file
        raise DataError(f"not a readable Parquet file: {exc}", file=str(source)) from None
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def write_jsonl(path: str | Path, rows: Iterable[Any]) -> None:
    """Write JSON lines atomically: the file appears only when every row is written."""
    with atomic_writer(path) as handle:
        for row in rows:
            handle.write(orjson.dumps(row, option=orjson.OPT_SERIALIZE_NUMPY))
            handle.write(b"\n")
