"""Reading JSON Lines: each non-blank line parsed, a bad one reported by file and line."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from evalsi.errors import DataError


def json_lines(raw: bytes, file: str, first_line: int = 1) -> Iterator[tuple[int, Any]]:
    """Each non-blank line of ``raw`` with its 1-based line number, parsed as JSON.

    What a line must hold (an object, a rollout, a row) is the caller's to check, with the line number given.

    Args:
        raw: The file's bytes.
        file: The file's name, for errors.
        first_line: The line number of ``raw``'s first line (a slice of a larger file starts further on).

    Raises:
        DataError: A line is not valid JSON (names the file and line).

    """
    for number, line in enumerate(raw.splitlines(), start=first_line):
        if not line.strip():
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise DataError(f"not valid JSON: {exc}", file=file, line=number) from None
        yield number, value
