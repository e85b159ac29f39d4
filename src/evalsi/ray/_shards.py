"""Shards of a rollouts file for offline scoring: planned by the driver, read by whichever actor scores them.

A JSONL file is cut every ``shard_rows`` rollouts at line boundaries (one streaming pass over its bytes); a
Parquet file at row-group boundaries. A shard knows its first rollout's index and, for JSONL, each rollout's
line, so errors found on any node name the file and line as ``evalsi rewards score`` does.

A spec with a group-level component scores each rollout with the rest of its group, so no group may cross a
shard: the rollouts are read once to find their groups, and a shard ends only where no group crosses (after
``shard_rows`` rollouts, at the next such place). That needs each group's rollouts next to each other in the
file; a file of more than one shard whose groups are interleaved is refused, naming the line where a group
comes back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from evalsi.errors import DataError
from evalsi.evaluators._group import group_of
from evalsi.rewards import Reward, RowSource
from evalsi.rewards._rollout_files import read_jsonl_rows


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


GroupKey = tuple[bytes | None, ...]
"""A rollout's group under each grouping of a spec's group-level components (None: in no group of it)."""
GroupKeys = Callable[[list[dict[str, Any]]], list[GroupKey]]
"""The keys of rollouts' groups, one per group-level component (None: the rollout is in no group of it)."""

KEY_BATCH = 4096
"""Rollouts normalised at once while a file is read for its groups."""


def group_keys(reward: Reward) -> GroupKeys | None:
    """How ``reward``'s group-level components group rollouts, as in-process scoring does; None without any.

    Raises:
        DataError: A rollout is malformed (names its index in the list given).

    """
    group_bys = [getattr(c.job.params, "group_by", None) for c in reward.components if c.evaluator.scope == "group"]
    if not group_bys:
        return None
    fields = list(dict.fromkeys(group_bys))

    def keys(rows: list[dict[str, Any]]) -> list[GroupKey]:
        return [tuple(group_of(record, field) for field in fields) for record in reward.records(rows)]

    return keys


def plan(path: Path, shard_rows: int, keys: GroupKeys | None = None) -> list[Shard]:
    """Cut a JSONL or Parquet file into shards of about ``shard_rows`` rollouts.

    Args:
        path: The rollouts file.
        shard_rows: Rollouts per shard.
        keys: With a group-level spec (:func:`group_keys`), how rollouts are grouped: no group crosses a shard.

    Raises:
        DataError: The file is missing, or is neither JSONL nor Parquet (a JSON array cannot be cut unparsed);
            with ``keys``, a rollout is malformed, or groups are interleaved in a file of several shards.

    """
    if not path.exists():
        raise DataError("no such file", file=str(path))
    suffix = path.suffix.lower()
    if suffix == ".json":
        raise DataError(
            "offline scoring on Ray reads JSONL or Parquet; convert the JSON array to JSONL", file=str(path)
        )
    parquet = suffix == ".parquet"
    if keys is not None:
        return _plan_groups(path, shard_rows, keys, parquet)
    return _plan_parquet(path, shard_rows) if parquet else _plan_jsonl(path, shard_rows)


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


def _plan_groups(path: Path, shard_rows: int, keys: GroupKeys, parquet: bool) -> list[Shard]:
    """Shards that keep every group whole: cut after ``shard_rows`` rollouts where no group crosses."""
    file = str(path)
    found: list[GroupKey] = []
    if parquet:
        sizes = []
        for rows, source in _parquet_row_groups(path):
            found += _keys(keys, rows, source)
            sizes.append(len(rows))
        lines = [0] * len(found)
    else:
        starts, lines, end = _jsonl_rows(path)
        for offset in range(0, len(starts), KEY_BATCH):
            stop = starts[offset + KEY_BATCH] if offset + KEY_BATCH < len(starts) else end
            raw = _read_bytes(path, starts[offset], stop)
            rows, source = read_jsonl_rows(raw, file, lines[offset])
            found += _keys(keys, rows, source)
        sizes = [1] * len(found)
    if len(found) > shard_rows:
        resumed = first_regroup(found)
        if resumed is not None:
            where = f"{file}: row {resumed + 1}" if parquet else f"{file}:{lines[resumed]}"
            raise DataError(
                f"{where}: this rollout's group has rollouts earlier in the file with other groups in between; "
                "offline scoring on Ray keeps each group of a group-level component whole in one shard, which "
                "needs each group's rollouts next to each other: sort the file by group (or score it without "
                "--ray)"
            )
    shards: list[Shard] = []
    row = 0
    for first_unit, stop_unit in cut(sizes, ends(found, sizes), shard_rows):
        count = sum(sizes[first_unit:stop_unit])
        if parquet:
            shards.append(Shard(len(shards), row, count, groups=tuple(range(first_unit, stop_unit))))
        else:
            stop = starts[stop_unit] if stop_unit < len(starts) else end
            shards.append(Shard(len(shards), row, count, starts[first_unit], stop, lines[first_unit]))
        row += count
    return shards


