"""The datasets table: every SQL statement the dataset service runs, and nothing else.

A stored dataset is one row: its JSONL content and the counts a listing shows, so a listing never reads rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, Engine, delete, select

from evalsi.server._config import ServerConfig
from evalsi.server._quota_store import Kind, StorageQuotas
from evalsi.server.evaluation._page_store import page
from evalsi.server.evaluation._row_store import changed, first_row, insert_row
from evalsi.server.evaluation._tables import datasets

QUOTA = Kind("datasets", datasets, datasets.c.size_bytes, "max_datasets", "max_dataset_bytes", "delete datasets first")
"""A project's datasets under the storage quotas."""


class DatasetTaken(Exception):
    """The project already has a dataset of that id."""


class DatasetStore:
    """Datasets in the server's database, per project, within the project's storage quotas."""

    def __init__(self, config: ServerConfig, engine: Engine) -> None:
        self.engine = engine
        self.quotas = StorageQuotas(config)

    def insert(self, values: dict[str, Any]) -> None:
        """Insert one dataset row (all of the table's columns), within the project's dataset quotas.

        Raises:
            DatasetTaken: The project has a dataset of that id.
            ServiceError: ``resource_exhausted`` when it would pass ``max_datasets`` or ``max_dataset_bytes``.

        """
        insert_row(self.engine, datasets, values, DatasetTaken, (self.quotas, QUOTA))

    def fetch(self, project: str, dataset_id: str) -> dict[str, Any] | None:
        """The stored dataset row (with its content), or None."""
        return first_row(self.engine, select(datasets).where(*_key(project, dataset_id)))

    def remove(self, project: str, dataset_id: str) -> bool:
        """Delete a dataset; whether there was one."""
        return bool(changed(self.engine, delete(datasets).where(*_key(project, dataset_id))))

    def page(self, project: str, size: int, token: str) -> tuple[Sequence[Any], str]:
        """One page of the project's dataset rows without their content, newest first, and the next page's token.

        Raises:
            ServiceError: ``invalid_argument`` for a bad page size or token.

        """
        columns = [c for c in datasets.c if c.name != "content"]  # never read the rows to list them
        query = select(*columns).where(datasets.c.project == project)
        with self.engine.connect() as connection:
            return page(connection, query, datasets.c.created_at, datasets.c.dataset_id, size, token)

    def room(self, project: str) -> None:
        """Refuse when the project could store no further dataset.

        Raises:
            ServiceError: ``resource_exhausted`` naming the dataset quota the project is at.

        """
        with self.engine.connect() as connection:
            self.quotas.room(connection, project, QUOTA)

    def exists(self, project: str, dataset_id: str) -> bool:
        """Whether the project has a dataset of that id."""
        query = select(datasets.c.dataset_id).where(*_key(project, dataset_id))
        with self.engine.connect() as connection:
            return connection.execute(query).first() is not None


def _key(project: str, dataset_id: str) -> tuple[ColumnElement[bool], ...]:
    """The conditions selecting one dataset of the project."""
    return datasets.c.project == project, datasets.c.dataset_id == dataset_id
