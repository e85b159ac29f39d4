"""The inputs of an evaluation test: JSONL datasets of ``messages`` rows, message lists, or ready rows."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalsi._util.jsonl import json_lines
from evalsi.errors import DataError
from evalsi.records import canonical_json
from evalsi.testing._row import EvaluationRow, Message


def rows_from_dataset(paths: Sequence[str | Path], base_dir: Path | None = None) -> list[EvaluationRow]:
    """Rows of JSONL files, one object a line: ``messages`` (or ``prompt`` text), optional ``ground_truth``.

    Raises:
        DataError: A file is missing, a line is not JSON, or a row has no messages (names the file and line).

    """
    rows: list[EvaluationRow] = []
    for raw in paths:
        path = Path(raw)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        try:
            text = path.read_bytes()
        except FileNotFoundError:
            raise DataError("no such file", file=str(path)) from None
        for number, data in json_lines(text, str(path)):
            if not isinstance(data, dict):
                raise DataError("a row must be a JSON object", file=str(path), line=number)
            rows.append(row_from_mapping(data, f"{path}:{number}", f"{path.name}:{number}"))
    return rows


def row_from_mapping(data: Mapping[str, Any], where: str, source: str | None = None) -> EvaluationRow:
    """A row from ``{"messages": [...], "ground_truth": ..., "id": ..., ...}`` (``prompt`` text also works).

    ``where`` names the row in errors; ``source`` (default ``where``) in reports, when the row has no id.

    Raises:
        DataError: There are no messages and no prompt (``where`` names the source).

    """
    messages = data.get("messages")
    if messages is None and isinstance(data.get("prompt"), str):
        messages = [{"role": "user", "content": data["prompt"]}]
    if not isinstance(messages, list) or not messages or not all(isinstance(m, Mapping) for m in messages):
        raise DataError(f"{where}: a row needs `messages` (a non-empty list of chat messages) or a `prompt` text")
    ground_truth = data.get("ground_truth")
    row_id = data.get("id", data.get("row_id"))
    metadata = {k: v for k, v in data.items() if k not in ("messages", "prompt", "ground_truth", "id", "row_id")}
    message_list = [Message(m) for m in messages]
    given = None if row_id is None else str(row_id)
    identity = given if given is not None else _content_id(message_list, ground_truth)
    return EvaluationRow(
        message_list, ground_truth, identity, metadata=metadata, source=source or where, dataset_id=given
    )


def rows_from_messages(conversations: Sequence[Sequence[Mapping[str, Any]]]) -> list[EvaluationRow]:
    """Rows from message lists (no reference)."""
    return [row_from_mapping({"messages": list(c)}, f"input_messages[{i}]") for i, c in enumerate(conversations)]


def distinct_ids(rows: Sequence[EvaluationRow]) -> list[EvaluationRow]:
    """The rows, a repeated ``row_id`` made distinct (``id#2``, ``id#3``...) as ``evalsi run`` does with records.

    A dataset may hold the same question twice: each is its own row, scored and counted on its own, never merged
    with the other into one record (which would also hide a row from the standard error).
    """
    seen: dict[str, int] = {}
    for row in rows:
        count = seen[row.row_id] = seen.get(row.row_id, 0) + 1
        if count > 1:
            row.row_id = f"{row.row_id}#{count}"
    return list(rows)


def _content_id(messages: list[Message], ground_truth: Any) -> str:
    """A row id from its content, stable across runs, for rows that carry none."""
    return hashlib.sha256(canonical_json([messages, ground_truth])).hexdigest()[:16]