def _keys(keys: GroupKeys, rows: list[dict[str, Any]], source: RowSource | OffsetSource) -> list[GroupKey]:
    """``keys(rows)``, a malformed rollout named by file and line (or row)."""
    try:
        return keys(rows)
    except DataError as exc:
        raise source.locate(exc) from None


def _jsonl_rows(path: Path) -> tuple[list[int], list[int], int]:
    """Each rollout's byte offset and line in a JSONL file (blank lines are not rollouts), and the file's size."""
    starts: list[int] = []
    lines: list[int] = []
    offset = 0
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                starts.append(offset)
                lines.append(number)
            offset += len(line)
    return starts, lines, offset


def _parquet_row_groups(path: Path) -> Iterator[tuple[list[dict[str, Any]], RowSource | OffsetSource]]:
    """The rows of each row group of a Parquet file in turn, each with where its rows are in the file."""
    metadata = _parquet_file(path).metadata
    first = 0
    for group in range(metadata.num_row_groups):
        rows, source = read_shard(path, Shard(group, first, metadata.row_group(group).num_rows, groups=(group,)))
        yield rows, source
        first += len(rows)


def ends(found: Sequence[GroupKey], sizes: Sequence[int]) -> list[bool]:
    """For each unit of rows (a line, a row group), whether a shard may end after it: no group continues past it.

    Args:
        found: Each row's group keys, one per grouping (None: in no group of it, scored alone).
        sizes: Rows of each unit, in order; they add up to ``len(found)``.

    """
    last: dict[tuple[int, bytes], int] = {}
    for row, row_keys in enumerate(found):
        for grouping, key in enumerate(row_keys):
            if key is not None:
                last[grouping, key] = row
    out: list[bool] = []
    reach = row = 0
    for size in sizes:
        for row_keys in found[row : row + size]:
            for grouping, key in enumerate(row_keys):
                if key is not None:
                    reach = max(reach, last[grouping, key])
        row += size
        out.append(reach < row)
    return out


def first_regroup(found: Sequence[GroupKey]) -> int | None:
    """The first row whose group has rows earlier on with another group's rows in between; None if none has.

    Args:
        found: Each row's group keys, one per grouping (None: in no group of it).

    """
    current: dict[int, bytes] = {}
    done: set[tuple[int, bytes]] = set()
    for row, row_keys in enumerate(found):
        for grouping, key in enumerate(row_keys):
            if key is None or current.get(grouping) == key:
                continue
            if (grouping, key) in done:
                return row
            if grouping in current:
                done.add((grouping, current[grouping]))
            current[grouping] = key
    return None


def cut(sizes: Sequence[int], may_end: Sequence[bool], shard_rows: int) -> list[tuple[int, int]]:
    """Shards as ``[first, stop)`` ranges of units: each ends once it holds ``shard_rows`` rows, where it may.

    Args:
        sizes: Rows of each unit (a line, a row group).
        may_end: Whether a shard may end after each unit (the last always may).
        shard_rows: Rows after which a shard ends at the next place it may.

    """
    out: list[tuple[int, int]] = []
    first = rows = 0
    for unit, size in enumerate(sizes):
        rows += size
        if rows >= shard_rows and may_end[unit]:
            out.append((first, unit + 1))
            first, rows = unit + 1, 0
    if first < len(sizes):
        out.append((first, len(sizes)))
    return out


def _read_bytes(path: Path, start: int, stop: int) -> bytes:
    with path.open("rb") as handle:
        handle.seek(start)
        return handle.read(stop - start)


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
    return read_jsonl_rows(_read_bytes(path, shard.start, shard.stop), file, shard.line)


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
