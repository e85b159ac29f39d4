"""Datasets as server resources: JSONL rows with ``messages`` and an optional ``ground_truth``, per project.

Rows are checked when uploaded, and a bad one is named by its line: ``line 3: messages[1].role: ...``. A
job's output dataset is written by the job (its rows carry ``evaluation_result`` or ``evaluation_error``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from evalsi.server._config import ServerConfig
from evalsi.server._errors import ServiceError
from evalsi.server._tokens import Principal
from evalsi.server._trust import check_depth
from evalsi.server.evaluation._answers import answer
from evalsi.server.evaluation._dataset_store import DatasetStore, DatasetTaken
from evalsi.server.evaluation._ids import check_id, not_found, resource_id
from evalsi.server.evaluation._pages import Page

if TYPE_CHECKING:
    from sqlalchemy import Engine


def _bad(line: int, message: str) -> ServiceError:
    return ServiceError("invalid_argument", f"line {line}: {message}", "invalid_dataset_row", line=line)


def parse_rows(text: str, max_rows: int) -> list[dict[str, Any]]:
    """The rows of a JSONL text, each checked; blank lines are skipped.

    Raises:
        ServiceError: ``invalid_argument`` naming the 1-based line and what would be valid (a row nested deeper
            than a request may be is refused too).

    """
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise _bad(number, f"not valid JSON ({exc})") from None
        check_depth(row, f"line {number}")
        check_row(row, number)
        rows.append(row)
        if len(rows) > max_rows:
            raise ServiceError("invalid_argument", f"more than datasets.max_rows={max_rows} rows", "dataset_too_large")
    if not rows:
        raise ServiceError("invalid_argument", "the dataset has no rows (one JSON object per line)")
    return rows


def check_row(row: Any, line: int) -> None:
    """Refuse a row that is not ``{"messages": [{"role": str, "content": ...}, ...], "ground_truth"?: ...}``."""
    if not isinstance(row, dict):
        raise _bad(line, f'a row is a JSON object {{"messages": [...], "ground_truth": ...}}, got {_kind(row)}')
    messages = row.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad(line, "`messages` must be a non-empty list of {role, content} objects")
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise _bad(line, f"{where}: must be an object {{role, content}}, got {_kind(message)}")
        if not isinstance(message.get("role"), str) or not message["role"]:
            raise _bad(line, f"{where}.role: must be a string such as 'system', 'user' or 'assistant'")
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise _bad(line, f"{where}.content: must be text or a list of content parts, got {_kind(content)}")


_KINDS = {dict: "an object", list: "a list", str: "a string", type(None): "null"}


def _kind(value: Any) -> str:
    return _KINDS.get(type(value), type(value).__name__)


def has_reply(row: dict[str, Any]) -> bool:
    """The row's conversation ends with the assistant's reply (what a job scores as it is)."""
    messages = row.get("messages") or []
    return bool(messages) and isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant"


def encode(rows: Sequence[dict[str, Any]]) -> bytes:
    """Rows as JSONL."""
    return b"".join(orjson.dumps(row) + b"\n" for row in rows)


@dataclass(frozen=True)
class Dataset:
    """A stored dataset as the service answers it: plain data, written into each protocol's form by transport."""

    dataset_id: str
    row_count: int
    size_bytes: int
    source_job: str
    """The job that wrote it, for a job's output dataset (empty for an upload)."""
    created_at: float
    """Seconds since the epoch."""
    jsonl: str = ""
    """The rows, when asked for."""


