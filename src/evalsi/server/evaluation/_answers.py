"""A stored row as the plain answer of the evaluator, dataset or job service (transport writes it per protocol)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")


def answer(kind: type[T], row: Mapping[str, Any], **computed: Any) -> T:
    """``kind`` with each field read from the row's column of the same name, but for the ``computed`` ones.

    Args:
        kind: The service's answer, a dataclass.
        row: The stored row: every field of ``kind`` not in ``computed`` is one of its columns.
        computed: The fields that are not a column as stored (decoded JSON, a default for NULL, ...).

    Returns:
        The answer.

    Raises:
        KeyError: A field is neither a column of the row nor computed.

    """
    columns = {f.name: row[f.name] for f in dataclasses.fields(kind) if f.name not in computed}
    return kind(**columns, **computed)
