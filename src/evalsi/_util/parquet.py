"""Reading a Parquet file as rows (``evalsi[parquet]`` brings pyarrow); every failure is a DataError naming it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalsi.errors import DataError


def read_parquet(path: Path) -> list[dict[str, Any]]:
    """Every row of a Parquet file, as plain mappings.

    Raises:
        DataError: pyarrow is missing, or the file cannot be read as Parquet (names the file).

    """
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError("reading Parquet needs pyarrow: pip install 'evalsi[parquet]'", file=str(path)) from None
    try:
        rows: list[dict[str, Any]] = pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises several unrelated types for a bad file
        raise DataError(f"not a readable Parquet file: {exc}", file=str(path)) from None
    return rows