class Datasets:
    """The dataset service: checks uploads and the caller's rights, and keeps datasets in its store."""

    def __init__(self, config: ServerConfig, engine: Engine) -> None:
        self.settings = config.spec.datasets
        self._store = DatasetStore(config, engine)

    def create(self, principal: Principal, dataset_id: str, jsonl: str) -> Dataset:
        """Check and store an uploaded dataset.

        Args:
            principal: The caller (needs the ``run`` scope).
            dataset_id: The new dataset's id.
            jsonl: Its rows, one JSON object per line.

        Returns:
            The stored dataset, without its rows.

        Raises:
            ServiceError: Too large, a bad row (named by line), or the id is taken.

        """
        dataset_id = check_id(dataset_id, "datasetId")
        size, limit = len(jsonl.encode()), self.settings.max_bytes
        if size > limit:
            raise ServiceError(
                "invalid_argument",
                f"the dataset is {size} bytes; this server accepts at most datasets.max_bytes={limit}",
                "dataset_too_large",
            )
        rows = parse_rows(jsonl, self.settings.max_rows)
        return self.store(principal.project, dataset_id, rows, source_job="")

    def store(self, project: str, dataset_id: str, rows: Sequence[dict[str, Any]], source_job: str) -> Dataset:
        """Insert a dataset (an upload, or a job's output) within the project's dataset quotas.

        Raises:
            ServiceError: ``already_exists`` when the project has a dataset of that id; ``resource_exhausted``
                when it would pass ``max_datasets`` or ``max_dataset_bytes``.

        """
        return self.store_encoded(project, dataset_id, encode(rows), len(rows), source_job)

    def store_encoded(self, project: str, dataset_id: str, content: bytes, row_count: int, source_job: str) -> Dataset:
        """Insert a dataset already encoded as JSONL (a job's output, spooled as it was scored).

        Raises:
            ServiceError: ``already_exists`` when the project has a dataset of that id.

        """
        values = {
            "project": project,
            "dataset_id": dataset_id,
            "row_count": row_count,
            "size_bytes": len(content),
            "source_job": source_job,
            "content": content,
            "created_at": time.time(),
        }
        try:
            self._store.insert(values)
        except DatasetTaken:
            raise ServiceError(
                "failed_precondition",
                f"dataset {dataset_id!r} already exists in project {project!r}",
                "already_exists",
            ) from None
        return _dataset(values, with_rows=False)

    def get(self, principal: Principal, dataset_id: str, rows: bool) -> Dataset:
        """The caller's dataset, with its rows when ``rows``.

        Raises:
            ServiceError: ``not_found`` when the caller's project has no such dataset.

        """
        dataset_id = resource_id(dataset_id, "datasets", "datasetId")
        return _dataset(self.row(principal.project, dataset_id), with_rows=rows)

    def delete(self, principal: Principal, dataset_id: str) -> str:
        """Delete the caller's dataset.

        Returns:
            Its resource name, ``datasets/<id>``.

        Raises:
            ServiceError: ``not_found`` when the caller's project has no such dataset.

        """
        dataset_id = resource_id(dataset_id, "datasets", "datasetId")
        if not self._store.remove(principal.project, dataset_id):
            raise not_found("dataset", dataset_id, principal.project, "datasetId")
        return f"datasets/{dataset_id}"

    def listing(self, principal: Principal, page_size: int, page_token: str) -> Page[Dataset]:
        """One page of the caller's project's datasets, newest first, without their rows.

        Raises:
            ServiceError: ``invalid_argument`` for a bad page size or token.

        """
        rows, token = self._store.page(principal.project, page_size, page_token)
        return Page([_dataset({**r, "content": b""}, with_rows=False) for r in rows], token)

    def check_room(self, project: str) -> None:
        """Refuse now when the project could store no further dataset (a job checks before it runs).

        Raises:
            ServiceError: ``resource_exhausted`` naming the dataset quota the project is at.

        """
        self._store.room(project)

    def exists(self, project: str, dataset_id: str) -> bool:
        """Whether the project has a dataset of that id."""
        return self._store.exists(project, dataset_id)

    def row(self, project: str, dataset_id: str, where: str = "datasetId") -> dict[str, Any]:
        """The stored dataset row.

        Raises:
            ServiceError: ``not_found`` naming ``where``.

        """
        found = self._store.fetch(project, dataset_id)
        if found is None:
            raise not_found("dataset", dataset_id, project, where)
        return found

    def rows(self, project: str, dataset_id: str, where: str) -> list[dict[str, Any]]:
        """A dataset's rows."""
        content = bytes(self.row(project, dataset_id, where)["content"])
        return [orjson.loads(line) for line in content.splitlines() if line.strip()]


def _dataset(row: dict[str, Any], with_rows: bool) -> Dataset:
    return answer(Dataset, row, jsonl=bytes(row["content"]).decode() if with_rows else "")
