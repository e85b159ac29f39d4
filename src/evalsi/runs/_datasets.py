"""Datasets of a run: local files (JSONL, JSON, CSV, Parquet) or Hugging Face datasets, mapped to items.

An item is what a target is asked about: a prompt (text or chat messages), a reference, an id and the rest
of the row as metadata. Every item has a key that pairs it across runs: its id when the dataset has one,
else a hash of its prompt and reference (``Record.pairing_key``).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalsi._util.parquet import read_parquet
from evalsi.errors import DataError
from evalsi.records import REFERENCE_FIELDS, Content, Record
from evalsi.rewards import RowSource, read_rollout_file
from evalsi.specs import DatasetSpec


@dataclass(frozen=True, slots=True)
class Item:
    """One dataset record to evaluate."""

    key: str
    index: int
    prompt: Content
    reference: Any = None
    id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


def read_rows(path: Path, fmt: str | None = None) -> list[dict[str, Any]]:
    """Rows of a JSONL, JSON (array), CSV or Parquet file; the format comes from ``fmt`` or the extension.

    Raises:
        DataError: The file is missing or malformed (names the file and line).

    """
    return read_located_rows(path, fmt)[0]


def read_located_rows(path: Path, fmt: str | None = None) -> tuple[list[dict[str, Any]], RowSource]:
    """:func:`read_rows`, with where each row came from (its 1-based line in JSONL and CSV files)."""
    kind = fmt or path.suffix.lower().lstrip(".")
    if kind == "csv":
        return _read_csv(path)
    if kind == "parquet" and path.suffix.lower() != ".parquet":
        return read_parquet(path), RowSource(str(path), unit="row")
    return read_rollout_file(path)


def _read_csv(path: Path) -> tuple[list[dict[str, Any]], RowSource]:
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            rows: list[dict[str, Any]] = []
            lines: list[int] = []
            end = 1  # the header's line
            for row in reader:
                rows.append(dict(row))
                lines.append(end + 1)
                end = reader.line_num
            return rows, RowSource(str(path), tuple(lines))
    except FileNotFoundError:
        raise DataError("no such file", file=str(path)) from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"cannot read as CSV: {exc}", file=str(path)) from None


def load_hf(name: str, subset: str | None, split: str) -> list[dict[str, Any]]:
    """Rows of a Hugging Face dataset split (from the local cache when offline).

    Raises:
        DataError: ``datasets`` is not installed, or the dataset cannot be loaded.

    """
    try:
        import datasets  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise DataError(
            f"dataset.hf {name!r} needs the `datasets` package (pip install datasets), or give dataset.path"
        ) from None
    try:
        loaded = datasets.load_dataset(name, subset, split=split)
    except Exception as exc:  # hub, cache and format errors all mean the same here
        raise DataError(f"cannot load Hugging Face dataset {name!r} (split {split!r}): {exc}") from None
    return [dict(row) for row in loaded]


def item_key(prompt: Content, reference: Any, record_id: str | None) -> str:
    """The pairing key of an item: its id, else a content hash of prompt and reference."""
    return Record(completion="", prompt=prompt, reference=reference, id=record_id).pairing_key


def rows_to_items(rows: Iterable[Mapping[str, Any]], spec: DatasetSpec, source: str | RowSource | None) -> list[Item]:
    """Map rows to items with the spec's field map and prompt template.

    Args:
        rows: The dataset's rows.
        spec: The run's ``dataset`` (field map, prompt template).
        source: Where the rows came from, named in errors (a file, or its rows' locations).

    Raises:
        DataError: A row lacks the prompt column or a template field (names the file and line, or the row).

    """
    source = source if isinstance(source, RowSource) else RowSource(source or "dataset", unit="row")
    fields = spec.fields
    items: list[Item] = []
    seen: dict[str, int] = {}
    columns: set[str] = set()
    for index, row in enumerate(rows):
        prompt = _prompt(row, spec, source, index)
        reference_column = fields.reference or next((f for f in REFERENCE_FIELDS if row.get(f) is not None), None)
        reference = row.get(reference_column) if reference_column else None
        id_column = fields.id or "id"
        raw_id = row.get(id_column)
        record_id = None if raw_id is None else str(raw_id)
        used = {fields.prompt, reference_column, id_column}
        metadata = {k: v for k, v in row.items() if k not in used}
        items.append(
            _unique(Item(item_key(prompt, reference, record_id), index, prompt, reference, record_id, metadata), seen)
        )
        columns.update(map(str, row))
    if fields.reference is not None and items and fields.reference not in columns:
        raise DataError(
            f"dataset.fields.reference names column {fields.reference!r}, which no row has "
            f"(columns: {', '.join(sorted(columns))}); every score that needs a reference would be skipped",
            file=source.file,
        )
    return items


def _unique(item: Item, seen: dict[str, int]) -> Item:
    """Repeated rows get distinct keys (``key#2``...), so resuming and pairing stay one-to-one."""
    count = seen.get(item.key, 0) + 1
    seen[item.key] = count
    if count == 1:
        return item
    return Item(f"{item.key}#{count}", item.index, item.prompt, item.reference, item.id, item.metadata)


def _prompt(row: Mapping[str, Any], spec: DatasetSpec, source: RowSource, index: int) -> Content:
    if spec.prompt_template is not None:
        try:
            return spec.prompt_template.format(**row)
        except (KeyError, IndexError) as exc:
            columns = ", ".join(sorted(map(str, row))) or "none"
            raise source.error(index, f"dataset.promptTemplate uses {exc} but the row has columns: {columns}") from None
    value = row.get(spec.fields.prompt)
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(m, Mapping) for m in value) and value:
        return [dict(m) for m in value]
    columns = ", ".join(sorted(map(str, row))) or "none"
    problem = "missing" if value is None else f"a {type(value).__name__}, not text or chat messages"
    raise source.error(
        index,
        f"prompt column {spec.fields.prompt!r} is {problem} (columns: {columns}); "
        "set dataset.fields.prompt or dataset.promptTemplate",
    )


def load_items(spec: DatasetSpec, base_dir: Path | None = None) -> list[Item]:
    """Every item of a file or Hugging Face dataset (built-in evals are loaded by ``evalsi.runs._builtin``).

    Args:
        spec: The run's ``dataset``.
        base_dir: What a relative ``path`` is relative to; None for the working directory.

    Raises:
        DataError: The data cannot be read or mapped.

    """
    if spec.path is not None:
        path = Path(spec.path)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        rows, source = read_located_rows(path, spec.format)
        return rows_to_items(rows, spec, source)
    if spec.hf is not None:
        return rows_to_items(load_hf(spec.hf, spec.subset, spec.split or "test"), spec, f"hf:{spec.hf}")
    raise DataError("dataset needs path, hf or builtin")
