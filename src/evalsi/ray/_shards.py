"""Shards of a rollouts file for offline scoring: planned by the driver, read by whichever actor scores them.

A JSONL file is cut every ``shard_rows`` rollouts at line boundaries (one streaming pass over its bytes); a
Parquet file at row-group boundaries. A shard knows its first rollout's index and, for JSONL, each rollout's
line, so errors found on any node name the file and line as ``evalsi rewards score`` does.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from evalsi.errors import DataError
from evalsi.rewards import RowSource


@dataclass(frozen=True)
class Shard:
    """Rollouts ``[first, first + rows)`` of the file: JSONL bytes ``[start, stop)`` or Parquet row groups."""

    number: int
    first: int
    rows: int
    start: int = 0
    stop: int = 0
    line: int = 1
    """The 1-based line at byte ``start`` (JSONL)."""
    groups: tuple[int, ...] = ()

    def to_item(self) -> dict[str, Any]:
        """The shard as a Ray Data row."""
        item = asdict(self)
        item["groups"] = list(self.groups)
        return item

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Shard:
        """A shard back from a Ray Data row (numpy scalars and arrays included)."""
        groups = item.get("groups")
        return cls(
            number=int(item["number"]),
            first=int(item["first"]),
            rows=int(item["rows"]),
            start=int(item["start"]),
            stop=int(item["stop"]),
            line=int(item["line"]),
            groups=tuple(int(g) for g in (groups if groups is not None else ())),
        )


def plan(path: Path, shard_rows: int) -> list[Shard]:
    """Cut a JSONL or Parquet file into shards of about ``shard_rows`` rollouts.

    Raises:
        DataError: The file is missing, or is neither JSONL nor Parquet (a JSON array cannot be cut unparsed).

    """
    if not path.exists():
        raise DataError("no such file", file=str(path))
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return _plan_parquet(path, shard_rows)
    if suffix == ".json":
        raise DataError(
            "offline scoring on Ray reads JSONL or Parquet; convert the JSON array to JSONL", file=str(path)
        )
    return _plan_jsonl(path, shard_rows)


def _plan_jsonl(path: Path, shard_rows: int) -> list[Shard]:
    shards: list[Shard] = []
    offset = start = rows = first = 0
    start_line = 1
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                if rows == shard_rows:
                    shards.append(Shard(len(shards), first, rows, start, offset, start_line))
                    first, rows, start, start_line = first + rows, 0, offset, number
                rows += 1
            offset += len(line)
    if rows:
        shards.append(Shard(len(shards), first, rows, start, offset, start_line))
    return shards


def _plan_parquet(path: Path, shard_rows: int) -> list[Shard]:
    metadata = _parquet_file(path).metadata
    shards: list[Shard] = []
    groups: list[int] = []
    rows = first = 0
    for group in range(metadata.num_row_groups):
        groups.append(group)
        rows += metadata.row_group(group).num_rows
        if rows >= shard_rows:
            shards.append(Shard(len(shards), first, rows, groups=tuple(groups)))
            first, rows, groups = first + rows, 0, []
    if groups and rows:
        shards.append(Shard(len(shards), first, rows, groups=tuple(groups)))
    return shards


def read_shard(path: Path, shard: Shard) -> tuple[list[dict[str, Any]], RowSource | OffsetSource]:
    """The shard's rollouts, and where each came from (file and line, for errors).

    Raises:
        DataError: A line is not a JSON object, or the Parquet file cannot be read (names file and line).

    """
    file = str(path)
    if shard.groups:
        try:
            rows: list[dict[str, Any]] = _parquet_file(path).read_row_groups(list(shard.groups)).to_pylist()
        except DataError:
            raise
        except Exception as exc:  # pyarrow raises several unrelated types for a bad file
            raise DataError(f"not a readable Parquet file: {exc}", file=file) from None
        return rows, OffsetSource(file, shard.first)
    with path.open("rb") as handle:
        handle.seek(shard.start)
        raw = handle.read(shard.stop - shard.start)
    out: list[dict[str, Any]] = []
    lines: list[int] = []
    for number, text in enumerate(raw.splitlines(), start=shard.line):
        if not text.strip():
            continue
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise DataError(f"not valid JSON: {exc}", file=file, line=number) from None
        if not isinstance(value, dict):
            raise DataError(
                f"each line must be a JSON object (a rollout), got {type(value).__name__}", file=file, line=number
            )
        out.append(value)
        lines.append(number)
    return out, RowSource(file, tuple(lines))


class OffsetSource:
    """Parquet rows named by their 1-based row in the whole file, for a shard whose first row is ``first``."""

    def __init__(self, file: str, first: int) -> None:
        self.source = RowSource(file, None, "row")
        self.first = first

    def error(self, index: int, message: str) -> DataError:
        """A DataError naming the shard's row ``index`` by its place in the file."""
        return self.source.error(index + self.first, message)

    def locate(self, exc: DataError) -> DataError:
        """``exc`` (raised for a rollout index of the shard) named by file and row instead."""
        if exc.index is None or exc.file is not None:
            return exc
        return self.error(exc.index, exc.detail)


def _parquet_file(path: Path) -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError("reading Parquet needs pyarrow: pip install 'evalsi[parquet]'", file=str(path)) from None
    try:
        return pq.ParquetFile(path)
    except Exception as exc:
        raise DataError(f"not a readable Parquet file: {exc}", file=str(path)) from None


def fingerprint(path: Path, spec: dict[str, Any], shard_rows: int, details: bool) -> str:
    """What finished shards are valid for: the input file (name, size, modification time), spec and options."""
    stat = path.stat()
    data = orjson.dumps(
        {
            "file": str(path.resolve()),
            "size": stat.st_size,
            "mtime_ns": stat.st_mtime_ns,
            "spec": spec,
            "shard_rows": shard_rows,
            "details": details,
        },
        option=orjson.OPT_SORT_KEYS,
    )
    return hashlib.sha256(data).hexdigest()
