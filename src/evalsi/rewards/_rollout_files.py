"""Reading rollouts from JSONL, JSON arrays and Parquet files, with errors that name the file and line.

Every row keeps where it came from (:class:`RowSource`), so an error found later, when the row is turned into a
record, still names ``rollouts.jsonl:4`` (the 1-based line) rather than a position in a list.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from evalsi._util.atomic import atomic_writer
from evalsi._util.jsonl import json_lines
from evalsi._util.parquet import read_parquet
from evalsi.errors import DataError

SUFFIXES = (".jsonl", ".ndjson", ".json", ".parquet")
STDIN = "-"
"""The path that means standard input (JSONL or a JSON array)."""


@dataclass(frozen=True, slots=True)
class RowSource:
    """Where a file's rows came from: the file, and each row's 1-based line (JSONL, CSV) or position."""

    file: str
    lines: tuple[int, ...] | None = None
    """Each row's first line in the file; None when rows have no line (a JSON array, Parquet)."""
    unit: Literal["line", "item", "row"] = "line"
    """How a row without a line is named: ``item [i]`` of a JSON array, or the 1-based ``row n`` of a table."""

    def error(self, index: int, message: str) -> DataError:
        """A DataError naming row ``index`` (0-based position) by file and line.

        Args:
            index: The row's 0-based position.
            message: What is wrong with it.

        """
        if self.lines is not None and index < len(self.lines):
            return DataError(message, file=self.file, line=self.lines[index])
        where = f"item [{index}]" if self.unit == "item" else f"row {index + 1}"
        return DataError(f"{where}: {message}", file=self.file)

    def locate(self, exc: DataError) -> DataError:
        """``exc`` (raised for a rollout index, without a file) named by this file and line instead.

        Args:
            exc: An error naming a rollout index.

        """
        if exc.index is None or exc.file is not None:
            return exc
        return self.error(exc.index, exc.detail)


def read_rollouts(path: str | Path) -> list[dict[str, Any]]:
    """Every rollout in a file: JSONL (one object per line), a JSON array, or Parquet (``evalsi[parquet]``).

    Raises:
        DataError: The file is missing, unreadable, or a line/item is not a JSON object (names file and line).

    """
    return read_rollout_file(path)[0]


def read_rollout_file(path: str | Path) -> tuple[list[dict[str, Any]], RowSource]:
    """Every rollout in a file (``-`` reads standard input), and where each came from.

    Args:
        path: A JSONL, JSON or Parquet file, or ``-``.

    Raises:
        DataError: The file is missing, unreadable, or a line/item is not a JSON object (names file and line).

    """
    file = str(path)
    if file == STDIN:
        return _read_text_rows(sys.stdin.buffer.read(), "<stdin>", json_array=False)
    source = Path(path)
    if not source.exists():
        raise DataError("no such file", file=file)
    suffix = source.suffix.lower()
    if suffix == ".parquet":
        return read_parquet(source), RowSource(file, unit="row")
    try:
        raw = source.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read: {exc}", file=file) from None
    return _read_text_rows(raw, file, json_array=suffix == ".json")


def _read_text_rows(raw: bytes, file: str, json_array: bool) -> tuple[list[dict[str, Any]], RowSource]:
    if json_array or raw.lstrip()[:1] == b"[":
        return _read_json_array(raw, file), RowSource(file, unit="item")
    return read_jsonl_rows(raw, file)


def read_jsonl_rows(raw: bytes, file: str, first_line: int = 1) -> tuple[list[dict[str, Any]], RowSource]:
    """The rollouts of JSON Lines ``raw`` (one object a line, blank lines skipped), and each one's line.

    Args:
        raw: The bytes: a whole file, or a slice of one that starts at a line boundary.
        file: The file's name, for errors.
        first_line: The line number of ``raw``'s first line.

    Raises:
        DataError: A line is not valid JSON or not an object (names the file and line).

    """
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    for number, value in json_lines(raw, file, first_line):
        if not isinstance(value, dict):
            raise DataError(
                f"each line must be a JSON object (a rollout), got {type(value).__name__}", file=file, line=number
            )
        rows.append(value)
        lines.append(number)
    return rows, RowSource(file, tuple(lines))


def _read_json_array(raw: bytes, file: str) -> list[dict[str, Any]]:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise DataError(f"not valid JSON: {exc}", file=file) from None
    if not isinstance(value, list):
        raise DataError("a .json rollouts file must hold an array of objects (or use JSONL)", file=file)
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise DataError(f"item [{index}] must be a JSON object (a rollout), got {type(item).__name__}", file=file)
    return value


def write_jsonl(path: str | Path, rows: Iterable[Any]) -> None:
    """Write JSON lines atomically: the file appears only when every row is written.

    Args:
        path: The file to write.
        rows: JSON-serialisable rows, one a line.

    """
    with atomic_writer(path) as handle:
        for row in rows:
            handle.write(orjson.dumps(row, option=orjson.OPT_SERIALIZE_NUMPY))
            handle.write(b"\n")
